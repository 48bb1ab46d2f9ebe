#!/usr/bin/python
"""Ansible module: refuse an incoherent epforge stack before anything changes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_stack_check
short_description: Check that an epforge stack (version set) is coherent
description:
  - Applies the coherence rules of C(module_utils/epforge_stack.py) to a stack loaded from C(stacks/NAME.yml).
  - Fails with one line per conflict (for example torch built for another CUDA major than the toolkit, or
    an SGLang release that pins another torch), each naming the remedy.
  - Changes nothing on the host, so it behaves the same in check mode.
options:
  spec:
    description: The stack mapping (C(epforge_stack_spec) from a stack file).
    type: dict
    required: true
  name:
    description: The stack name the inventory asked for; must equal C(spec.name).
    type: str
    required: true
author: epforge developers
"""

EXAMPLES = r"""
- name: Refuse an incoherent stack
  epforge_stack_check:
    spec: "{{ epforge_stack_spec }}"
    name: "{{ epforge_stack }}"
"""

RETURN = r"""
stack:
  description: The stack's main versions.
  returned: success
  type: dict
  sample:
    {name: cu130, cuda: "13.0", torch: "2.14.1", sglang: "0.5.23", flashinfer: "0.7.2", arch_list: ["12.0"]}
problems:
  description: Every conflict found (empty on success).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_stack import check_stack, summarize


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "spec": {"type": "dict", "required": True},
            "name": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    problems = check_stack(module.params["spec"], module.params["name"])
    if problems:
        module.fail_json(
            msg=f"stack '{module.params['name']}' is incoherent: " + "; ".join(problems),
            problems=problems,
        )
    module.exit_json(changed=False, stack=summarize(module.params["spec"]), problems=[])


if __name__ == "__main__":
    main()
