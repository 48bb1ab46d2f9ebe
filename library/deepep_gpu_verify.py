#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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
  - DeepEP's normal mode needs NVLink between the GPUs (DeepEP issue 216). With O(normal_needs_nvlink) the
    module reads C(nvidia-smi topo -m) first and, when the GPUs taking part are not all NVLink-connected (a
    PCIe host such as 8x RTX PRO 6000), drops C(normal) with the reason in RV(skipped_modes) instead of
    letting it hang; C(low_latency) works over PCIe peer access.
  - A measurement changes nothing on the host (changed is always false); in check mode it does not run.
options:
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
  environment:
    description: Extra environment for the run (NCCL/NVSHMEM variables).
    type: dict
    default: {}
  timeout:
    description: Seconds before the run is killed.
    type: int
    default: 480
  normal_needs_nvlink:
    description: Drop C(normal) mode when C(nvidia-smi topo -m) shows a non-NVLink pair among the GPUs used.
    type: bool
    default: true
  nvidia_smi:
    description: The nvidia-smi to read the topology with.
    type: path
    default: nvidia-smi
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.python
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      A real run changes nothing either (changed is always false). Check mode runs no round trip
      (C(skipped=true)), so it cannot find a fault.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Round trip on 2 GPUs
  epforge.ep.deepep_gpu_verify:
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
skipped_modes:
  description: Modes not run, with the reason (for example normal mode on GPUs without NVLink).
  returned: success
  type: dict
  sample: {normal: "GPU0-GPU1 is PHB, not NVLink: DeepEP normal mode needs NVLink ..."}
seconds:
  description: Wall time of the run.
  returned: success
  type: float
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail_file
from ansible_collections.epforge.ep.plugins.module_utils.deepep import non_nvlink_pairs
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged

ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "script": {"type": "path", "required": True},
    "num_processes": {"type": "int", "default": 2},
    "modes": {
        "type": "list",
        "elements": "str",
        "choices": ["normal", "low_latency"],
        "default": ["normal", "low_latency"],
    },
    "result_path": {"type": "path", "required": True},
    "log_path": {"type": "path", "required": True},
    "environment": {"type": "dict", "default": {}},
    "timeout": {"type": "int", "default": 480},
    "normal_needs_nvlink": {"type": "bool", "default": True},
    "nvidia_smi": {"type": "path", "default": "nvidia-smi"},
}


class DeepEPGpuVerify:
    """DeepEP's GPU round trip in the env: the modes this host can run, the script under a deadline, and
    its result file read back."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params

    def modes(self) -> tuple[list[str], dict[str, str]]:
        """The modes to verify and the ones skipped with why: normal mode needs NVLink between all GPUs, so
        on a PCIe host it is skipped rather than reported as a hang (not probed in check mode)."""
        module, p = self.module, self.p
        modes = list(p["modes"])
        skipped: dict[str, str] = {}
        if "normal" in modes and p["normal_needs_nvlink"] and not module.check_mode:
            topo = run_bounded([p["nvidia_smi"], "topo", "-m"], timeout=60)
            # no topology to read: nothing is concluded, the round trip itself will tell
            bad = non_nvlink_pairs(topo.out, p["num_processes"]) if topo.rc == 0 else None
            if bad:
                pairs = ", ".join(f"{a}-{b} is {link}" for a, b, link in bad)
                skipped["normal"] = (
                    f"{pairs}, not NVLink: DeepEP normal mode needs NVLink between all GPUs; "
                    "SGLang must use --deepep-mode low_latency on this host"
                )
                modes.remove("normal")
        if not modes:
            reasons = "; ".join(f"{m}: {r}" for m, r in skipped.items())
            module.fail_json(msg=f"no DeepEP mode left to verify: {reasons}", skipped_modes=skipped)
        return modes, skipped

    def round_trip(self, argv: list[str]) -> tuple[int, float, dict | None]:
        """Run the script (a stale result file removed first, so only this run's counts) and read its
        result: (rc, seconds, result or None when it wrote none)."""
        p = self.p
        env = dict(os.environ)
        env.update({k: str(v) for k, v in p["environment"].items()})
        env.setdefault("DEEPEP_VERIFY_TIMEOUT", str(max(60, p["timeout"] - 60)))
        if os.path.exists(p["result_path"]):
            os.unlink(p["result_path"])
        rc, seconds = run_logged(
            argv, p["log_path"], env=env, timeout=p["timeout"], header="deepep gpu verify"
        )
        result = None
        if os.path.isfile(p["result_path"]):
            with open(p["result_path"], encoding="utf-8") as handle:
                result = json.load(handle)
        return rc, seconds, result

    def refuse_failure(self, argv: list[str], rc: int, result: dict | None) -> None:
        """Fail on a timeout, a missing result or a failed mode, each with the log; returns when it passed."""
        module, p = self.module, self.p
        if rc == 124:
            fail_cmd(
                module,
                f"DeepEP round trip did not finish within {p['timeout']} s (hung collective?)",
                argv,
                rc,
                log_path=p["log_path"],
            )
        if result is None:
            fail_cmd(
                module,
                "DeepEP round trip wrote no result (the script crashed before the end)",
                argv,
                rc,
                log_path=p["log_path"],
            )
        if not result.get("ok"):
            bad = {
                m: r.get("error", f"rel_diff {r.get('max_rel_diff')}")
                for m, r in result.get("modes", {}).items()
                if not r.get("ok")
            }
            module.fail_json(
                msg="DeepEP round trip failed: "
                + (result.get("error") or "; ".join(f"{m}: {e}" for m, e in bad.items())),
                cmd=argv,
                rc=rc,
                result=result,
                log_tail=tail_file(p["log_path"]),
                log_path=p["log_path"],
            )

    def run(self) -> None:
        """Verify the modes left, or in check mode say that the GPU round trip is not run."""
        module, p = self.module, self.p
        modes, skipped = self.modes()
        argv = [
            p["python"],
            p["script"],
            "--num-processes",
            str(p["num_processes"]),
            "--modes",
            ",".join(modes),
            "--out",
            p["result_path"],
        ]
        if module.check_mode:
            module.exit_json(
                changed=False, skipped=True, msg="check mode: the GPU round trip is not run", cmd=argv
            )
        rc, seconds, result = self.round_trip(argv)
        self.refuse_failure(argv, rc, result)
        module.exit_json(
            changed=False, result=result, seconds=round(seconds, 1), cmd=argv, skipped_modes=skipped
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    DeepEPGpuVerify(module).run()


if __name__ == "__main__":
    main()
