#!/usr/bin/python
"""Ansible module (host side, read-only): what a wheelhouse for this host must be built for."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheelhouse_probe
short_description: Read a host's python version, machine, glibc and the distributions its env holds
description:
  - Read-only. Runs I(python) (the env the roles install into) when it exists, else I(base_python) (the
    interpreter that will create that env), and reports its version, the machine, the glibc version
    (which decides the manylinux wheels that fit) and, for an existing env, every installed distribution
    with its version (read from metadata, nothing is imported).
  - The controller builds the host's wheelhouse for exactly these (module wheelhouse_build).
options:
  python:
    description: The env's python (for example the ML env's, or an image's adopted python).
    type: path
    required: true
  base_python:
    description: The interpreter that creates the env when I(python) does not exist yet.
    type: str
    default: python3
author: epforge developers
"""

EXAMPLES = r"""
- name: Probe what the wheelhouse must fit
  wheelhouse_probe:
    python: /opt/epforge/ml-env/bin/python
  register: probe
"""

RETURN = r"""
python:
  description: The interpreter that was read.
  returned: success
  type: str
env_exists:
  description: Whether I(python) exists (else I(base_python) was read and I(installed) is empty).
  returned: success
  type: bool
python_version:
  description: Its version (MAJOR.MINOR.PATCH).
  returned: success
  type: str
machine:
  description: C(platform.machine()).
  returned: success
  type: str
glibc:
  description: The glibc version (empty on a non-glibc host).
  returned: success
  type: str
installed:
  description: Distribution name -> version in the env (empty when the env does not exist yet).
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import tail

PROBE_SCRIPT = r"""
import importlib.metadata as md, json, os, platform, sys
installed = {}
if sys.argv[1] == "1":
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            installed[name] = dist.version
libc, version = platform.libc_ver()
print("EPFORGE_WHEELHOUSE_PROBE " + json.dumps({
    "python_version": platform.python_version(), "machine": platform.machine(),
    "glibc": version if libc == "glibc" else "", "installed": installed}))
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "base_python": {"type": "str", "default": "python3"},
        },
        supports_check_mode=True,
    )
    python = module.params["python"]
    exists = os.access(python, os.X_OK)
    interpreter = python if exists else module.params["base_python"]
    argv = [interpreter, "-c", PROBE_SCRIPT, "1" if exists else "0"]
    rc, out, err = module.run_command(argv)
    marked = [line for line in out.splitlines() if line.startswith("EPFORGE_WHEELHOUSE_PROBE ")]
    if rc != 0 or not marked:
        module.fail_json(msg=f"cannot read the python of {interpreter} (the env's python {python} "
                             f"{'exists' if exists else 'does not exist yet'})", cmd=argv, rc=rc,
                         log_tail=tail(out + err))
    data = json.loads(marked[-1].split(" ", 1)[1])
    if not data["glibc"]:
        module.fail_json(msg=f"{interpreter} reports no glibc: manylinux wheels need a glibc host", cmd=argv,
                         rc=rc)
    module.exit_json(changed=False, python=interpreter, env_exists=exists, **data)


if __name__ == "__main__":
    main()
