#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: a venv with the stack's torch and build tools, verified once and stamped."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ml_env_torch
short_description: Ensure a venv holds the stack's torch and build tools, verified against the CUDA toolkit
description:
  - Creates the venv at O(path) when missing and installs C(torch==torch_version) (from O(index_url) when
    set) plus the build tools in O(packages), only when they are not already there (read from dist-info, no
    import).
  - Verifies, by importing torch once in the venv (no GPU needed), that C(torch.version.cuda) has the major
    version of the toolkit (O(toolkit_cuda)) and that C(torch.cuda.get_arch_list()) covers every arch in
    O(archs).
  - Records the inputs and this evidence in a stamp (JSON). When the stamp matches the inputs and the venv
    and its packages are still there, nothing runs and torch is not imported again (a rerun is cheap and
    changed=false).
  - The stamp also records the state of torch's files (the directories of its files and of its direct
    requirements' files, their native libraries, their RECORDs;
    C(plugins/module_utils/ml_env_torch/dist_files.py)). When
    that changed (a deleted C(__init__.py), a truncated C(.so), a reinstall), torch is imported again before
    the stamp is trusted; torch that no longer imports is reinstalled (C(--force-reinstall --no-deps)).
  - Every rerun also checks each C(.py) and native file torch's dist-info RECORD lists against the size the
    RECORD records (a stat per file, about 2,450 for torch 2.14, tens of milliseconds, no import); a file
    missing or of another size (C(torch/nn/modules/linear.py) deleted) means torch is reinstalled
    (C(--force-reinstall --no-deps)). The directories holding torch's C(.py) files are in RV(watch), so the
    probe cache sees a deletion too. A C(.py) file edited in place with its size kept is not seen.
  - Refuses, before anything changes, a torch build whose declared CUDA major (O(torch_cuda)) differs from
    the toolkit's, since torch refuses to build extensions with an nvcc of another major version.
  - With O(facts_dir) set it also records the local fact C(epforge_ml_env), only when its content changes.
  - Supports check mode and diff mode.
  - On the no-op answer (the stamp matches, nothing is missing, the fact is current) it returns RV(watch), the
    paths that answer depends on, so the probe cache can reuse it while none of them changes.
  - The installs go through O(installer) (uv or pip, RV(installer) says which and why); their output goes to
    O(log_path) (users can C(tail -f) it); each run is bounded by O(timeout).
options:
  path:
    description: Directory of the venv.
    type: path
    required: true
  base_python:
    description: Interpreter that creates the venv.
    type: str
    default: python3
  torch_version:
    description: torch version to install (as on PyPI, e.g. C(2.14.1); a local part such as C(+cu130) is
      ignored
      when comparing).
    type: str
    required: true
  torch_cuda:
    description: CUDA version the requested torch build is made for (e.g. C(13.0)).
    type: str
    required: true
  index_url:
    description: Package index for torch (e.g. C(https://download.pytorch.org/whl/cu130)); empty = pip's
      default.
    type: str
    default: ""
  packages:
    description: Build tools (pip requirement strings) installed next to torch.
    type: list
    elements: str
    default: [setuptools, wheel, ninja, packaging]
  toolkit_cuda:
    description: CUDA version of the toolkit extensions will be built with; torch's CUDA major must equal it.
    type: str
    required: true
  archs:
    description: Target archs (C(12.0), C(9.0), C(12.0a)); C(torch.cuda.get_arch_list()) must cover each.
    type: list
    elements: str
    required: true
  stamp_path:
    description: Stamp file; default C(PATH/.epforge-ml-env.json).
    type: path
  facts_dir:
    description:
      - When set, the same call records the venv as the local fact C(epforge_ml_env) (JSON in
        O(facts_dir)C(/epforge_ml_env.fact), read back as C(ansible_local.epforge_ml_env)), written only when
        its content changes (nothing in check mode), so a no-op rerun needs no second module call.
      - The fact holds the method (C(venv)), O(path), the python, the verified torch version, CUDA and arch
        list, O(toolkit_cuda), O(archs), the stamp key, what later pip runs keep (C(torch==VERSION)) and
        O(pip_source).
    type: path
  pip_source:
    description: Where pip takes packages from (a wheelhouse or the registry), recorded in the fact.
    type: str
    default: ""
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.timeout.pip
  - epforge.ep.installer
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode creates and installs nothing; it reports the actions a real run would take.
  diff_mode:
    support: full
    details: The diff shows the stamp's key (in check mode) or the whole stamp, and the local fact.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Ensure the ML venv (tail -f /var/log/epforge/ml_env.log)
  epforge.ep.ml_env_torch:
    path: /opt/epforge/ml-env
    torch_version: "{{ epforge_stack_spec.torch.version }}"
    torch_cuda: "{{ epforge_stack_spec.torch.cuda }}"
    index_url: "{{ epforge_stack_spec.torch.index_url }}"
    toolkit_cuda: "{{ epforge_stack_spec.cuda.version }}"
    archs: "{{ epforge_stack_spec.arch_list }}"
    log_path: /var/log/epforge/ml_env.log
"""

RETURN = r"""
python:
  description: The venv's interpreter.
  returned: always
  type: str
  sample: /opt/epforge/ml-env/bin/python
torch_version:
  description: torch.__version__ as verified (from the stamp on a no-op run).
  returned: success
  type: str
  sample: 2.14.1+cu130
torch_cuda:
  description: torch.version.cuda as verified.
  returned: success
  type: str
  sample: "13.0"
torch_arch_list:
  description: torch.cuda.get_arch_list() as verified.
  returned: success
  type: list
  elements: str
  sample: [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120, compute_120]
key:
  description: Hash of the inputs recorded in the stamp.
  returned: always
  type: str
actions:
  description:
    - What this run did (empty when nothing was needed); each install named by the installer that ran it
      (C(uv install ...) or C(pip install ...)), or C(install ...) in check mode, where none runs.
  returned: always
  type: list
  elements: str
  sample: [create venv, uv install torch==2.14.1, uv install ninja, verify torch]
installer:
  description:
    - The installer of this run's installs (C(uv) or C(pip)) and why it was chosen; the pip settings uv was
      given are named, never their values.
  returned: when something was installed
  type: dict
  sample:
    name: uv
    why: "uv==0.13.9 at /opt/epforge/uv/bin/uv; pip settings translated: find-links, no-index"
verified:
  description: Whether torch was imported in this run (false when the stamp proved the state).
  returned: always
  type: bool
reason:
  description: Why work was needed (or C(stamp matches)).
  returned: always
  type: str
fact_changed:
  description: Whether the local fact C(epforge_ml_env) changed (would change in check mode).
  returned: when facts_dir is set
  type: bool
watch:
  description:
    - Paths the no-op answer depends on, sorted and absolute. The stamp; the venv's C(bin/python) with every
      symlink on the way and its realpath; the venv's C(lib/) (which C(python3*) dir holds the site); the
      site-packages the dist-info versions are read from (an install, upgrade or uninstall renames a
      dist-info dir there); with O(facts_dir), the fact file. While the args are the same and none of these
      changed, a rerun gives the same answer (the no-op path imports nothing and runs no pip).
    - Returned only with the no-op answer (RV(reason) C(stamp matches) and nothing changed); empty otherwise.
  returned: always
  type: list
  elements: str
  sample: [/etc/ansible/facts.d/epforge_ml_env.fact, /opt/epforge/ml-env/.epforge-ml-env.json,
           /opt/epforge/ml-env/bin/python, /opt/epforge/ml-env/lib,
           /opt/epforge/ml-env/lib/python3.11/site-packages, /usr/bin/python3.11]
"""

import glob
import json
import os
import re
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import torch_arch_missing
from ansible_collections.epforge.ep.plugins.module_utils.build import (
    cuda_major,
    dist_info_version,
    input_key,
)
from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest_matches, is_older_layout
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.installer import (
    INSTALLER_ARGUMENT_SPEC,
    Installer,
)
from ansible_collections.epforge.ep.plugins.module_utils.ml_env_fact import FACT_NAME, record_ml_env_fact
from ansible_collections.epforge.ep.plugins.module_utils.ml_env_torch.dist_files import (
    integrity_paths,
    path_states,
    record_problems,
    states_digest,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import requirement_name
from ansible_collections.epforge.ep.plugins.module_utils.torch_env import (
    read_facts,
    torch_evidence,
    torch_inputs,
    torch_probe,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version
from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, watch_list


def site_packages(venv: str) -> str | None:
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    return found[-1] if found else None


def missing_packages(venv: str, torch_version: str, packages: list[str]) -> list[str]:
    """Requirements the venv lacks, read from dist-info names only (torch is never imported here)."""
    site = site_packages(venv)
    if not os.path.exists(os.path.join(venv, "bin", "python")) or site is None:
        return [f"torch=={torch_version}", *packages]
    missing = []
    if base_version(dist_info_version(site, "torch")) != base_version(torch_version):
        missing.append(f"torch=={torch_version}")
    for req in packages:
        name = requirement_name(req)
        pinned = re.match(r"^[A-Za-z0-9_.-]+==([^;\s]+)$", req.strip())
        have = dist_info_version(site, name)
        if have is None or (pinned and have != pinned.group(1)):
            missing.append(req)
    return missing


def watched(p: dict, stamp_path: str) -> list[str]:
    """What the no-op answer depends on: the stamp (key and evidence), whether bin/python exists (its link
    chain: a link retargeted, an interpreter replaced or removed), which lib/python3*/site-packages is
    chosen and the dist-info names in it, and the fact file record_ml_env_fact compares."""
    venv = p["path"]
    fact = os.path.join(p["facts_dir"], f"{FACT_NAME}.fact") if p["facts_dir"] else ""
    return watch_list(
        [stamp_path, os.path.join(venv, "lib"), site_packages(venv) or "", fact],
        binary_paths(os.path.join(venv, "bin", "python")),
    )


def run_inputs(p: dict, archs: list[str]) -> dict:
    """What the stamp's key is computed from."""
    return {
        "base_python": p["base_python"],
        "torch_version": p["torch_version"],
        "torch_cuda": p["torch_cuda"],
        "index_url": p["index_url"],
        "packages": sorted(p["packages"]),
        "toolkit_cuda": p["toolkit_cuda"],
        "archs": archs,
    }


def why_work(stamp: dict | None, key: str, missing: list[str]) -> str:
    if not stamp:
        return "no stamp"
    if stamp.get("key") != key:
        return "inputs changed"
    return "packages missing: " + ", ".join(missing)


def planned_actions(created: bool, torch_missing: list[str], other_missing: list[str]) -> list[str]:
    """What the run will do; an install is named by its installer once one ran (named_by)."""
    actions = ["create venv"] if created else []
    if torch_missing:
        actions.append(f"install {torch_missing[0]}")
    if other_missing:
        actions.append("install " + " ".join(other_missing))
    return [*actions, "verify torch"]


def named_by(actions: list[str], installer: str) -> list[str]:
    """The actions with each install named by the installer that ran it (`uv install torch==2.14.1`)."""
    return [f"{installer} {a}" if a.startswith("install ") else a for a in actions]


def install(
    module: AnsibleModule, p: dict, *, created: bool, torch_missing: list, other_missing: list, force: bool
) -> dict:
    """Create the venv and install what is missing, each step logged to log_path; the installer's report."""
    venv, log = p["path"], p["log_path"]
    if created:
        argv = [p["base_python"], "-m", "venv", venv]
        rc, _unused = run_logged(argv, log, timeout=300, header="ml_env: create venv")
        if rc != 0:
            fail_cmd(module, f"creating the venv at {venv} failed", argv, rc, log_path=log)
    installer = Installer.for_python(p, os.path.join(venv, "bin", "python"), log)
    if torch_missing:
        # force: torch's files are broken under an intact dist-info; pip would call it satisfied
        installer.install_or_fail(
            module,
            torch_missing[:1],
            what=torch_missing[0],
            header="ml_env: install torch",
            timeout=p["timeout"],
            index_url=p["index_url"],
            reinstall=force,
            no_deps=force,
        )
    if other_missing:
        installer.install_or_fail(
            module,
            other_missing,
            what="the build tools",
            header="ml_env: install build tools",
            timeout=p["timeout"],
        )
    return installer.report()


def verify_torch(module: AnsibleModule, venv: str, result: dict) -> dict:
    """Import torch in the venv; its version, CUDA and arch list (fail_json when it cannot)."""
    return torch_evidence(
        module,
        os.path.join(venv, "bin", "python"),
        timeout=600,
        failed=f"importing torch in {venv} failed",
        result=result,
    )


def torch_files(venv: str) -> list[str]:
    """The paths whose states stand for torch's installed files and its requirements' (epforge_dist_files)."""
    site = site_packages(venv)
    return integrity_paths(site, "torch") if site else []


def reverify(
    module: AnsibleModule,
    p: dict,
    *,
    stamp: dict,
    stamp_path: str,
    toolkit_major: int,
    archs: list,
    result: dict,
) -> bool:
    """torch's files changed under a matching stamp: import it again. When it still proves the stamp's
    evidence, the stamp learns the new file states (nothing was changed: changed stays false); when it does
    not, returns True: torch is reinstalled (the caller plans it, check mode only reports it)."""
    venv = p["path"]
    proc, _shown = torch_probe(os.path.join(venv, "bin", "python"), timeout=600)
    evidence = read_facts(proc) if proc.rc == 0 else None
    result["verified"] = True
    if evidence is not None and not torch_problems(evidence, p, toolkit_major, archs):
        result["reason"] = "torch's files changed since the stamp; the import proves it again"
        if not module.check_mode:
            write_json_atomic(
                stamp_path, {**stamp, "evidence": evidence, "files_digest": states_digest(torch_files(venv))}
            )
        return False
    why = tail(proc.err or proc.out, 3).strip() or "it printed no versions"
    result["reason"] = f"torch no longer imports in {venv} ({why}): it is reinstalled"
    module.warn(result["reason"])
    return True


def answer_from_stamp(
    module: AnsibleModule, p: dict, *, stamp: dict, stamp_path: str, checks: tuple, result: dict
) -> bool:
    """The stamp matches the inputs and nothing is missing: exit with its answer, after an import when
    torch's files changed since. Returns (without exiting) True when torch no longer imports."""
    venv = p["path"]
    files = torch_files(venv)
    broken = record_problems(site_packages(venv) or "", "torch")
    if broken:
        # pip's RECORD says what it installed: a file missing or of another size is a broken torch, whether
        # or not `import torch` happens to reach it
        result["reason"] = f"torch's files differ from its RECORD ({'; '.join(broken)}): it is reinstalled"
        module.warn(result["reason"])
        return True
    states = path_states(files)
    if not digest_matches(stamp.get("files_digest"), states):
        toolkit_major, archs = checks
        what = {"stamp": stamp, "stamp_path": stamp_path, "toolkit_major": toolkit_major, "archs": archs}
        if reverify(module, p, **what, result=result):
            return True
        stamp = read_json(stamp_path) or stamp
    elif is_older_layout(stamp["files_digest"], states) and not module.check_mode:
        # an older epforge's digest of the same states: the stamp (a cache of the import's answer) is
        # rewritten once in the current layout
        stamp = {**stamp, "files_digest": states_digest(files)}
        write_json_atomic(stamp_path, stamp)
    evidence = stamp.get("evidence", {})
    result.update(
        reason=result.get("reason", "stamp matches"),
        torch_version=evidence.get("torch"),
        torch_cuda=evidence.get("cuda"),
        torch_arch_list=evidence.get("archs", []),
    )
    record_ml_env_fact(module, "venv", venv, result)
    if not result["changed"]:
        result["watch"] = watch_list(watched(p, stamp_path), files)
    module.exit_json(**result)
    return False


def torch_problems(evidence: dict, p: dict, toolkit_major: int, archs: list[str]) -> list[str]:
    """Why the installed torch is not the stack's (empty when it is)."""
    problems = []
    if base_version(evidence["torch"]) != base_version(p["torch_version"]):
        problems.append(f"torch is {evidence['torch']}, not {p['torch_version']}")
    if cuda_major(evidence["cuda"]) != toolkit_major:
        problems.append(
            f"the installed torch {evidence['torch']} is built for CUDA {evidence['cuda']} but the "
            f"toolkit is "
            f"CUDA {p['toolkit_cuda']}: extensions cannot be built with it; install a torch build for CUDA "
            f"{toolkit_major}.x (set the stack's torch.index_url)"
        )
    not_covered = torch_arch_missing(evidence["archs"], archs)
    if not_covered:
        problems.append(
            f"torch.cuda.get_arch_list() {evidence['archs']} does not cover {', '.join(not_covered)}: "
            "this torch "
            "build carries no kernels for those GPUs; choose a torch build that does or change the arch list"
        )
    return problems


def mismatch_msg(p: dict) -> Callable[[int, int], str]:
    return lambda toolkit_major, torch_major: (
        f"torch {p['torch_version']} is built for CUDA {p['torch_cuda']} but the toolkit is CUDA "
        f"{p['toolkit_cuda']}: torch refuses to build extensions with an nvcc of another major "
        f"version. Choose a torch build for CUDA {toolkit_major}.x (index_url) or a CUDA "
        f"{torch_major}.x toolkit. Nothing was changed."
    )


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "base_python": {"type": "str", "default": "python3"},
    "torch_version": {"type": "str", "required": True},
    "torch_cuda": {"type": "str", "required": True},
    "index_url": {"type": "str", "default": ""},
    "packages": {
        "type": "list",
        "elements": "str",
        "default": ["setuptools", "wheel", "ninja", "packaging"],
    },
    "toolkit_cuda": {"type": "str", "required": True},
    "archs": {"type": "list", "elements": "str", "required": True},
    "stamp_path": {"type": "path"},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 1800},
    "facts_dir": {"type": "path"},
    "pip_source": {"type": "str", "default": ""},
    **INSTALLER_ARGUMENT_SPEC,
}


class MlEnvTorch:
    """The module's one job: the venv with the stack's torch, answered from the stamp when it still holds,
    else planned (check mode stops there), installed, verified by an import and stamped."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.venv = self.p["path"]
        self.python = os.path.join(self.venv, "bin", "python")
        self.stamp_path = self.p["stamp_path"] or os.path.join(self.venv, ".epforge-ml-env.json")
        self.result = {"changed": False, "python": self.python, "actions": [], "verified": False, "watch": []}

    def run(self) -> None:
        """Check the inputs, plan the work, then do it (or, in check mode, report it)."""
        module, p, result = self.module, self.p, self.result
        # Bad input first, before anything changes.
        toolkit_major, archs = torch_inputs(module, p, result, mismatch_msg(p))
        inputs = run_inputs(p, archs)
        key = input_key(inputs)
        result["key"] = key

        stamp = read_json(self.stamp_path)
        missing, reinstall = self.missing(stamp, key, inputs, (toolkit_major, archs))
        created, torch_missing, other_missing = self.plan(stamp, key, missing, reinstall=reinstall)
        if module.check_mode:
            result["changed"] = True
            result["diff"] = {"before": {"stamp_key": (stamp or {}).get("key")}, "after": {"stamp_key": key}}
            record_ml_env_fact(module, "venv", self.venv, result)
            module.exit_json(**result)

        result["installer"] = installed_by = install(
            module,
            p,
            created=created,
            torch_missing=torch_missing,
            other_missing=other_missing,
            force=reinstall,
        )
        if installed_by["name"]:
            result["actions"] = named_by(result["actions"], installed_by["name"])
        if created or missing:
            result["changed"] = True
        evidence = self.verify(toolkit_major, archs)
        self.write_stamp(stamp, key, inputs, evidence)
        record_ml_env_fact(module, "venv", self.venv, result)
        module.exit_json(**result)

    def missing(self, stamp: dict | None, key: str, inputs: dict, checks: tuple) -> tuple[list[str], bool]:
        """(what the venv lacks, whether torch is force-reinstalled). A matching stamp with nothing missing
        exits here with its answer, unless torch's files no longer hold."""
        missing = missing_packages(self.venv, self.p["torch_version"], inputs["packages"])
        reinstall = False
        if stamp and stamp.get("key") == key and not missing:
            reinstall = answer_from_stamp(
                self.module,
                self.p,
                stamp=stamp,
                stamp_path=self.stamp_path,
                checks=checks,
                result=self.result,
            )
            missing = [f"torch=={self.p['torch_version']}"]
        return missing, reinstall

    def plan(
        self, stamp: dict | None, key: str, missing: list[str], *, reinstall: bool
    ) -> tuple[bool, list[str], list[str]]:
        """The reason and the actions in the result; returns (venv created, torch missing, others missing)."""
        result = self.result
        result.setdefault("reason", why_work(stamp, key, missing))
        created = not os.path.exists(self.python)
        torch_missing = [m for m in missing if m.startswith("torch==")]
        other_missing = [m for m in missing if not m.startswith("torch==")]
        result["actions"] = planned_actions(created, torch_missing, other_missing)
        if reinstall:
            result["actions"][0] = f"install --force-reinstall {torch_missing[0]}"
        return created, torch_missing, other_missing

    def verify(self, toolkit_major: int, archs: list[str]) -> dict:
        """Import the installed torch; fail naming why it is not the stack's. Returns its evidence."""
        result = self.result
        evidence = verify_torch(self.module, self.venv, result)
        result["verified"] = True
        result.update(
            torch_version=evidence["torch"], torch_cuda=evidence["cuda"], torch_arch_list=evidence["archs"]
        )
        problems = torch_problems(evidence, self.p, toolkit_major, archs)
        if problems:
            self.module.fail_json(msg="; ".join(problems), **result)
        return evidence

    def write_stamp(self, stamp: dict | None, key: str, inputs: dict, evidence: dict) -> None:
        """Record the verified answer (and torch's file states) so the next run needs no import."""
        result, stamp_path = self.result, self.stamp_path
        new_stamp = {
            "key": key,
            "inputs": inputs,
            "evidence": evidence,
            "files_digest": states_digest(torch_files(self.venv)),
        }
        if write_json_atomic(stamp_path, new_stamp):
            result["changed"] = True
            result["diff"] = {
                "before_header": stamp_path,
                "after_header": stamp_path,
                "before": json.dumps(stamp or {}, indent=2, sort_keys=True) + "\n",
                "after": json.dumps(new_stamp, indent=2, sort_keys=True) + "\n",
            }


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    MlEnvTorch(module).run()


if __name__ == "__main__":
    main()
