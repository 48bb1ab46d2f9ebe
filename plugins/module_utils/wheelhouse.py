"""Wheelhouse: what a host needs from pip, resolved for that host's python and platform, as wheel files.

One concept: turning the stack and the roles' choices into ordered requirement groups (the pip runs the
roles will make on the host, in order), the pip arguments that resolve them for another machine's python
tag and platform, and the manifest that proves a wheelhouse covers them (file name -> sha256).
"""

from __future__ import annotations

import json
import os
import re
import zipfile

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.installer import UV_REQUIREMENT
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
    requirement_key,
    requirement_name,
)

MANIFEST_SCHEMA = 1
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
# pip's message when a requirement has no file in the places it may look (offline: the wheelhouse).
_NOT_FOUND = re.compile(r"No matching distribution found for ([^\s]+)")
_NO_VERSION = re.compile(r"Could not find a version that satisfies the requirement ([^\s]+)")


def pin_from_metadata(requires_dist: list[str], names: list[str]) -> list[str]:
    """Each name as SGLang's own Requires-Dist spells it (version specifier, no extras, no markers).

    Entries that only apply to an extra are ignored; a name SGLang does not declare (a transitive import
    such as starlette) or an item that already carries a specifier is used as given.
    """
    declared: dict[str, str] = {}
    for entry in requires_dist or []:
        requirement, _unused, marker = entry.partition(";")
        if "extra" in marker:
            continue
        name = requirement_name(requirement)
        if name:
            spec = re.sub(r"^\s*\[[^\]]*\]", "", requirement.strip()[len(name) :])
            declared.setdefault(normalize(name), spec.strip().replace(" ", ""))
    pinned = []
    for name in names:
        if requirement_name(name) != name.strip():
            pinned.append(name)
            continue
        spec = declared.get(normalize(name), "")
        pinned.append(f"{name}{spec}")
    return pinned


def _group(
    name: str,
    requirements: list[str],
    *,
    no_deps: bool = False,
    index_url: str = "",
    env: str = "ml",
    pin_from: str = "",
) -> dict:
    return {
        "name": name,
        "requirements": [r for r in requirements if r],
        "no_deps": no_deps,
        "index_url": index_url,
        "env": env,
        "pin_from": pin_from,
    }


def _cuda_toolkit_groups(stack: dict, choice: dict) -> list[dict]:
    cuda = stack.get("cuda", {})
    if choice.get("cuda_toolkit_method", cuda.get("default_method")) != "pypi":
        return []
    return [_group("cuda_toolkit", list(cuda.get("pypi_packages", [])), no_deps=True, env="download")]


def _ml_env_groups(stack: dict, choice: dict) -> list[dict]:
    # An adopted env (method existing) is used as it is: no torch, no build tools installed into it.
    if choice.get("ml_env_method", "venv") != "venv":
        return []
    torch = stack.get("torch", {})
    return [
        _group("ml_env torch", [f"torch=={torch.get('version')}"], index_url=torch.get("index_url") or ""),
        _group("ml_env build tools", list(choice.get("ml_env_build_packages") or [])),
    ]


def _installer_groups(choice: dict) -> list[dict]:
    # uv's own wheel (installer.py installs it into a tools venv with the roles' pip settings), only where the
    # installer must be uv: with auto, a registry or mirror without uv's wheel must not fail the wheelhouse
    # (the host's installs fall back to pip, saying so); with uv, a missing wheel fails here, by name.
    if choice.get("installer", "pip") != "uv":
        return []
    return [_group("installer", [UV_REQUIREMENT], no_deps=True, env="download")]


def _flashinfer_groups(stack: dict, choice: dict) -> list[dict]:
    flashinfer = stack.get("flashinfer", {})
    if not choice.get("flashinfer", True) or not flashinfer.get("version"):
        return []
    # flashinfer_no_deps: role flashinfer installs it --no-deps (flashinfer_pip_extra_args), so the plan does.
    requirement = f"{flashinfer.get('package', 'flashinfer-python')}=={flashinfer['version']}"
    return [_group("flashinfer", [requirement], no_deps=bool(choice.get("flashinfer_no_deps")))]


def _deepep_groups(stack: dict, choice: dict) -> list[dict]:
    if not choice.get("deepep", False):
        return []
    groups = []
    nvshmem = stack.get("nvshmem", {})
    if nvshmem.get("package"):
        groups.append(_group("deepep nvshmem", [f"{nvshmem['package']}=={nvshmem['version']}"]))
    prebuilt = stack.get("deepep", {}).get("prebuilt_wheel")
    if prebuilt:
        groups.append(_group("deepep prebuilt", [prebuilt], no_deps=True, env="download"))
    return groups


# The server profile's run of the pins declared no-deps (sglang_server_no_deps).
SERVER_NO_DEPS_RUN = "sglang server deps (--no-deps)"


def split_no_deps(requirements: list[str], no_deps: list[str] | None) -> tuple[list[str], list[str]]:
    """(the requirements pip installs with --no-deps, the others), in their order. A requirement goes to the
    first when its distribution is named in no_deps (names or requirements there: only the normalised
    distribution name counts, so 'apache-tvm-ffi==0.1.11' names apache_tvm_ffi>=0.1)."""
    names = {requirement_key(n) for n in no_deps or []} - {""}
    without = [r for r in requirements if requirement_key(r) in names]
    return without, [r for r in requirements if requirement_key(r) not in names]


def server_profile_runs(
    release: str, kernel: str, deps: list[str], keep: list[str], no_deps: list[str] | None = None
) -> list[dict]:
    """The pip runs of SGLang's install profile server, in order: [{name, requirements, no_deps}].

    The one rule, used by role sglang (module sglang_install runs them on the host) and role wheelhouse
    (requirement_groups plans the same runs):
    1. 'sglang': the release and its kernel package, --no-deps;
    2. 'sglang server deps (--no-deps)', only when no_deps names some of deps (sglang_server_no_deps: the
       stack's FlashInfer where role flashinfer installs it --no-deps, without its optional CuTe-DSL/cuDNN
       dependencies): those, --no-deps. Before run 3, so that a run-3 package depending on one of them
       (xgrammar -> apache-tvm-ffi) finds it installed instead of resolving it again;
    3. 'sglang server deps': the other deps with their dependencies, and keep (the env's torch).
    A distribution of run 2 never appears in run 3: pip asked for an installed distribution again resolves
    its declared dependencies, which is what the inventory left out.
    """
    without, with_deps = split_no_deps(deps, no_deps)
    runs = [{"name": "sglang", "requirements": [r for r in (release, kernel) if r], "no_deps": True}]
    if without:
        runs.append({"name": SERVER_NO_DEPS_RUN, "requirements": without, "no_deps": True})
    if with_deps or keep:
        runs.append({"name": "sglang server deps", "requirements": [*with_deps, *keep], "no_deps": False})
    return runs


def _sglang_groups(stack: dict, choice: dict, keep: list[str]) -> list[dict]:
    """SGLang as its profile installs it (full, server or parser), then any overrides of its pins."""
    if not choice.get("sglang", True):
        return []
    sglang = stack.get("sglang", {})
    profile = choice.get("sglang_profile", "full")
    release = f"sglang=={sglang.get('version')}"
    kernel = sglang.get("kernel_package", "")
    if profile == "full":
        groups = [_group("sglang full", [release, kernel, *keep])]
    elif profile == "server":
        # As role sglang does (the same function): SGLang + kernel --no-deps, then its imports pinned from its
        # Requires-Dist, those named in sglang_no_deps --no-deps.
        runs = server_profile_runs(
            release, kernel, list(choice.get("sglang_deps", [])), keep, choice.get("sglang_no_deps")
        )
        groups = [
            _group(
                run["name"],
                run["requirements"],
                no_deps=run["no_deps"],
                pin_from="" if run["name"] == "sglang" else "sglang",
            )
            for run in runs
        ]
    else:
        groups = [
            _group("sglang", [release], no_deps=True),
            _group(f"sglang {profile} deps", [*choice.get("sglang_deps", []), *keep]),
        ]
    overrides = list(choice.get("sglang_overrides") or [])
    if overrides:
        groups.append(_group("sglang overrides", [*overrides, *keep]))
    return groups


def _gateway_groups(stack: dict, choice: dict) -> list[dict]:
    """smg for role gateway: a venv of its own, so resolved alone (with its dependencies), never against the
    ML env."""
    gateway = stack.get("gateway", {})
    if not choice.get("gateway", False) or not gateway.get("version"):
        return []
    return [_group("gateway", [f"{gateway.get('package', 'smg')}=={gateway['version']}"], env="venv")]


def _extra_groups(choice: dict) -> list[dict]:
    return [
        _group(
            extra["name"],
            list(extra["requirements"]),
            no_deps=bool(extra.get("no_deps")),
            index_url=extra.get("index_url", ""),
            env=extra.get("env", "ml"),
        )
        for extra in choice.get("extra") or []
    ]


def requirement_groups(stack: dict, choice: dict) -> list[dict]:
    """The pip runs the roles make on a host, in the order they make them.

    choice holds the roles' settings that change what they install: ml (bool, default true: the ML env's
    runs at all; false on a host that only runs the gateway), cuda_toolkit_method, ml_env_method,
    ml_env_build_packages, flashinfer (bool), flashinfer_no_deps (bool: role flashinfer's run is --no-deps),
    installer (auto | uv | pip: epforge_installer; uv adds uv's wheel), deepep (bool), sglang (bool),
    sglang_profile (full | parser | server), sglang_deps (the profile's list),
    sglang_no_deps (profile server: those of sglang_deps installed --no-deps, server_profile_runs),
    sglang_keep, sglang_overrides, gateway (bool, default false), extra (list of groups).
    env 'ml' groups install into the ML env (resolved against what it already holds, in this order);
    env 'venv' groups install into a venv of their own (resolved alone, with their dependencies);
    env 'download' groups are fetched with --no-deps and unpacked or inspected by a role, not installed.
    A distribution that an ML-env run declared no_deps (an extra group's no_deps, sglang_no_deps,
    flashinfer_no_deps) installs without its dependencies is never resolved with them by another ML-env run:
    ValueError naming both runs (no_deps_conflict).
    """
    keep = list(choice.get("sglang_keep") or [f"torch=={stack.get('torch', {}).get('version')}"])
    ml = [
        *_cuda_toolkit_groups(stack, choice),
        *_ml_env_groups(stack, choice),
        *_installer_groups(choice),
        *_flashinfer_groups(stack, choice),
        *_deepep_groups(stack, choice),
        *_sglang_groups(stack, choice, keep),
    ]
    if not choice.get("ml", True):
        ml = []
    extra = _extra_groups(choice)
    groups = [*ml, *_gateway_groups(stack, choice), *extra]
    # A run with nothing to install (no build tools asked for, say) is no pip run at all.
    groups = [group for group in groups if group["requirements"]]
    declared = [(g, "wheelhouse_extra_requirements") for g in extra if g["no_deps"] and g["env"] == "ml"]
    declared += [(g, "sglang_server_no_deps") for g in ml if g["name"] == SERVER_NO_DEPS_RUN]
    declared += [(g, "flashinfer_pip_extra_args") for g in ml if g["name"] == "flashinfer" and g["no_deps"]]
    conflict = no_deps_conflict(groups, declared)
    if conflict:
        raise ValueError(conflict)
    return groups


# Where a run with dependencies names a distribution another run installs --no-deps: how to say it once.
_NO_DEPS_HINT = {
    "sglang server deps": "name them in sglang_server_no_deps (role sglang then installs them --no-deps too; "
    "its default names the stack's FlashInfer and flashinfer_extra_packages when flashinfer_pip_extra_args "
    "holds --no-deps)",
    "flashinfer": "give role flashinfer flashinfer_pip_extra_args: [--no-deps] (its run is then planned "
    "--no-deps too), or leave it out of the wheelhouse (wheelhouse_flashinfer: false)",
}


def no_deps_conflict(groups: list[dict], declared: list[tuple[dict, str]]) -> str:
    """'' when no ML-env run resolves with its dependencies a distribution that a declared no-deps run
    installs without them; else the conflicts, named with both runs and where the no-deps run comes from.
    declared: (run, the variable it comes from): wheelhouse_extra_requirements' no_deps runs of env ml, the
    server profile's --no-deps deps. Such a run would fetch exactly what the inventory leaves out (for
    FlashInfer about 200 MB of CuTe-DSL and cuDNN wheels), and on the host pip would install it."""
    owners: dict[str, str] = {}
    for group, source in declared:
        for requirement in group["requirements"]:
            owners.setdefault(requirement_key(requirement), f"'{group['name']}' ({source})")
    problems = []
    for group in groups:
        if group["no_deps"] or group["env"] != "ml":
            continue
        clashes = [r for r in group["requirements"] if requirement_key(r) in owners]
        if not clashes:
            continue
        by_owner: dict[str, list[str]] = {}
        for requirement in clashes:
            by_owner.setdefault(owners[requirement_key(requirement)], []).append(requirement_key(requirement))
        without = " and ".join(f"pip run {o} installs {', '.join(names)}" for o, names in by_owner.items())
        hint = _NO_DEPS_HINT.get(group["name"], "declare them the same way in both runs")
        problems.append(
            f"pip run '{group['name']}' would resolve {', '.join(clashes)} with their dependencies, while "
            f"{without} without them (no_deps): the wheelhouse would hold, and the host install, what the "
            f"inventory leaves out; {hint}"
        )
    return ". ".join(problems)


def manylinux_platforms(machine: str, glibc: str) -> list[str]:
    """The platform tags pip may pick wheels for on a glibc host, newest first (as packaging.tags does)."""
    match = re.match(r"^(\d+)\.(\d+)", glibc or "")
    platforms: list[str] = []
    if match and int(match.group(1)) == 2:
        for minor in range(int(match.group(2)), 4, -1):
            platforms.append(f"manylinux_2_{minor}_{machine}")
            # Older wheels carry only the legacy alias of the same glibc level (PEP 600).
            legacy = LEGACY_MANYLINUX.get(minor)
            if legacy and (minor == 17 or machine in ("x86_64", "i686")):
                platforms.append(f"{legacy}_{machine}")
    platforms.append(f"linux_{machine}")
    return platforms


def target_args(python_version: str, machine: str, glibc: str) -> list[str]:
    """pip arguments that select wheels for another interpreter and platform (binary wheels only)."""
    match = re.match(r"^(\d+)\.(\d+)", python_version or "")
    if not match:
        raise ValueError(f"python version {python_version!r} is not MAJOR.MINOR[.PATCH]")
    tag = f"cp{match.group(1)}{match.group(2)}"
    args = [
        "--only-binary=:all:",
        "--python-version",
        f"{match.group(1)}.{match.group(2)}",
        "--implementation",
        "cp",
        "--abi",
        tag,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for platform in manylinux_platforms(machine, glibc):
        args += ["--platform", platform]
    return args


def write_installed_stubs(directory: str, installed: dict[str, str]) -> None:
    """dist-info stubs (name + version only) that make pip treat these distributions as installed."""
    os.makedirs(directory, exist_ok=True)
    for name, version in sorted(installed.items()):
        safe = re.sub(r"[^A-Za-z0-9.+]+", "_", name)
        info = os.path.join(directory, f"{safe}-{version}.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def report_items(report: dict) -> list[dict]:
    """pip's --report install list -> [{name, version, filename}] (the wheel each would install)."""
    items = []
    for entry in report.get("install", []):
        url = entry.get("download_info", {}).get("url", "")
        items.append(
            {
                "name": normalize(entry["metadata"]["name"]),
                "version": entry["metadata"]["version"],
                "filename": os.path.basename(url.split("#", 1)[0]),
            }
        )
    return items


def missing_requirement(pip_output: str) -> str:
    """The requirement pip could not find (offline: the wheel missing from the wheelhouse), or ''."""
    for pattern in (_NOT_FOUND, _NO_VERSION):
        found = pattern.findall(pip_output or "")
        if found:
            return found[-1]
    return ""


def wheel_requires_dist(path: str) -> list[str]:
    """Requires-Dist entries of a wheel's METADATA (read from the zip, nothing installed)."""
    with zipfile.ZipFile(path) as wheel:
        names = [n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            return []
        text = wheel.read(names[0]).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def inputs_digest(inputs: dict) -> str:
    """The digest (plugins/module_utils/digests.py) of what decides the wheel set (groups, target, env
    contents); a manifest's file name is made from it."""
    return digest(inputs)


def manifest_path(directory: str, digest: str) -> str:
    return os.path.join(directory, "manifests", f"{digest[:16]}.json")


# A manifest names files of its wheelhouse: plain wheel file names, never a path.
_PLAIN_WHEEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$")
# What identifies a file's bytes without reading them: a replacement (even one that keeps size and mtime)
# gets a new inode or ctime.
_IDENTITY = ("size", "mtime_ns", "ctime_ns", "inode")


def bad_names(manifest: dict) -> list[str]:
    """The manifest's file names that are not plain wheel file names of the wheelhouse (e.g. ../x.whl)."""
    return sorted(name for name in manifest.get("files", {}) if not _PLAIN_WHEEL.match(str(name)))


def _identity(stat: os.stat_result) -> dict:
    return {
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "inode": stat.st_ino,
    }


def stale_files(directory: str, manifest: dict, known: dict | None = None) -> tuple[list[str], dict]:
    """Files of a manifest that are absent or whose content changed; and the current {file: {sha256,
    size, mtime_ns, ctime_ns, inode}, ...}.

    A file whose size, mtime, ctime and inode equal those `known` (the controller's hash cache, kept outside
    the wheelhouse) holds keeps that hash (no re-read of 5 GB of torch on every run); any other file is
    hashed again. Identities are never taken from the manifest: it sits beside the wheels, so whoever
    replaces a wheel could also write the new file's identity next to the old hash there.
    """
    known = known or {}
    stale: list[str] = []
    current: dict = {}
    for filename, recorded in sorted(manifest.get("files", {}).items()):
        path = os.path.join(directory, filename)
        try:
            stat = os.stat(path)
        except OSError:
            stale.append(filename)
            continue
        seen = known.get(filename) or {}
        identity = _identity(stat)
        same = all(seen.get(k) == identity[k] for k in _IDENTITY)
        sha = seen["sha256"] if same and seen.get("sha256") else file_sha256(path)
        current[filename] = {"sha256": sha, **identity}
        if sha != recorded.get("sha256"):
            stale.append(filename)
    return stale, current


def manifest_files(current: dict) -> dict:
    """The manifest's files entry: each wheel's sha256 only. File identities (inode, ctime) differ on every
    copy of the wheelhouse; kept out of the manifest, its bytes - and so its digest - stay the build's."""
    return {name: {"sha256": item["sha256"]} for name, item in sorted(current.items())}


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _digest(value, where: str) -> str:
    digest = str(value).strip().lower()
    if not _SHA256.match(digest):
        raise ValueError(f"{where} is {value!r}, not a sha256 (64 hex digits)")
    return digest


def given_manifest_digest(given, name: str) -> str:
    """The sha256 given for the manifest file `name` (like '0123456789abcdef.json'), '' when none is given
    for it. `given` is one digest, or a mapping manifest file name (with or without .json) -> digest for a
    wheelhouse shared by several kinds of hosts. ValueError when it is neither or a digest is malformed."""
    if given is None or given in ("", {}):
        return ""
    if isinstance(given, str):
        return _digest(given, "the digest")
    if not isinstance(given, dict):
        raise ValueError(
            f"expected a sha256 or a mapping manifest file name -> sha256, got {type(given).__name__}"
        )
    digests = {str(k).removesuffix(".json"): _digest(v, f"the digest for {k}") for k, v in given.items()}
    return digests.get(name.removesuffix(".json"), "")


def recorded_hashes(directory: str) -> dict[str, set[str]]:
    """Every hash the wheelhouse's manifests record per wheel file name (plain names only)."""
    hashes: dict[str, set[str]] = {}
    folder = os.path.join(directory, "manifests")
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, entry), encoding="utf-8") as handle:
                files = json.load(handle).get("files", {})
        except (OSError, ValueError, AttributeError):
            continue
        for name, item in files.items() if isinstance(files, dict) else []:
            if _PLAIN_WHEEL.match(str(name)) and isinstance(item, dict) and item.get("sha256"):
                hashes.setdefault(name, set()).add(item["sha256"])
    return hashes


def mismatched_files(current: dict, recorded: dict[str, set[str]]) -> list[str]:
    """Present wheels whose content no manifest of the wheelhouse recorded (a replaced build)."""
    return sorted(f for f, item in current.items() if f in recorded and item["sha256"] not in recorded[f])
