#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: prove that a CUDA_HOME is the stack's CUDA and record it as a local fact."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit_verify
short_description: Prove that a CUDA_HOME has the stack's nvcc and archs; record it as a local fact
description:
  - Runs C(HOME/bin/nvcc --version), C(--list-gpu-code) and C(--list-gpu-arch) and checks that nvcc is CUDA
    O(cuda_version) (MAJOR.MINOR) and that it can compile for every arch in O(archs) (by base arch, V(12.0a)
    needs C(sm_120) and C(compute_120) in those lists).
  - Finds C(cuobjdump) (O(cuobjdump), else C(HOME/bin/cuobjdump), else empty).
  - With O(enforce=true) (default), fails on any problem, naming it and the remedy, and writes the local
    fact C(epforge_cuda_toolkit) in O(facts_dir) (JSON; changed only when its content changes; diff mode
    shows it).
  - With O(enforce=false) (a probe), changes nothing and never fails on a problem; RV(ok) says whether the
    home verifies AND the fact file already holds exactly this evidence and O(inputs) (then the caller's
    install steps can be skipped, so a no-op rerun costs this one call).
  - In check mode it reads everything, writes nothing and reports whether the fact would change.
  - On the no-op answer (the home verifies and the fact already holds this evidence) it returns RV(watch),
    the paths that answer depends on, so the probe cache can reuse it while none of them changes.
options:
  home:
    description: The CUDA_HOME to verify.
    type: path
    required: true
  cuda_version:
    description: CUDA MAJOR.MINOR nvcc must report (patch level ignored).
    type: str
    required: true
  archs:
    description: Archs nvcc must compile for (V(12.0), V(12.0a), V(sm_120)).
    type: list
    elements: str
    default: []
  cuobjdump:
    description: cuobjdump to record (default C(HOME/bin/cuobjdump) when present).
    type: path
  method:
    description: How the toolkit was installed (recorded).
    type: str
    default: existing
  source:
    description: Where it came from, in words (recorded), for example C(apt repo URL).
    type: str
    default: ""
  inputs:
    description: The caller's install inputs; their sha256 is recorded, so a changed input fails the probe.
    type: dict
    default: {}
  enforce:
    description: Fail on problems and write the fact (true), or only report (false).
    type: bool
    default: true
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.facts_dir
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The only change, the fact in O(facts_dir), is shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Verify an existing CUDA 13.0 and record it
  epforge.ep.cuda_toolkit_verify:
    home: /usr/local/cuda-13.0
    cuda_version: "13.0"
    archs: ["12.0"]
    method: existing
    source: existing CUDA_HOME /usr/local/cuda-13.0
    facts_dir: /etc/ansible/facts.d
"""

RETURN = r"""
ok:
  description: The home verifies and the fact file already holds this evidence (nothing to do).
  returned: always
  type: bool
problems:
  description: What does not verify, one sentence each with the remedy (empty when it verifies).
  returned: always
  type: list
  elements: str
nvcc:
  description: Path of nvcc.
  returned: always
  type: str
nvcc_release:
  description: Full nvcc version (for example C(13.0.88)), empty when nvcc does not run.
  returned: always
  type: str
gpu_code:
  description: nvcc's C(--list-gpu-code) (real archs).
  returned: always
  type: list
  elements: str
cuobjdump:
  description: Path of cuobjdump, or empty.
  returned: always
  type: str
fact:
  description: The local fact's content.
  returned: always
  type: dict
  sample:
    {version: "13.0", nvcc_release: 13.0.88, method: pypi, home: /opt/epforge/cuda-13.0, archs: ["12.0"],
     source: pypi wheels from the configured index, nvcc: /opt/epforge/cuda-13.0/bin/nvcc,
     cuobjdump: /opt/epforge/cuda-13.0/bin/cuobjdump, include_dirs: [...], inputs_digest: 3f0c...}
watch:
  description:
    - Paths the no-op answer depends on, sorted and absolute. nvcc with every symlink on the way and its
      realpath (its version and arch lists); the home (and any link to it); C(HOME/bin) (which binaries
      exist); cuobjdump; C(HOME/include) and C(HOME/include/cccl); the link stub
      C(HOME/lib64/stubs/libcuda.so); the fact file. While the args are the same and none of these changed,
      a rerun gives the same answer.
    - Returned only with the no-op answer (RV(ok) true and nothing changed); empty otherwise (there is work
      to do, or this run wrote the fact).
  returned: always
  type: list
  elements: str
  sample: [/etc/ansible/facts.d/epforge_cuda_toolkit.fact, /opt/epforge/cuda-13.0, /opt/epforge/cuda-13.0/bin,
           /opt/epforge/cuda-13.0/bin/cuobjdump, /opt/epforge/cuda-13.0/bin/nvcc,
           /opt/epforge/cuda-13.0/include]
"""

import os
from typing import NamedTuple

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import nvcc_missing_archs
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_gpu_list, parse_nvcc_release
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.stack import version_tuple
from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, watch_list

FACT_NAME = "epforge_cuda_toolkit"


def run(argv: list[str]) -> tuple[int, str]:
    proc = run_bounded(argv, timeout=120)
    return proc.rc, proc.output


class NvccCheck(NamedTuple):
    problems: list[str]
    release: str
    gpu_code: list[str]
    log_tail: str


def check_nvcc(home: str, nvcc: str, want: str, archs: list[str]) -> NvccCheck:
    """Is home a CUDA toolkit whose nvcc is release `want` and compiles for every arch the stack needs?"""
    if not os.path.isdir(home):
        return NvccCheck(
            [
                f"CUDA_HOME {home} does not exist: install the toolkit (cuda_toolkit_method pypi or "
                "nvidia_repo) or point cuda_toolkit_home at an existing one"
            ],
            "",
            [],
            "",
        )
    if not os.access(nvcc, os.X_OK):
        return NvccCheck(
            [f"{home} has no executable bin/nvcc: it is not a CUDA toolkit (runtime only?)"], "", [], ""
        )
    rc, out = run([nvcc, "--version"])
    found = parse_nvcc_release(out) if rc == 0 else None
    if not found:
        return NvccCheck(
            [f"{nvcc} --version failed (rc {rc}) or printed no release line"], "", [], out[-2000:]
        )
    problems = []
    if found[0] != want:
        problems.append(
            f"{nvcc} is CUDA {found[0]} ({found[1]}) but the stack needs CUDA {want}: point the role "
            f"at a CUDA {want} toolkit (cuda_toolkit_home / cuda_toolkit_prefix) or choose the stack "
            f"for CUDA {found[0]}; nothing was built with it"
        )
    rc_code, out_code = run([nvcc, "--list-gpu-code"])
    rc_arch, out_arch = run([nvcc, "--list-gpu-arch"])
    gpu_code = parse_gpu_list(out_code) if rc_code == 0 else []
    gpu_arch = parse_gpu_list(out_arch) if rc_arch == 0 else []
    missing = nvcc_missing_archs(gpu_code, gpu_arch, archs)
    if missing:
        problems.append(
            f"{nvcc} cannot compile for {', '.join(missing)} (--list-gpu-code: "
            f"{' '.join(gpu_code) or 'nothing'}): the stack's archs need a newer CUDA"
        )
    return NvccCheck(problems, found[1], gpu_code, "")


def find_cuobjdump(home: str, requested: str | None, problems: list[str]) -> str:
    """The cuobjdump to record: the requested one (a problem when not executable) or home's, else ""."""
    cuobjdump = requested or os.path.join(home, "bin", "cuobjdump")
    if os.access(cuobjdump, os.X_OK):
        return cuobjdump
    if requested:
        problems.append(f"cuobjdump {requested} is not executable")
    return ""


def include_dirs_of(home: str) -> list[str]:
    include_dirs = [os.path.join(home, "include")]
    if os.path.isdir(os.path.join(home, "include", "cccl")):
        # CUDA 13: thrust/cub/cuda-std live here; nvcc adds it itself, host compilers need it on CPATH.
        include_dirs.append(os.path.join(home, "include", "cccl"))
    return include_dirs


def toolkit_fact(p: dict, *, home: str, want: str, nvcc: str, release: str, cuobjdump: str) -> dict:
    stub = os.path.join(home, "lib64", "stubs", "libcuda.so")
    return {
        "version": want,
        "nvcc_release": release,
        "method": p["method"],
        "source": p["source"],
        "home": home,
        "nvcc": nvcc,
        "cuobjdump": cuobjdump,
        "archs": list(p["archs"]),
        "include_dirs": include_dirs_of(home),
        "link_stub": stub if os.path.exists(stub) else "",
        "inputs_digest": digest(p["inputs"]),
    }


def watched(home: str, nvcc: str, cuobjdump: str, requested: str | None, fact_file: str) -> list[str]:
    """What the no-op answer depends on: nvcc (runs; strace shows it reads no other file for --version and
    the --list-gpu-* lists), the home (isdir) and bin/ (cuobjdump found or not), cuobjdump, include/ and
    include/cccl (the fact's include_dirs), the link stub and the fact file itself."""
    return watch_list(
        [
            os.path.join(home, "bin"),
            os.path.join(home, "bin", "cuobjdump"),
            os.path.join(home, "include"),
            os.path.join(home, "include", "cccl"),
            os.path.join(home, "lib64", "stubs", "libcuda.so"),
            fact_file,
        ],
        binary_paths(home),
        binary_paths(nvcc),
        binary_paths(requested or cuobjdump),
    )


def record_fact(module: AnsibleModule, facts_dir: str, fact: dict, result: dict) -> None:
    """Write the fact when it changed (not in check mode), with a diff: the one fact writer."""
    written = write_local_fact(facts_dir, FACT_NAME, fact, module.check_mode)
    if written["changed"]:
        result["diff"] = written["diff"]
        result["changed"] = True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "home": {"type": "path", "required": True},
            "cuda_version": {"type": "str", "required": True},
            "archs": {"type": "list", "elements": "str", "default": []},
            "cuobjdump": {"type": "path"},
            "method": {"type": "str", "default": "existing"},
            "source": {"type": "str", "default": ""},
            "inputs": {"type": "dict", "default": {}},
            "facts_dir": {"type": "path", "required": True},
            "enforce": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    home = os.path.abspath(p["home"]).rstrip("/") or "/"
    want = ".".join(str(x) for x in version_tuple(p["cuda_version"])[:2])
    nvcc = os.path.join(home, "bin", "nvcc")
    checked = check_nvcc(home, nvcc, want, p["archs"])
    problems = list(checked.problems)
    cuobjdump = find_cuobjdump(home, p["cuobjdump"], problems)
    fact = toolkit_fact(p, home=home, want=want, nvcc=nvcc, release=checked.release, cuobjdump=cuobjdump)
    path = fact_path(p["facts_dir"], FACT_NAME)
    current = read_json(path)
    result = {
        "problems": problems,
        "nvcc": nvcc,
        "nvcc_release": checked.release,
        "gpu_code": checked.gpu_code,
        "cuobjdump": cuobjdump,
        "fact": fact,
        "changed": False,
    }

    no_op = not problems and current == fact
    result["watch"] = watched(home, nvcc, cuobjdump, p["cuobjdump"], path) if no_op else []
    if not p["enforce"]:
        module.exit_json(ok=no_op, **result)
    if problems:
        module.fail_json(
            msg="CUDA toolkit check failed: " + "; ".join(problems),
            ok=False,
            log_tail=checked.log_tail,
            **result,
        )
    record_fact(module, p["facts_dir"], fact, result)
    module.exit_json(ok=True, **result)


if __name__ == "__main__":
    main()
