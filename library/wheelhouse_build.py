#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module (controller side): a wheelhouse that covers every pip run a host's roles make."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheelhouse_build
short_description: Download once every wheel a host needs, for its python and platform, into a wheelhouse
description:
  - Runs on the controller (delegate_to localhost). Computes the pip runs the roles will make on a host
    (plugins/module_utils/wheelhouse.py requirement_groups, from the stack and I(choice)), in order.
  - For each run, first asks pip whether the wheelhouse alone satisfies it (C(pip install --dry-run --no-index
    --find-links DIRECTORY --report), for the host's python version, ABI and manylinux platforms, against
    what the host's env already holds, given as I(installed)). pip's configuration files and C(PIP_*)
    variables are ignored for this check, so only the wheelhouse counts.
  - When the wheelhouse falls short and I(download=true), resolves the run against the registry (pip's own
    configuration), then C(pip download --no-deps) only the wheels that are not there. A wheel a user put
    in the directory (a trimmed vendor build, for example) is used when its name and version fit and is
    recorded with its hash.
  - "Every wheel is checked against the hashes the wheelhouse's manifests recorded before anything uses it
    (a file is hashed again whenever its size, mtime, ctime or inode differ from those in I(hash_cache)):
    a recorded wheel replaced by other bytes fails the run with I(download=false), naming the file (returned
    in C(mismatched)), and is removed to be downloaded again with I(download=true) (C(redownloaded)). A
    manifest naming anything but a plain wheel file name (for example C(../outside/x.whl)) is refused."
  - Writes C(DIRECTORY/manifests/DIGEST.json) (the inputs, every wheel's sha256 and which run needs it) and
    returns the sha256 of that file's bytes (C(manifest_sha256)). A rerun with the same inputs and unchanged
    files runs no pip at all (changed=false).
  - "With I(download=false) the wheelhouse was carried in, and a manifest beside the wheels could have been
    replaced together with them: the run uses it only when the sha256 of this host's manifest file equals
    the one given in I(manifest_sha256) (the digest its build returned, carried apart from the wheelhouse).
    Without that digest, without a manifest for this host, or with another digest, it fails naming the
    manifest file (and both digests) before any pip run or write. Only that manifest's hashes count then,
    and the manifest is never rewritten."
  - When it falls short and I(download=false) (a controller with no registry), fails naming the requirement
    pip could not find, before anything changes on any host.
  - Distributions named in I(protect) (torch) that the env already holds must not be replaced by any run;
    the module fails naming what would replace them.
  - Check mode resolves (read-only) and reports what would be downloaded.
options:
  directory:
    description: The wheelhouse on the controller (C(epforge_wheelhouse)).
    type: path
    required: true
  stack:
    description: The stack (C(epforge_stack_spec)).
    type: dict
    required: true
  choice:
    description: The roles' settings that change what they install (keys in requirement_groups' docstring).
    type: dict
    default: {}
  python_version:
    description: The host env's python version (MAJOR.MINOR[.PATCH]).
    type: str
    required: true
  machine:
    description: The host's machine (C(x86_64), C(aarch64)).
    type: str
    required: true
  glibc:
    description: The host's glibc version (decides the manylinux platforms).
    type: str
    required: true
  installed:
    description: Distributions the host's env already holds (name -> version); pip keeps them when they fit.
    type: dict
    default: {}
  protect:
    description: Distributions that no run may replace when the env already holds them.
    type: list
    elements: str
    default: [torch]
  download:
    description: Fetch what the wheelhouse lacks from the registry (false on a controller without one).
    type: bool
    default: true
  pip:
    description: pip as argv on the controller (it must accept C(--dry-run) with C(--platform), pip >= 24).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds each pip run may take.
    type: int
    default: 3600
  manifest_sha256:
    description:
      - The sha256 of the manifest file the build wrote for this host (its C(manifest_sha256)), as one
        digest, or a mapping manifest file name (C(0123456789abcdef.json), C(.json) optional) -> digest for a
        wheelhouse built for several kinds of hosts.
      - Required with I(download=false); ignored otherwise.
    type: raw
  hash_cache:
    description:
      - Controller file that keeps each wheel's sha256 with its size, mtime, ctime and inode, so a rerun reads
        no unchanged wheel. Keep it outside I(directory) (it is trusted; the wheelhouse is not).
      - Empty, every wheel is hashed on every run.
    type: path
    default: ""
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode resolves read-only (pip's dry run), downloads, removes and writes nothing; it reports what
      would be downloaded.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Wheelhouse for the hosts' python and platform
  epforge.ep.wheelhouse_build:
    directory: /srv/epforge-wheelhouse
    stack: "{{ epforge_stack_spec }}"
    choice: {ml_env_method: existing, sglang_profile: server, sglang_deps: [fastapi, uvicorn]}
    python_version: "3.12.3"
    machine: x86_64
    glibc: "2.39"
    installed: {torch: 2.11.0+cu130, numpy: 2.3.1}
    log_path: /root/.cache/epforge/wheelhouse.log
    hash_cache: /root/.cache/epforge/wheelhouse-hashes.json
  delegate_to: localhost

- name: The same wheelhouse carried to a controller with no registry
  epforge.ep.wheelhouse_build:
    directory: /srv/epforge-wheelhouse
    stack: "{{ epforge_stack_spec }}"
    python_version: "3.12.3"
    machine: x86_64
    glibc: "2.39"
    download: false
    # The manifest_sha256 the build above returned, carried apart from the wheelhouse.
    manifest_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    log_path: /root/.cache/epforge/wheelhouse.log
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: Wheel file names (in I(directory)) the host needs.
  returned: success
  type: list
  elements: str
groups:
  description: Each pip run (name, requirements, no_deps) with the wheel files it uses.
  returned: success
  type: list
  elements: dict
manifest:
  description: Path of the manifest for these inputs.
  returned: success
  type: str
manifest_sha256:
  description:
    - sha256 of the manifest file's bytes (the digest to carry apart from the wheelhouse and give as
      I(manifest_sha256) where downloads are off). Empty in check mode while wheels are still to be fetched.
    - On failure, the digest of the manifest found (empty when there is none).
  returned: always
  type: str
expected_manifest_sha256:
  description: The digest I(manifest_sha256) gave for this manifest, when the file's differs.
  returned: failure
  type: str
inputs_digest:
  description: sha256 of the inputs (groups, target python and platform, the env's distributions).
  returned: success
  type: str
hashes:
  description: Wheel file name -> sha256, as the manifest records them.
  returned: success
  type: dict
downloaded:
  description: Wheel files fetched from the registry by this run (would be, in check mode).
  returned: success
  type: list
  elements: str
mismatched:
  description: Recorded wheels whose bytes differ from every hash the manifests recorded (what failed).
  returned: failure
  type: list
  elements: str
redownloaded:
  description: Such wheels removed to be downloaded again (I(download=true)).
  returned: when one was replaced
  type: list
  elements: str
"""

import json
import os
import re
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import bytes_sha256, file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv, pip_command
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
    requirement_key,
    wheel_name_version,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    MANIFEST_SCHEMA,
    bad_names,
    given_manifest_digest,
    inputs_digest,
    manifest_files,
    manifest_path,
    mismatched_files,
    missing_requirement,
    pin_from_metadata,
    recorded_hashes,
    report_items,
    requirement_groups,
    stale_files,
    target_args,
    wheel_requires_dist,
    write_installed_stubs,
)


def offline_env(stubs: str) -> dict:
    """Only the wheelhouse counts: no pip configuration file, no PIP_* variable, the stubs as installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull, PYTHONPATH=stubs, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1"
    )
    return env


def online_env(stubs: str) -> dict:
    """The controller's pip configuration (mirrors, certificates) with the registry allowed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
    env.update(PYTHONPATH=stubs, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


class Resolver:
    def __init__(self, module, pip: list[str], directory: str, target: list[str], scratch: str):
        self.module = module
        self.pip = pip
        self.directory = directory
        self.target = target
        self.scratch = scratch
        self.log = module.params["log_path"]
        self.timeout = module.params["timeout"]
        # An interpreter with nothing installed: pip --python sees only the stubs on PYTHONPATH.
        self.empty = os.path.join(scratch, "empty-env")
        argv = [sys.executable, "-m", "venv", "--without-pip", self.empty]
        rc, _unused = run_logged(argv, self.log, timeout=120, header="wheelhouse: empty env for resolution")
        if rc != 0:
            fail_cmd(module, "cannot create an empty venv for pip's resolution", argv, rc, log_path=self.log)
        self.count = 0

    def dry_run(self, group: dict, installed: dict, offline: bool) -> tuple[int, list[dict], str, list[str]]:
        """(rc, items, output, argv) of pip install --dry-run --report for one group."""
        self.count += 1
        stubs = os.path.join(self.scratch, f"stubs-{self.count}")
        write_installed_stubs(stubs, installed)
        report = os.path.join(self.scratch, f"report-{self.count}.json")
        argv = pip_argv(
            self.pip,
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            report,
            "--find-links",
            self.directory,
            *self.target,
            target_python=os.path.join(self.empty, "bin", "python"),
        )
        if group["no_deps"]:
            argv.append("--no-deps")
        if offline:
            argv.append("--no-index")
        elif group["index_url"]:
            argv += ["--extra-index-url", group["index_url"]]
        argv += group["requirements"]
        env = offline_env(stubs) if offline else online_env(stubs)
        done = run_bounded(argv, timeout=self.timeout, env=env)
        rc, output = done.rc, done.out + done.err
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(
                f"\n=== wheelhouse: {'offline check' if offline else 'resolve'} {group['name']}\n"
                f"$ {' '.join(argv)}\n{output}\nrc={rc}\n"
            )
        items = report_items(read_json(report) or {}) if rc == 0 else []
        return rc, items, output, argv

    def download(self, group: dict, items: list[dict]) -> None:
        """pip download --no-deps of the exact versions the resolution chose (one pip run per group)."""
        argv = pip_argv(self.pip, "download", "--no-deps", "--dest", self.directory, *self.target)
        if group["index_url"]:
            argv += ["--extra-index-url", group["index_url"]]
        argv += [f"{item['name']}=={item['version']}" for item in items]
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_INDEX",)}
        rc, _unused = run_logged(
            argv, self.log, env=env, timeout=self.timeout, header=f"wheelhouse: download for {group['name']}"
        )
        absent = [
            i["filename"] for i in items if not os.path.exists(os.path.join(self.directory, i["filename"]))
        ]
        if rc != 0 or absent:
            fail_cmd(
                self.module,
                f"downloading the wheels of '{group['name']}' failed (missing: "
                f"{', '.join(absent) or 'none'}); see {self.log}",
                argv,
                rc or 1,
                log_path=self.log,
            )


def pip_supports_target_dry_run(module, pip: list[str]) -> None:
    argv = [*pip, "--version"]
    proc = run_bounded(argv, timeout=120)
    match = re.search(r"pip (\d+)\.", proc.out)
    if proc.rc != 0 or not match:
        module.fail_json(
            msg="cannot run pip on the controller", cmd=argv, rc=proc.rc, log_tail=tail(proc.output)
        )
    if int(match.group(1)) < 24:
        module.fail_json(
            msg=f"the controller's pip is {proc.out.split()[1]}: resolving for another host's "
            "platform with --dry-run needs pip >= 24 (upgrade pip in the controller's venv)",
            cmd=argv,
            rc=proc.rc,
        )


def pin_group(module, planned: dict, resolved: dict[str, str], directory: str, result: dict) -> dict:
    """The group, its requirements pinned from the metadata of the pin_from wheel an earlier run chose."""
    group = dict(planned)
    if not group["pin_from"]:
        return group
    source = resolved.get(normalize(group["pin_from"]))
    if not source:
        module.fail_json(
            msg=f"'{group['name']}' takes its pins from {group['pin_from']}, which "
            "no earlier pip run resolved",
            **result,
        )
    source_path = os.path.join(directory, source)
    # In check mode the wheel may not be here yet: then the names stay unpinned in the report.
    requires = wheel_requires_dist(source_path) if os.path.exists(source_path) else []
    group["requirements"] = pin_from_metadata(requires, group["requirements"])
    return group


def fail_offline_missing(module, group: dict, attempt: tuple, result: dict) -> None:
    """Downloads are off and the wheelhouse lacks a wheel: say which, and which the manifest expected."""
    p = module.params
    rc, _items, output, argv = attempt
    wanted = missing_requirement(output) or "(see the log)"
    wanted_name = requirement_key(wanted)
    expected = [f for f in result.get("stale", []) if (wheel_name_version(f) or ("",))[0] == wanted_name]
    module.fail_json(
        msg=(
            f"the wheelhouse {p['directory']} has no wheel for requirement {wanted} (pip run "
            f"'{group['name']}': {' '.join(group['requirements'])})"
            + (f"; the manifest expected {', '.join(expected)}" if expected else "")
            + ". Downloads are off (no registry), so nothing was changed on any host: put "
            "the wheel into the wheelhouse (built for this host's python "
            + f"{p['python_version']}, {p['machine']}, glibc {p['glibc']}) or build the "
            "wheelhouse on a connected controller."
        ),
        cmd=argv,
        rc=rc,
        log_tail=tail(output),
        missing=wanted,
        **result,
    )


def resolve_online_and_download(
    module, resolver: Resolver, group: dict, state: dict, result: dict
) -> list[dict]:
    """Resolve against the registry, download what the wheelhouse lacks, then check it offline again."""
    p = module.params
    rc, items, output, argv = resolver.dry_run(group, state, offline=False)
    if rc != 0:
        fail_cmd(
            module,
            f"pip cannot resolve '{group['name']}' "
            f"({' '.join(group['requirements'])}) for python "
            f"{p['python_version']} on {p['machine']}: "
            f"{missing_requirement(output) or 'see the log'}",
            argv,
            rc,
            output=output,
        )
    fetch = [i for i in items if not os.path.exists(os.path.join(p["directory"], i["filename"]))]
    if fetch and not module.check_mode:
        resolver.download(group, fetch)
    result["downloaded"] += [i["filename"] for i in fetch]
    if module.check_mode:
        return items
    rc, items, output, argv = resolver.dry_run(group, state, offline=True)
    if rc != 0:
        fail_cmd(
            module,
            f"after downloading, the wheelhouse still does not satisfy '{group['name']}'",
            argv,
            rc,
            output=output,
        )
    return items


def resolve_group(module, resolver: Resolver, group: dict, state: dict, result: dict) -> list[dict]:
    """The wheels of one pip run: from the wheelhouse alone when it has them, else downloaded (if allowed)."""
    attempt = resolver.dry_run(group, state, offline=True)
    if attempt[0] == 0:
        return attempt[1]
    if not module.params["download"]:
        fail_offline_missing(module, group, attempt, result)
    return resolve_online_and_download(module, resolver, group, state, result)


def track_ml_env(module, group: dict, items: list[dict], env_state: dict, result: dict) -> None:
    """Record what a pip run installs into the ML env; refuse one that would replace a protected package."""
    protect = {normalize(n) for n in module.params["protect"]}
    for item in items:
        had = env_state.get(item["name"])
        if item["name"] in protect and had and base_version(had) != base_version(item["version"]):
            module.fail_json(
                msg=f"pip run '{group['name']}' would replace {item['name']} {had} "
                f"(already in the env) with {item['version']}: refusing; adjust "
                f"the requirements ({' '.join(group['requirements'])})",
                **result,
            )
        env_state[item["name"]] = item["version"]


def resolve_all(
    module, pip: list[str], groups: list[dict], *, target: list[str], installed: dict, result: dict
):
    """Every pip run in order, each seeing what the earlier ones installed.

    Returns (the groups with their wheel files, {wheel file: {}}).
    """
    directory = module.params["directory"]
    details = []
    files: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="epforge-wheelhouse-") as scratch:
        resolver = Resolver(module, pip, directory, target, scratch)
        env_state = dict(installed)
        resolved: dict[str, str] = {}
        for planned in groups:
            group = pin_group(module, planned, resolved, directory, result)
            state = env_state if group["env"] == "ml" else {}
            items = resolve_group(module, resolver, group, state, result)
            if group["env"] == "ml":
                track_ml_env(module, group, items, env_state, result)
            details.append({**group, "files": sorted(i["filename"] for i in items)})
            for item in items:
                files[item["filename"]] = {}
                resolved[item["name"]] = item["filename"]
    return details, files


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


ARGUMENT_SPEC = {
    "directory": {"type": "path", "required": True},
    "stack": {"type": "dict", "required": True},
    "choice": {"type": "dict", "default": {}},
    "python_version": {"type": "str", "required": True},
    "machine": {"type": "str", "required": True},
    "glibc": {"type": "str", "required": True},
    "installed": {"type": "dict", "default": {}},
    "protect": {"type": "list", "elements": "str", "default": ["torch"]},
    "download": {"type": "bool", "default": True},
    "pip": {"type": "list", "elements": "str", "default": []},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 3600},
    "manifest_sha256": {"type": "raw"},
    "hash_cache": {"type": "path", "default": ""},
}


class WheelhouseBuild:
    """The module's one job, split by phase: plan the host's pip runs, trust or refuse what the wheelhouse
    holds, then resolve, download and describe it in a manifest."""

    def __init__(self, module: AnsibleModule) -> None:
        """Plan the inputs first: bad input fails before the wheelhouse is looked at."""
        self.module = module
        p = self.p = module.params
        self.directory = p["directory"]
        self.pip = p["pip"] or pip_command(sys.executable)
        try:
            self.target = target_args(p["python_version"], p["machine"], p["glibc"])
            self.groups = requirement_groups(p["stack"], p["choice"])
        except (ValueError, KeyError, TypeError) as err:
            module.fail_json(msg=f"cannot compute the host's requirements: {err}")
        self.installed = {normalize(k): str(v) for k, v in p["installed"].items()}
        self.inputs = {
            "schema": MANIFEST_SCHEMA,
            "groups": self.groups,
            "target": self.target,
            "installed": self.installed,
            "protect": sorted(normalize(n) for n in p["protect"]),
        }
        self.digest = inputs_digest(self.inputs)
        self.mpath = manifest_path(self.directory, self.digest)
        self.result = {
            "changed": False,
            "manifest": self.mpath,
            "inputs_digest": self.digest,
            "manifest_sha256": "",
            "downloaded": [],
        }

    def run(self) -> None:
        """Refuse what cannot be trusted, answer from a current manifest (no pip run), else build."""
        module, directory, result = self.module, self.directory, self.result
        if not os.path.isdir(directory) and not self.p["download"]:
            module.fail_json(
                msg=f"the wheelhouse {directory} does not exist and downloads are off: carry in a "
                "wheelhouse built on a connected controller, or allow downloads",
                **result,
            )

        old = trusted_manifest(module, self.mpath, self.digest, result)
        known = read_hash_cache(self.p["hash_cache"], directory)
        seen = refuse_untrusted(module, directory, old, known, result)
        known = {**known, **seen}
        if old and old.get("inputs_digest") == self.digest:
            exit_when_current(module, old, known, seen, result)
        self.build(old, known, seen)

    def build(self, old: dict | None, known: dict, seen: dict) -> None:
        """The wheelhouse falls short of (or has no) manifest: resolve every pip run, download what is
        missing (online only), write the manifest and exit."""
        module, directory, result = self.module, self.directory, self.result
        pip_supports_target_dry_run(module, self.pip)
        if not self.p["download"]:
            fail_offline_incomplete(module, self.pip, self.groups, target=self.target, result=result)
        if not module.check_mode:
            os.makedirs(directory, exist_ok=True)
        details, files = resolve_all(
            module, self.pip, self.groups, target=self.target, installed=self.installed, result=result
        )
        result["changed"] = bool(result["downloaded"]) or not old or bool(result.get("stale"))
        present = {f: {"sha256": ""} for f in files if os.path.exists(os.path.join(directory, f))}
        _unused, current = stale_files(directory, {"files": present}, known=known)
        seen.update(current)
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "inputs_digest": self.digest,
            "inputs": self.inputs,
            "groups_detail": details,
            "files": manifest_files(current),
        }
        write_manifest(module, manifest, len(current) == len(files), result)
        finish(
            module,
            seen,
            files=sorted(files),
            groups=details,
            hashes={f: v["sha256"] for f, v in current.items()},
            **result,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    WheelhouseBuild(module).run()


if __name__ == "__main__":
    main()
