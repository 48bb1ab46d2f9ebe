#!/usr/bin/python
"""Ansible module: write one local fact file (JSON), only when its content changes, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_local_fact
short_description: Write a local fact file (JSON) only when its content changes
description:
  - Writes O(content) as JSON to O(facts_dir)C(/<name>.fact) (read back by setup as C(ansible_local.<name>)),
    creating O(facts_dir) when it is missing.
  - The file is written through a temp file and a rename, and only when its content changes, so a rerun
    reports changed=false. One module call instead of a directory task and a copy task keeps a no-op rerun
    short.
  - Supports check mode and diff mode.
options:
  name:
    description: Fact name (the file name without C(.fact)); letters, digits and C(_) only.
    type: str
    required: true
  facts_dir:
    description: Directory of local facts.
    type: path
    required: true
  content:
    description: The whole fact.
    type: dict
    required: true
author: epforge developers
"""

EXAMPLES = r"""
- name: Record the ML env as local fact epforge_ml_env
  epforge_local_fact:
    name: epforge_ml_env
    facts_dir: /etc/ansible/facts.d
    content:
      python: /opt/epforge/ml-env/bin/python
      torch_version: 2.14.1+cu130
"""

RETURN = r"""
path:
  description: The local fact file.
  returned: always
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_files import json_text, read_json, write_json_atomic


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "facts_dir": {"type": "path", "required": True},
            "content": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not re.fullmatch(r"[A-Za-z0-9_]+", p["name"]):
        module.fail_json(msg=f"fact name '{p['name']}' may hold only letters, digits and '_'")
    path = os.path.join(p["facts_dir"], f"{p['name']}.fact")
    before = read_json(path)
    changed = before != p["content"]
    diff = {
        "before_header": path,
        "after_header": path,
        "before": json_text(before) if before is not None else "",
        "after": json_text(p["content"]),
    }
    if changed and not module.check_mode:
        write_json_atomic(path, p["content"])
    module.exit_json(changed=changed, path=path, diff=diff if changed else {})


if __name__ == "__main__":
    main()
