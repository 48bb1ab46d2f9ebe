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

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import NAME_RE
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, write_json_atomic


def text(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n" if data is not None else ""


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
    fact_path = os.path.join(p["facts_dir"], "epforge_cuda_extensions.fact")
    old_fact = read_json(fact_path)
    new_fact = dict(old_fact or {})
    new_fact[p["name"]] = p["entry"]
    old_stamp = read_json(stamp_path)
    diffs = []
    if p["stamp"] is not None and old_stamp != p["stamp"]:
        diffs.append(
            {
                "before_header": stamp_path,
                "after_header": stamp_path,
                "before": text(old_stamp),
                "after": text(p["stamp"]),
            }
        )
    if old_fact != new_fact:
        diffs.append(
            {
                "before_header": fact_path,
                "after_header": fact_path,
                "before": text(old_fact),
                "after": text(new_fact),
            }
        )
    changed = bool(diffs)
    if changed and not module.check_mode:
        if p["stamp"] is not None:
            write_json_atomic(stamp_path, p["stamp"])
        write_json_atomic(fact_path, new_fact)
    module.exit_json(changed=changed, stamp_path=stamp_path, fact_path=fact_path, fact=new_fact, diff=diffs)


if __name__ == "__main__":
    main()
