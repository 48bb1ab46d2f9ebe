#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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
    GPU connection matrix), each as an argv list; then the PCIe fabric between the GPUs (C(fabric)) from
    sysfs, one C(lspci -D -vvv) and the GPUs' persistence mode.
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
extends_documentation_fragment:
  - epforge.ep.pci_fabric
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Gather GPU facts
  epforge.ep.nvidia_gpu_facts:

- name: Use an nvidia-smi outside the PATH
  epforge.ep.nvidia_gpu_facts:
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
        fabric:
          description:
            - The PCIe fabric between the GPUs (plugins/module_utils/pci_fabric.py), from sysfs under
              O(fabric_root) and one C(lspci -D -vvv). C(available) false (with C(reason)) without GPUs.
            - C(gpus) - per GPU, C(bdf), C(root_complex), C(path) (the bridges above it, root port first),
              C(numa_node), C(socket), C(link) (C(speed_gts), C(max_speed_gts), C(width), C(max_width),
              C(port_max_speed_gts) of the port above it), C(bar1_mib), C(memory_mib), C(persistence_mode).
            - C(bridges) - per bridge on a GPU's path, its lspci C(name), C(acs) (each ACSCtl bit, null when
              not read) and C(acs_redirect) (ReqRedir or CmpltRedir on).
            - C(pairs) - per GPU pair, C(kind) (switch, host_bridge, cross_socket), C(via) (the bridges peer
              traffic crosses) and C(acs_redirect) (those of them with ACS redirect on).
            - C(iommu) - C(mode) (off, passthrough, translated, unknown), C(evidence), C(cmdline) (the
              kernel's IOMMU words). C(acs_read), C(lspci_error).
          type: dict
          sample:
            available: true
            gpus:
              - index: 0
                bdf: "0000:03:00.0"
                root_complex: pci0000:00
                path: ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"]
                numa_node: 0
                socket: 0
                bar1_mib: 131072
                memory_mib: 97887
                persistence_mode: Enabled
                link: {speed_gts: 32.0, max_speed_gts: 32.0, width: 16, max_width: 16,
                       port_max_speed_gts: 32.0}
            pairs:
              - gpus: [0, 1]
                kind: switch
                via: ["0000:02:00.0", "0000:01:00.0", "0000:02:01.0"]
                acs_redirect: []
            iommu: {mode: passthrough, evidence: iommu_group type identity, cmdline: [iommu=pt]}
        archs:
          description: Unique compute capabilities of the GPUs, in numeric order (8.9 before 12.0).
          type: list
          elements: str
          sample: ["12.0"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.gpu_facts import (
    DEFAULT_TIMEOUT,
    FABRIC_ARGUMENT_SPEC,
    gather_gpu_facts,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "timeout": {"type": "int", "default": DEFAULT_TIMEOUT},
            **FABRIC_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    p = module.params
    facts = gather_gpu_facts(module, p["nvidia_smi_path"], p["timeout"], p["fabric_root"], p["lspci_path"])
    module.exit_json(changed=False, ansible_facts={"epforge_gpu_facts": facts})


if __name__ == "__main__":
    main()
