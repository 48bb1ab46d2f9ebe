#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: install requirements into a Python env through epforge's one installer (uv or pip)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: env_install
short_description: Install requirements into a Python environment with uv or pip, saying which
description:
  - Installs O(requirements) into the environment of O(python) through the collection's installer owner
    (C(plugins/module_utils/installer.py)), the same choice the ML env's torch is installed with, and reports
    which installer ran and why.
  - The caller decides what is missing (role flashinfer's probe does); every call with requirements installs
    them and reports changed.
  - O(pip_args) are passed to pip as given; uv has no translation of a caller's pip arguments, so with any
    O(installer=auto) uses pip and O(installer=uv) fails before anything is installed.
options:
  requirements:
    description: Requirement strings to install (C(flashinfer-python==0.6.3)).
    type: list
    elements: str
    required: true
  pip_args:
    description: Extra pip arguments for the install (index URLs), passed to pip only.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.log_path
  - epforge.ep.timeout.pip
  - epforge.ep.installer
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode installs nothing and reports the requirements a real run would install.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Install the stack's FlashInfer (tail -f /var/log/epforge/flashinfer-install.log)
  epforge.ep.env_install:
    python: /opt/epforge/ml-env/bin/python
    requirements: [flashinfer-python==0.6.3]
    log_path: /var/log/epforge/flashinfer-install.log
"""

RETURN = r"""
requirements:
  description: The requirements installed (to be installed, in check mode).
  returned: always
  type: list
  elements: str
installer:
  description: The installer (C(uv) or C(pip)) and why it was chosen.
  returned: when something was installed
  type: dict
  sample:
    name: uv
    why: "uv==0.13.9 at /opt/epforge/uv/bin/uv; pip settings translated: none"
seconds:
  description: How long the install took.
  returned: when something was installed
  type: float
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.installer import INSTALLER_ARGUMENT_SPEC, Installer

ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "requirements": {"type": "list", "elements": "str", "required": True},
    "pip_args": {"type": "list", "elements": "str", "default": []},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 1800},
    **INSTALLER_ARGUMENT_SPEC,
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    wanted = p["requirements"]
    if not os.access(p["python"], os.X_OK):
        module.fail_json(msg=f"{p['python']} is not an executable interpreter; nothing was installed")
    if not wanted or module.check_mode:
        module.exit_json(changed=bool(wanted), requirements=wanted)
    installer = Installer.for_python(p, p["python"], p["log_path"], pip_args=p["pip_args"])
    seconds = installer.install_or_fail(
        module, wanted, what=" ".join(wanted), header="env_install", timeout=p["timeout"]
    )
    module.exit_json(
        changed=True, requirements=wanted, installer=installer.report(), seconds=round(seconds, 1)
    )


if __name__ == "__main__":
    main()
