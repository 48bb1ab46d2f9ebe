"""module wheelhouse_build's first job: resolve each requirement group for the host's targets with pip's
resolver (a dry run into a stub of what the host already has) and download what it picked; offline, prove
the wheelhouse holds every pick. Tested through the module in tests/unit/test_wheelhouse*.py."""

from __future__ import annotations

import os
import re
import sys
import tempfile

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
    requirement_key,
    wheel_name_version,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    missing_requirement,
    pin_from_metadata,
    report_items,
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
