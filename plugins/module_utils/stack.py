"""Coherence rules for a stack (a version set in stacks/*.yml).

A stack is refused when its parts cannot work together, with one message per conflict that names both
sides and the remedy. Pure functions: used by library/epforge_stack_check.py and unit-tested directly.
"""

from __future__ import annotations

import re

from ansible_collections.epforge.ep.plugins.module_utils.arch import (
    PTX_SUFFIX,
    ArchError,
    arch_list,
    base_arch,
    require_arch,
)
from ansible_collections.epforge.ep.plugins.module_utils.pynames import normalize
from ansible_collections.epforge.ep.plugins.module_utils.version import (
    version_tuple,  # also imported from here by modules
)

REQUIRED_KEYS = {
    "name": str,
    "cuda": dict,
    "driver": dict,
    "python": dict,
    "torch": dict,
    "sglang": dict,
    "flashinfer": dict,
    "deepep": dict,
    "nvshmem": dict,
    "arch_list": list,
}

# CUDA build of the *default* PyPI wheel per torch minor (read from PyPI: the CUDA version of the nvidia-*
# runtime packages each default torch wheel depends on).
# Used only when a stack installs torch from the default index (torch.index_url empty).
TORCH_PYPI_DEFAULT_CUDA = {
    "2.8": "12.8",
    "2.9": "12.8",
    "2.10": "12.8",
    "2.11": "13.0",
    "2.12": "13.0",
    "2.13": "13.0",
    "2.14": "13.0",
    "2.15": "13.2",
}

# First CUDA release whose nvcc knows each SASS target (NVIDIA CUDA release notes).
ARCH_MIN_CUDA = {
    "7.5": (10, 0),
    "8.0": (11, 0),
    "8.6": (11, 1),
    "8.9": (11, 8),
    "9.0": (11, 8),
    "10.0": (12, 8),
    "10.3": (12, 9),
    "12.0": (12, 8),
    "12.1": (12, 9),
}
# Family-specific targets ("12.0f") arrived with CUDA 12.9.
FAMILY_SUFFIX_MIN_CUDA = (12, 9)
VALID_METHODS = ("nvidia_repo", "pypi", "existing")
# A package override is an exact pin (name==version): it replaces what SGLang's own metadata pins.
PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
# Distributions an override must never name: they are the stack's torch build (pip would swap it).
TORCH_DISTS = ("torch",)


def _missing_keys(spec: dict) -> list[str]:
    return [
        f"stack key '{key}' is missing or not a {kind.__name__}"
        for key, kind in REQUIRED_KEYS.items()
        if not isinstance(spec.get(key), kind)
    ]


def _check_torch(torch: dict, cuda: str, cuda_t: tuple[int, ...]) -> list[str]:
    """torch's CUDA build agrees with the toolkit's major version and with the index it comes from."""
    problems = []
    if not version_tuple(str(torch.get("version") or "")):
        problems.append("torch.version (the torch release the stack installs, e.g. 2.14.1) is missing")
    torch_cuda_t = version_tuple(torch.get("cuda", ""))
    if not torch_cuda_t:
        problems.append("torch.cuda (the CUDA version torch is built for) is missing")
    elif torch_cuda_t[0] != cuda_t[0]:
        problems.append(
            f"torch {torch.get('version')} is built for CUDA {torch.get('cuda')} but the toolkit is CUDA "
            f"{cuda}: torch refuses to build extensions with an nvcc of another major version; pick a torch "
            f"build for CUDA {cuda_t[0]}.x or a CUDA {torch_cuda_t[0]}.x toolkit"
        )
    if not torch.get("index_url"):
        minor = ".".join(str(p) for p in version_tuple(torch.get("version", ""))[:2])
        default_cuda = TORCH_PYPI_DEFAULT_CUDA.get(minor)
        if default_cuda and version_tuple(default_cuda)[:2] != torch_cuda_t[:2]:
            problems.append(
                f"torch {torch.get('version')} from the default PyPI index is built for CUDA {default_cuda}, "
                f"not torch.cuda {torch.get('cuda')}: set torch.index_url to a CUDA "
                f"{torch.get('cuda')} index or correct torch.cuda"
            )
    return problems


def _check_sglang(sglang: dict, torch: dict) -> list[str]:
    """sglang's own torch pin matches the stack's torch; its package overrides are exact pins."""
    problems = []
    if (
        sglang.get("requires_torch")
        and torch.get("version")
        and str(sglang["requires_torch"]) != str(torch["version"])
    ):
        problems.append(
            f"sglang {sglang.get('version')} pins torch=={sglang['requires_torch']} but the stack installs "
            f"torch {torch.get('version')}: pip would replace torch; choose a matching pair"
        )
    return problems + check_package_overrides(sglang)


def _check_cuda_method(method: str, cuda: str, cuda_t: tuple[int, ...]) -> list[str]:
    problems = []
    if method not in VALID_METHODS:
        problems.append(f"cuda.default_method '{method}' is not one of {', '.join(VALID_METHODS)}")
    if method == "pypi" and cuda_t[0] < 13:
        problems.append(
            f"cuda.default_method pypi cannot install CUDA {cuda}: NVIDIA's CUDA 12 wheels carry no nvcc; "
            "use nvidia_repo (or existing)"
        )
    return problems


def _check_nvshmem(nvshmem: dict, cuda: str, cuda_t: tuple[int, ...]) -> list[str]:
    nvshmem_pkg = str(nvshmem.get("package", ""))
    nv_match = re.search(r"-cu(\d+)$", nvshmem_pkg)
    if nv_match and int(nv_match.group(1)) != cuda_t[0]:
        return [
            f"nvshmem package {nvshmem_pkg} is for CUDA {nv_match.group(1)} but the toolkit is CUDA {cuda}: "
            f"use nvidia-nvshmem-cu{cuda_t[0]}"
        ]
    return []


def _check_arch(arch, cuda: str, cuda_t: tuple[int, ...]) -> list[str]:
    """One arch_list entry: a valid SASS target (no +PTX) that the stack's CUDA can compile for."""
    try:
        arch_list([arch])
    except ArchError as exc:
        return [f"stack arch_list: {exc}"]
    if str(arch).endswith(PTX_SUFFIX):
        return [f"stack arch_list entry '{arch}': the stack names SASS targets, without '+PTX'"]
    problems = []
    base, suffix = base_arch(arch), require_arch(arch)[2]
    need = ARCH_MIN_CUDA.get(base)
    if need and cuda_t[:2] < need:
        problems.append(f"arch {arch} needs CUDA >= {need[0]}.{need[1]} but the stack's CUDA is {cuda}")
    if suffix == "f" and cuda_t[:2] < FAMILY_SUFFIX_MIN_CUDA:
        problems.append(f"arch {arch} (family target) needs CUDA >= 12.9; use {base}a with CUDA {cuda}")
    return problems


def _check_arch_list(archs: list, cuda: str, cuda_t: tuple[int, ...]) -> list[str]:
    problems = []
    if not archs:
        problems.append("arch_list is empty: name the GPU archs the binaries must carry (e.g. '12.0')")
    for arch in archs:
        problems += _check_arch(arch, cuda, cuda_t)
    return problems


def check_stack(spec: dict, expected_name: str | None = None) -> list[str]:
    """Return every conflict found in the stack; an empty list means coherent."""
    if not isinstance(spec, dict):
        return ["the stack file does not define epforge_stack_spec as a mapping"]
    problems = _missing_keys(spec)
    if problems:
        return problems

    name = spec["name"]
    if expected_name is not None and name != expected_name:
        problems.append(f"stack file for '{expected_name}' declares name '{name}': rename one so they agree")

    cuda = str(spec["cuda"].get("version", ""))
    cuda_t = version_tuple(cuda)
    if len(cuda_t) < 2:
        problems.append(f"cuda.version '{cuda}' is not MAJOR.MINOR")
        return problems

    problems += _check_torch(spec["torch"], cuda, cuda_t)
    problems += _check_sglang(spec["sglang"], spec["torch"])
    problems += _check_cuda_method(spec["cuda"].get("default_method", ""), cuda, cuda_t)
    problems += _check_nvshmem(spec["nvshmem"], cuda, cuda_t)
    if not version_tuple(spec["driver"].get("min_version", "")):
        problems.append("driver.min_version is missing")
    return problems + _check_arch_list(spec["arch_list"], cuda, cuda_t)


def check_package_overrides(sglang: dict) -> list[str]:
    """sglang.package_overrides: a list of exact pins, none of them torch (the stack's torch stays)."""
    overrides = sglang.get("package_overrides", [])
    if not isinstance(overrides, list):
        return ["sglang.package_overrides must be a list of pins such as transformers==5.12.1"]
    problems = []
    for req in overrides:
        match = PIN_RE.match(str(req).strip())
        if not match:
            problems.append(
                f"sglang.package_overrides entry '{req}' is not an exact pin NAME==VERSION: an override "
                "replaces SGLang's own pin, so it must name one version"
            )
        elif normalize(match.group(1)) in TORCH_DISTS:
            problems.append(
                f"sglang.package_overrides entry '{req}' would replace the stack's torch: change "
                "torch.version (and sglang.requires_torch) instead"
            )
    return problems


def summarize(spec: dict) -> dict:
    """The few fields worth printing and recording about a stack."""
    return {
        "name": spec.get("name"),
        "cuda": spec.get("cuda", {}).get("version"),
        "torch": spec.get("torch", {}).get("version"),
        "sglang": spec.get("sglang", {}).get("version"),
        "flashinfer": spec.get("flashinfer", {}).get("version"),
        "arch_list": list(spec.get("arch_list", [])),
    }
