#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: install a pinned SGLang into the ML env, once, and prove that it imports."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_install
short_description: Install a pinned SGLang into a Python environment, once, and verify it
description:
  - Installs C(sglang==VERSION) into the environment of I(python) with pip (an argv list, output appended
    to I(log_path), bounded by I(timeout)).
  - I(install_deps=true) (serving hosts) installs SGLang with its dependencies and I(kernel_package).
    I(install_deps=false) (hosts that only validate server flags, such as a CPU-only CI machine) installs
    SGLang with C(--no-deps) plus I(parser_deps), the few packages that importing
    C(sglang.srt.server_args) needs; such an environment can parse flags but cannot serve.
  - I(profile=server) (an air-gapped GPU host whose image already has torch) installs SGLang and
    I(kernel_package) with C(--no-deps), then I(server_deps) (what C(python -m sglang.launch_server) imports),
    each pinned to the requirement the installed SGLang's own metadata declares (C(Requires-Dist), extras
    dropped) and skipped by pip when the env already has it; those named in I(server_no_deps) in a
    C(--no-deps) run of their own, before the others.
  - I(overrides) (pins such as C(transformers==5.12.1)) are installed after SGLang in a pip run of their own,
    over SGLang's pins, and checked on every run like the release itself.
  - pip uses the index, or a wheelhouse when the task's environment sets C(PIP_NO_INDEX) and
    C(PIP_FIND_LINKS) (role wheelhouse); I(pip_source) is only recorded.
  - I(keep) requirements (the stack's torch) are passed to every pip run, so pip refuses to replace
    them instead of silently swapping torch. Before installing anything, pip's plan (C(--dry-run --report))
    is checked too, and a plan that would replace a kept distribution (even by the same version of another
    build) is refused naming it (C(torch 2.11.0+cu130 -> 2.14.1)).
  - Idempotent by evidence. A stamp (JSON with a hash of the inputs) plus the installed distribution
    versions (read from metadata, no import) decide; when both match nothing runs and nothing is imported.
  - After an install, proves that C(import sglang) and C(import sglang.srt.server_args) work (no GPU
    needed) and that C(sglang.__version__) is I(version), then writes the stamp.
  - With I(server_object), also the sglang role's other work, in this one call (a no-op rerun is one module
    call) - before anything changes, the object is refused when malformed, edited or rendered for another
    release (C(plugins/module_utils/server_object.py)); the directories of I(log_path) and I(stamp_path) are
    made; after the install (or finding it current) the object's argv is judged by the installed SGLang's
    own parser, or answered from I(flags_cache_path) when nothing they depend on changed (see module
    C(sglang_flags_check)); with I(facts_dir), the local fact C(epforge_sglang) is written, only when its
    content changes.
  - Check mode reports what would be installed, with a diff of the stamp and of the fact; the parser is not
    run when SGLang would first have to be installed.
options:
  python:
    description: The python of the environment (the ML env), which must already hold the stack's torch.
    type: path
    required: true
  version:
    description: SGLang release to install (C(epforge_stack_spec.sglang.version)).
    type: str
    required: true
  kernel_package:
    description: SGLang's kernel package requirement (C(epforge_stack_spec.sglang.kernel_package)), installed
      with I(install_deps=true) only.
    type: str
    default: ""
  install_deps:
    description: Full install (true) or SGLang without dependencies plus I(parser_deps) (false).
    type: bool
    default: true
  parser_deps:
    description: Requirements that C(import sglang.srt.server_args) needs, installed when
      I(install_deps=false).
    type: list
    elements: str
    default: []
  profile:
    description: C(full), C(parser) or C(server); default C(full) when I(install_deps) else C(parser).
    type: str
    choices: [full, parser, server]
  server_deps:
    description: Distributions that C(python -m sglang.launch_server) imports (I(profile=server)), pinned from
      SGLang's metadata when it names them; an item with its own version specifier is used as given.
    type: list
    elements: str
    default: []
  server_no_deps:
    description:
      - Distributions (names, or requirements whose name counts) of I(server_deps) that I(profile=server)
        installs with C(--no-deps), in a pip run of their own before the others (role sglang's
        C(sglang_server_no_deps), by default the stack's FlashInfer where role flashinfer installs it without
        its optional dependencies). They never appear in the run with dependencies, where pip would resolve
        their declared dependencies again (plugins/module_utils/wheelhouse.py C(server_profile_runs), the
        rule role wheelhouse plans with).
    type: list
    elements: str
    default: []
  overrides:
    description: Pinned requirements installed after SGLang (over its own pins).
    type: list
    elements: str
    default: []
  pip_source:
    description: Where pip gets packages (C(registry) or the wheelhouse path), recorded in the result.
    type: str
    default: registry
  keep:
    description: Requirements that must stay as they are (for example C(torch==2.14.1)).
    type: list
    elements: str
    default: []
  pip_args:
    description: Extra pip install arguments (an index URL, for example), one argv item each.
    type: list
    elements: str
    default: []
  stamp_path:
    description: JSON stamp of the installed inputs.
    type: path
    required: true
  server_object:
    description:
      - The server settings object role C(preflight) built (C(preflight_server_object);
        C(plugins/module_utils/server_object.py)) - its C(argv) is what SGLang's parser judges, exactly as
        role C(sglang_server) launches it, and its C(digest) is recorded with the verdict and in the fact. It
        holds no API key. Refused before anything changes when it is malformed, edited after it was built (its
        digest no longer names its argv) or rendered for another SGLang release than I(version).
      - Empty - no flags are checked.
    type: dict
    default: {}
  validate_flags:
    description: Judge the argv of a non-empty I(server_object) with SGLang's parser.
    type: bool
    default: true
  flags_timeout:
    description: Seconds SGLang's parser may take (it imports torch).
    type: int
    default: 300
  flags_cache_path:
    description:
      - JSON file of the verdicts of successful flag checks, one per settings object's digest (the key role
        C(sglang_server) looks for before it launches an object), each naming the parser run it came from
        (the flags, the SGLang version, I(python), the stamp's hash and the check script); an unchanged rerun
        imports nothing. Keeps the newest 32 besides those of a tuner's or sweep's current plan (module
        C(sglang_flags_check), option C(plan)).
      - Not written in check mode; a failed check is never remembered.
    type: path
extends_documentation_fragment:
  - epforge.ep.facts_dir.optional
  - epforge.ep.log_path
  - epforge.ep.timeout.pip
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode installs nothing and makes no directory; SGLang's parser is not run when SGLang would first
      be installed.
  diff_mode:
    support: partial
    details: >-
      The diff shows the stamp (installed versions and inputs) and the local fact; the directories it makes
      are only in C(created_dirs), and check mode on a host without the ML env returns no diff.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Install SGLang into the ML env
  epforge.ep.sglang_install:
    python: /opt/epforge/ml-env/bin/python
    version: "0.5.23"
    kernel_package: sglang-kernel==0.4.10
    keep: [torch==2.14.1]
    log_path: /var/log/epforge/sglang-install.log
    stamp_path: /var/lib/epforge/sglang.stamp.json

- name: Install SGLang, judge the server flags with its parser and record the fact, in one call
  epforge.ep.sglang_install:
    python: /opt/epforge/ml-env/bin/python
    version: "0.5.23"
    install_deps: false
    parser_deps: [pydantic, fastapi]
    keep: [torch==2.14.1]
    log_path: /var/log/epforge/sglang-install.log
    stamp_path: /var/lib/epforge/sglang.stamp.json
    server_object: "{{ preflight_server_object }}"
    flags_cache_path: /var/lib/epforge/sglang-flags-check.json
    facts_dir: /etc/ansible/facts.d
"""

RETURN = r"""
version:
  description: The installed SGLang version (verified by import after a change, else from its metadata).
  returned: success
  type: str
mode:
  description: C(full), C(parser-only) or C(server).
  returned: success
  type: str
installed:
  description: Versions of the relevant distributions as pip's metadata names them.
  returned: success
  type: dict
  sample: {sglang: "0.5.23", sglang-kernel: "0.4.10", torch: "2.14.1"}
actions:
  description: What was done (empty when the stamp matched).
  returned: success
  type: list
  elements: str
stamp:
  description: The stamp's content (inputs and their hash).
  returned: success
  type: dict
log_path:
  description: The pip log.
  returned: always
  type: str
pip_source:
  description: I(pip_source), as given.
  returned: always
  type: str
flags:
  description:
    - The flag check of I(server_object) - C(validated) (false when the object is empty, I(validate_flags) is
      false, or check mode would first install SGLang), C(argv) (the checked flags, never a key), C(digest)
      (the object's);
      after a check also C(cached), C(parsed), C(constructed), C(notes), C(warnings_sglang) and
      C(sglang_version) as module C(sglang_flags_check) returns them.
  returned: success
  type: dict
fact:
  description: The local fact C(epforge_sglang) as written (or as it would be, in check mode).
  returned: when I(facts_dir) is set
  type: dict
created_dirs:
  description: Directories made (or given mode 0755) in this run.
  returned: success
  type: list
  elements: str
watch:
  description:
    - For the probe cache (plugins/module_utils/watch.py), when nothing changed and the flags were not
      judged or came from I(flags_cache_path) - the sorted paths the answer depends on - I(python) as given
      and resolved, its C(pyvenv.cfg) and every C(sys.path) directory (the site dirs whose C(.dist-info)
      entries give the installed versions), I(stamp_path), the directories of I(log_path) and I(stamp_path),
      I(flags_cache_path) when the flags were judged, and the fact file with I(facts_dir).
    - Empty after a change, after a run of SGLang's parser (the next run answers from its cache), or when an
      import-path variable (C(PYTHONPATH)...) is set.
  returned: success
  type: list
  elements: str
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    read_stamp,
    stamp_digest,
    stamp_holds,
    stamp_of,
    stamp_rewrite,
    write_stamp,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import ensure_directories
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv, run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import dist_requires, sglang_import
from ansible_collections.epforge.ep.plugins.module_utils.payloads import (
    installed_versions as installed_versions_payload,
)
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import requirement_key, requirement_name
from ansible_collections.epforge.ep.plugins.module_utils.sglang_install.flags import flags_argv, judge_flags
from ansible_collections.epforge.ep.plugins.module_utils.sglang_install.pip_guard import refuse_replacing
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version
from ansible_collections.epforge.ep.plugins.module_utils.watch import import_paths, watch_list
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    pin_from_metadata,
    server_profile_runs,
)

STAMP_SCHEMA = 1


def requirement_pin(requirement: str) -> str | None:
    """The exact version of an '=='-pinned requirement, else None."""
    pattern = r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*$"
    match = re.match(pattern, requirement or "")
    return match.group(1) if match else None


def profile_of(params: dict) -> str:
    return params.get("profile") or ("full" if params["install_deps"] else "parser")


MODE_NAMES = {"full": "full", "parser": "parser-only", "server": "server"}


def desired_inputs(params: dict) -> dict:
    """The inputs the stamp records; any change in them reinstalls."""
    profile = profile_of(params)
    inputs = {
        "schema": STAMP_SCHEMA,
        "python": params["python"],
        "version": params["version"],
        "mode": MODE_NAMES[profile],
        "kernel_package": params["kernel_package"] if profile in ("full", "server") else "",
        "parser_deps": sorted(params["parser_deps"]) if profile == "parser" else [],
        "keep": sorted(params["keep"]),
        "pip_args": list(params["pip_args"]),
    }
    # Only present when used, so stamps written before these inputs existed stay valid.
    if profile == "server":
        inputs["server_deps"] = sorted(params.get("server_deps") or [])
        if params.get("server_no_deps"):
            inputs["server_no_deps"] = sorted(params["server_no_deps"])
    if params.get("overrides"):
        inputs["overrides"] = list(params["overrides"])
    return inputs


def pinned_checks(inputs: dict) -> dict[str, str]:
    """Distribution -> version that must be installed for the stamp to hold (overrides win)."""
    wanted = {"sglang": inputs["version"]}
    for requirement in [inputs["kernel_package"], *inputs["keep"], *inputs.get("overrides", [])]:
        pin = requirement_pin(requirement)
        if pin:
            wanted[requirement_key(requirement)] = pin
    return wanted


def version_matches(installed: str | None, pin: str) -> bool:
    """PEP 440 '==': a pin without a local label matches any local build (torch==2.11.0 is 2.11.0+cu130)."""
    if installed is None:
        return False
    return installed == pin or ("+" not in pin and base_version(installed) == pin)


def pip_commands(python: str, inputs: dict, server_deps: list[str] | None = None) -> list[list[str]]:
    """The pip argv lists that install the inputs (server deps as given, pinned once SGLang is in)."""
    base = pip_argv(python, "install", *inputs["pip_args"])
    sglang = f"sglang=={inputs['version']}"
    overrides = inputs.get("overrides", [])
    tail_runs = [[*base, *overrides, *inputs["keep"]]] if overrides else []
    if inputs["mode"] == "full":
        extra = [inputs["kernel_package"]] if inputs["kernel_package"] else []
        return [[*base, sglang, *extra, *inputs["keep"]], *tail_runs]
    if inputs["mode"] == "server":
        deps = server_deps if server_deps is not None else inputs["server_deps"]
        runs = server_profile_runs(
            sglang, inputs["kernel_package"], deps, inputs["keep"], inputs.get("server_no_deps")
        )
        return [
            [*base, *(["--no-deps"] if run["no_deps"] else []), *run["requirements"]] for run in runs
        ] + tail_runs
    commands = [[*base, "--no-deps", sglang]]
    if inputs["parser_deps"] or inputs["keep"]:
        commands.append([*base, *inputs["parser_deps"], *inputs["keep"]])
    return commands + tail_runs


def installed_versions(module, python: str, names: list[str]) -> dict:
    """{name: version or None} for python's environment (payload installed_versions); fails the module when
    the interpreter cannot answer."""
    run = run_payload(python, installed_versions_payload, names, timeout=300)
    if not isinstance(run.answer, dict):
        fail_cmd(
            module,
            f"cannot read installed versions with {python}: is the ML env there (role ml_env)?",
            run.argv,
            run.rc,
            output=run.output,
        )
    return run.answer


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "version": {"type": "str", "required": True},
    "kernel_package": {"type": "str", "default": ""},
    "install_deps": {"type": "bool", "default": True},
    "parser_deps": {"type": "list", "elements": "str", "default": []},
    "profile": {"type": "str", "choices": ["full", "parser", "server"]},
    "server_deps": {"type": "list", "elements": "str", "default": []},
    "server_no_deps": {"type": "list", "elements": "str", "default": []},
    "overrides": {"type": "list", "elements": "str", "default": []},
    "pip_source": {"type": "str", "default": "registry"},
    "keep": {"type": "list", "elements": "str", "default": []},
    "pip_args": {"type": "list", "elements": "str", "default": []},
    "log_path": {"type": "path", "required": True},
    "stamp_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 1800},
    "server_object": {"type": "dict", "default": {}},
    "validate_flags": {"type": "bool", "default": True},
    "flags_timeout": {"type": "int", "default": 300},
    "flags_cache_path": {"type": "path"},
    "facts_dir": {"type": "path"},
}

FACT_NAME = "epforge_sglang"

# The variable that lists a profile's dependencies, named when SGLang then misses a module.
DEPS_VARIABLE = {
    "parser-only": "sglang_parser_deps (parser_deps)",
    "server": "sglang_server_deps (server_deps)",
}


def input_problem(params: dict) -> str | None:
    """The first reason the input is refused, or None."""
    if not re.match(r"^\d+(\.\d+)*([a-z0-9.+-]*)$", params["version"]):
        return (
            f"version {params['version']!r} is not a release number (e.g. 0.5.23): "
            "set epforge_stack_spec.sglang.version in the stack file"
        )
    requirements = [params["kernel_package"], *params["keep"], *params["parser_deps"]]
    requirements += [*params["server_deps"], *params["server_no_deps"], *params["overrides"]]
    for requirement in requirements:
        if requirement and not requirement_name(requirement):
            return f"{requirement!r} is not a pip requirement (e.g. sglang-kernel==0.4.10)"
    for requirement in params["overrides"]:
        if not requirement_pin(requirement):
            return (
                f"override {requirement!r} is not pinned as name==version: an override must "
                "say exactly which version replaces SGLang's pin"
            )
    if profile_of(params) == "server" and not params["server_deps"]:
        return "profile server needs server_deps (what python -m sglang.launch_server imports)"
    if profile_of(params) == "parser" and not params["parser_deps"]:
        return (
            "install_deps is false but parser_deps is empty: SGLang without dependencies "
            "cannot even import its server arguments; give the parser's packages"
        )
    return None


def require_python(module, inputs: dict) -> dict | None:
    """The ML env's python must exist; in check mode on a fresh host, the install it would do."""
    params = module.params
    python = params["python"]
    if os.access(python, os.X_OK):
        return None
    if module.check_mode:
        # Check mode on a fresh host: the ML env that a real run creates first is not there yet.
        return {
            "changed": True,
            "version": params["version"],
            "installed": {},
            "actions": [f"install sglang=={params['version']} ({inputs['mode']}) once {python} exists"],
        }
    module.fail_json(
        msg=f"python {python} does not exist or is not executable: create the ML env first "
        "(role ml_env) or set sglang_python"
    )
    return None


def stamp_diff(path: str, before: dict, old_stamp: dict | None, wanted: dict, stamp: dict) -> dict:
    def text(installed, recorded) -> str:
        return json.dumps({"installed": installed, "stamp": recorded}, indent=2, sort_keys=True) + "\n"

    return {
        "before": text(before, old_stamp),
        "after": text(wanted, stamp),
        "before_header": path,
        "after_header": path,
    }


def first_action(wanted: dict, before: dict, mode: str) -> str:
    """What the install does: the versions it installs, or a pip re-run for changed inputs."""
    missing = [
        f"{name}=={version}"
        for name, version in sorted(wanted.items())
        if not version_matches(before.get(name), version)
    ]
    if missing:
        return "install " + ", ".join(missing) + f" ({mode})"
    return f"re-run pip for changed inputs ({mode})"


def pinned_server_commands(module, inputs: dict) -> list[list[str]]:
    """Once SGLang is in (--no-deps): the pip commands with the server deps pinned to what this release
    declares (the same runs as planned: pinning changes no name)."""
    python = module.params["python"]
    run = run_payload(python, dist_requires, ["sglang"], timeout=300)
    declared = run.answer.get("sglang") if isinstance(run.answer, dict) else None
    if run.rc != 0 or declared is None:
        fail_cmd(
            module,
            "cannot read the installed SGLang's Requires-Dist",
            run.argv,
            run.rc or 1,
            output=run.output,
        )
    pinned = pin_from_metadata(declared, inputs["server_deps"])
    return pip_commands(python, inputs, pinned)


def run_pip(module, inputs: dict, commands: list[list[str]], result: dict) -> list[str]:
    """Run the pip commands (each dry-run first, refusing to replace a kept package); one action each."""
    params = module.params
    python, log_path, timeout = params["python"], params["log_path"], params["timeout"]
    env = dict(os.environ, PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
    # Before any install: refuse a plan that would replace the kept torch (an adopted image's above all).
    # With a wheelhouse (PIP_NO_INDEX, PIP_FIND_LINKS) these dry runs also prove every wheel is there.
    keep = inputs["keep"]
    for argv in commands:
        refuse_replacing(module, python, argv, keep, env=env, timeout=timeout, result=result)
    actions = []
    for index in range(len(commands)):
        if inputs["mode"] == "server" and index == 1:
            pinned = pinned_server_commands(module, inputs)
            for changed in [argv for argv in pinned[1:] if argv not in commands]:
                refuse_replacing(module, python, changed, keep, env=env, timeout=timeout, result=result)
            commands = pinned
        argv = commands[index]
        rc, seconds = run_logged(argv, log_path, env=env, timeout=timeout, header="sglang_install")
        if rc != 0:
            what = f"timed out after {timeout} s" if rc == 124 else f"failed (rc {rc})"
            fail_cmd(
                module,
                f"pip install of SGLang {params['version']} {what}; see {log_path}",
                argv,
                rc,
                log_path=log_path,
            )
        actions.append(f"pip ({round(seconds)} s): " + " ".join(argv[4:]))
    return actions


def verify_import(module, mode: str) -> str:
    """Import sglang and its server args in the env; the version it imports as (the asked one)."""
    params = module.params
    argv, verify = payload_argv(params["python"], sglang_import)
    proc = run_bounded(argv, timeout=600, env_update={"HF_HUB_OFFLINE": "1"})
    output = proc.output
    marked = [line for line in output.splitlines() if line.startswith(sglang_import.MARK)]
    if proc.rc != 0 or not marked:
        missing_module = re.findall(r"No module named '([^'.]+)", output)
        deps_var = DEPS_VARIABLE.get(mode)
        hint = (
            f"; add the package that provides '{missing_module[-1]}' to {deps_var}"
            if missing_module and deps_var
            else ""
        )
        fail_cmd(
            module,
            "SGLang was installed but does not import (import sglang, sglang.srt.server_args)" + hint,
            verify,
            proc.rc or 1,
            output=output,
            log_path=params["log_path"],
        )
    imported = json.loads(marked[-1][len(sglang_import.MARK) :])["version"]
    if imported != params["version"]:
        module.fail_json(
            msg=f"SGLang imports as {imported}, not {params['version']}: another sglang shadows "
            f"the installed one (check {params['python']} -m pip list and PYTHONPATH)",
            cmd=verify,
            rc=0,
            log_tail=tail(output),
        )
    return imported


def require_installed(module, wanted: dict) -> dict:
    """The installed versions after pip; every pinned one must be there."""
    params = module.params
    after_versions = installed_versions(module, params["python"], sorted(wanted))
    missing = {
        name: version
        for name, version in wanted.items()
        if not version_matches(after_versions.get(name), version)
    }
    if missing:
        module.fail_json(
            msg=f"after pip, these versions are not installed: {missing} (installed: "
            f"{after_versions}); see {params['log_path']}",
            log_path=params["log_path"],
        )
    return after_versions


def install(module, inputs: dict, stamp: dict) -> dict:
    """Install unless the stamp and the installed versions match: changed, version, installed, actions
    (and diff, commands). stamp: the one in force for inputs (stamp_of); a stamp an older epforge wrote for
    the same inputs is rewritten in this layout once (changed, no pip run)."""
    params = module.params
    wanted = pinned_checks(inputs)
    before_versions = installed_versions(module, params["python"], sorted(wanted))
    old_stamp = read_stamp(params["stamp_path"])
    versions_ok = all(version_matches(before_versions.get(name), version) for name, version in wanted.items())
    stamp_ok = stamp_holds(old_stamp, inputs)
    if versions_ok and stamp_ok:
        rewrite = stamp_rewrite(old_stamp, inputs)
        if rewrite and not module.check_mode:
            write_stamp(params["stamp_path"], stamp)
        return {
            "changed": rewrite,
            "version": before_versions["sglang"],
            "installed": before_versions,
            "actions": ["stamp rewritten in the current digest layout (same inputs)"] if rewrite else [],
            **(
                {"diff": stamp_diff(params["stamp_path"], before_versions, old_stamp, wanted, stamp)}
                if rewrite
                else {}
            ),
        }

    diff = stamp_diff(params["stamp_path"], before_versions, old_stamp, wanted, stamp)
    commands = pip_commands(params["python"], inputs)
    actions = [first_action(wanted, before_versions, inputs["mode"])]
    done = {"changed": True, "installed": before_versions, "actions": actions, "diff": diff}
    if module.check_mode:
        return {**done, "version": params["version"], "commands": commands}
    # What a failure reports besides its message.
    result = {"mode": inputs["mode"], "log_path": params["log_path"], "stamp": stamp}
    result["pip_source"] = params["pip_source"]
    actions += run_pip(module, inputs, commands, result)
    imported = verify_import(module, inputs["mode"])
    after_versions = require_installed(module, wanted)
    actions.append(f"verified: import sglang {imported} and sglang.srt.server_args")
    write_stamp(params["stamp_path"], stamp)
    return {**done, "version": imported, "installed": after_versions}


def fact_of(params: dict, inputs: dict, installed: dict, stamp: dict, flags: dict) -> dict:
    """The local fact epforge_sglang: what is installed, from where, and which flags SGLang accepted."""
    settings = (params["server_object"] or {}).get("settings") or {}
    return {
        "version": installed["version"],
        "mode": inputs["mode"],
        "can_serve": inputs["mode"] in ("full", "server"),
        "package_overrides": list(params["overrides"]),
        "pip_source": params["pip_source"],
        "python": params["python"],
        "kernel_package": inputs["kernel_package"],
        "installed": installed["installed"],
        "stamp_sha256": stamp_digest(stamp),
        "server_flags": {
            "validated": flags["validated"],
            "argv": flags["argv"],
            "digest": flags.get("digest", ""),
            "nnodes": settings.get("nnodes", 1),
            "node_rank": settings.get("node_rank", 0),
        },
    }


def watched(params: dict, result: dict) -> list[str]:
    """What a no-op answer depends on besides the args and the task environment (both in the probe cache's
    key; pip's environment only matters when pip runs, which a no-op does not): where the versions are read
    from, the stamp, the directories made, the flags' cache and the fact; [] after a change or a parser
    run."""
    flags = result["flags"]
    if result["changed"] or (flags["validated"] and not flags.get("cached")):
        return []
    places = import_paths(params["python"])
    if places is None:
        return []
    own = [params["stamp_path"], os.path.dirname(params["log_path"]), os.path.dirname(params["stamp_path"])]
    if flags["validated"]:
        own.append(params["flags_cache_path"])
    if params["facts_dir"]:
        own.append(fact_path(params["facts_dir"], FACT_NAME))
    return watch_list(places, own)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    problem = input_problem(params)
    if problem:
        module.fail_json(msg=problem)
    argv = flags_argv(module)
    inputs = desired_inputs(params)
    # The stamp these inputs get (install() rewrites one an older epforge wrote for them once).
    stamp = stamp_of(inputs)
    # A missing python is refused (or, in check mode, answered) before the directories are made.
    fresh_host = require_python(module, inputs)
    directories = [os.path.dirname(params["log_path"]), os.path.dirname(params["stamp_path"])]
    try:
        created = ensure_directories([d for d in directories if d], check_mode=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"cannot make the log and state directories {directories}: {exc}")
    installed = fresh_host or install(module, inputs, stamp)
    flags = judge_flags(module, argv, installed, stamp)
    diffs = [installed.pop("diff")] if "diff" in installed else []
    result = {
        **installed,
        "changed": installed["changed"] or bool(created),
        "mode": inputs["mode"],
        "log_path": params["log_path"],
        "stamp": stamp,
        "pip_source": params["pip_source"],
        "flags": flags,
        "created_dirs": created,
    }
    if params["facts_dir"]:
        fact = fact_of(params, inputs, installed, stamp, flags)
        written = write_local_fact(params["facts_dir"], FACT_NAME, fact, check_mode=module.check_mode)
        diffs += [written["diff"]] if written["diff"] else []
        result.update(fact=fact, changed=result["changed"] or written["changed"])
    if diffs:
        # Ansible prints one diff or a list of them: the stamp's and the fact's.
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    result["watch"] = watched(params, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
