#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: list the GPU archs (SASS and PTX) inside CUDA binaries and require some of them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_binary_archs
short_description: List the SASS and PTX archs inside CUDA binaries; fail when a required one is missing
description:
  - Runs C(cuobjdump -lelf -lptx FILE) on every file given (shared objects, C(.cubin), C(.o), C(.a),
    C(.fatbin)) and reports, per file, the SASS archs (compiled GPU code, for example C(sm_120)) and the
    PTX archs (virtual code that the driver can JIT-compile at load time).
  - With O(required_archs), fails when a file lacks one of them, naming for each file the archs it found.
  - "Matching rules. A required V(12.0) (a GPU of compute capability 12.0 must run the binary) is covered by
    SASS C(sm_120) or C(sm_120a): an arch-specific C(sm_120a) cubin runs on exactly that GPU, so it counts.
    A required V(12.0a) (arch-specific kernels wanted) is covered only by C(sm_120a). A required V(12.0f)
    is covered by C(sm_120): cuobjdump prints a family build (C(sm_120f)) as plain C(sm_120).
    The base must match exactly; SASS of another minor (C(sm_120) for a 12.1 GPU) does not count."
  - PTX is reported separately and does not count unless O(accept_ptx=true); then generic PTX of an equal
    or lower arch (C(compute_90) for V(12.0)) counts, as the driver can JIT-compile it (slow first load).
  - Reads only; behaves the same in check mode.
options:
  paths:
    description:
      - Files, directories or glob patterns (C(**) recurses). A directory is searched recursively for files
        matching O(patterns).
    type: list
    elements: path
    required: true
    aliases: [path]
  patterns:
    description: File name patterns used when an entry of O(paths) is a directory.
    type: list
    elements: str
    default: ["*.so", "*.so.*", "*.cubin", "*.o", "*.a", "*.fatbin"]
  required_archs:
    description:
      - Archs every file must carry, spelled V(12.0), V(12.0a), V(12.0f), V(sm_120) or V(sm_120a).
      - An empty list (the default) only lists what the files carry.
    type: list
    elements: str
    default: []
  accept_ptx:
    description: Count PTX that the driver can JIT-compile for a required arch (default SASS only).
    type: bool
    default: false
  ignore_host_only:
    description:
      - Skip files with no device code at all (for example a package's pure C++ helper libraries when a
        directory is scanned). They are listed in RV(host_only). When false they fail the requirement.
      - At least one file with device code must remain.
    type: bool
    default: false
  cuobjdump:
    description:
      - Path of C(cuobjdump). Default the first of C(CUDA_HOME/bin/cuobjdump) (O(cuda_home) or the
        environment's C(CUDA_HOME)), C(cuobjdump) on C(PATH), C(/usr/local/cuda/bin/cuobjdump).
      - CUDA 13 installs get it from the wheel C(nvidia-cuda-cuobjdump) (role cuda_toolkit puts it into the
        toolkit prefix); the play fact C(cuda_toolkit_cuobjdump) holds its path.
    type: path
  cuda_home:
    description: A CUDA_HOME whose C(bin/cuobjdump) is used when O(cuobjdump) is not given.
    type: path
extends_documentation_fragment:
  - epforge.ep.timeout.cuobjdump
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: The DeepEP extension must carry SASS for the RTX PRO 6000 (sm_120)
  epforge.ep.cuda_binary_archs:
    paths: "{{ venv }}/lib/python3.11/site-packages/deep_ep_cpp*.so"
    required_archs: "{{ epforge_stack_spec.arch_list }}"
    cuobjdump: "{{ cuda_toolkit_cuobjdump }}"

- name: List the archs of every binary in a package directory, without requiring any
  epforge.ep.cuda_binary_archs:
    paths: ["{{ venv }}/lib/python3.11/site-packages/flashinfer"]
    ignore_host_only: true
  register: fi_archs
"""

RETURN = r"""
files:
  description: One entry per file, in path order.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The file., type: str}
    sass: {description: SASS archs inside (as cuobjdump names them)., type: list, elements: str,
           sample: [sm_90, sm_120a]}
    ptx: {description: PTX archs inside., type: list, elements: str, sample: [sm_120]}
    host_only: {description: The file has no device code., type: bool}
    missing: {description: Required archs this file lacks., type: list, elements: str}
    covered:
      description: For each required arch what covers it (C(sass sm_120), C(ptx sm_90)).
      type: dict
  sample:
    - {path: /tmp/k/sm90.o, sass: [sm_90], ptx: [], host_only: false, missing: ["12.0"], covered: {}}
sass_archs:
  description: Union of the SASS archs of all files.
  returned: always
  type: list
  elements: str
ptx_archs:
  description: Union of the PTX archs of all files.
  returned: always
  type: list
  elements: str
host_only:
  description: Files without device code that were skipped (O(ignore_host_only=true)).
  returned: always
  type: list
  elements: str
missing:
  description: Per file path, the required archs it lacks (empty on success).
  returned: always
  type: dict
cuobjdump:
  description: The cuobjdump used.
  returned: always
  type: str
"""

import fnmatch
import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import arch_sort_key, check_required, parse_arch
from ansible_collections.epforge.ep.plugins.module_utils.cuobjdump import CuobjdumpError, read_binary

GLOB_CHARS = set("*?[")


def expand_paths(entries: list[str], patterns: list[str]) -> tuple[list[str], list[str]]:
    """Entries -> (sorted unique files, entries that matched nothing)."""
    files: list[str] = []
    unmatched: list[str] = []
    # type path: Ansible has expanded '~' and variables already
    for entry in entries:
        found: list[str] = []
        if GLOB_CHARS & set(entry):
            found = [p for p in glob.glob(entry, recursive=True) if os.path.isfile(p)]
        elif os.path.isdir(entry):
            for root, _dirs, names in os.walk(entry):
                for name in names:
                    if any(fnmatch.fnmatch(name, pat) for pat in patterns):
                        path = os.path.join(root, name)
                        if os.path.isfile(path):
                            found.append(path)
        elif os.path.isfile(entry):
            found = [entry]
        if not found:
            unmatched.append(entry)
        files.extend(os.path.abspath(p) for p in found)
    return sorted(set(files)), unmatched


def find_cuobjdump(module: AnsibleModule) -> str | None:
    explicit = module.params["cuobjdump"]
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    homes = [module.params["cuda_home"], os.environ.get("CUDA_HOME")]
    for home in homes:
        if home and os.access(os.path.join(home, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(home, "bin", "cuobjdump")
    return module.get_bin_path("cuobjdump", opt_dirs=["/usr/local/cuda/bin"])


def list_archs(module: AnsibleModule, cuobjdump: str, path: str) -> dict:
    try:
        return read_binary(cuobjdump, path, module.params["timeout"])
    except CuobjdumpError as exc:
        module.fail_json(**exc.fail_fields())
        raise  # fail_json exits; this keeps the type checker and readers sure nothing follows


ARGUMENT_SPEC = {
    "paths": {"type": "list", "elements": "path", "required": True, "aliases": ["path"]},
    "patterns": {
        "type": "list",
        "elements": "str",
        "default": ["*.so", "*.so.*", "*.cubin", "*.o", "*.a", "*.fatbin"],
    },
    "required_archs": {"type": "list", "elements": "str", "default": []},
    "accept_ptx": {"type": "bool", "default": False},
    "ignore_host_only": {"type": "bool", "default": False},
    "cuobjdump": {"type": "path"},
    "cuda_home": {"type": "path"},
    "timeout": {"type": "int", "default": 120},
}


class CudaBinaryArchs:
    """The archs of the given binaries against the required ones. Every input is checked before the first
    cuobjdump run, so a typo fails in a second instead of after a long scan."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params

    def inputs(self) -> tuple[list[str], str]:
        """The files to read and the cuobjdump to read them with; fails on a bad arch, a path that matches
        nothing or no cuobjdump."""
        module, params = self.module, self.params
        bad = [arch for arch in params["required_archs"] if parse_arch(arch) is None]
        if bad:
            module.fail_json(
                msg=f"required_archs has entries that are no GPU arch: {', '.join(bad)}; "
                "spell them 12.0, 12.0a, 12.0f or sm_120"
            )

        files, unmatched = expand_paths(params["paths"], params["patterns"])
        if unmatched:
            module.fail_json(
                msg=f"no file matched {', '.join(unmatched)}: check the path (globs need quotes in "
                "YAML) or the build that should have produced it",
                unmatched=unmatched,
            )

        cuobjdump = find_cuobjdump(module)
        if not cuobjdump:
            module.fail_json(
                msg="cuobjdump not found (option cuobjdump, CUDA_HOME/bin, PATH): run role "
                "cuda_toolkit (its fact cuda_toolkit_cuobjdump) or `pip install "
                "nvidia-cuda-cuobjdump` and pass nvidia/cu13/bin/cuobjdump"
            )
        return files, cuobjdump

    def read_files(self, files: list[str], cuobjdump: str) -> tuple[list[dict], list[str]]:
        """Each file's SASS/PTX and what it lacks; host-only files set aside when ignore_host_only says so."""
        params = self.params
        results = []
        host_only: list[str] = []
        for path in files:
            parsed = list_archs(self.module, cuobjdump, path)
            if parsed["host_only"] and params["ignore_host_only"]:
                host_only.append(path)
                continue
            check = check_required(
                parsed["sass"], parsed["ptx"], params["required_archs"], params["accept_ptx"]
            )
            results.append(
                {
                    "path": path,
                    "sass": parsed["sass"],
                    "ptx": parsed["ptx"],
                    "host_only": parsed["host_only"],
                    "missing": check["missing"],
                    "covered": check["covered"],
                }
            )
        return results, host_only

    def refuse_missing(self, results: list[dict], missing: dict, out: dict) -> None:
        """Fail naming, per file that lacks a required arch, what it has instead, so the rebuild can aim."""
        params = self.params
        lines = []
        for r in results:
            if not r["missing"]:
                continue
            found = ", ".join(r["sass"]) or "none"
            ptx = ", ".join(r["ptx"]) or "none"
            what = "no device code" if r["host_only"] else f"SASS found: {found}; PTX found: {ptx}"
            lines.append(f"{r['path']} lacks {', '.join(r['missing'])} ({what})")
        rule = "" if params["accept_ptx"] else " (PTX does not count: accept_ptx is false)"
        self.module.fail_json(
            msg=f"{len(missing)} of {len(results)} files lack required archs "
            f"{', '.join(params['required_archs'])}{rule}: "
            + "; ".join(lines)
            + ". Rebuild with TORCH_CUDA_ARCH_LIST / -gencode for the missing archs.",
            **out,
        )

    def run(self) -> None:
        """Read every file, then answer with the per-file and overall archs, or fail with the same fields."""
        files, cuobjdump = self.inputs()
        results, host_only = self.read_files(files, cuobjdump)

        sass_all = sorted({a for r in results for a in r["sass"]}, key=arch_sort_key)
        ptx_all = sorted({a for r in results for a in r["ptx"]}, key=arch_sort_key)
        missing = {r["path"]: r["missing"] for r in results if r["missing"]}
        out = {
            "changed": False,
            "files": results,
            "sass_archs": sass_all,
            "ptx_archs": ptx_all,
            "host_only": host_only,
            "missing": missing,
            "cuobjdump": cuobjdump,
        }

        if not results:
            self.module.fail_json(
                msg=f"none of the {len(files)} files has device code (all host-only): {', '.join(host_only)}",
                **out,
            )
        if missing:
            self.refuse_missing(results, missing, out)
        self.module.exit_json(**out)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    CudaBinaryArchs(module).run()


if __name__ == "__main__":
    main()
