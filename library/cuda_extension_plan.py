#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the input key of a CUDA extension build on this host, and whether it is installed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_plan
short_description: Compute a CUDA extension's build key on a host and whether the host already has it
description:
  - Reads, cheaply and without importing torch, what the wheel depends on on this host - the CUDA release
    (C(nvcc --version) under O(cuda_home)), the torch version (its dist-info in the venv of O(python)), the
    Python tag and machine - and hashes them with the source revision, archs, build env, include dirs and
    O(key_extra) into the build key.
  - The host already has the extension when the stamp O(state_dir)C(/<name>.stamp.json) holds this key and
    every C(.so) file it lists still exists.
  - Changes nothing, except with O(record) the local fact entry of an installed key, only when it differs
    (check mode writes nothing; diff mode shows it).
  - On the no-op answer (the key is installed, nothing changed) it returns RV(watch), the paths that answer
    depends on, so the probe cache can reuse it while none of them changes.
options:
  name:
    description: Extension name.
    type: str
    required: true
  source:
    description: The source as given (a git URL is part of the key; directories and archives count by
      content).
    type: str
    required: true
  source_kind:
    description: C(git), C(dir) or C(archive) (from M(epforge.ep.cuda_extension_source)).
    type: str
    required: true
    choices: [git, dir, archive]
  revision:
    description: Source revision (git commit or content sha256).
    type: str
    required: true
  subdir:
    description: Directory of C(setup.py) inside the source.
    type: str
    default: ""
  archs:
    description: Target archs (e.g. C(12.0), C(9.0)); order and duplicates do not matter.
    type: list
    elements: str
    required: true
  cuda_home:
    description: CUDA_HOME of the toolchain.
    type: path
    required: true
  build_env:
    description: Extra build environment (part of the key).
    type: dict
    default: {}
  include_dirs:
    description: Extra include directories (part of the key).
    type: list
    elements: str
    default: []
  key_extra:
    description: Any other key material (JSON-serialisable).
    type: raw
    default: {}
  state_dir:
    description: Directory of the host's stamps.
    type: path
    required: true
  facts_dir:
    description: Directory of local facts; the current C(epforge_cuda_extensions.fact) is returned as C(fact).
    type: path
    default: /etc/ansible/facts.d
  record:
    description:
      - When the key is installed (the stamp matches), also set this extension's entry in
        C(epforge_cuda_extensions.fact) to the stamp without its inputs, keeping the other extensions'
        entries; written only when it changes (nothing in check mode). Then a no-op rerun of role
        cuda_extension records its fact in this one call.
    type: bool
    default: false
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The only change, the local fact's entry (O(record)), is shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Compute the key of the canary build
  epforge.ep.cuda_extension_plan:
    name: canary
    source: /src/canary
    source_kind: dir
    revision: sha256:0123
    archs: ["12.0"]
    python: /opt/epforge/ml-env/bin/python
    cuda_home: /opt/epforge/cuda-13.0
    state_dir: /var/lib/epforge/cuda_extension
"""

RETURN = r"""
key:
  description: Hash of every input of the build.
  returned: success
  type: str
  sample: 3f0c9a1b2d4e5f607182
inputs:
  description: The inputs the key was computed from.
  returned: success
  type: dict
installed:
  description: Whether the host's stamp proves this key is installed (and its .so files exist).
  returned: success
  type: bool
reason:
  description: Why the host does (not) need an install.
  returned: success
  type: str
stamp:
  description: The host's current stamp (empty when none).
  returned: success
  type: dict
fact:
  description: Current content of the local fact epforge_cuda_extensions (empty when none).
  returned: success
  type: dict
site_dir:
  description: The venv's site-packages.
  returned: success
  type: str
python:
  description: O(python) (so a delegated build can use the build host's own interpreter).
  returned: success
  type: str
cuda_home:
  description: O(cuda_home).
  returned: success
  type: str
torch_version:
  description: torch version read from its dist-info.
  returned: success
  type: str
cuda_version:
  description: CUDA release of O(cuda_home)'s nvcc.
  returned: success
  type: str
fact_changed:
  description: Whether O(record) changed (or, in check mode, would change) this extension's fact entry.
  returned: success
  type: bool
watch:
  description:
    - Paths the no-op answer depends on, sorted and absolute. O(python) with every symlink on the way and its
      realpath, and C(pyvenv.cfg) of its prefix (the Python tag, machine and site dirs the probe reads); the
      purelib and platlib dirs (torch's dist-info name); O(cuda_home) and its C(bin/nvcc) with their link
      chains (the CUDA release); the stamp, every C(.so) file it lists, and the fact file. While the args are
      the same and none of these changed, a rerun gives the same answer.
    - Returned only with the no-op answer (RV(installed) true and nothing changed); empty otherwise (there is
      work to do, this run wrote the fact, or a variable that moves the site dirs without any file changing
      is set, C(PYTHONHOME), C(PYTHONPLATLIBDIR) or Debian's C(DEB_PYTHON_INSTALL_LAYOUT)).
  returned: success
  type: list
  elements: str
  sample: [/etc/ansible/facts.d/epforge_cuda_extensions.fact, /opt/epforge/cuda-13.0,
           /opt/epforge/cuda-13.0/bin/nvcc, /opt/epforge/ml-env/bin/python,
           /opt/epforge/ml-env/lib/python3.11/site-packages, /opt/epforge/ml-env/pyvenv.cfg,
           /usr/bin/python3.11, /var/lib/epforge/cuda_extension/canary.stamp.json]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import arch_list
from ansible_collections.epforge.ep.plugins.module_utils.build import (
    NAME_RE,
    dist_info_version,
    input_key,
    python_tag,
    stamp_matches,
)
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_nvcc_release
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import python_layout
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, watch_list

FACT_NAME = "epforge_cuda_extensions"

# Variables that move the probe's sysconfig purelib/platlib (sys.prefix, sys.platlibdir, Debian's install
# scheme) without any file changing. PYTHONPATH and the user site do not: torch is read from those two dirs.
SYSCONFIG_VARIABLES = ("PYTHONHOME", "PYTHONPLATLIBDIR", "DEB_PYTHON_INSTALL_LAYOUT")


def record_installed(module: AnsibleModule, name: str, stamp: dict, fact: dict) -> dict:
    """Set the fact entry of an installed key to its stamp without the inputs (only on change): the part of
    the result it adds (changed, fact_changed and the diff)."""
    entry = {k: v for k, v in stamp.items() if k != "inputs"}
    if fact.get(name) == entry:
        return {"fact_changed": False}
    try:
        wrote = write_local_fact(
            module.params["facts_dir"], FACT_NAME, {**fact, name: entry}, check_mode=module.check_mode
        )
    except OSError as exc:
        module.fail_json(msg=f"writing the local fact {FACT_NAME} failed: {exc}")
    return {"changed": wrote["changed"], "fact_changed": wrote["changed"], "diff": wrote["diff"]}


def watched(p: dict, probe: dict, stamp_path: str, stamp: dict, fact_path: str) -> list[str]:
    """What the installed verdict depends on: the interpreter and its prefix's pyvenv.cfg (version, machine
    and sysconfig paths), the site dirs (torch's dist-info name), the toolkit's nvcc (its release), the
    stamp, the .so files it lists (they must exist) and the fact. [] when one of SYSCONFIG_VARIABLES is set:
    the probe cache's key holds the task's environment, not the login environment the module inherits."""
    if any(os.environ.get(name) for name in SYSCONFIG_VARIABLES):
        return []
    nvcc = os.path.join(p["cuda_home"], "bin", "nvcc")
    return watch_list(
        [os.path.join(probe["prefix"], "pyvenv.cfg"), probe["purelib"], probe["platlib"]],
        binary_paths(p["python"]),
        binary_paths(p["cuda_home"]),
        binary_paths(nvcc),
        [stamp_path, fact_path, *stamp.get("so_files", [])],
    )


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "source": {"type": "str", "required": True},
    "source_kind": {"type": "str", "required": True, "choices": ["git", "dir", "archive"]},
    "revision": {"type": "str", "required": True},
    "subdir": {"type": "str", "default": ""},
    "archs": {"type": "list", "elements": "str", "required": True},
    "python": {"type": "path", "required": True},
    "cuda_home": {"type": "path", "required": True},
    "build_env": {"type": "dict", "default": {}},
    "include_dirs": {"type": "list", "elements": "str", "default": []},
    "key_extra": {"type": "raw", "default": {}, "no_log": False},
    "state_dir": {"type": "path", "required": True},
    "facts_dir": {"type": "path", "default": "/etc/ansible/facts.d"},
    "record": {"type": "bool", "default": False},
}


class CudaExtensionPlan:
    """One extension's plan on this host: its build key from what the host has, and whether its stamp
    proves that key installed. The checks run in the order a user fixes them (args, venv, toolkit)."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params

    def checked_archs(self) -> list[str]:
        """The name (it becomes a stamp file name) and archs refused before anything runs; the archs
        normalised, so their order and duplicates do not change the key."""
        p = self.p
        if not NAME_RE.match(p["name"]):
            self.module.fail_json(
                msg=f"extension name '{p['name']}' may hold only letters, digits, '_', '.', '-'"
            )
        try:
            return arch_list(p["archs"])
        except ValueError as err:
            self.module.fail_json(msg=f"archs: {err}")
            raise  # fail_json exits; this keeps the type checker and readers sure nothing follows

    def probe_venv(self) -> tuple[dict, str]:
        """The venv's layout (payload python_layout) and its torch version, read from the dist-info so that
        the key costs no torch import."""
        p = self.p
        if not os.path.exists(p["python"]):
            self.module.fail_json(
                msg=f"{p['python']} does not exist: run role ml_env first (or set "
                "cuda_extension_python to a venv interpreter with torch)"
            )
        run = run_payload(p["python"], python_layout, timeout=300)
        if run.rc != 0 or not isinstance(run.answer, dict):
            self.module.fail_json(
                msg=f"{p['python']} does not run", cmd=run.argv, rc=run.rc, log_tail=tail(run.output)
            )
        probe = run.answer
        torch_version = dist_info_version(probe["purelib"], "torch") or dist_info_version(
            probe["platlib"], "torch"
        )
        if not torch_version:
            self.module.fail_json(
                msg=f"torch is not installed in the venv of {p['python']}: run role ml_env first"
            )
        return probe, torch_version

    def cuda_release(self) -> tuple[str, str]:
        """The CUDA release of cuda_home's nvcc, e.g. ('13.0', '13.0.88'): the wheel depends on it."""
        nvcc = os.path.join(self.p["cuda_home"], "bin", "nvcc")
        argv = [nvcc, "--version"]
        if not os.path.exists(nvcc):
            self.module.fail_json(
                msg=f"{nvcc} does not exist: cuda_home must be a CUDA toolkit with nvcc "
                "(role cuda_toolkit sets cuda_toolkit_home)",
                cmd=argv,
                rc=127,
            )
        rc, out, err, _unused = run_bounded(argv, timeout=60)
        nvcc_version = parse_nvcc_release(out)  # ('13.0', '13.0.88')
        if rc != 0 or not nvcc_version:
            self.module.fail_json(
                msg=f"cannot read the CUDA release from {nvcc} --version",
                cmd=argv,
                rc=rc,
                log_tail=tail(err or out),
            )
        return nvcc_version

    def key_inputs(self, archs: list[str], probe: dict, *, torch_version: str, cuda: str) -> dict:
        """Every input of the build, as hashed into the key: a git URL counts, a dir or archive only by its
        content revision."""
        p = self.p
        source = {"kind": p["source_kind"], "revision": p["revision"], "subdir": p["subdir"]}
        if p["source_kind"] == "git":
            source["url"] = p["source"]
        return {
            "name": p["name"],
            "source": source,
            "archs": archs,
            "cuda": cuda,
            "torch": torch_version,
            "python": python_tag(probe["major"], probe["minor"], probe["impl"]),
            "machine": probe["machine"],
            "build_env": {str(k): str(v) for k, v in sorted(p["build_env"].items())},
            "include_dirs": [str(d) for d in p["include_dirs"]],
            "key_extra": p["key_extra"],
        }

    def run(self) -> None:
        """Compute the key, compare it with the stamp, record the fact when asked, and answer."""
        p = self.p
        archs = self.checked_archs()
        probe, torch_version = self.probe_venv()
        nvcc_version = self.cuda_release()
        inputs = self.key_inputs(archs, probe, torch_version=torch_version, cuda=nvcc_version[1])
        key = input_key(inputs)
        stamp_path = os.path.join(p["state_dir"], f"{p['name']}.stamp.json")
        stamp = read_json(stamp_path) or {}
        installed, reason = stamp_matches(stamp, key, stamp.get("so_files", []) if stamp else [])
        if installed and not stamp.get("so_files"):
            installed, reason = False, "stamp lists no .so files"
        fact_path = os.path.join(p["facts_dir"], f"{FACT_NAME}.fact")
        fact = read_json(fact_path) or {}
        recorded = {"changed": False, "fact_changed": False}
        if installed and p["record"]:
            recorded.update(record_installed(self.module, p["name"], stamp, fact))
        no_op = installed and not recorded["changed"]
        recorded["watch"] = watched(p, probe, stamp_path, stamp, fact_path) if no_op else []
        self.module.exit_json(
            **recorded,
            key=key,
            inputs=inputs,
            installed=installed,
            reason=reason,
            stamp=stamp,
            fact=fact,
            site_dir=probe["platlib"],
            torch_version=torch_version,
            cuda_version=nvcc_version[1],
            python=p["python"],
            cuda_home=p["cuda_home"],
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    CudaExtensionPlan(module).run()


if __name__ == "__main__":
    main()
