#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: work out (and refuse early) everything a DeepEP v1.x build needs on this host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_plan
short_description: Plan a DeepEP build - NVSHMEM, headers, arch list and DeepEP's own flag rules
description:
  - Finds NVSHMEM (O(nvshmem_dir), else the C(nvidia.nvshmem) package of the env's Python, which DeepEP's
    setup.py finds on its own) and reads its version.
  - Applies DeepEP v1.x setup.py rules before anything is built, so a bad combination fails in seconds with
    the reason - C(DISABLE_SM90_FEATURES) with NVSHMEM, aggressive PTX instructions with an arch list other
    than exactly C(9.0), a missing NVSHMEM when O(require_nvshmem) is set, a missing C(infiniband/mlx5dv.h).
  - Returns the build environment and include directories for the C(cuda_extension) role, and the key
    material (NVSHMEM version, flags) that must make a different build a different wheel.
  - Reads only; runs the same in check mode.
options:
  cuda_home:
    description: CUDA_HOME of the build (its C(include/cccl) is added for CUDA 13).
    type: path
    required: true
  arch_list:
    description: Target archs (TORCH_CUDA_ARCH_LIST entries such as C(9.0), C(12.0)).
    type: list
    elements: str
    required: true
  nvshmem_dir:
    description:
      - An NVSHMEM install (with C(include/) and C(lib/)); empty to use the env's C(nvidia.nvshmem) package.
    type: str
    default: ""
  nvshmem_package:
    description: Distribution name of the NVSHMEM wheel, for its version (C(nvidia-nvshmem-cu13)).
    type: str
    default: nvidia-nvshmem-cu13
  require_nvshmem:
    description: Fail when no NVSHMEM is found (without it DeepEP has no internode or low-latency kernels).
    type: bool
    default: true
  disable_sm90_features:
    description: Build with C(DISABLE_SM90_FEATURES=1) (A100-class; DeepEP then requires no NVSHMEM).
    type: bool
    default: false
  aggressive_ptx:
    description: Build with C(DISABLE_AGGRESSIVE_PTX_INSTRS=0) (allowed by DeepEP for exactly C(9.0) only).
    type: bool
    default: false
  extra_include_dirs:
    description: Extra header folders (for example one holding a carried C(infiniband/mlx5dv.h)).
    type: list
    elements: path
    default: []
  system_include_dirs:
    description: Folders searched for system headers such as C(infiniband/mlx5dv.h).
    type: list
    elements: path
    default: [/usr/include, /usr/local/include]
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Plan the DeepEP build
  epforge.ep.deepep_plan:
    python: /root/ml-env/bin/python
    cuda_home: /opt/cuda-13.0
    arch_list: ["12.0"]
  register: deepep_plan
"""

RETURN = r"""
build_env:
  description:
    - Environment for DeepEP's setup.py (TORCH_CUDA_ARCH_LIST, DISABLE_* and NVSHMEM_DIR when explicit).
  returned: success
  type: dict
  sample: {TORCH_CUDA_ARCH_LIST: "12.0", DISABLE_AGGRESSIVE_PTX_INSTRS: "1", DISABLE_SM90_FEATURES: "0"}
include_dirs:
  description: Header folders to put on CPATH (extra dirs, CUDA 13 cccl, the env's nvidia/cu13/include).
  returned: success
  type: list
  elements: str
nvshmem:
  description: C({dir, version, source}); source is C(nvshmem_dir), C(wheel) or C(none).
  returned: success
  type: dict
mlx5dv_h:
  description: Path of the infiniband/mlx5dv.h found (empty when NVSHMEM is off).
  returned: success
  type: str
sass_archs:
  description: The SASS names the binary must carry (C(sm_120)).
  returned: success
  type: list
  elements: str
key_extra:
  description: Key material for the wheel cache (NVSHMEM version and source, flags, recipe version).
  returned: success
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import sass_name
from ansible_collections.epforge.ep.plugins.module_utils.deepep import (
    RECIPE_VERSION,
    DeepEPError,
    build_flags,
    find_header,
    include_path,
)
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import env_site


def probe_env(module: AnsibleModule, python: str, package: str) -> dict:
    """The env's site dirs and its nvidia-nvshmem wheel (dir, version): payload env_site run in it."""
    run = run_payload(python, env_site, [package], timeout=120)
    if run.rc != 0 or not isinstance(run.answer, dict):
        module.fail_json(
            msg=f"probing the env {python} failed", cmd=run.argv, rc=run.rc, log_tail=run.output[-2000:]
        )
    return run.answer


def nvshmem_header_version(d: str) -> str:
    """MAJOR.MINOR.PATCH from an NVSHMEM install's include/non_abi/nvshmem_version.h; "" when absent."""
    version_h = os.path.join(d, "include", "non_abi", "nvshmem_version.h")
    if not os.path.isfile(version_h):
        return ""
    with open(version_h, encoding="utf-8", errors="replace") as handle:
        fields = dict(
            line.split()[1:3]
            for line in handle
            if line.startswith("#define NVSHMEM_VENDOR_") and len(line.split()) >= 3
        )
    if not fields.get("NVSHMEM_VENDOR_MAJOR_VERSION"):
        return ""
    return ".".join(fields.get(f"NVSHMEM_VENDOR_{k}_VERSION", "0") for k in ("MAJOR", "MINOR", "PATCH"))


def explicit_nvshmem(module: AnsibleModule, d: str) -> dict:
    """An NVSHMEM_DIR the user named: refused unless DeepEP can link it."""
    if not (os.path.isdir(os.path.join(d, "include")) and os.path.isdir(os.path.join(d, "lib"))):
        module.fail_json(
            msg=f"NVSHMEM_DIR {d} is not an NVSHMEM install (needs include/ and lib/): fix "
            "deepep_nvshmem_dir or leave it empty to use the env's nvidia-nvshmem wheel"
        )
    host_libs = [f for f in os.listdir(os.path.join(d, "lib")) if f == "libnvshmem_host.so"]
    if not host_libs:
        module.fail_json(
            msg=f"NVSHMEM_DIR {d}/lib has no unversioned libnvshmem_host.so, which "
            "DeepEP v1.x links "
            "with -l:libnvshmem_host.so when NVSHMEM_DIR is set (a pip wheel only "
            "has .so.3): "
            "leave deepep_nvshmem_dir empty to let setup.py use the wheel"
        )
    return {"dir": d, "version": nvshmem_header_version(d), "source": "nvshmem_dir"}


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "cuda_home": {"type": "path", "required": True},
    "arch_list": {"type": "list", "elements": "str", "required": True},
    "nvshmem_dir": {"type": "str", "default": ""},
    "nvshmem_package": {"type": "str", "default": "nvidia-nvshmem-cu13"},
    "require_nvshmem": {"type": "bool", "default": True},
    "disable_sm90_features": {"type": "bool", "default": False},
    "aggressive_ptx": {"type": "bool", "default": False},
    "extra_include_dirs": {"type": "list", "elements": "path", "default": []},
    "system_include_dirs": {
        "type": "list",
        "elements": "path",
        "default": ["/usr/include", "/usr/local/include"],
    },
}


class DeepEPPlan:
    """DeepEP's build settings for this host: the env, its NVSHMEM, the flags for the archs and the
    headers the NVSHMEM kernels need, each refused with its remedy before a long build would fail."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params

    def check_paths(self) -> None:
        """The env's Python and CUDA_HOME must exist: their roles come first, and saying so is the remedy."""
        p = self.p
        if not os.access(p["python"], os.X_OK):
            self.module.fail_json(
                msg=f"the env's Python {p['python']} is missing: run the ml_env role first or "
                "set deepep_python"
            )
        if not os.path.isdir(p["cuda_home"]):
            self.module.fail_json(
                msg=f"CUDA_HOME {p['cuda_home']} does not exist: run the cuda_toolkit role or "
                "set deepep_cuda_home"
            )

    def nvshmem(self, env_info: dict) -> dict:
        """NVSHMEM: an explicit dir wins, else the wheel DeepEP's setup.py would find by itself; none is
        refused unless allowed, as DeepEP then silently lacks the kernels SGLang's PCIe path needs."""
        p = self.p
        nvshmem = {"dir": "", "version": "", "source": "none"}
        if p["nvshmem_dir"]:
            nvshmem = explicit_nvshmem(self.module, p["nvshmem_dir"])
        elif env_info["nvshmem_dir"]:
            nvshmem = {
                "dir": env_info["nvshmem_dir"],
                "version": env_info["nvshmem_version"],
                "source": "wheel",
            }
        if nvshmem["source"] == "none" and p["require_nvshmem"]:
            self.module.fail_json(
                msg=f"NVSHMEM not found: no deepep_nvshmem_dir and no nvidia.nvshmem package in "
                f"{p['python']}. Without it "
                "DeepEP builds without internode and low-latency kernels (the ones SGLang's PCIe path "
                "needs). "
                f"Remedy: install the stack's {p['nvshmem_package']} wheel into the env "
                "(deepep_install_nvshmem: true), "
                "set deepep_nvshmem_dir, or deepep_require_nvshmem: false",
                nvshmem=nvshmem,
            )
        return nvshmem

    def flags(self, nvshmem: dict) -> tuple[dict, list[str]]:
        """The build environment and the SASS archs; an explicit NVSHMEM dir is passed as NVSHMEM_DIR."""
        p = self.p
        try:
            flags = build_flags(
                p["arch_list"],
                nvshmem=nvshmem["source"] != "none",
                disable_sm90_features=p["disable_sm90_features"],
                aggressive_ptx=p["aggressive_ptx"],
            )
            sass = [sass_name(a) for a in p["arch_list"]]
        except DeepEPError as exc:
            self.module.fail_json(msg=str(exc), nvshmem=nvshmem)
        if nvshmem["source"] == "nvshmem_dir":
            flags["NVSHMEM_DIR"] = nvshmem["dir"]
        return flags, sass

    def mlx5dv_header(self, nvshmem: dict) -> str:
        """infiniband/mlx5dv.h, needed only with NVSHMEM ("" without); its absence is refused here rather
        than as a compiler error deep in the build."""
        p = self.p
        mlx5 = ""
        if nvshmem["source"] != "none":
            mlx5 = (
                find_header("infiniband/mlx5dv.h", p["extra_include_dirs"] + p["system_include_dirs"]) or ""
            )
            if not mlx5:
                self.module.fail_json(
                    msg="infiniband/mlx5dv.h not found (needed by DeepEP's NVSHMEM kernels): install "
                    "libibverbs-dev "
                    "(Debian/Ubuntu; the role does it with deepep_install_system_packages: true) or point "
                    "deepep_extra_include_dirs at a folder holding infiniband/mlx5dv.h",
                    searched=p["extra_include_dirs"] + p["system_include_dirs"],
                )
        return mlx5

    def run(self) -> None:
        """Plan the build and answer; the key material names the recipe and the NVSHMEM it links."""
        p = self.p
        self.check_paths()
        env_info = probe_env(self.module, p["python"], p["nvshmem_package"])
        nvshmem = self.nvshmem(env_info)
        flags, sass = self.flags(nvshmem)
        includes = include_path(p["cuda_home"], env_info["site"], p["extra_include_dirs"])
        mlx5 = self.mlx5dv_header(nvshmem)
        key_extra = {
            "deepep_recipe": RECIPE_VERSION,
            "nvshmem": {
                "version": nvshmem["version"],
                "source": nvshmem["source"],
                "dir": nvshmem["dir"] if nvshmem["source"] == "nvshmem_dir" else "",
            },
        }
        self.module.exit_json(
            changed=False,
            build_env=flags,
            include_dirs=includes,
            nvshmem=nvshmem,
            mlx5dv_h=mlx5,
            sass_archs=sass,
            key_extra=key_extra,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    DeepEPPlan(module).run()


if __name__ == "__main__":
    main()
