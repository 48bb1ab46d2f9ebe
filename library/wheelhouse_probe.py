#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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
  baseline_path:
    description: JSON file holding the env's distributions as they were before epforge's first install
      (written by role wheelhouse). When it exists its content is returned as I(baseline) instead of the
      env's current distributions, so packages the roles installed themselves do not change the wheel set
      (a rerun stays a no-op and a removed wheel is still missed). Delete it to take a new baseline.
    type: path
  wheel_dir:
    description: The host's wheelhouse copy; its wheel files are listed with their sha256 (nothing when it
      does not exist yet), so the controller copies only what is missing or different.
    type: path
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Probe what the wheelhouse must fit
  epforge.ep.wheelhouse_probe:
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
baseline:
  description: The distributions the wheelhouse is resolved against (I(baseline_path)'s, else I(installed)).
  returned: success
  type: dict
baseline_recorded:
  description: Whether I(baseline) came from I(baseline_path).
  returned: success
  type: bool
wheels:
  description: Wheel file name -> sha256 in I(wheel_dir).
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import interpreter_facts

# Listing an env's distributions takes a second or two; a hung interpreter must not hang the play.
PROBE_TIMEOUT_S = 120


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "base_python": {"type": "str", "default": "python3"},
    "wheel_dir": {"type": "path"},
    "baseline_path": {"type": "path"},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    python = module.params["python"]
    exists = os.access(python, os.X_OK)
    interpreter = python if exists else module.params["base_python"]
    run = run_payload(interpreter, interpreter_facts, ["1" if exists else "0"], timeout=PROBE_TIMEOUT_S)
    data = run.answer
    if run.rc != 0 or not isinstance(data, dict):
        module.fail_json(
            msg=f"cannot read the python of {interpreter} (the env's python {python} "
            f"{'exists' if exists else 'does not exist yet'})",
            cmd=run.argv,
            rc=run.rc,
            log_tail=tail(run.output),
        )
    if not data["glibc"]:
        module.fail_json(
            msg=f"{interpreter} reports no glibc: manylinux wheels need a glibc host", cmd=run.argv, rc=run.rc
        )
    baseline, recorded = data["installed"], False
    baseline_path = module.params["baseline_path"]
    if baseline_path and os.path.exists(baseline_path):
        try:
            with open(baseline_path, encoding="utf-8") as handle:
                baseline, recorded = json.load(handle)["installed"], True
        except (OSError, ValueError, KeyError) as err:
            module.fail_json(
                msg=f"cannot read the env baseline {baseline_path} ({err}): delete it to take a "
                "new one from the env as it is now"
            )
    wheels = {}
    wheel_dir = module.params["wheel_dir"]
    if wheel_dir and os.path.isdir(wheel_dir):
        for name in sorted(os.listdir(wheel_dir)):
            if name.endswith(".whl") and os.path.isfile(os.path.join(wheel_dir, name)):
                wheels[name] = file_sha256(os.path.join(wheel_dir, name))
    module.exit_json(
        changed=False,
        python=interpreter,
        env_exists=exists,
        wheels=wheels,
        baseline=baseline,
        baseline_recorded=recorded,
        **data,
    )


if __name__ == "__main__":
    main()
