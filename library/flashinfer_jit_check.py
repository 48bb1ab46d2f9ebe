#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: JIT-compile one real FlashInfer kernel for the target archs on this host (no GPU "
"needed)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_jit_check
short_description: JIT-compile a real FlashInfer kernel for the target archs, without a GPU
description:
  - Runs FlashInfer's own JIT (C(flashinfer.jit.activation.gen_act_and_mul_module(ACT).build()))
    inside the env
    with C(FLASHINFER_CUDA_ARCH_LIST) set, so no GPU is needed, and returns the built shared object for a
    SASS check (module C(cuda_binary_archs)).
  - The link step needs C(-lcuda); a host without a driver has no C(libcuda.so). The module looks for one in
    O(library_dirs), C(CUDA_HOME/lib64/stubs) and C(CUDA_HOME/lib/stubs); when none exists and
    O(make_libcuda_stub) is true it compiles an empty link stub (soname C(libcuda.so.1), as NVIDIA's stub)
    into
    O(stub_dir) with the host's C compiler. At run time the real driver's C(libcuda.so.1) is used.
  - FlashInfer caches the kernel in O(workspace); an up-to-date kernel is not rebuilt. A run reports a change
    when it built the kernel or made the link stub; a rerun with both in place reports none.
  - In check mode nothing is compiled and nothing is written (see the C(check_mode) attribute).
options:
  cuda_home:
    description: CUDA_HOME for the JIT (its nvcc).
    type: path
    required: true
  arch_list:
    description: Value of C(FLASHINFER_CUDA_ARCH_LIST), the arch rule's answer (C(rule.arch_list) of module
      C(flashinfer_probe)).
    type: str
    required: true
  activation:
    description: The activation kernel to build (C(silu) builds C(silu_and_mul)).
    type: str
    choices: [silu, gelu, gelu_tanh]
    default: silu
  workspace:
    description: FLASHINFER_WORKSPACE_BASE (JIT cache lives under it).
    type: path
    required: true
  library_dirs:
    description: Extra folders for the linker (LIBRARY_PATH), searched first for libcuda.so.
    type: list
    elements: path
    default: []
  make_libcuda_stub:
    description: Compile a libcuda.so link stub into O(stub_dir) when none is found.
    type: bool
    default: true
  stub_dir:
    description: Where the link stub goes.
    type: path
    required: true
  max_jobs:
    description: MAX_JOBS for FlashInfer's ninja.
    type: int
    default: 2
  timeout:
    description: Seconds before the build is killed.
    type: int
    default: 1200
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.python
  - epforge.ep.attributes
attributes:
  check_mode:
    support: partial
    details: >-
      Check mode compiles nothing, makes no stub and writes nothing. It looks for C(libcuda.so) as a real run
      does, fails where a real run would fail for its lack (O(make_libcuda_stub=false)), and reports
      changed=true where a real run would make the link stub (RV(would_make_stub)). Whether FlashInfer's JIT
      would compile the kernel is not predicted - FlashInfer's own build (its ninja file, written from the
      installed release's sources and flags, against the cache in O(workspace)) decides that, and only by
      running - so a check run with the stub in place reports changed=false where a real run that compiles
      the kernel reports changed=true.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: JIT-compile silu_and_mul for sm_120
  epforge.ep.flashinfer_jit_check:
    python: /root/ml-env/bin/python
    cuda_home: /opt/cuda-13.0
    arch_list: "12.0"
    workspace: /var/lib/epforge/flashinfer
    stub_dir: /var/lib/epforge/flashinfer/stubs
    log_path: /var/log/epforge/flashinfer-jit.log
"""

RETURN = r"""
library:
  description: The JIT-built shared object.
  returned: success
  type: str
built:
  description: Whether this run compiled it (false when FlashInfer's cache was up to date).
  returned: success
  type: bool
seconds:
  description: Wall time of the JIT step.
  returned: success
  type: float
libcuda:
  description: The libcuda.so the link used (a stub on driverless hosts); in check mode, the one it would
    use (the stub's path where it would make one).
  returned: success
  type: str
made_stub:
  description: Whether this run compiled the libcuda.so link stub into O(stub_dir) (a change).
  returned: success, not in check mode
  type: bool
would_make_stub:
  description: Check mode, whether a real run would make the link stub (the change check mode reports).
  returned: in check mode
  type: bool
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail_file
from ansible_collections.epforge.ep.plugins.module_utils.flashinfer import classify_jit_error
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv
from ansible_collections.epforge.ep.plugins.module_utils.payloads import flashinfer_jit
from ansible_collections.epforge.ep.plugins.module_utils.payloads.flashinfer_jit import MARK
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged
from ansible_collections.epforge.ep.plugins.module_utils.server_env import server_path


def find_libcuda(dirs: list[str]) -> str:
    for folder in dirs:
        candidate = os.path.join(folder, "libcuda.so")
        if os.path.exists(candidate):
            return candidate
    return ""


def make_stub(module, stub_dir: str) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        module.fail_json(
            msg="no libcuda.so to link against and no C compiler to make a link stub: "
            "install a full "
            "CUDA toolkit (lib64/stubs) or gcc"
        )
    os.makedirs(stub_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "libcuda_stub.c")
        with open(src, "w", encoding="utf-8") as handle:
            handle.write(
                "/* link stub: the real libcuda.so.1 comes from the driver at run time */\n"
                "int epforge_libcuda_stub;\n"
            )
        out = os.path.join(tmp, "libcuda.so")
        argv = [compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", out, src]
        proc = run_bounded(argv, timeout=120)
        if proc.rc != 0:
            fail_cmd(module, "could not compile the libcuda.so link stub", argv, proc.rc, output=proc.output)
        shutil.move(out, os.path.join(stub_dir, "libcuda.so"))
    return os.path.join(stub_dir, "libcuda.so")


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "cuda_home": {"type": "path", "required": True},
    "arch_list": {"type": "str", "required": True},
    "activation": {"type": "str", "choices": ["silu", "gelu", "gelu_tanh"], "default": "silu"},
    "workspace": {"type": "path", "required": True},
    "library_dirs": {"type": "list", "elements": "path", "default": []},
    "make_libcuda_stub": {"type": "bool", "default": True},
    "stub_dir": {"type": "path", "required": True},
    "max_jobs": {"type": "int", "default": 2},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 1200},
}


class FlashInferJitCheck:
    """One FlashInfer JIT build in the env, the way a server's first request would run it, with a
    libcuda.so to link against (the toolkit's stub, else one made here)."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params

    def existing_libcuda(self) -> str:
        """A libcuda.so to link with ("" when a stub must be made); fails when none is found and making
        one is not allowed, as the JIT's -lcuda would fail later with a less clear error."""
        p = self.p
        cuda = p["cuda_home"]
        search = [
            *p["library_dirs"],
            os.path.join(cuda, "lib64", "stubs"),
            os.path.join(cuda, "lib", "stubs"),
            p["stub_dir"],
        ]
        libcuda = find_libcuda(search)
        if not libcuda and not p["make_libcuda_stub"]:
            self.module.fail_json(
                msg="no libcuda.so in " + ", ".join(search) + ": FlashInfer's JIT links with "
                "-lcuda. "
                "Set flashinfer_make_libcuda_stub: true or install a toolkit with "
                "lib64/stubs"
            )
        return libcuda

    def jit_env(self, libcuda: str) -> dict:
        """The build's environment: the toolkit, the archs, the workspace and libcuda's dir to link from."""
        p = self.p
        cuda = p["cuda_home"]
        env = dict(os.environ)
        env.update(
            {
                "CUDA_HOME": cuda,
                "CUDA_PATH": cuda,
                # FlashInfer's JIT runs ninja by name: the env's bin/ (pip's ninja) first, as for a server
                # (a fresh Debian 12 has no other ninja: bench/first_run.py, 2026-12-04)
                "PATH": server_path(p["python"], cuda, env.get("PATH", "")),
                "FLASHINFER_CUDA_ARCH_LIST": p["arch_list"],
                "FLASHINFER_WORKSPACE_BASE": p["workspace"],
                "LIBRARY_PATH": os.pathsep.join(
                    x for x in (os.path.dirname(libcuda), env.get("LIBRARY_PATH")) if x
                ),
                "MAX_JOBS": str(p["max_jobs"]),
            }
        )
        return env

    def build(self, argv: list[str], shown: list[str], libcuda: str) -> tuple[dict, float]:
        """Run the payload and read its result line from the log; fails with the JIT's error classified."""
        p = self.p
        env = self.jit_env(libcuda)
        os.makedirs(p["workspace"], exist_ok=True)
        rc, seconds = run_logged(
            argv,
            p["log_path"],
            env=env,
            timeout=p["timeout"],
            header=f"flashinfer jit {p['activation']}_and_mul for {p['arch_list']}",
            shown=shown,
        )
        text = tail_file(p["log_path"], lines=400)
        result = None
        for line in reversed(text.splitlines()):
            if line.startswith(MARK):
                result = json.loads(line[len(MARK) :])
                break
        if rc != 0 or result is None or not result.get("exists"):
            why = classify_jit_error(text)
            msg = "FlashInfer JIT build failed" + (f": {why}" if why else "")
            msg += " (timed out)" if rc == 124 else ""
            fail_cmd(self.module, msg, shown, rc, log_path=p["log_path"], diagnosis=why or "")
        return result, seconds

    def run(self) -> None:
        """Check mode only tells whether a stub would be made: the JIT itself is known only by building."""
        module, p = self.module, self.p
        argv, shown = payload_argv(p["python"], flashinfer_jit, [p["activation"]])
        libcuda = self.existing_libcuda()
        if module.check_mode:
            module.exit_json(
                changed=not libcuda,
                would_make_stub=not libcuda,
                libcuda=libcuda or os.path.join(p["stub_dir"], "libcuda.so"),
                msg="check mode: nothing compiled"
                + ("" if libcuda else "; a real run makes the libcuda.so link stub")
                + "; whether FlashInfer's JIT would build the kernel is known only by building it",
                cmd=shown,
            )
        made_stub = not libcuda
        if made_stub:
            libcuda = make_stub(module, p["stub_dir"])
        result, seconds = self.build(argv, shown, libcuda)
        module.exit_json(
            changed=bool(result["built"]) or made_stub,
            library=result["library"],
            built=bool(result["built"]),
            made_stub=made_stub,
            seconds=round(seconds, 1),
            libcuda=libcuda,
            cmd=shown,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    FlashInferJitCheck(module).run()


if __name__ == "__main__":
    main()
