#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: whether an interpreter's C headers (Python.h) are installed, and the distribution package
that installs them when they are not."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_headers
short_description: Find an interpreter's C headers, or the package that installs them
description:
  - Asks the interpreter where its C headers are (C(sysconfig)'s C(include) path, the base installation's for
    a venv) and whether C(Python.h) is there. Extension builds (the canary, DeepEP) and FlashInfer's JIT
    compile against it; without it they fail late with "C(Python.h - No such file or directory)".
  - When the headers are missing and the interpreter is the distribution's (its headers belong under
    C(/usr/include)), returns the Debian/Ubuntu package that installs them (C(pythonX.Y-dev)) for the caller
    to install (role ml_env does, with M(ansible.builtin.apt)). When there is no such package, or O(install)
    is false, fails with the remedy before anything is built.
  - Changes nothing, so it runs the same in check mode.
options:
  install:
    description:
      - Whether the caller installs the missing headers' package. When false, missing headers fail the task.
    type: bool
    default: true
  timeout:
    description: Seconds the interpreter may take to answer.
    type: int
    default: 60
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Find the ML env's Python headers
  epforge.ep.python_headers:
    python: /opt/epforge/ml-env/bin/python
  register: headers

- name: Install them from the distribution when they are missing
  ansible.builtin.apt:
    name: "{{ headers.package }}"
  when: not headers.present
"""

RETURN = r"""
present:
  description: Whether C(Python.h) is in the interpreter's include directory.
  returned: always
  type: bool
  sample: false
include:
  description: The interpreter's include directory (its base installation's for a venv).
  returned: always
  type: str
  sample: /usr/include/python3.11
package:
  description: The distribution package that installs the missing headers (empty when they are present).
  returned: always
  type: str
  sample: python3.11-dev
version:
  description: The interpreter's C(major.minor).
  returned: always
  type: str
  sample: "3.11"
watch:
  description:
    - For the probe cache (plugins/module_utils/watch.py) - the interpreter (every link it resolves through),
      its include directory and C(Python.h) in it; the answer stands while none of them changed.
  returned: success
  type: list
  elements: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import python_layout
from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, watch_list

ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "install": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 60},
}
# Where a distribution's python keeps its headers: the package manager owns them.
SYSTEM_INCLUDE = "/usr/include/"


def headers_package(layout: dict) -> str:
    """The Debian/Ubuntu package of a distribution python's headers ('' for any other python)."""
    if layout.get("impl") != "cpython" or not layout["include"].startswith(SYSTEM_INCLUDE):
        return ""
    return f"python{layout['major']}.{layout['minor']}-dev"


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    run = run_payload(p["python"], python_layout, timeout=p["timeout"])
    layout = run.answer
    if run.rc != 0 or not isinstance(layout, dict):
        module.fail_json(
            msg=f"{p['python']} does not answer: the env's python must run before its headers can be found",
            cmd=run.argv,
            rc=run.rc,
            log_tail=tail(run.output),
        )
    header = os.path.join(layout["include"], "Python.h")
    present = os.path.isfile(header)
    result = {
        "changed": False,
        "present": present,
        "include": layout["include"],
        "version": f"{layout['major']}.{layout['minor']}",
        "package": "" if present else headers_package(layout),
        "watch": watch_list(
            binary_paths(shutil.which(p["python"]) or p["python"]), [layout["include"], header]
        ),
    }
    if not present and not (p["install"] and result["package"]):
        remedy = (
            f"install {result['package']}" if result["package"] else "install that python's development files"
        )
        module.fail_json(
            msg=f"the C headers of {p['python']} are missing ({layout['include']} has no Python.h): "
            f"extension builds and FlashInfer's JIT compile against them. Remedy: {remedy}, or point the "
            "role at a python that has them",
            cmd=run.argv,
            rc=1,
            log_tail="",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
