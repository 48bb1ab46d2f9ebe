#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: decide FlashInfer's JIT arch list for this nvcc, refusing what would fail misleadingly."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_arch_rule
short_description: FlashInfer JIT arch list for the host's nvcc, with the sm_12x rule applied
description:
  - Reads the release of C(CUDA_HOME/bin/nvcc --version) and applies the sm_12x rule of
    C(plugins/module_utils/flashinfer.py) - nvcc >= 12.9 as is, or the arch-specific C(12.0a) with nvcc 12.8,
    else a clear error - instead of FlashInfer's misleading "FlashInfer requires GPUs with sm75 or higher".
  - Returns the value for C(FLASHINFER_CUDA_ARCH_LIST) and the SASS names a JIT-built kernel must carry.
  - Role flashinfer does not call it (module C(flashinfer_probe) applies the same rule in its one call); it
    stays for callers that want the rule alone.
  - Reads only; runs the same in check mode.
options:
  cuda_home:
    description: CUDA_HOME whose nvcc FlashInfer's JIT will use.
    type: path
    required: true
  arch_list:
    description: Target archs (C(12.0), C(12.0a), C(9.0), ...).
    type: list
    elements: str
    required: true
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Decide FlashInfer's arch list
  flashinfer_arch_rule:
    cuda_home: /opt/cuda-13.0
    arch_list: ["12.0"]
  register: fi_arch
"""

RETURN = r"""
arch_list:
  description: Value for FLASHINFER_CUDA_ARCH_LIST (space-separated).
  returned: success
  type: str
  sample: "12.0"
sass_archs:
  description: SASS names the built kernels must carry.
  returned: success
  type: list
  elements: str
  sample: [sm_120]
nvcc_version:
  description: nvcc release (major.minor).
  returned: always
  type: str
  sample: "13.0"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.flashinfer import (
    FlashInferRuleFailure,
    nvcc_arch_rule,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cuda_home": {"type": "path", "required": True},
            "arch_list": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        rule = nvcc_arch_rule(module.params["cuda_home"], module.params["arch_list"])
    except FlashInferRuleFailure as exc:
        module.fail_json(**exc.fields)
    module.exit_json(changed=False, **rule)


if __name__ == "__main__":
    main()
