#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: install a built CUDA extension wheel into a venv and prove it imports."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_install
short_description: Install a CUDA extension wheel into a venv (no dependencies) and import it
description:
  - Runs C(pip install --no-deps --force-reinstall WHEEL) with the venv's interpreter (the stamp of role
    C(cuda_extension) decides whether this runs at all, so it always installs when called).
  - Returns the installed C(.so) files (the wheel's shared objects under the venv's site-packages) so their
    SASS can be checked, and imports each module of O(imports) in a fresh interpreter (payload
    C(import_check); no GPU needed).
  - In check mode nothing is installed and the C(.so) paths are predicted from the wheel.
options:
  wheel:
    description: The wheel file on the host.
    type: path
    required: true
  imports:
    description: Python modules that must import after the install (empty = no import check).
    type: list
    elements: str
    default: []
  env:
    description: Extra environment for the import check (e.g. C(LD_LIBRARY_PATH)).
    type: dict
    default: {}
  timeout:
    description: Seconds the install may take.
    type: int
    default: 600
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.python
  - epforge.ep.installer
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode installs and imports nothing; it predicts the C(.so) paths from the wheel.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Install the canary
  epforge.ep.cuda_extension_install:
    wheel: /var/lib/epforge/cuda_extension/wheels/canary/3f0c/epforge_canary-0.1.0-cp311-linux_x86_64.whl
    python: /opt/epforge/ml-env/bin/python
    imports: [epforge_canary]
    log_path: /var/log/epforge/cuda_extension-canary.log
"""

RETURN = r"""
so_files:
  description: Absolute paths of the installed shared objects.
  returned: success
  type: list
  elements: str
imported:
  description: Modules that imported.
  returned: success
  type: list
  elements: str
installer:
  description: The installer of the wheel (C(uv) or C(pip)) and why it was chosen.
  returned: when the wheel was installed
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import wheel_so_members
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.installer import (
    INSTALLER_ARGUMENT_SPEC,
    Installer,
)
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv, run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import import_check, python_layout
from ansible_collections.epforge.ep.plugins.module_utils.payloads.import_check import answer_of
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded

ARGUMENT_SPEC = {
    "wheel": {"type": "path", "required": True},
    "python": {"type": "path", "required": True},
    "imports": {"type": "list", "elements": "str", "default": []},
    "env": {"type": "dict", "default": {}},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 600},
    **INSTALLER_ARGUMENT_SPEC,
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isfile(p["wheel"]):
        module.fail_json(msg=f"wheel {p['wheel']} does not exist on the host")
    run = run_payload(p["python"], python_layout, timeout=120)
    if run.rc != 0 or not isinstance(run.answer, dict):
        module.fail_json(
            msg=f"{p['python']} does not run", cmd=run.argv, rc=run.rc, log_tail=tail(run.output)
        )
    site = run.answer["platlib"]
    so_files = [os.path.join(site, member) for member in wheel_so_members(p["wheel"])]
    if module.check_mode:
        module.exit_json(changed=True, so_files=so_files, imported=[])

    installer = Installer.for_python(p, p["python"], p["log_path"])
    installer.install_or_fail(
        module,
        [p["wheel"]],
        what=os.path.basename(p["wheel"]),
        header="cuda_extension: install",
        timeout=p["timeout"],
        reinstall=True,
        no_deps=True,
    )
    absent = [f for f in so_files if not os.path.exists(f)]
    if absent:
        module.fail_json(msg=f"pip reported success but these files are missing: {absent}", so_files=so_files)

    imported = []
    env = {str(k): str(v) for k, v in p["env"].items()}
    for name in p["imports"]:
        argv, shown = payload_argv(p["python"], import_check, [name])
        rc, out, err, _unused = run_bounded(argv, env_update=env, timeout=p["timeout"])
        answer = answer_of(out) if rc == 0 else None
        if not answer or not answer["ok"]:
            module.fail_json(
                msg=f"the installed extension does not import: 'import {name}' failed in {p['python']}"
                + (f": {answer['error_type']}: {answer['error']}" if answer else ""),
                cmd=shown,
                rc=rc if rc != 0 else 1,
                log_tail=(answer or {}).get("traceback_tail") or tail(err or out),
                so_files=so_files,
            )
        imported.append(name)
    module.exit_json(changed=True, so_files=so_files, imported=imported, installer=installer.report())


if __name__ == "__main__":
    main()
