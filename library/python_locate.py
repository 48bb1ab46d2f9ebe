#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: what an interpreter's environment holds, without importing it - where named modules are
installed (their compiled extension files included) and which versions of named distributions are there."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_locate
short_description: Locate modules and read distribution versions in an interpreter, importing nothing
description:
  - Runs the collection's payloads C(module_files) and C(installed_versions) in O(python) as argv lists (no
    shell) and reports, for each import name in O(modules), whether it is installed, its origin and the
    compiled extension files (C(.so)) it ships, and for each name in O(distributions) its installed version.
  - Nothing is imported, except the parent packages of a dotted name (finding C(sglang.bench_serving)
    imports C(sglang)).
  - The one home of these queries in roles (issue 40) - they had been Python strings in task files.
options:
  modules:
    description: Import names to locate, such as C(deep_ep) or C(sglang.bench_serving).
    type: list
    elements: str
    default: []
  distributions:
    description: Distribution names whose installed version to read from their metadata, such as C(smg).
    type: list
    elements: str
    default: []
  python_missing:
    description:
      - What an O(python) that does not exist means. C(fail) refuses it; C(empty) answers that nothing is
        installed there (a venv that a check-mode run has not created yet, an optional client's python).
    type: str
    choices: [fail, empty]
    default: fail
  timeout:
    description: Seconds before each query is given up.
    type: int
    default: 120
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Locate DeepEP's compiled extensions in the ML env
  epforge.ep.python_locate:
    python: /opt/epforge/venv/bin/python
    modules: [deep_ep_cpp, deep_ep]
  register: deepep_files

- name: Read which smg the gateway's venv holds (none yet in a check-mode run)
  epforge.ep.python_locate:
    python: /opt/epforge/smg/bin/python
    distributions: [smg]
    python_missing: "{{ 'empty' if ansible_check_mode else 'fail' }}"
  register: smg_installed
"""

RETURN = r"""
python_exists:
  description: Whether O(python) exists (false only with O(python_missing=empty)).
  returned: always
  type: bool
  sample: true
modules:
  description:
    - Per name of O(modules) - C(found), C(origin) (its file; null for a namespace package or when not
      found), C(binaries) (the C(.so) files under a package, or the module itself) and C(error) (why a
      parent package could not be imported; empty otherwise).
  returned: always
  type: dict
  sample: {deep_ep: {found: true, origin: /venv/lib/python3.12/site-packages/deep_ep/__init__.py,
           binaries: [], error: ""}}
binaries:
  description: Every C(binaries) entry of RV(modules), in the order of O(modules).
  returned: always
  type: list
  elements: str
  sample: [/venv/lib/python3.12/site-packages/deep_ep_cpp.cpython-312-x86_64-linux-gnu.so]
distributions:
  description: Per name of O(distributions), its installed version, or null when it is not installed.
  returned: always
  type: dict
  sample: {smg: 0.3.1}
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import installed_versions, module_files

ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "modules": {"type": "list", "elements": "str", "default": []},
    "distributions": {"type": "list", "elements": "str", "default": []},
    "python_missing": {"type": "str", "choices": ["fail", "empty"], "default": "fail"},
    "timeout": {"type": "int", "default": 120},
}


def exists(python: str) -> bool:
    """A path that is there, or a bare name found on PATH."""
    return os.path.exists(python) if os.sep in python else shutil.which(python) is not None


def query(module: AnsibleModule, payload, names: list[str]) -> dict:
    """The payload's JSON answer for names ({} for none asked)."""
    if not names:
        return {}
    run = run_payload(module.params["python"], payload, names, timeout=module.params["timeout"])
    if run.rc != 0 or not isinstance(run.answer, dict):
        module.fail_json(
            msg=f"{module.params['python']} did not answer the query for {names}",
            cmd=run.argv,
            rc=run.rc,
            log_tail=tail(run.output),
        )
    return run.answer


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if not exists(p["python"]):
        if p["python_missing"] == "fail":
            module.fail_json(
                msg=f"python {p['python']} does not exist", cmd=[p["python"]], rc=None, log_tail=""
            )
        absent = {"found": False, "origin": None, "binaries": [], "error": "no such python"}
        module.exit_json(
            changed=False,
            python_exists=False,
            modules={name: dict(absent) for name in p["modules"]},
            binaries=[],
            distributions=dict.fromkeys(p["distributions"]),
        )
    modules = query(module, module_files, p["modules"])
    module.exit_json(
        changed=False,
        python_exists=True,
        modules=modules,
        binaries=[path for name in p["modules"] for path in modules[name]["binaries"]],
        distributions=query(module, installed_versions, p["distributions"]),
    )


if __name__ == "__main__":
    main()
