#!/usr/bin/python
"""Ansible module (controller side): a wheelhouse that covers every pip run a host's roles make."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheelhouse_build
short_description: Download once every wheel a host needs, for its python and platform, into a wheelhouse
description:
  - Runs on the controller (delegate_to localhost). Computes the pip runs the roles will make on a host
    (module_utils/epforge_wheelhouse.py requirement_groups, from the stack and I(choice)), in order.
  - For each run, first asks pip whether the wheelhouse alone satisfies it (C(pip install --dry-run --no-index
    --find-links DIRECTORY --report), for the host's python version, ABI and manylinux platforms, against
    what the host's env already holds, given as I(installed)). pip's configuration files and C(PIP_*)
    variables are ignored for this check, so only the wheelhouse counts.
  - When the wheelhouse falls short and I(download=true), resolves the run against the registry (pip's own
    configuration), then C(pip download --no-deps) only the wheels that are not there. A wheel a user put
    in the directory (a trimmed vendor build, for example) is used when its name and version fit and is
    recorded with its hash.
  - "Every wheel is checked against the hashes the wheelhouse's manifests recorded before anything uses it
    (a file is hashed again whenever its size, mtime, ctime or inode changed): a recorded wheel replaced by
    other bytes fails the run with I(download=false), naming the file (returned in C(mismatched)), and is
    removed to be downloaded again with I(download=true) (C(redownloaded)). A manifest naming anything but a
    plain wheel file name (for example C(../outside/x.whl)) is refused."
  - When it falls short and I(download=false) (a controller with no registry), fails naming the requirement
    pip could not find, before anything changes on any host.
  - Writes C(DIRECTORY/manifests/DIGEST.json) (the inputs, every wheel's sha256 and which run needs it).
    A rerun with the same inputs and unchanged files runs no pip at all (changed=false).
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
  log_path:
    description: Log of every pip run (appended).
    type: path
    required: true
  timeout:
    description: Seconds each pip run may take.
    type: int
    default: 3600
author: epforge developers
"""

EXAMPLES = r"""
- name: Wheelhouse for the hosts' python and platform
  wheelhouse_build:
    directory: /srv/epforge-wheelhouse
    stack: "{{ epforge_stack_spec }}"
    choice: {ml_env_method: existing, sglang_profile: server, sglang_deps: [fastapi, uvicorn]}
    python_version: "3.12.3"
    machine: x86_64
    glibc: "2.39"
    installed: {torch: 2.11.0+cu130, numpy: 2.3.1}
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

import os
import re
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import fail_cmd, tail
from ansible.module_utils.epforge_files import read_json, write_json_atomic
from ansible.module_utils.epforge_process import run_bounded, run_logged
from ansible.module_utils.epforge_wheelhouse import (
    MANIFEST_SCHEMA,
    bad_names,
    base_version,
    inputs_digest,
    manifest_path,
    mismatched_files,
    missing_requirement,
    normalize,
    pin_from_metadata,
    recorded_hashes,
    report_items,
    requirement_groups,
    stale_files,
    target_args,
    wheel_name_version,
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
        rc, _ = run_logged(argv, self.log, timeout=120, header="wheelhouse: empty env for resolution")
        if rc != 0:
            fail_cmd(module, "cannot create an empty venv for pip's resolution", argv, rc, log_path=self.log)
        self.count = 0

    def dry_run(self, group: dict, installed: dict, offline: bool) -> tuple[int, list[dict], str, list[str]]:
        """(rc, items, output, argv) of pip install --dry-run --report for one group."""
        self.count += 1
        stubs = os.path.join(self.scratch, f"stubs-{self.count}")
        write_installed_stubs(stubs, installed)
        report = os.path.join(self.scratch, f"report-{self.count}.json")
        argv = [
            *self.pip,
            "--python",
            os.path.join(self.empty, "bin", "python"),
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            report,
            "--find-links",
            self.directory,
            *self.target,
        ]
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
        argv = [*self.pip, "download", "--no-deps", "--dest", self.directory, *self.target]
        if group["index_url"]:
            argv += ["--extra-index-url", group["index_url"]]
        argv += [f"{item['name']}=={item['version']}" for item in items]
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_INDEX",)}
        rc, _ = run_logged(
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
    wanted_name = normalize(re.split(r"[<>=!~;\[ ]", wanted)[0])
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


def refuse_untrusted(module, directory: str, old: dict | None, download: bool, result: dict) -> None:
    """Before any pip run or write: a manifest naming anything but a plain wheel file of the wheelhouse is
    refused; a wheel whose bytes no manifest recorded (replaced after the build) is refused offline, and
    removed to be downloaded again online. Names the files."""
    names = bad_names(old or {})
    if names:
        module.fail_json(
            msg=f"the manifest {result['manifest']} names {', '.join(repr(n) for n in names)}: "
            f"'{names[0]}' is not a plain wheel file name of the wheelhouse; nothing was used or changed. "
            "Rebuild the wheelhouse on a connected controller",
            **result,
        )
    recorded = recorded_hashes(directory)
    present = {f: {"sha256": ""} for f in recorded if os.path.exists(os.path.join(directory, f))}
    _, current = stale_files(directory, {"files": present}, known=(old or {}).get("files"))
    mismatched = mismatched_files(current, recorded)
    if not mismatched:
        return
    if not download:
        found = "; ".join(
            f"{f}: sha256 {current[f]['sha256'][:12]}..., recorded {', '.join(sorted(recorded[f]))[:12]}..."
            for f in mismatched
        )
        module.fail_json(
            msg=f"wheels of {directory} differ from what its manifests recorded (replaced after the build): "
            f"{found}. Nothing was used or changed; put the recorded wheels back, or, to trust the new ones "
            f"as they are, remove {os.path.join(directory, 'manifests')} and build again",
            mismatched=mismatched,
            **result,
        )
    if not module.check_mode:
        for name in mismatched:
            os.unlink(os.path.join(directory, name))
    result["redownloaded"] = mismatched


def main() -> None:
    module = AnsibleModule(
        argument_spec={
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
        },
        supports_check_mode=True,
    )
    p = module.params
    directory = p["directory"]
    pip = p["pip"] or [sys.executable, "-m", "pip"]
    try:
        target = target_args(p["python_version"], p["machine"], p["glibc"])
        groups = requirement_groups(p["stack"], p["choice"])
    except (ValueError, KeyError, TypeError) as err:
        module.fail_json(msg=f"cannot compute the host's requirements: {err}")
    installed = {normalize(k): str(v) for k, v in p["installed"].items()}
    inputs = {
        "schema": MANIFEST_SCHEMA,
        "groups": groups,
        "target": target,
        "installed": installed,
        "protect": sorted(normalize(n) for n in p["protect"]),
    }
    digest = inputs_digest(inputs)
    mpath = manifest_path(directory, digest)
    result = {"changed": False, "manifest": mpath, "inputs_digest": digest, "downloaded": []}
    if not os.path.isdir(directory) and not p["download"]:
        module.fail_json(
            msg=f"the wheelhouse {directory} does not exist and downloads are off: carry in a "
            "wheelhouse built on a connected controller, or allow downloads",
            **result,
        )

    old = read_json(mpath)
    refuse_untrusted(module, directory, old, p["download"], result)
    if old and old.get("inputs_digest") == digest:
        stale, current = stale_files(directory, old)
        if not stale and current != old["files"]:
            # Same bytes, other file identities (a manifest written before they were recorded, or a copy
            # with the same content): record them, so the next run hashes nothing.
            if not module.check_mode:
                write_json_atomic(mpath, {**old, "files": current})
            result["changed"] = True
        if not stale:
            module.exit_json(
                files=sorted(old["files"]),
                groups=old["groups_detail"],
                hashes={f: v["sha256"] for f, v in current.items()},
                reason="manifest matches, every wheel present with its recorded hash",
                **result,
            )
        result["stale"] = stale

    pip_supports_target_dry_run(module, pip)
    if not module.check_mode:
        os.makedirs(directory, exist_ok=True)
    details, files = resolve_all(module, pip, groups, target=target, installed=installed, result=result)
    result["changed"] = bool(result["downloaded"]) or not old or bool(result.get("stale"))
    if module.check_mode:
        present = {f: {"sha256": ""} for f in files if os.path.exists(os.path.join(directory, f))}
        _, current = stale_files(directory, {"files": present}, known=(old or {}).get("files"))
        module.exit_json(
            files=sorted(files), groups=details, hashes={f: v["sha256"] for f, v in current.items()}, **result
        )
    _, current = stale_files(
        directory, {"files": {f: {"sha256": ""} for f in files}}, known=(old or {}).get("files")
    )
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "inputs_digest": digest,
        "inputs": inputs,
        "groups_detail": details,
        "files": current,
    }
    os.makedirs(os.path.dirname(mpath), exist_ok=True)
    write_json_atomic(mpath, manifest)
    module.exit_json(
        files=sorted(files), groups=details, hashes={f: v["sha256"] for f, v in current.items()}, **result
    )


if __name__ == "__main__":
    main()
