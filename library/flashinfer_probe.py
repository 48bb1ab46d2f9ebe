#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: one read of FlashInfer's state on the host (installed versions, JIT stamp, local fact);
when everything is current it also records the local fact, so a no-op rerun is this one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_probe
short_description: Say whether FlashInfer is current in an env and record its local fact when it is
description:
  - First applies the sm_12x arch rule of C(plugins/module_utils/flashinfer.py) to O(arch_list) and the
    release that C(bin/nvcc --version) in O(cuda_home) prints - failing as the rule does (no nvcc,
    unreadable release, a refused arch list with its remedy) before anything is read or written - and
    returns its answer as RV(rule).
  - Reads, with the env's O(python) (C(importlib.metadata), FlashInfer is not imported), which of
    O(requirements) are missing or at another version.
  - Reads the JIT stamp O(stamp_path) and says whether it holds the JIT inputs (O(inputs) plus the rule's
    C(arch_list) and C(nvcc)) with its kernel library still on disk.
  - When nothing is missing and (with O(jit_verify)) the stamp holds, the env is current and the module then
    records the local fact C(epforge_flashinfer) in O(facts_dir) (O(fact), the rule's C(nvcc) and
    C(jit_arch_list), and the kernel the stamp names),
    written only when its content changes; nothing is written in check mode. So a no-op rerun of role
    flashinfer is this one module call.
  - When the env is not current it changes nothing; the role installs, compiles and records.
  - Supports check mode and diff mode.
options:
  cuda_home:
    description: CUDA_HOME whose nvcc FlashInfer's JIT will use.
    type: path
    required: true
  arch_list:
    description: Target archs (C(12.0), C(12.0a), C(9.0), ...) that the rule turns into
      C(FLASHINFER_CUDA_ARCH_LIST).
    type: list
    elements: str
    required: true
  requirements:
    description: Requirements (C(name==version) or C(name)) the env must hold.
    type: list
    elements: str
    required: true
  stamp_path:
    description: The JIT stamp (JSON with C(inputs), C(library), C(sass_archs), C(seconds)).
    type: path
    required: true
  inputs:
    description: The JIT inputs the role knows (FlashInfer version, CUDA home, kernel); the module adds the
      rule's C(arch_list) and C(nvcc) - the stamp must hold all of them.
    type: dict
    required: true
  jit_verify:
    description: Whether the role proves the install with a JIT-compiled kernel (then the stamp must hold).
    type: bool
    default: true
  fact:
    description: The fact's fields the role knows (package, version, python, arch_list, ...); the module adds
      C(nvcc) and C(jit_arch_list) from the rule and C(jit_library), C(jit_sass_archs) and C(jit_seconds)
      from the stamp.
    type: dict
    required: true
  timeout:
    description: Seconds the version read may take.
    type: int
    default: 120
extends_documentation_fragment:
  - epforge.ep.facts_dir
  - epforge.ep.python
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The only change, the local fact C(epforge_flashinfer), is shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Probe FlashInfer (and record its fact when current)
  epforge.ep.flashinfer_probe:
    cuda_home: /opt/epforge/cuda-13.0
    arch_list: ["12.0"]
    python: /opt/epforge/ml-env/bin/python
    requirements: [flashinfer-python==0.7.2]
    stamp_path: /var/lib/epforge/flashinfer-jit.stamp.json
    inputs: {flashinfer: 0.7.2, cuda_home: /opt/epforge/cuda-13.0, activation: silu}
    facts_dir: /etc/ansible/facts.d
    fact: {package: flashinfer-python, version: 0.7.2, python: /opt/epforge/ml-env/bin/python}
"""

RETURN = r"""
rule:
  description: The arch rule's answer (C(nvcc_arch_rule) of C(plugins/module_utils/flashinfer.py)).
  returned: success
  type: dict
  contains:
    arch_list:
      description: Value for FLASHINFER_CUDA_ARCH_LIST (space-separated).
      type: str
      sample: "12.0"
    sass_archs:
      description: SASS names the built kernels must carry.
      type: list
      elements: str
      sample: [sm_120]
    nvcc_version:
      description: nvcc release (major.minor).
      type: str
      sample: "13.0"
nvcc_version:
  description: nvcc release (major.minor); also returned when the rule fails (empty when unreadable).
  returned: success and on an arch rule failure
  type: str
  sample: "13.0"
inputs:
  description: The JIT inputs compared with the stamp (O(inputs) plus the rule's C(arch_list) and C(nvcc)).
  returned: success
  type: dict
fact:
  description: The fact's fields without the kernel (O(fact) plus the rule's C(nvcc) and C(jit_arch_list)).
  returned: success
  type: dict
missing:
  description: Requirements the env lacks or holds at another version.
  returned: always
  type: list
  elements: str
stamp:
  description: The JIT stamp as read (empty when missing or unreadable).
  returned: always
  type: dict
stamp_ok:
  description: Whether the stamp holds O(inputs) and its kernel library exists.
  returned: always
  type: bool
current:
  description: Nothing to install or compile (the fact was recorded in this call).
  returned: always
  type: bool
kernel:
  description: The verified kernel the stamp names (library, sass_archs, seconds, rebuilt=false).
  returned: always
  type: dict
fact_changed:
  description: Whether the local fact changed (would change in check mode); false when not current.
  returned: always
  type: bool
watch:
  description:
    - For the probe cache (plugins/module_utils/watch.py), when the env is current and nothing changed - the
      sorted paths the answer depends on - C(bin/nvcc) of O(cuda_home) as given and resolved, O(python) as
      given and resolved, its C(pyvenv.cfg) and every C(sys.path) directory (the site dirs whose
      C(.dist-info) entries give the versions), O(stamp_path), the kernel library the stamp names and the
      fact file.
    - Empty when there is work (not current), the fact changed, or an import-path variable (C(PYTHONPATH)...)
      is set (then the versions do not depend on files alone).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json
from ansible_collections.epforge.ep.plugins.module_utils.flashinfer import (
    FlashInferRuleFailure,
    nvcc_arch_rule,
)
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import installed_versions
from ansible_collections.epforge.ep.plugins.module_utils.pynames import requirement_name
from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, import_paths, watch_list

FACT_NAME = "epforge_flashinfer"


def missing_requirements(module: AnsibleModule, python: str, requirements: list[str], timeout: int) -> list:
    """The requirements the env's python lacks: not installed, or another version than an exact `==` pin
    (the installed versions from distribution metadata: payload installed_versions)."""
    names = [requirement_name(req) for req in requirements]
    run = run_payload(python, installed_versions, names, timeout=timeout)
    if run.rc != 0 or not isinstance(run.answer, dict):
        msg = f"reading the installed versions with {python} failed"
        fail_cmd(module, msg, run.argv, run.rc, output=run.output)
    missing = []
    for req, name in zip(requirements, names, strict=True):
        have, want = run.answer.get(name) or "", req.partition("==")[2].strip()
        if not have or (want and have != want):
            missing.append(req)
    return missing


def stamped_kernel(stamp: dict, jit_verify: bool) -> dict:
    """The fact's JIT fields: the stamp's kernel when the role verifies one, else empty."""
    if not jit_verify:
        return {"jit_library": "", "jit_sass_archs": [], "jit_seconds": None}
    return {
        "jit_library": stamp.get("library", ""),
        "jit_sass_archs": stamp.get("sass_archs", []),
        "jit_seconds": stamp.get("seconds"),
    }


def watched(p: dict, stamp: dict) -> list[str]:
    """What a current answer depends on: the nvcc the rule asks, where the env's versions are read from,
    the stamp, the kernel it names (its existence counts) and the fact compared ([] when the versions'
    places cannot be told from files)."""
    places = import_paths(p["python"], p["timeout"])
    if places is None:
        return []
    nvcc = binary_paths(os.path.join(p["cuda_home"], "bin", "nvcc"))
    own = [p["stamp_path"], stamp.get("library") or "", fact_path(p["facts_dir"], FACT_NAME)]
    return watch_list(nvcc, places, own)


ARGUMENT_SPEC = {
    "cuda_home": {"type": "path", "required": True},
    "arch_list": {"type": "list", "elements": "str", "required": True},
    "python": {"type": "path", "required": True},
    "requirements": {"type": "list", "elements": "str", "required": True},
    "stamp_path": {"type": "path", "required": True},
    "inputs": {"type": "dict", "required": True},
    "jit_verify": {"type": "bool", "default": True},
    "facts_dir": {"type": "path", "required": True},
    "fact": {"type": "dict", "required": True},
    "timeout": {"type": "int", "default": 120},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    # The rule first: a refused arch list or a missing nvcc fails before anything is read or written.
    try:
        rule = nvcc_arch_rule(p["cuda_home"], p["arch_list"])
    except FlashInferRuleFailure as exc:
        module.fail_json(**exc.fields)
    inputs = {**p["inputs"], "arch_list": rule["arch_list"], "nvcc": rule["nvcc_version"]}
    fact = {**p["fact"], "nvcc": rule["nvcc_version"], "jit_arch_list": rule["arch_list"]}
    missing = missing_requirements(module, p["python"], p["requirements"], p["timeout"])
    stamp = read_json(p["stamp_path"]) or {}
    stamp_ok = stamp.get("inputs") == inputs and os.path.exists(stamp.get("library") or "/nonexistent")
    current = not missing and (stamp_ok or not p["jit_verify"])
    result = {
        "changed": False,
        "rule": rule,
        "nvcc_version": rule["nvcc_version"],
        "inputs": inputs,
        "fact": fact,
        "missing": missing,
        "stamp": stamp,
        "stamp_ok": stamp_ok,
        "current": current,
        "kernel": {
            "library": stamp.get("library"),
            "sass_archs": stamp.get("sass_archs"),
            "seconds": stamp.get("seconds"),
            "rebuilt": False,
        },
        "fact_changed": False,
        "watch": [],
    }
    if current:
        content = {**fact, **stamped_kernel(stamp, p["jit_verify"])}
        try:
            wrote = write_local_fact(p["facts_dir"], FACT_NAME, content, check_mode=module.check_mode)
        except OSError as exc:
            module.fail_json(msg=f"writing the local fact {FACT_NAME} under {p['facts_dir']} failed: {exc}")
        result.update(changed=wrote["changed"], fact_changed=wrote["changed"])
        if wrote["changed"]:
            result["diff"] = wrote["diff"]
        else:
            result["watch"] = watched(p, stamp)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
