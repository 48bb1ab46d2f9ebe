#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: refuse an incoherent epforge stack before anything changes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_stack_check
short_description: Check that an epforge stack (version set) is coherent
description:
  - Applies the coherence rules of C(plugins/module_utils/stack.py) to a stack loaded from C(stacks/NAME.yml).
  - Fails with one line per conflict (for example torch built for another CUDA major than the toolkit, or
    an SGLang release that pins another torch), each naming the remedy.
  - Changes nothing on the host, so it behaves the same in check mode.
  - With O(path), it reads the stack file itself (on the controller) and returns its C(spec) - a file that is
    not YAML, is empty or does not define C(epforge_stack_spec) as a mapping is refused naming the file and
    the fault; a file that does not exist is an unknown stack name, refused with the names of the stacks its
    directory holds.
options:
  spec:
    description:
      - The stack mapping (C(epforge_stack_spec) from a stack file).
      - Exactly one of O(spec) and O(path) is required.
    type: dict
  path:
    description: A stack file (C(stacks/NAME.yml)) to read, check and return as C(spec).
    type: path
  name:
    description: The stack name the inventory asked for; must equal C(spec.name).
    type: str
    required: true
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Read the stack file and refuse it when it is broken or incoherent
  epforge.ep.epforge_stack_check:
    path: stacks/cu130.yml
    name: cu130
  register: stack

- name: Refuse an incoherent stack
  epforge.ep.epforge_stack_check:
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
spec:
  description: The stack mapping read from O(path) (or O(spec) as given).
  returned: success
  type: dict
problems:
  description: Every conflict found (empty on success).
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.yaml import yaml_load

from ansible_collections.epforge.ep.plugins.module_utils.stack import check_stack, summarize

SPEC_KEY = "epforge_stack_spec"
STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def unknown_stack(path: str, name: str) -> str:
    """The refusal of a stack name that has no file, with the names that have one."""
    folder = os.path.dirname(path) or "."
    try:
        known = sorted(entry[: -len(".yml")] for entry in os.listdir(folder) if entry.endswith(".yml"))
    except OSError:
        known = []
    return (
        f"unknown stack '{name}': choose one of {', '.join(known) or '(none)'} (files in {folder}) "
        f"or add {os.path.join(folder, name + '.yml')}"
    )


def read_stack_file(module: AnsibleModule, path: str) -> dict:
    """The stack file's epforge_stack_spec, or a failure naming the file and its fault."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        module.fail_json(msg=unknown_stack(path, module.params["name"]))
    except OSError as exc:
        module.fail_json(msg=f"cannot read the stack file {path}: {exc.strerror or exc}")
    try:
        data = yaml_load(text)
    except Exception as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        module.fail_json(msg=f"the stack file {path} is not valid YAML{line}: {getattr(exc, 'problem', exc)}")
    if data is None:
        module.fail_json(msg=f"the stack file {path} is empty: it must define {SPEC_KEY}: {{name: ..., ...}}")
    if not isinstance(data, dict) or not isinstance(data.get(SPEC_KEY), dict):
        found = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
        module.fail_json(
            msg=f"the stack file {path} does not define {SPEC_KEY} as a mapping (found: {found})"
        )
    return data[SPEC_KEY]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "spec": {"type": "dict"},
            "path": {"type": "path"},
            "name": {"type": "str", "required": True},
        },
        required_one_of=[("spec", "path")],
        mutually_exclusive=[("spec", "path")],
        supports_check_mode=True,
    )
    spec = module.params["spec"]
    if module.params["path"]:
        if not STACK_NAME.fullmatch(module.params["name"]):
            # a name is a file name in the stacks directory, never a path out of it
            module.fail_json(msg=unknown_stack(module.params["path"], module.params["name"]))
        spec = read_stack_file(module, module.params["path"])
    problems = check_stack(spec, module.params["name"])
    if problems:
        module.fail_json(
            msg=f"stack '{module.params['name']}' is incoherent: " + "; ".join(problems),
            problems=problems,
        )
    module.exit_json(changed=False, stack=summarize(spec), spec=spec, problems=[])


if __name__ == "__main__":
    main()
