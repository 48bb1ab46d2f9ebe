#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: import a Python module inside a given interpreter (argv, no shell quoting) and say
precisely why it failed: missing, broken, or only 'no usable GPU on this host'."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_import_check
short_description: Import a Python module inside a given interpreter and classify the outcome
description:
  - Runs C(PYTHON -c PAYLOAD NAME) (payload C(import_check) of the collection's module_utils) as an argv
    list (no shell, so no quoting can eat the check), imports O(name) there and reports the import name
    tried, the module's file and version, and on failure the real exception type and message with its
    traceback tail.
  - Classifies a failure as C(missing) (the module or its top-level package is not installed),
    C(no_gpu) (the import itself needs a usable CUDA device or driver and this host has none; the install
    may well be fine) or C(broken) (anything else, such as an undefined symbol or an ABI mismatch).
  - Tells C(no_gpu) apart from C(broken) by evidence - the error must carry a known "no device / no driver"
    signature B(and) the host must show no usable GPU (no C(/dev/nvidiactl), or torch reports no device).
  - Changes nothing, so it runs the same in check mode.
options:
  name:
    description: Import name, such as C(deep_ep) or C(flashinfer) (dotted names are allowed).
    type: str
    required: true
  distribution:
    description: Distribution whose installed version to report (C(importlib.metadata)); defaults to none.
    type: str
  allow_no_gpu:
    description:
      - When true, a C(no_gpu) outcome returns normally with C(status=no_gpu) (a build host without a GPU).
      - When false it fails like any other import error.
    type: bool
    default: true
  environment:
    description: Extra environment variables for the interpreter (for example C(LD_LIBRARY_PATH)).
    type: dict
    default: {}
  timeout:
    description: Seconds before the import is given up (a hung driver call, say).
    type: int
    default: 300
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Import deep_ep inside the ML env
  epforge.ep.python_import_check:
    python: /root/ml-env/bin/python
    name: deep_ep
    distribution: deep_ep
  register: deepep_import

- name: A serving host must import it for real
  epforge.ep.python_import_check:
    python: /root/ml-env/bin/python
    name: flashinfer
    allow_no_gpu: false
"""

RETURN = r"""
status:
  description: C(ok), C(no_gpu) (import needs a GPU this host lacks), C(missing) or C(broken).
  returned: always
  type: str
  sample: ok
name:
  description: The import name tried.
  returned: always
  type: str
  sample: deep_ep
python:
  description: The interpreter used and its version.
  returned: always
  type: str
  sample: /root/ml-env/bin/python (3.11.2)
file:
  description: The imported module's file.
  returned: when status is ok
  type: str
version:
  description: Distribution version (from O(distribution)) or the module's C(__version__).
  returned: when known
  type: str
error:
  description: The exception as C(Type) and message (empty when the import worked).
  returned: always
  type: str
  sample: "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
traceback_tail:
  description: The last lines of the traceback.
  returned: on failure
  type: str
gpu:
  description:
    - What the probe saw of GPUs (C(dev_nvidiactl), and C(torch_cuda_available), C(device_count) when torch
      imports).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv
from ansible_collections.epforge.ep.plugins.module_utils.payloads import import_check
from ansible_collections.epforge.ep.plugins.module_utils.payloads.import_check import answer_of
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded

# Error texts that mean "this import needs a usable GPU / driver", seen in real packages:
# sgl-deep-ep's prerequisite check, torch's lazy init, missing libcuda.so.1 (driver library).
NO_GPU_SIGNATURES = (
    "usable CUDA device",
    "no CUDA GPUs are available",
    "Found no NVIDIA driver",
    "NVIDIA driver on your system is too old",
    "libcuda.so.1: cannot open shared object file",
    "CUDA driver initialization failed",
    "cudaErrorNoDevice",
    "CUDA_ERROR_NO_DEVICE",
    "no CUDA-capable device is detected",
    "CUDA driver version is insufficient",
)


def classify(result: dict, name: str) -> str:
    """ok / missing / no_gpu / broken from a probe result."""
    if result.get("ok"):
        return "ok"
    top = name.split(".", maxsplit=1)[0]
    missing = result.get("missing_name") or ""
    if result.get("error_type") == "ModuleNotFoundError" and (
        missing in (name, top) or name.startswith(missing + ".")
    ):
        return "missing"
    text = (result.get("error") or "") + "\n" + (result.get("traceback_tail") or "")
    gpu = result.get("gpu") or {}
    host_has_gpu = bool(gpu.get("dev_nvidiactl")) and gpu.get("torch_cuda_available", True) is not False
    if any(sig in text for sig in NO_GPU_SIGNATURES) and not host_has_gpu:
        return "no_gpu"
    return "broken"


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "name": {"type": "str", "required": True},
    "distribution": {"type": "str"},
    "allow_no_gpu": {"type": "bool", "default": True},
    "environment": {"type": "dict", "default": {}},
    "timeout": {"type": "int", "default": 300},
}


class ImportCheck:
    """The module's one job: import one name in the env's interpreter (a payload run apart, so a crash in
    an extension's init cannot take the module down), then classify and report what happened."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.argv, self.shown = payload_argv(
            self.p["python"], import_check, [self.p["name"], self.p["distribution"] or ""]
        )

    def run(self) -> None:
        """Probe, then exit for an import that works (or only lacks a GPU, when allowed), else fail."""
        proc, result = self.probe()
        status = classify(result, self.p["name"])
        ret = {
            "changed": False,
            "status": status,
            "name": self.p["name"],
            "python": f"{self.p['python']} ({result['python_version']})",
            "file": result.get("file", ""),
            "version": result.get("version", ""),
            "error": result.get("error", ""),
            "gpu": result.get("gpu", {}),
        }
        if status == "ok" or (status == "no_gpu" and self.p["allow_no_gpu"]):
            if status == "no_gpu":
                ret["traceback_tail"] = result.get("traceback_tail", "")
            self.module.exit_json(**ret)
        self.fail_import(proc, result, ret)

    def probe(self):
        """(the finished process, the probe's answer); fails as broken when no answer came back."""
        module, p, shown = self.module, self.p, self.shown
        if not os.access(p["python"], os.X_OK):
            module.fail_json(
                msg=f"interpreter {p['python']} does not exist or is not executable: point the "
                "role's python variable at the env's bin/python",
                status="broken",
                name=p["name"],
                cmd=shown,
            )
        env = dict(os.environ)
        env.update({k: str(v) for k, v in p["environment"].items()})
        proc = run_bounded(self.argv, env=env, timeout=p["timeout"])
        if proc.timed_out:
            module.fail_json(
                msg=f"importing {p['name']} in {p['python']} did not finish within {p['timeout']} s",
                cmd=shown,
                rc=124,
                status="broken",
                name=p["name"],
            )
        result = answer_of(proc.out)
        if result is None:
            # The interpreter itself died (segfault in an extension's init, say): that is a broken install.
            module.fail_json(
                msg=f"importing {p['name']} killed the interpreter {p['python']} (rc {proc.rc})",
                cmd=shown,
                rc=proc.rc,
                status="broken",
                name=p["name"],
                log_tail=tail(proc.output),
            )
        return proc, result

    def fail_import(self, proc, result: dict, ret: dict) -> None:
        """Fail with the status's remedy, so the message says what to do about it."""
        p, status = self.p, ret["status"]
        remedy = {
            "missing": "it is not installed in this env: install it there (or check that the role's python "
            "is the env's)",
            "no_gpu": "this import needs a usable CUDA device and this host has none (the install itself may "
            "be fine)",
            "broken": "it is installed but does not load: read the error (undefined symbol / ABI mismatch / "
            "missing "
            "library) and rebuild against this env's torch and CUDA",
        }[status]
        ret.pop("changed")
        self.module.fail_json(
            msg=f"import {p['name']} failed in {p['python']} [{status}]: {ret['error']} -- {remedy}",
            cmd=self.shown,
            rc=proc.rc,
            traceback_tail=result.get("traceback_tail", ""),
            **ret,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    ImportCheck(module).run()


if __name__ == "__main__":
    main()
