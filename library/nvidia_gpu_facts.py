#!/usr/bin/python
"""Ansible module: gather facts about a host's NVIDIA GPUs, driver and GPU interconnect."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU, driver and interconnect facts with nvidia-smi
description:
  - Runs C(nvidia-smi --query-gpu=index,name,compute_cap,memory.total,pci.bus_id,uuid,driver_version
    --format=csv,noheader,nounits), plain C(nvidia-smi) (its header names the newest CUDA the driver
    supports), C(nvidia-smi topo -p2p r) (which GPU pairs have peer reads) and C(nvidia-smi topo -m) (the
    GPU connection matrix), each as an argv list.
  - Sets the fact C(epforge_gpu_facts). The module only gathers; it never fails because a host has no
    GPU. A host without nvidia-smi, or where nvidia-smi cannot reach the driver, gets C(available=false)
    with the reason, so a later preflight step decides what that means.
  - Fails only when nvidia-smi answers the GPU query with output it cannot parse (the message names
    the line at fault and carries cmd, rc and the output tail). An unparsable topology matrix does not
    fail the module; it gives C(interconnect=unknown) and the parser's message in C(topology_error).
  - Reads only, so check mode behaves the same.
options:
  nvidia_smi_path:
    description:
      - Path of the nvidia-smi executable.
      - When omitted, nvidia-smi is looked up on the PATH (and the usual sbin directories).
    type: path
  timeout:
    description:
      - Seconds each nvidia-smi call may run before its process group is stopped. A hung driver then
        reports C(available=false) instead of hanging the play.
    type: int
    default: 60
author: epforge developers
"""

EXAMPLES = r"""
- name: Gather GPU facts
  nvidia_gpu_facts:

- name: Use an nvidia-smi outside the PATH
  nvidia_gpu_facts:
    nvidia_smi_path: /usr/lib/wsl/lib/nvidia-smi
    timeout: 30

- name: Show what was found
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts['epforge_gpu_facts']['gpu_count'] }} GPU(s), archs
      {{ ansible_facts['epforge_gpu_facts']['archs'] }}, interconnect
      {{ ansible_facts['epforge_gpu_facts']['interconnect'] }}
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    epforge_gpu_facts:
      description: What nvidia-smi reported.
      returned: always
      type: dict
      contains:
        available:
          description: True when nvidia-smi listed at least one GPU.
          type: bool
        reason:
          description: >-
            Empty when available; otherwise why not, for example C(nvidia-smi not found on PATH),
            C(nvidia-smi failed: <its message>, rc 9) or C(no GPU listed).
          type: str
        gpu_count:
          description: Number of GPUs listed.
          type: int
        gpus:
          description: One entry per GPU, in nvidia-smi's index order.
          type: list
          elements: dict
          sample:
            - {index: 0, name: NVIDIA RTX PRO 6000 Blackwell Server Edition, compute_capability: "12.0",
               arch: "12.0", memory_total_mib: 97887, pci_bus_id: "00000000:01:00.0",
               uuid: GPU-0e4a5f5c-0000-0000-0000-000000000000}
        driver_version:
          description: The NVIDIA driver version ("" when unavailable).
          type: str
          sample: "580.159.04"
        cuda_driver_version:
          description: The newest CUDA version the driver supports ("" when unknown).
          type: str
          sample: "13.0"
        interconnect:
          description: >-
            nvlink (every GPU pair over NVLink), pcie (no pair over NVLink), mixed (some pairs),
            single (one GPU), none (no GPU), unknown (the topology could not be read; see topology_error).
          type: str
          choices: [nvlink, pcie, mixed, single, none, unknown]
        topology:
          description: >-
            The GPU part of C(nvidia-smi topo -m). C(links) counts each GPU pair once by link class
            (NV is any NV#; the older SOC counts as SYS).
          type: dict
          sample:
            gpus: [GPU0, GPU1]
            matrix: {GPU0: {GPU1: NV18}, GPU1: {GPU0: NV18}}
            links: {NV: 1, PIX: 0, PXB: 0, PHB: 0, NODE: 0, SYS: 0}
        topology_error:
          description: Why the topology could not be read ("" when it was, or when there is no GPU).
          type: str
        peer_access:
          description: >-
            Peer reads between the GPUs from C(nvidia-smi topo -p2p r): C(status) full (every pair OK),
            partial (some pairs; DeepEP crashes on such hosts), none (no pair), single (one GPU), no_gpu,
            or unknown (not readable; C(error) says why); C(pairs), C(ok_pairs) and C(missing)
            (C(GPU0-GPU2 CNS), the pair and the legend code of the direction that is not OK).
          type: dict
          sample: {status: partial, pairs: 6, ok_pairs: 2, missing: [GPU0-GPU2 CNS, GPU0-GPU3 CNS], error: ""}
        archs:
          description: Unique compute capabilities of the GPUs, in numeric order (8.9 before 12.0).
          type: list
          elements: str
          sample: ["12.0"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import fail_cmd, tail
from ansible.module_utils.epforge_nvidia import (
    LINK_CLASSES,
    QUERY_FIELDS,
    classify_interconnect,
    parse_cuda_version,
    parse_p2p,
    parse_query_csv,
    parse_topology,
)
from ansible.module_utils.epforge_process import TIMED_OUT, run_bounded

QUERY_ARGS = [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]


def empty_facts(reason: str) -> dict:
    return {
        "available": False,
        "reason": reason,
        "gpu_count": 0,
        "gpus": [],
        "driver_version": "",
        "cuda_driver_version": "",
        "interconnect": "none",
        "topology": {"gpus": [], "matrix": {}, "links": dict.fromkeys(LINK_CLASSES, 0)},
        "topology_error": "",
        "peer_access": {"status": "no_gpu", "pairs": 0, "ok_pairs": 0, "missing": [], "error": ""},
        "archs": [],
    }


def one_line(text: str) -> str:
    return " ".join(tail(text, 5).split())


class NvidiaSmi:
    """Runs nvidia-smi with a bounded time, as argv lists."""

    def __init__(self, module: AnsibleModule, path: str):
        self.module = module
        self.path = path
        self.timeout = module.params["timeout"]

    def run(self, args: list[str]) -> tuple[list[str], int, str, str]:
        argv = [self.path, *args]
        rc, out, err, _ = run_bounded(argv, timeout=self.timeout, env_update={"LC_ALL": "C"})
        return argv, rc, out, err


def failure_reason(rc: int, out: str, err: str, timeout: int) -> str:
    if rc == TIMED_OUT:
        return f"nvidia-smi timed out after {timeout} s"
    message = one_line(err) or one_line(out) or "no output"
    return f"nvidia-smi failed: {message}, rc {rc}"


def unknown_peer_access(error: str) -> dict:
    return {"status": "unknown", "pairs": 0, "ok_pairs": 0, "missing": [], "error": error}


def peer_access(smi: NvidiaSmi, gpu_count: int) -> dict:
    """Peer reads between every GPU pair: DeepEP crashes when only some pairs have them (sglang #19033,
    DeepEP #584), so preflight's known-issues rows read this. Unreadable -> status unknown, never a failure.
    """
    _argv, rc, out, err = smi.run(["topo", "-p2p", "r"])
    if rc != 0:
        return unknown_peer_access(failure_reason(rc, out, err, smi.timeout))
    try:
        p2p = parse_p2p(out)
    except ValueError as exc:
        return unknown_peer_access(str(exc))
    if len(p2p["gpus"]) != gpu_count:
        return unknown_peer_access(
            f"topo -p2p r lists {len(p2p['gpus'])} GPUs but the query listed {gpu_count}"
        )
    return {key: p2p[key] for key in ("status", "pairs", "ok_pairs", "missing")} | {"error": ""}


def topology_facts(smi: NvidiaSmi, gpu_count: int) -> dict:
    """topology and interconnect from `nvidia-smi topo -m`, else interconnect unknown with the reason."""
    _argv, rc, out, err = smi.run(["topo", "-m"])
    if rc != 0:
        return {"interconnect": "unknown", "topology_error": failure_reason(rc, out, err, smi.timeout)}
    try:
        topology = parse_topology(out)
    except ValueError as exc:
        return {"interconnect": "unknown", "topology_error": str(exc)}
    if len(topology["gpus"]) != gpu_count:
        return {
            "interconnect": "unknown",
            "topology_error": f"topo -m lists {len(topology['gpus'])} GPUs but the query listed {gpu_count}",
        }
    return {"topology": topology, "interconnect": classify_interconnect(topology)}


def find_nvidia_smi(module: AnsibleModule) -> tuple[str | None, str]:
    """(path, "") of nvidia-smi, or (None, why not)."""
    path = module.params["nvidia_smi_path"]
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return None, f"nvidia-smi not found at {path}"
        return path, ""
    path = module.get_bin_path("nvidia-smi")
    if not path:
        return None, "nvidia-smi not found on PATH"
    return path, ""


def gather(module: AnsibleModule) -> dict:
    path, missing = find_nvidia_smi(module)
    if not path:
        return empty_facts(missing)
    smi = NvidiaSmi(module, path)

    argv, rc, out, err = smi.run(QUERY_ARGS)
    if rc != 0:
        if "No devices were found" in out + err:
            return empty_facts("no GPU listed (nvidia-smi: No devices were found)")
        return empty_facts(failure_reason(rc, out, err, smi.timeout))
    try:
        gpus = parse_query_csv(out)
    except ValueError as exc:
        fail_cmd(module, f"cannot parse the nvidia-smi GPU query: {exc}", argv, rc, output=out + err)
    if not gpus:
        return empty_facts("no GPU listed")

    facts = empty_facts("")
    facts.update(
        available=True,
        gpu_count=len(gpus),
        gpus=[{key: value for key, value in gpu.items() if key != "driver_version"} for gpu in gpus],
        driver_version=gpus[0]["driver_version"],
        archs=sorted({gpu["arch"] for gpu in gpus}, key=lambda arch: tuple(int(p) for p in arch.split("."))),
    )
    _argv, rc, out, err = smi.run([])
    facts["cuda_driver_version"] = parse_cuda_version(out) if rc == 0 else ""
    facts["peer_access"] = peer_access(smi, len(gpus))
    facts.update(topology_facts(smi, len(gpus)))
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    module.exit_json(changed=False, ansible_facts={"epforge_gpu_facts": gather(module)})


if __name__ == "__main__":
    main()
