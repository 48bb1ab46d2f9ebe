#!/usr/bin/python
"""Ansible module: run DeepEP's dispatch + combine round trip on this host's GPUs, check it and time it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_gpu_verify
short_description: DeepEP dispatch + combine round trip across a host's GPUs (correctness and latency)
description:
  - Runs the role's round-trip script (C(roles/deepep/files/deepep_roundtrip.py)) with the env's Python as an
    argv list, one process per GPU, and reads its JSON result.
  - C(normal) mode is DeepEP's intranode path (needs NVLink between the GPUs); C(low_latency) uses the NVSHMEM
    kernels SGLang's decode path (and PCIe hosts) use.
  - Fails when any mode gives a wrong result, naming the mode, the error and the log tail.
  - A measurement changes nothing on the host (changed is always false); in check mode it does not run.
options:
  python:
    description: Python of the env where deep_ep is installed.
    type: path
    required: true
  script:
    description: Path of the round-trip script on the host.
    type: path
    required: true
  num_processes:
    description: GPUs (processes) taking part.
    type: int
    default: 2
  modes:
    description: Modes to run.
    type: list
    elements: str
    choices: [normal, low_latency]
    default: [normal, low_latency]
  result_path:
    description: Where the script writes its JSON result.
    type: path
    required: true
  log_path:
    description: Log of the run (stdout and stderr).
    type: path
    required: true
  environment:
    description: Extra environment for the run (NCCL/NVSHMEM variables).
    type: dict
    default: {}
  timeout:
    description: Seconds before the run is killed.
    type: int
    default: 480
author: epforge developers
"""

EXAMPLES = r"""
- name: Round trip on 2 GPUs
  deepep_gpu_verify:
    python: /root/ml-env/bin/python
    script: /var/lib/epforge/deepep/deepep_roundtrip.py
    num_processes: 2
    result_path: /var/lib/epforge/deepep/gpu_verify.json
    log_path: /var/log/epforge/deepep-gpu-verify.log
"""

RETURN = r"""
result:
  description: The script's JSON (per mode - ok, rel_diff, latency_us_mean, latency_us_min, sizes).
  returned: success
  type: dict
seconds:
  description: Wall time of the run.
  returned: success
  type: float
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import fail_cmd, run_logged, tail_file


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "script": {"type": "path", "required": True},
            "num_processes": {"type": "int", "default": 2},
            "modes": {"type": "list", "elements": "str", "choices": ["normal", "low_latency"],
                      "default": ["normal", "low_latency"]},
            "result_path": {"type": "path", "required": True},
            "log_path": {"type": "path", "required": True},
            "environment": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 480},
        },
        supports_check_mode=True,
    )
    p = module.params
    argv = [p["python"], p["script"], "--num-processes", str(p["num_processes"]), "--modes",
            ",".join(p["modes"]), "--out", p["result_path"]]
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: the GPU round trip is not "
                                                          "run", cmd=argv)
    env = dict(os.environ)
    env.update({k: str(v) for k, v in p["environment"].items()})
    env.setdefault("DEEPEP_VERIFY_TIMEOUT", str(max(60, p["timeout"] - 60)))
    if os.path.exists(p["result_path"]):
        os.unlink(p["result_path"])
    rc, seconds = run_logged(argv, p["log_path"], env=env, timeout=p["timeout"], header="deepep gpu verify")
    result = None
    if os.path.isfile(p["result_path"]):
        with open(p["result_path"], encoding="utf-8") as handle:
            result = json.load(handle)
    if rc == 124:
        fail_cmd(module, f"DeepEP round trip did not finish within {p['timeout']} s (hung "
                         "collective?)", argv, rc,
                 log_path=p["log_path"])
    if result is None:
        fail_cmd(module, "DeepEP round trip wrote no result (the script crashed before the end)", argv, rc,
                 log_path=p["log_path"])
    if not result.get("ok"):
        bad = {m: r.get("error", f"rel_diff {r.get('max_rel_diff')}")
               for m, r in result.get("modes", {}).items()
               if not r.get("ok")}
        module.fail_json(msg="DeepEP round trip failed: " + (result.get("error") or "; ".join(
            f"{m}: {e}" for m, e in bad.items())), cmd=argv, rc=rc, result=result,
            log_tail=tail_file(p["log_path"]), log_path=p["log_path"])
    module.exit_json(changed=False, result=result, seconds=round(seconds, 1), cmd=argv)


if __name__ == "__main__":
    main()
