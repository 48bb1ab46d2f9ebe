#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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
  - Runs through the action plugin C(epforge.ep.probe_cache) (meta/runtime.yml) - an unchanged fact is
    answered from the host's probe-cache record while the file is as this module last found it, without
    shipping the module again.
options:
  name:
    description: Fact name (the file name without C(.fact)); letters, digits and C(_) only.
    type: str
    required: true
  content:
    description: The whole fact.
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
- name: Record the ML env as local fact epforge_ml_env
  epforge.ep.epforge_local_fact:
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
watch:
  description: The paths the verdict depends on (the fact file), for the probe cache.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact


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
    try:
        result = write_local_fact(p["facts_dir"], p["name"], p["content"], check_mode=module.check_mode)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(
            msg=f"cannot write the local fact {p['name']}: {exc.strerror or exc} ({exc.filename})"
        )
    # The verdict "the file holds this content" stands while the file is unchanged.
    module.exit_json(watch=[result["path"]], **result)


if __name__ == "__main__":
    main()
