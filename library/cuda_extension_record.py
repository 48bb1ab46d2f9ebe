#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: write a CUDA extension's stamp and its entry in the local fact, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_record
short_description: Write a CUDA extension's install stamp and its entry in the local fact
description:
  - Writes O(stamp) (when given) to O(state_dir)C(/<name>.stamp.json) and sets the key O(name) of the local
    fact file O(facts_dir)C(/epforge_cuda_extensions.fact) to O(entry), keeping the other extensions' entries.
  - Each file is written through a temp file and a rename, and only when its content changes, so a rerun
    reports changed=false. One module call instead of several file/copy tasks keeps a fleet's per-host cost
    low.
  - Supports check mode and diff mode.
options:
  name:
    description: Extension name (stamp file name and fact key).
    type: str
    required: true
  state_dir:
    description: Directory of the stamps.
    type: path
    required: true
  stamp:
    description: The stamp to write (inputs and evidence of the installed key); omit to leave the stamp alone.
    type: dict
  entry:
    description: This extension's entry in the fact (name, key, source, revision, archs, archs_found, wheel,
      so_files).
    type: dict
    required: true
extends_documentation_fragment:
  - epforge.ep.facts_dir
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Record the canary
  epforge.ep.cuda_extension_record:
    name: canary
    state_dir: /var/lib/epforge/cuda_extension
    stamp: "{{ stamp }}"
    facts_dir: /etc/ansible/facts.d
    entry: "{{ stamp | dict2items | rejectattr('key', 'eq', 'inputs') | items2dict }}"
"""

RETURN = r"""
stamp_path:
  description: The stamp file.
  returned: always
  type: str
fact_path:
  description: The local fact file.
  returned: always
  type: str
fact:
  description: The whole fact after this call.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import NAME_RE
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact

FACT_NAME = "epforge_cuda_extensions"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state_dir": {"type": "path", "required": True},
            "stamp": {"type": "dict"},
            "facts_dir": {"type": "path", "required": True},
            "entry": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not NAME_RE.match(p["name"]):
        module.fail_json(msg=f"extension name '{p['name']}' may hold only letters, digits, '_', '.', '-'")
    stamp_path = os.path.join(p["state_dir"], f"{p['name']}.stamp.json")
    # one fact for every extension: this one's entry over the others' (the one fact writer, local_facts.py)
    new_fact = {**(read_json(fact_path(p["facts_dir"], FACT_NAME)) or {}), p["name"]: p["entry"]}
    old_stamp = read_json(stamp_path)
    diffs = []
    if p["stamp"] is not None and old_stamp != p["stamp"]:
        diffs.append(
            {
                "before_header": stamp_path,
                "after_header": stamp_path,
                "before": json_text(old_stamp) if old_stamp is not None else "",
                "after": json_text(p["stamp"]),
            }
        )
        if not module.check_mode:
            write_json_atomic(stamp_path, p["stamp"])
    written = write_local_fact(p["facts_dir"], FACT_NAME, new_fact, module.check_mode)
    if written["changed"]:
        diffs.append(written["diff"])
    module.exit_json(
        changed=bool(diffs), stamp_path=stamp_path, fact_path=written["path"], fact=new_fact, diff=diffs
    )


if __name__ == "__main__":
    main()
