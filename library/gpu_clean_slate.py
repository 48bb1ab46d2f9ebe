#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: wait for a clean slate between two servers (process groups gone, GPU memory released)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_clean_slate
short_description: Wait until a stopped server's process groups are gone and GPU memory is released
description:
  - Without O(baseline), measures every GPU's used memory (C(nvidia-smi --query-gpu=index,memory.used
    --format=csv,noheader,nounits)) and returns it as RV(baseline); the tuner takes it once, after the server
    that ran before was stopped and before its first launch.
  - With O(baseline), polls until no process group of O(process_groups) has a member and every GPU's used
    memory is within O(bound_mib) of its baseline, for at most O(wait_s); else fails with
    C(failure_class=gpu_memory_not_released) and the figures per GPU (RV(gpus)).
  - A host without nvidia-smi (a stand-in, a GPU-less test host) has no GPU to judge; only the process groups
    are waited for, and RV(reason) says why no GPU was read.
  - Reads only (C(changed) is always false); check mode runs it too.
options:
  baseline:
    description:
      - Used MiB per GPU index, as an earlier call returned it in RV(baseline) (empty on a host without GPUs).
      - Omitted, the baseline is measured and returned; nothing is waited for.
    type: dict
  bound_mib:
    description: How many MiB above its baseline a GPU may still hold.
    type: int
    default: 1024
  wait_s:
    description: Seconds to wait for the slate to clear before failing.
    type: float
    default: 60
  interval_s:
    description: Seconds between two polls.
    type: float
    default: 1
  process_groups:
    description: Process group ids of the previous launch (role sglang_server's C(process_groups)).
    type: list
    elements: int
    default: []
  nvidia_smi_path:
    description: Path of nvidia-smi; when omitted it is looked up on the PATH.
    type: path
  timeout:
    description: Seconds one nvidia-smi call may run.
    type: int
    default: 30
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Measure the baseline once the previous server stopped
  epforge.ep.gpu_clean_slate:
  register: baseline

- name: Before the next launch, wait for a clean slate
  epforge.ep.gpu_clean_slate:
    baseline: "{{ baseline.baseline }}"
    process_groups: [12345]
    bound_mib: 1024
    wait_s: 60
"""

RETURN = r"""
baseline:
  description: Used MiB per GPU index; the measured one without O(baseline), else O(baseline) as given.
  returned: always
  type: dict
  sample: {"0": 0, "1": 0}
gpus:
  description: Per GPU, C(index), C(baseline_mib), C(now_mib), C(bound_mib), C(over) (beyond the bound).
  returned: always
  type: list
  elements: dict
waited_s:
  description: Seconds waited.
  returned: always
  type: float
process_groups_left:
  description: Process groups of O(process_groups) still alive at the end.
  returned: always
  type: list
  elements: int
reason:
  description: Why no GPU was read ("" when nvidia-smi answered).
  returned: always
  type: str
failure_class:
  description: C(gpu_memory_not_released) when the slate did not clear within O(wait_s).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.gpu_clean_slate.memory import (
    GPU_MEMORY_NOT_RELEASED,
    QUERY_ARGS,
    describe,
    live_groups,
    parse_memory_used,
    settle,
)
from ansible_collections.epforge.ep.plugins.module_utils.gpu_facts import (
    NvidiaSmi,
    failure_reason,
    find_nvidia_smi,
)

ARGUMENT_SPEC = {
    "baseline": {"type": "dict"},
    "bound_mib": {"type": "int", "default": 1024},
    "wait_s": {"type": "float", "default": 60},
    "interval_s": {"type": "float", "default": 1},
    "process_groups": {"type": "list", "elements": "int", "default": []},
    "nvidia_smi_path": {"type": "path"},
    "timeout": {"type": "int", "default": 30},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    path, reason = find_nvidia_smi(module, p["nvidia_smi_path"])
    smi = NvidiaSmi(path, p["timeout"]) if path else None

    def read() -> dict[str, int]:
        if smi is None:
            return {}
        argv, rc, out, err = smi.run(QUERY_ARGS)
        if rc != 0:
            module.fail_json(msg=failure_reason(rc, out, err, p["timeout"]), cmd=argv, rc=rc)
        try:
            return parse_memory_used(out)
        except ValueError as exc:
            module.fail_json(msg=f"cannot parse the nvidia-smi memory query: {exc}", cmd=argv, stdout=out)

    if p["baseline"] is None:
        baseline = read()
        module.exit_json(
            changed=False, baseline=baseline, gpus=[], waited_s=0.0, process_groups_left=[], reason=reason
        )
    baseline = {str(index): int(mib) for index, mib in p["baseline"].items()}
    answer = settle(
        read,
        lambda: live_groups(p["process_groups"]),
        baseline,
        bound_mib=p["bound_mib"],
        wait_s=p["wait_s"],
        interval_s=p["interval_s"],
    )
    result = {
        "changed": False,
        "baseline": baseline,
        "gpus": answer["gpus"],
        "waited_s": answer["waited_s"],
        "process_groups_left": answer["process_groups_left"],
        "reason": reason,
    }
    if not answer["clean"]:
        module.fail_json(msg=describe(answer, p["wait_s"]), failure_class=GPU_MEMORY_NOT_RELEASED, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
