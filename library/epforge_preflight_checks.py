#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: check a host against an epforge stack before anything changes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_preflight_checks
short_description: Check a host's GPUs, driver, Python and disk against an epforge stack
description:
  - Compares the host with the chosen stack (C(epforge_stack_spec)) before anything is installed. The NVIDIA
    driver must be at least the stack's C(driver.min_version) and must support the stack's CUDA
    (C(cuda_driver_version) >= C(cuda.version)); every GPU's arch must be in the stack's C(arch_list) (12.0
    and 12.0a count as the same base arch); the host's Python must be at least C(python.min_version);
    the filesystem of C(disk_path) must have C(min_free_gib) free (a run that builds nothing, O(builds=false),
    needs at most 2 GiB of it).
  - On a host without a usable GPU the GPU checks are skipped with the reason and C(gpu_runtime) lists the
    steps that need a GPU as skipped, unless C(require_gpu) is true, which fails.
  - Fails with one line per failed check, each naming the problem and the remedy.
  - With O(gather_gpu_facts) it first gathers the GPU facts itself with nvidia-smi, through the same code
    as module C(nvidia_gpu_facts) (C(plugins/module_utils/gpu_facts.py)), and returns them as
    C(ansible_facts.epforge_gpu_facts).
  - With O(known_issues_table) it then evaluates the known-issues table against the GPUs, the stack and
    O(server) (C(plugins/module_utils/known_issues.py), the code of module C(epforge_known_issues)). An error
    row fails with that module's message, warning rows are reported as Ansible warnings, adjust rows change
    the settings; and it returns C(preflight_result), role C(preflight)'s whole result.
  - With O(facts_dir) as well, it writes C(preflight_result) as the local fact O(fact_name) through
    C(plugins/module_utils/local_facts.py) (the writer of module C(epforge_local_fact)), only when the
    content changes and never when a check or an error row failed. So role C(preflight) costs one module
    call on a no-op rerun.
  - Otherwise it reads only (runs the host's Python for its version, reads the filesystem's free space,
    runs nvidia-smi). Check mode writes nothing and reports whether the fact would change; diff mode shows
    the fact's change. Results hold no volatile values (no free-byte counts), so they are stable across
    reruns.
options:
  stack:
    description: The stack (C(epforge_stack_spec)); reads C(name), C(cuda.version), C(driver.min_version),
      C(python.min_version), C(arch_list).
    type: dict
    required: true
  gpu_facts:
    description:
      - GPU facts in the schema of module C(nvidia_gpu_facts) (C(epforge_gpu_facts)); empty means no GPU.
      - Must stay empty with O(gather_gpu_facts).
    type: dict
    default: {}
  gather_gpu_facts:
    description:
      - Gather the GPU facts on the host with nvidia-smi instead of reading O(gpu_facts), and return them as
        C(ansible_facts.epforge_gpu_facts). A host without a usable GPU gets C(available=false) with the
        reason, as with module C(nvidia_gpu_facts).
    type: bool
    default: false
  nvidia_smi_path:
    description:
      - nvidia-smi to run with O(gather_gpu_facts); unset or empty looks it up on the PATH (and the usual
        sbin directories).
    type: path
  nvidia_smi_timeout:
    description: Seconds each nvidia-smi call may run with O(gather_gpu_facts) (a hung driver reports no GPU).
    type: int
    default: 60
  known_issues_table:
    description:
      - The known-issues table (C(data/known_issues.yml) as a mapping, or that mapping as JSON text). When
        set, it is evaluated after the host checks against the GPU facts, the stack and O(server), and
        C(preflight_result) is returned.
      - JSON text is what the action plugin passes for O(known_issues_path) - one value to encode, check and
        copy instead of every node of the table (a no-op rerun pays less).
    type: raw
  server:
    description:
      - The requested SGLang server settings (C(epforge_server) with the node group's values) for
        O(known_issues_table). Secret-named values are masked in the output and left out of
        C(preflight_result).
      - With O(known_issues_table), the one server settings object is built from them
        (C(plugins/module_utils/server_object.py)) - the settings with the table's adjustments and their
        reasons, rendered for O(sglang_version) to argv and environment, with their digest;
        returned as C(preflight_result.server).
    type: dict
    default: {}
  sglang_version:
    description:
      - The SGLang release the object's argv is rendered for (flag names move between releases).
      - Empty takes the stack's C(sglang.version).
    type: str
    default: ""
  flag_table:
    description:
      - The flag table of that release (C(data/sglang_flags/VERSION.json), written from the release's own
        parser by C(scripts/sglang_flag_data.py)); settings named after any of its flags are known.
      - Empty knows only epforge's own settings (C(plugins/module_utils/sglang_args.py)).
      - A mapping, or its JSON text (what the action plugin passes for O(flag_table_path) - the file as
        it is).
    type: raw
    default: {}
  flag_table_path:
    description:
      - The flag table's file instead of O(flag_table) (a release without a file knows only epforge's own
        settings). epforge's action plugin for this module reads it on the controller and passes the table, so
        the host needs no copy; cheaper than passing the table through a template.
    type: path
  known_issues_path:
    description:
      - The known-issues table's file (C(data/known_issues.yml)) instead of O(known_issues_table), read on the
        controller by the action plugin like O(flag_table_path).
    type: path
  facts_dir:
    description:
      - Write C(preflight_result) as the local fact O(fact_name) in this directory (created when missing),
        only when its content changes. Needs O(known_issues_table) (or O(known_issues_path)).
    type: path
  fact_name:
    description: Name of the local fact file (without C(.fact)) written to O(facts_dir).
    type: str
    default: epforge_preflight
  require_gpu:
    description: Fail when the host has no usable GPU (instead of marking GPU steps skipped).
    type: bool
    default: false
  python:
    description:
      - The Python interpreter that will build the host's environments (name on PATH or absolute path).
      - Empty checks the interpreter running this module.
    type: str
    default: python3
  disk_path:
    description:
      - A path whose filesystem must have C(min_free_gib) free; its nearest existing parent is measured.
    type: path
    default: /var/lib/epforge
  min_free_gib:
    description:
      - Free space needed on C(disk_path) in GiB (0 skips the check) by a run that builds the toolkit, torch
        and SGLang environments and extensions.
    type: float
    default: 20
  builds:
    description:
      - Whether this run builds the toolkit, environments and extensions (site.yml's provision steps).
      - False for a run that only serves, tunes or benchmarks what was built. The disk check then needs at
        most 2 GiB (logs, results, JIT caches), so a host that provisioning itself filled past
        C(min_free_gib) can still serve.
    type: bool
    default: true
  gpu_steps:
    description:
      - Steps that need a GPU at runtime; listed in C(gpu_runtime.skipped_steps) on a host without one.
    type: list
    elements: str
    default: [sglang_server, sglang_benchmark, collective_probe, deepep_gpu_verify]
  fail_on_error:
    description:
      - Fail when a check fails or an error row of O(known_issues_table) matches (false returns them and
        lets the caller decide; the fact is then not written).
    type: bool
    default: true
  run_lock:
    description:
      - Take the host's run lock before anything else (one epforge run per host at a time), held by a small
        detached process through an flock(2) the kernel releases whenever that process ends
        (C(plugins/module_utils/epforge_preflight_checks/run_lock.py)). Not taken in check mode.
      - The action plugin (C(plugins/action/epforge_preflight_checks.py)) fills in C(controller) and breaks a
        stale lock of an earlier run of the same controller whose ansible-playbook process is gone.
    type: dict
    suboptions:
      path:
        description: The lock file.
        type: path
        required: true
      wait_s:
        description: Seconds a second run waits for the lock before it is refused, naming the holder.
        type: float
        default: 60
      lease_s:
        description:
          - Seconds the lock is held at most when the host cannot watch the controller's process (ssh, podman
            hosts); on the controller's own machine the lock ends with the controller's process.
        type: float
        default: 21600
      controller:
        description: The controller's ansible-playbook process (host, boot_id, pid, start).
        type: dict
        required: true
      playbook:
        description: The playbook the run is of (named to a refused run).
        type: str
        default: ""
      break_stale:
        description: The token of a stale holder to end first (set by the action plugin only).
        type: str
        default: ""
extends_documentation_fragment:
  - epforge.ep.model_dir
  - epforge.ep.pci_fabric
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode takes no run lock and writes no fact; it reports whether the fact would change.
  diff_mode:
    support: full
    details: The only change, the fact O(fact_name), is shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Check the host against the stack
  epforge.ep.epforge_preflight_checks:
    stack: "{{ epforge_stack_spec }}"
    gpu_facts: "{{ epforge_gpu_facts }}"
    require_gpu: "{{ epforge_require_gpu }}"
    disk_path: /var/lib/epforge
    min_free_gib: 20
  register: preflight_checks

- name: The whole preflight in one call (role preflight)
  epforge.ep.epforge_preflight_checks:
    stack: "{{ epforge_stack_spec }}"
    gather_gpu_facts: true
    require_gpu: "{{ epforge_require_gpu }}"
    known_issues_table: "{{ lookup('ansible.builtin.file', 'data/known_issues.yml') | from_yaml }}"
    server: "{{ epforge_server }}"
    facts_dir: /etc/ansible/facts.d
  register: preflight
"""

RETURN = r"""
run_lock:
  description:
    - The run lock (taken C(new) or C(already) by this run; C(watching) says whether the holder watches the
      controller's process) and its holder record.
    - When refused, C(holder) names the run that holds it.
  returned: when run_lock is set and not in check mode
  type: dict
checks:
  description: One entry per check, in a fixed order; status is passed, failed or skipped.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: python, ok: true, status: passed, detail: "python3 3.11.7 >= 3.10 (stack cu130)"}
    - {name: gpu_arch, ok: true, status: skipped, detail: "skipped: no usable GPU (nvidia-smi not found)"}
failed_checks:
  description:
    - Names of the failed checks. (Called C(failed) before 2026-12-05, which ansible-core 2.21 warns of in a
      real run - "Values for result key 'failed' must be of type bool".)
  returned: always
  type: list
  elements: str
python_version:
  description: Version of the checked Python (empty when it could not run).
  returned: always
  type: str
  sample: 3.11.7
gpu_runtime:
  description: Whether GPU-runtime steps can run here; without a GPU, which steps are skipped and why.
  returned: always
  type: dict
  sample: {available: false, reason: "nvidia-smi not found on PATH", skipped_steps: [sglang_server]}
ansible_facts:
  description: >-
    The gathered GPU facts, as module C(nvidia_gpu_facts) sets them, and whether systemd runs the host
    (role C(sglang_server) picks its manager from it without another host call).
  returned: when gather_gpu_facts is true
  type: dict
  contains:
    epforge_gpu_facts:
      description: The schema of module M(epforge.ep.nvidia_gpu_facts).
      type: dict
    epforge_systemd_running:
      description: Whether C(/run/systemd/system) is a directory (systemd is the host's init, running).
      type: bool
known_issues:
  description: >-
    The known-issues verdict, in the keys of module C(epforge_known_issues) (findings, matched,
    adjusted_settings, settings_changes, messages, context).
  returned: when known_issues_table is set
  type: dict
preflight_result:
  description: >-
    Role C(preflight)'s result and the content of the local fact (schema, stack, gpu, checks,
    python_version, known_issues, server, gpu_runtime; see the role's README). C(server) is the one server
    settings object (schema, sglang_version, settings, adjustments, argv, env, digest).
  returned: when known_issues_table is set and nothing failed
  type: dict
path:
  description: The local fact file.
  returned: when facts_dir is set and nothing failed
  type: str
  sample: /etc/ansible/facts.d/epforge_preflight.fact
"""

import json
import os
import pwd
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks.host_checks import (
    host_checks,
    start_python,
)
from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks.run_lock import (
    LockBusy,
    describe_holder,
    take_lock,
)
from ansible_collections.epforge.ep.plugins.module_utils.gpu_facts import (
    DEFAULT_TIMEOUT,
    FABRIC_ARGUMENT_SPEC,
    gather_gpu_facts,
)
from ansible_collections.epforge.ep.plugins.module_utils.known_issues import (
    TableError,
    evaluate,
    format_adjustment,
    format_finding,
    stack_summary,
)
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import fabric_summary
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import secret_values
from ansible_collections.epforge.ep.plugins.module_utils.server_object import build as build_server_object
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import load_flag_table

DEFAULT_GPU_STEPS = ("sglang_server", "sglang_benchmark", "collective_probe", "deepep_gpu_verify")


ARGUMENT_SPEC = {
    "stack": {"type": "dict", "required": True},
    "gpu_facts": {"type": "dict", "default": {}},
    "gather_gpu_facts": {"type": "bool", "default": False},
    "nvidia_smi_path": {"type": "path"},
    "nvidia_smi_timeout": {"type": "int", "default": DEFAULT_TIMEOUT},
    **FABRIC_ARGUMENT_SPEC,
    "require_gpu": {"type": "bool", "default": False},
    "python": {"type": "str", "default": "python3"},
    "disk_path": {"type": "path", "default": "/var/lib/epforge"},
    "min_free_gib": {"type": "float", "default": 20},
    "builds": {"type": "bool", "default": True},
    "gpu_steps": {"type": "list", "elements": "str", "default": list(DEFAULT_GPU_STEPS)},
    "known_issues_table": {"type": "raw"},
    "server": {"type": "dict", "default": {}},
    "sglang_version": {"type": "str", "default": ""},
    "flag_table": {"type": "raw", "default": {}},
    "model_dir": {"type": "path", "default": "/var/lib/epforge/models"},
    "flag_table_path": {"type": "path"},
    "known_issues_path": {"type": "path"},
    "facts_dir": {"type": "path"},
    "fact_name": {"type": "str", "default": "epforge_preflight"},
    "fail_on_error": {"type": "bool", "default": True},
    "run_lock": {
        "type": "dict",
        "options": {
            "path": {"type": "path", "required": True},
            "wait_s": {"type": "float", "default": 60},
            "lease_s": {"type": "float", "default": 21600},
            "controller": {"type": "dict", "required": True},
            "playbook": {"type": "str", "default": ""},
            "break_stale": {"type": "str", "default": "", "no_log": False},
        },
    },
}


def take_run_lock(module: AnsibleModule) -> dict:
    """Hold the host's run lock for this run, or fail naming the run that holds it."""
    lock = module.params["run_lock"]
    if lock["wait_s"] < 0 or lock["lease_s"] <= 0:
        module.fail_json(msg="run_lock.wait_s must be >= 0 and run_lock.lease_s > 0 (seconds)")
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        return take_lock(
            lock["path"],
            controller=lock["controller"],
            python=sys.executable,
            wait_s=lock["wait_s"],
            lease_s=lock["lease_s"],
            info={"user": user, "playbook": lock["playbook"]},
            break_stale=lock["break_stale"],
        )
    except LockBusy as busy:
        holder = busy.args[0]
        module.fail_json(
            msg=f"another epforge run holds this host's run lock ({lock['path']}): "
            f"{describe_holder(holder)}; waited {lock['wait_s']:g} s. Nothing was changed: run again when "
            "it has finished",
            run_lock={"taken": "refused", "holder": holder},
        )
    except OSError as exc:
        module.fail_json(msg=f"cannot take the run lock {lock['path']}: {exc}")
    return {}


def known_issues_verdict(table: dict, gpu_facts: dict, stack: dict, server: dict) -> dict:
    """The result of module epforge_known_issues (its messages included); TableError when malformed."""
    verdict = evaluate(table, gpu_facts, stack, server)
    findings = verdict["findings"]
    verdict["messages"] = (
        [f"ERROR {format_finding(f)}" for f in findings["errors"]]
        + [f"ADJUSTED {format_adjustment(a)}" for a in findings["adjustments"]]
        + [f"WARNING {format_finding(f)}" for f in findings["warnings"]]
    )
    return verdict


def _version_of(stack: dict, key: str, field: str = "version"):
    part = stack.get(key)
    return part.get(field, "") if isinstance(part, dict) else ""


def preflight_result(stack: dict, gpu_facts: dict, host: dict, verdict: dict, server: dict) -> dict:
    """Role preflight's result (the local fact epforge_preflight): what the host checks found, the GPUs in
    short, and the known-issues verdict. No volatile values, so a rerun writes the same bytes."""
    gpus = [g for g in gpu_facts.get("gpus") or [] if isinstance(g, dict)]
    findings = verdict["findings"]
    return {
        "schema": 1,
        "stack": {
            "name": stack.get("name"),
            "cuda": _version_of(stack, "cuda"),
            "torch": _version_of(stack, "torch"),
            "sglang": _version_of(stack, "sglang"),
            "flashinfer": _version_of(stack, "flashinfer"),
            "arch_list": stack.get("arch_list"),
            "driver_min": _version_of(stack, "driver", "min_version"),
            "python_min": _version_of(stack, "python", "min_version"),
        },
        "gpu": {
            "available": bool(gpu_facts.get("available")),
            "reason": gpu_facts.get("reason", ""),
            "gpu_count": int(gpu_facts.get("gpu_count") or 0),
            "names": list(dict.fromkeys(g.get("name") for g in gpus)),
            "archs": gpu_facts.get("archs", []),
            "interconnect": gpu_facts.get("interconnect", "none"),
            "driver_version": gpu_facts.get("driver_version", ""),
            "cuda_driver_version": gpu_facts.get("cuda_driver_version", ""),
            "fabric": fabric_summary(gpu_facts.get("fabric")),
        },
        "checks": host["checks"],
        "python_version": host["python_version"],
        "known_issues": {
            "matched": verdict["matched"],
            "errors": findings["errors"],
            "warnings": findings["warnings"],
            "adjustments": findings["adjustments"],
        },
        "server": server,
        "gpu_runtime": host["gpu_runtime"],
    }


def start(module: AnsibleModule) -> dict:
    """Refuse contradictory options; return the GPU facts (gathered here or passed in)."""
    params = module.params
    if params["gather_gpu_facts"]:
        if params["gpu_facts"]:
            module.fail_json(msg="gpu_facts and gather_gpu_facts exclude each other: pass one")
        if params["nvidia_smi_timeout"] < 1:
            module.fail_json(
                msg=f"nvidia_smi_timeout must be at least 1 second, got {params['nvidia_smi_timeout']}"
            )
        return gather_gpu_facts(
            module,
            params["nvidia_smi_path"],
            params["nvidia_smi_timeout"],
            params["fabric_root"],
            params["lspci_path"],
        )
    return params["gpu_facts"] or {}


def _mapping(value, name: str):
    """A table given as a mapping or as its JSON text, as a mapping (None stays None); else ValueError."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping (or its JSON text), got {type(value).__name__}")
    return value


def load_tables(module: AnsibleModule) -> tuple[dict, dict | None]:
    """(flag table, known-issues table) as mappings: given by file (read where the module runs; the action
    plugin reads them on the controller and passes their JSON text, so on a host this reads no file) or by
    value. module.params keep what was passed: the invocation record stays one string per table."""
    params = module.params
    try:
        flag_table = params["flag_table"]
        known_issues = params["known_issues_table"]
        if params["flag_table_path"]:
            flag_table = load_flag_table(params["flag_table_path"])
        if params["known_issues_path"]:
            # imported here: a host given the table (the usual case, through the action plugin) never needs it
            from ansible.module_utils.common.yaml import yaml_load  # noqa: PLC0415

            if yaml_load is None:
                module.fail_json(
                    msg="known_issues_path needs PyYAML where the module runs: pass known_issues_table"
                )
            with open(params["known_issues_path"], encoding="utf-8") as handle:
                known_issues = yaml_load(handle.read())
        return _mapping(flag_table, "flag_table") or {}, _mapping(known_issues, "known_issues_table")
    except Exception as exc:  # a file that cannot be read or parsed: named, not a traceback
        module.fail_json(msg=f"cannot read a table preflight needs: {exc}")
    return {}, None


def judged(tables: tuple[dict, dict | None], gpu_facts: dict, stack: dict, params: dict) -> tuple:
    """(verdict, its error, server object, its error): the pure part of the module, done while the host's
    interpreter answers; the errors are reported in PreflightChecks.run's order (after the host checks)."""
    flag_table, table = tables
    if table is None:
        return None, "", {}, ""
    try:
        verdict = known_issues_verdict(table, gpu_facts, stack, params["server"] or {})
    except TableError as exc:
        return None, f"the known-issues table is malformed: {exc}; fix data/known_issues.yml", {}, ""
    if verdict["findings"]["errors"]:
        return verdict, "", {}, ""
    version = params["sglang_version"] or _version_of(stack, "sglang")
    try:
        return verdict, "", build_server_object(verdict, version, flag_table, params["model_dir"]), ""
    except ValueError as exc:
        return verdict, "", {}, f"the server settings cannot be rendered for SGLang {version}: {exc}"


class PreflightChecks:
    """The module's one job in its fixed order: tables read, the run lock taken, the host checked, then the
    known-issues verdict and the server object reported, and the local fact written."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.stack = self.params["stack"]

    def run(self) -> None:
        """Check the host, then judge the server settings: the refusals come in this fixed order."""
        module, params = self.module, self.params
        tables = self.tables()
        gpu_facts, judgement, result = self.check_host(tables)
        if tables[1] is None:
            module.exit_json(changed=False, **result)
        verdict, table_error, server, server_error = judgement
        self.report_known_issues(verdict, table_error, result)
        if server_error:
            module.fail_json(msg=server_error, **result)
        result["preflight_result"] = preflight_result(self.stack, gpu_facts, result, verdict, server)
        if not params["facts_dir"]:
            module.exit_json(changed=False, **result)
        try:
            written = write_local_fact(
                params["facts_dir"],
                params["fact_name"],
                result["preflight_result"],
                check_mode=module.check_mode,
            )
        except ValueError as exc:
            module.fail_json(msg=str(exc), **result)
        module.exit_json(**written, **result)

    def tables(self) -> tuple[dict, dict | None]:
        """The flag and known-issues tables; a fact to write needs the known-issues one."""
        tables = load_tables(self.module)
        if self.params["facts_dir"] and tables[1] is None:
            self.module.fail_json(
                msg="facts_dir needs known_issues_table (or known_issues_path): the fact is its result"
            )
        return tables

    def check_host(self, tables: tuple[dict, dict | None]) -> tuple[dict, tuple, dict]:
        """(GPU facts, the judged tables, the host checks' result); fails when the host does not fit the
        stack and fail_on_error is set."""
        module, params, stack = self.module, self.params, self.stack
        # Mask secrets of the settings everywhere in the output, the invocation record included.
        module.no_log_values.update(secret_values(params["server"] or {}))
        # One run at a time on this host, decided before anything is written.
        lock = take_run_lock(module) if params["run_lock"] and not module.check_mode else None
        # Every bounded command starts after the lock is held: its timeout counts its own run, never the lock
        # wait (issue 35 item 5: a 30 s probe started before a 60 s wait failed as "cannot run python3").
        # Reads only, so it starts first: the interpreter runs while the GPU facts are gathered.
        python_version = start_python(params["python"] or "")
        gpu_facts = start(module)
        judgement = judged(tables, gpu_facts, stack, params)
        result = host_checks(params, gpu_facts, python_version)
        if lock:
            result["run_lock"] = lock
        if params["gather_gpu_facts"]:
            result["ansible_facts"] = {
                "epforge_gpu_facts": gpu_facts,
                "epforge_systemd_running": os.path.isdir("/run/systemd/system"),
            }
        if result["failed_checks"] and params["fail_on_error"]:
            module.fail_json(
                msg=f"preflight: host does not fit stack '{stack_summary(stack)['name']}': "
                + " | ".join(c["detail"] for c in result["checks"] if c["status"] == "failed"),
                **result,
            )
        return gpu_facts, judgement, result

    def report_known_issues(self, verdict: dict | None, table_error: str, result: dict) -> None:
        """The verdict into the result, its errors failing (fail_on_error) and its warnings warned; exits
        without a server object when the host checks or the verdict found errors."""
        module = self.module
        if table_error:
            module.fail_json(msg=table_error, **result)
        result["known_issues"] = verdict
        errors = verdict["findings"]["errors"]
        if errors and self.params["fail_on_error"]:
            module.fail_json(
                msg=f"{len(errors)} known dead end(s) in the requested server settings: "
                + " | ".join(format_finding(f) for f in errors),
                **result,
            )
        for warning in verdict["findings"]["warnings"]:
            module.warn(format_finding(warning))
        if result["failed_checks"] or errors:
            module.exit_json(changed=False, **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("known_issues_table", "known_issues_path"), ("flag_table", "flag_table_path")],
        supports_check_mode=True,
    )
    PreflightChecks(module).run()


if __name__ == "__main__":
    main()
