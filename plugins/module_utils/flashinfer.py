"""FlashInfer rules shared by the flashinfer modules: which arch list its JIT gets for an nvcc release (and
the one place that asks the host's nvcc for it), and the misleading errors it prints when that goes wrong."""

from __future__ import annotations

import os
import re

from ansible_collections.epforge.ep.plugins.module_utils.arch import (
    PTX_SUFFIX,
    ArchError,
    arch_list,
    require_arch,
    sass_name,
)
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_nvcc_release
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


class FlashInferArchError(ValueError):
    """An arch list FlashInfer's JIT cannot build with this nvcc: the message names the remedy."""


def parse_nvcc_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of `nvcc --version` output, read by epforge_cuda's one nvcc parser."""
    parsed = parse_nvcc_release(text)
    if parsed is None:
        return None
    major, minor = parsed[0].split(".")
    return int(major), int(minor)


def flashinfer_arch_list(archs: list[str], nvcc: tuple[int, int]) -> tuple[str, list[str]]:
    """FLASHINFER_CUDA_ARCH_LIST for these targets and this nvcc, and the SASS names to expect.

    The rule for sm_12x (flashinfer #3675, vLLM #50705): FlashInfer 0.6.x with a CUDA 12.8 nvcc logs
    "SM 12.x requires CUDA >= 12.9", ends up with no target arch and fails with the misleading
    "FlashInfer requires GPUs with sm75 or higher". So for 12.x: nvcc >= 12.9 works as is (FlashInfer
    picks the family target 12.0f); with nvcc 12.8 only the arch-specific spelling 12.0a works; anything
    else is refused here, with the remedy, before FlashInfer is asked.
    """
    try:
        entries = arch_list(archs)
        if any(entry.endswith(PTX_SUFFIX) for entry in entries):
            raise ArchError("FLASHINFER_CUDA_ARCH_LIST takes no '+PTX' entries")
    except ArchError as exc:
        raise FlashInferArchError(f"{exc}: set flashinfer_arch_list (or the stack's arch_list)") from exc
    out: list[str] = []
    sass: list[str] = []
    for arch in entries:
        major, minor, suffix = require_arch(arch)
        if major == 12:
            if nvcc < (12, 8):
                raise FlashInferArchError(
                    f"nvcc {nvcc[0]}.{nvcc[1]} cannot compile for sm_{major}{minor} (Blackwell RTX needs "
                    "CUDA >= 12.8): "
                    "install the stack's CUDA toolkit (cuda_toolkit role)"
                )
            if minor > 0 and nvcc < (12, 9):
                raise FlashInferArchError(
                    f"FlashInfer needs nvcc >= 12.9 for sm_{major}{minor}; this nvcc is {nvcc[0]}.{nvcc[1]}"
                )
            if suffix == "f" and nvcc < (12, 9):
                raise FlashInferArchError(f"family target {arch} needs nvcc >= 12.9")
            if nvcc < (12, 9) and suffix != "a":
                raise FlashInferArchError(
                    f"FlashInfer JIT for sm_{major}{minor} with nvcc {nvcc[0]}.{nvcc[1]}: this "
                    "combination ends in "
                    "FlashInfer's misleading 'FlashInfer requires GPUs with sm75 or higher' (no target arch: "
                    "'SM 12.x requires CUDA >= 12.9'; flashinfer #3675). Remedy: set flashinfer_arch_list to "
                    f"['{major}.{minor}a'] (CUDA 12.8 knows sm_{major}{minor} only as the arch-specific "
                    "target), "
                    "or use a CUDA >= 12.9 toolkit"
                )
        elif major >= 10 and nvcc < (12, 8):
            raise FlashInferArchError(f"nvcc {nvcc[0]}.{nvcc[1]} cannot compile for sm_{major}{minor}")
        out.append(arch)
        sass.append(sass_name(arch))
    return " ".join(out), sass


class FlashInferRuleFailure(Exception):
    """The rule could not be applied on this host: `fields` are the module's fail_json keywords (msg, cmd,
    nvcc_version and, when nvcc ran, rc and log_tail)."""

    def __init__(self, msg: str, **fields) -> None:
        super().__init__(msg)
        self.fields = {"msg": msg, **fields}


def nvcc_arch_rule(cuda_home: str, archs: list[str], timeout: int = 60) -> dict:
    """The sm_12x rule for the nvcc in CUDA_HOME: runs `CUDA_HOME/bin/nvcc --version` (read only) and answers
    {arch_list (FLASHINFER_CUDA_ARCH_LIST), sass_archs, nvcc_version}; raises FlashInferRuleFailure when there
    is no nvcc, its release is unreadable, or flashinfer_arch_list refuses the targets. Applied by module
    flashinfer_probe (role flashinfer's rule step)."""
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    argv = [nvcc, "--version"]
    if not os.access(nvcc, os.X_OK):
        raise FlashInferRuleFailure(
            f"no nvcc at {nvcc}: FlashInfer's JIT needs a CUDA toolkit (run cuda_toolkit or set "
            "flashinfer_cuda_home)",
            cmd=argv,
            nvcc_version="",
        )
    proc = run_bounded(argv, timeout=timeout)
    version = parse_nvcc_version(proc.out)
    if proc.rc != 0 or version is None:
        raise FlashInferRuleFailure(
            f"could not read the nvcc release from {nvcc} --version",
            cmd=argv,
            rc=proc.rc,
            log_tail=proc.output[-2000:],
            nvcc_version="",
        )
    shown = f"{version[0]}.{version[1]}"
    try:
        arch_value, sass = flashinfer_arch_list(archs, version)
    except FlashInferArchError as exc:
        raise FlashInferRuleFailure(str(exc), nvcc_version=shown, cmd=argv) from exc
    return {"arch_list": arch_value, "sass_archs": sass, "nvcc_version": shown}


MISLEADING = [
    (
        r"FlashInfer requires GPUs with sm75 or higher",
        "FlashInfer found no target arch (its 'sm75' message is misleading): the GPU/arch list was not "
        "usable with "
        "this nvcc; see the sm_12x rule (nvcc >= 12.9, or arch 12.0a)",
    ),
    (
        r"cannot find -lcuda",
        "the link needs libcuda.so: on a host without a driver use a link stub "
        "(CUDA_HOME/lib64/stubs/libcuda.so, or flashinfer_make_libcuda_stub)",
    ),
    (r"SM 12\.?\S* requires CUDA", "nvcc too old for sm_12x"),
    (
        r"No supported CUDA architectures found",
        "no target arch: set FLASHINFER_CUDA_ARCH_LIST (flashinfer_arch_list)",
    ),
    (r"ninja: (command )?not found|No module named 'ninja'", "ninja is missing in the env"),
]


def classify_jit_error(text: str) -> str | None:
    """A plain diagnosis of a failed FlashInfer JIT build from its output."""
    for pattern, diagnosis in MISLEADING:
        if re.search(pattern, text):
            return diagnosis
    return None
