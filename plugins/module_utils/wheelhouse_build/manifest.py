"""module wheelhouse_build's second job: the manifest - a host's wheels and their hashes, written once they
are all there, trusted only when it records this host's inputs (offline: only the anchored one the controller
gave), and the no-op answer when every recorded wheel is present with its hash. Tested through the module in
tests/unit/test_wheelhouse*.py."""

from __future__ import annotations

import json
import os

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import bytes_sha256, file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
)
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    bad_names,
    given_manifest_digest,
    manifest_files,
    mismatched_files,
    recorded_hashes,
    stale_files,
)
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse_build.resolve import (
    resolve_all,
)


def read_hash_cache(path: str, directory: str) -> dict:
    """{wheel file name: {sha256, size, mtime_ns, ctime_ns, inode}} the controller's cache holds for
    directory (nothing without a cache, or for an unreadable one: then every wheel is hashed)."""
    entries = ((read_json(path) if path else None) or {}).get(os.path.realpath(directory))
    return entries if isinstance(entries, dict) else {}


def write_hash_cache(module, directory: str, seen: dict) -> None:
    """Merge what this run hashed into the cache (outside the wheelhouse), dropping wheels that are gone.
    A cache, not managed state: it is written without reporting a change, and never in check mode."""
    path = module.params["hash_cache"]
    if not path or module.check_mode:
        return
    data = read_json(path) or {}
    key = os.path.realpath(directory)
    entries = {**read_hash_cache(path, directory), **seen}
    data[key] = {n: e for n, e in sorted(entries.items()) if os.path.exists(os.path.join(directory, n))}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_json_atomic(path, data)


def read_manifest(mpath: str) -> bytes | None:
    try:
        with open(mpath, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def refuse_unanchored(module, mpath: str, text: bytes | None, result: dict) -> None:
    """Downloads off: the wheelhouse was carried in, and a manifest beside the wheels can be replaced
    together with them. Trust comes from outside it: this host's manifest must exist and its bytes must
    have the sha256 the user carried apart (what the build returned). Fails before any pip run or write."""
    p = module.params
    name = os.path.basename(mpath)
    try:
        expected = given_manifest_digest(p["manifest_sha256"], name)
    except ValueError as err:
        module.fail_json(msg=f"wheelhouse_manifest_sha256 (option manifest_sha256): {err}", **result)
    if text is None:
        module.fail_json(
            msg=f"the wheelhouse {p['directory']} has no manifest {name} for this host (python "
            f"{p['python_version']}, {p['machine']}, glibc {p['glibc']} and the env's distributions; inputs "
            f"digest {result['inputs_digest']}). Downloads are off, and wheels are trusted only through the "
            "manifest their build wrote, so nothing was used or changed: build the wheelhouse on a connected "
            "controller against a host like this one, and carry it with the manifest digest that run printed"
            + ("" if expected else " (give it as wheelhouse_manifest_sha256)"),
            **result,
        )
    if not expected:
        listed = sorted(p["manifest_sha256"]) if isinstance(p["manifest_sha256"], dict) else []
        module.fail_json(
            msg=f"downloads are off, so {p['directory']} is a carried wheelhouse: it is used only with the "
            f"sha256 of its manifest {name} given as wheelhouse_manifest_sha256 (module option "
            "manifest_sha256), since a manifest beside the wheels can be replaced together with them"
            + (f"; the mapping given names only {', '.join(listed)}" if listed else "")
            + ". The build that wrote it printed it (task 'Show the manifest digest to carry apart from the "
            "wheelhouse', and step 'wheelhouse' of the summary); it is also in local fact "
            "epforge_wheelhouse, key manifest_sha256, on the hosts it was built for. Nothing was used or "
            "changed",
            **result,
        )
    if result["manifest_sha256"] != expected:
        module.fail_json(
            msg=f"the manifest {mpath} has sha256 {result['manifest_sha256']}, not {expected} as "
            "wheelhouse_manifest_sha256 gives: it is not the manifest its build wrote (replaced or edited, "
            "perhaps together with the wheels it lists), so none of its wheels is trusted. Nothing was used "
            "or changed; carry the wheelhouse again from the connected controller, or give the digest that "
            "build printed",
            expected_manifest_sha256=expected,
            **result,
        )


def refuse_untrusted(module, directory: str, old: dict | None, known: dict, result: dict) -> dict:
    """Before any pip run or write: a manifest naming anything but a plain wheel file of the wheelhouse is
    refused; a wheel whose bytes no trusted manifest recorded (replaced after the build) is refused offline,
    and removed to be downloaded again online. Names the files. Returns what it hashed (for the cache).

    Online every manifest of the wheelhouse counts (this controller wrote them); offline only this host's,
    whose digest was checked: the others are as untrusted as the wheels."""
    download = module.params["download"]
    names = bad_names(old or {})
    if names:
        module.fail_json(
            msg=f"the manifest {result['manifest']} names {', '.join(repr(n) for n in names)}: "
            f"'{names[0]}' is not a plain wheel file name of the wheelhouse; nothing was used or changed. "
            "Rebuild the wheelhouse on a connected controller",
            **result,
        )
    if download:
        recorded = recorded_hashes(directory)
    else:
        recorded = {n: {i.get("sha256")} for n, i in (old or {}).get("files", {}).items()}
    present = {f: {"sha256": ""} for f in recorded if os.path.exists(os.path.join(directory, f))}
    _unused, current = stale_files(directory, {"files": present}, known=known)
    mismatched = mismatched_files(current, recorded)
    if not mismatched:
        return current
    if not download:
        found = "; ".join(
            f"{f}: sha256 {current[f]['sha256'][:12]}..., recorded {', '.join(sorted(recorded[f]))[:12]}..."
            for f in mismatched
        )
        module.fail_json(
            msg=f"wheels of {directory} differ from what its manifests recorded (replaced after the build): "
            f"{found}. Nothing was used or changed; put the recorded wheels back, or carry the wheelhouse "
            "again from the connected controller that built it",
            mismatched=mismatched,
            **result,
        )
    if not module.check_mode:
        for name in mismatched:
            os.unlink(os.path.join(directory, name))
    result["redownloaded"] = mismatched
    return {f: v for f, v in current.items() if f not in mismatched}


def fail_offline_incomplete(module, pip: list[str], groups: list[dict], *, target: list[str], result: dict):
    """Offline, this host's manifest lists wheels the wheelhouse lacks: pip's offline check names the
    requirement; should pip find other wheels for it, those are still not the manifest's, so refuse too.
    Never a new manifest offline: the anchored one's digest is what the next run checks."""
    p = module.params
    installed = {normalize(k): str(v) for k, v in p["installed"].items()}
    resolve_all(module, pip, groups, target=target, installed=installed, result=result)
    module.fail_json(
        msg=f"the wheelhouse {p['directory']} lacks {', '.join(result['stale'])}, which its manifest "
        f"{result['manifest']} lists; other wheels there satisfy pip, but offline only the manifest's are "
        "trusted. Nothing was used or changed: put the listed wheels back, or carry the wheelhouse again",
        missing=result["stale"],
        **result,
    )


def trusted_manifest(module, mpath: str, digest: str, result: dict) -> dict | None:
    """This host's manifest (None when absent or unreadable online), its digest in the result; offline only
    the anchored one, for these inputs."""
    text = read_manifest(mpath)
    if text is not None:
        result["manifest_sha256"] = bytes_sha256(text)
    download = module.params["download"]
    if not download:
        refuse_unanchored(module, mpath, text, result)
    try:
        old = json.loads(text) if text is not None else None
    except ValueError:
        old = None
    old = old if isinstance(old, dict) else None
    if not download and (old or {}).get("inputs_digest") != digest:
        # Its digest matched, so the build wrote it: yet not for these inputs (another epforge's layout).
        module.fail_json(
            msg=f"the manifest {mpath} does not record this host's inputs (digest {digest}); nothing was "
            "used or changed: build the wheelhouse again on a connected controller with this epforge",
            **result,
        )
    return old


def exit_when_current(module, old: dict, known: dict, seen: dict, result: dict) -> None:
    """Every wheel of this host's manifest present with its recorded hash: done, no pip run. Otherwise
    result['stale'] names what is absent or changed."""
    stale, current = stale_files(module.params["directory"], old, known)
    seen.update(current)
    if stale:
        result["stale"] = stale
        return
    download = module.params["download"]
    canonical = {**old, "files": manifest_files(current)}
    if canonical != old and download:
        # Written by an older epforge, with file identities inside (they differ on every copy): rewritten
        # once without them, so its digest stays the same from now on. Never offline (anchored bytes).
        if not module.check_mode:
            write_json_atomic(result["manifest"], canonical)
        result["manifest_sha256"] = bytes_sha256(json_text(canonical).encode())
        result["changed"] = True
    finish(
        module,
        seen,
        files=sorted(old["files"]),
        groups=old["groups_detail"],
        hashes={f: v["sha256"] for f, v in current.items()},
        reason="manifest matches"
        + ("" if download else " its given digest")
        + ", every wheel present with its recorded hash",
        **result,
    )


def write_manifest(module, manifest: dict, complete: bool, result: dict) -> None:
    """Write the manifest; the result's manifest_sha256 is the digest of the file's bytes (in check mode,
    the digest it would have; unknown while wheels are still to be fetched)."""
    if module.check_mode:
        result["manifest_sha256"] = bytes_sha256(json_text(manifest).encode()) if complete else ""
        return
    mpath = result["manifest"]
    os.makedirs(os.path.dirname(mpath), exist_ok=True)
    write_json_atomic(mpath, manifest)
    result["manifest_sha256"] = file_sha256(mpath)


def finish(module, seen: dict, **values) -> None:
    write_hash_cache(module, module.params["directory"], seen)
    module.exit_json(**values)
