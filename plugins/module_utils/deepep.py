"""DeepEP build rules shared by the deepep modules: which source trees the role can build, the build
environment DeepEP's setup.py expects (NVSHMEM, arch list, PTX flags), and the key that decides a rebuild.

Pure functions: no Ansible, no subprocess. Each rule names the DeepEP v1.x setup.py behaviour it mirrors.
"""

from __future__ import annotations

import os
import re

from ansible_collections.epforge.ep.plugins.module_utils.arch import ArchError, torch_arch_list
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.nvidia import parse_topology

# Bumped when the role's build recipe changes in a way that changes the wheel: every cached wheel rebuilds.
RECIPE_VERSION = 1

SUPPORTED = "setup_v1"
UNSUPPORTED_V2 = "jit_v2"
UNKNOWN = "unknown"


class DeepEPError(ValueError):
    """Bad input for a DeepEP build: the message names the problem and the remedy."""


def classify_source(setup_py: str | None, files: set[str]) -> tuple[str, str]:
    """Which build system a DeepEP tree uses: (kind, reason).

    kind is SUPPORTED for the v1.x layout (setup.py building the CUDAExtension `deep_ep_cpp` with
    NVSHMEM_DIR / TORCH_CUDA_ARCH_LIST handling), UNSUPPORTED_V2 for the V2 code line on `main` (JIT
    kernels, NCCL device API: `deep_ep/utils/find_pkgs.py`, `EP_JIT_*` variables, CMakeLists.txt), and
    UNKNOWN for anything else (not a DeepEP tree, or a layout this role has not been taught).
    """
    if setup_py is None:
        return UNKNOWN, "no setup.py at the top of the source tree"
    v2_markers = [m for m in ("EP_JIT_CACHE_DIR", "find_pkgs", "EP_NCCL_ROOT_DIR") if m in setup_py]
    if v2_markers or "deep_ep/utils/find_pkgs.py" in files:
        return UNSUPPORTED_V2, (
            "setup.py is DeepEP's V2 build (JIT kernels over NCCL; markers: "
            + ", ".join(v2_markers or ["deep_ep/utils/find_pkgs.py"])
            + ")"
        )
    has_ext = re.search(r"name\s*=\s*['\"]deep_ep_cpp['\"]", setup_py) is not None
    has_nvshmem = "NVSHMEM_DIR" in setup_py
    has_arch = "TORCH_CUDA_ARCH_LIST" in setup_py
    if has_ext and has_nvshmem and has_arch:
        return SUPPORTED, "setup.py builds CUDAExtension deep_ep_cpp (DeepEP v1.x interface)"
    missing = [
        n
        for n, ok in (
            ("CUDAExtension deep_ep_cpp", has_ext),
            ("NVSHMEM_DIR", has_nvshmem),
            ("TORCH_CUDA_ARCH_LIST", has_arch),
        )
        if not ok
    ]
    return UNKNOWN, "setup.py lacks the DeepEP v1.x interface: no " + ", ".join(missing)


def setup_py_version(setup_py: str) -> str | None:
    """The public version setup.py writes (`version='1.2.1' + revision`), or None."""
    match = re.search(r"version\s*=\s*['\"]([0-9][^'\"]*)['\"]", setup_py)
    return match.group(1) if match else None


def build_flags(
    arch_list: list[str], *, nvshmem: bool, disable_sm90_features: bool, aggressive_ptx: bool
) -> dict:
    """The environment DeepEP v1.x's setup.py reads, after applying its own rules, or DeepEPError.

    setup.py rules mirrored here (v1.2.1):
    - DISABLE_SM90_FEATURES=1 asserts that NVSHMEM is disabled (no internode / low-latency kernels).
    - any TORCH_CUDA_ARCH_LIST other than exactly "9.0" asserts DISABLE_AGGRESSIVE_PTX_INSTRS=1
      (`.L1::no_allocate` loads are only safe on sm_90); unset, the variable defaults to 1.
    """
    try:
        archs = torch_arch_list(arch_list)
    except ArchError as exc:
        raise DeepEPError(f"{exc}: set deepep_arch_list (or the stack's arch_list), e.g. ['12.0']") from exc
    if disable_sm90_features and nvshmem:
        raise DeepEPError(
            "DISABLE_SM90_FEATURES cannot be combined with NVSHMEM: DeepEP's setup.py asserts that "
            "NVSHMEM is "
            "disabled when SM90 features are off. Remedy: set deepep_disable_sm90_features: false, or "
            "deepep_nvshmem: false (no internode or low-latency kernels)"
        )
    if aggressive_ptx and archs != "9.0":
        raise DeepEPError(
            f"aggressive PTX instructions need TORCH_CUDA_ARCH_LIST exactly '9.0', not '{archs}': DeepEP's "
            "setup.py forces DISABLE_AGGRESSIVE_PTX_INSTRS=1 for any other list. Remedy: "
            "deepep_aggressive_ptx: false, or build for 9.0 alone"
        )
    env = {
        "TORCH_CUDA_ARCH_LIST": archs,
        "DISABLE_AGGRESSIVE_PTX_INSTRS": "0" if aggressive_ptx else "1",
        "DISABLE_SM90_FEATURES": "1" if disable_sm90_features else "0",
    }
    return env


def build_key(inputs: dict) -> str:
    """The cache key of a build: the digest of its inputs (plugins/module_utils/digests.py), first 16 hex
    digits."""
    return digest({"recipe": RECIPE_VERSION, **inputs})[:16]


def include_path(cuda_home: str, site_packages: list[str], extra: list[str]) -> list[str]:
    """Header folders a DeepEP build needs on CPATH besides CUDA_HOME/include.

    CUDA 13 moved the CCCL headers (cuda/std, cub, thrust) to include/cccl, and host compiles of
    NVSHMEM headers need them; a CUDA_HOME assembled from wheels lacks cuSPARSE/cuBLAS headers that
    torch's ATen/cuda headers include: the venv's nvidia/cu13/include (or cu12) has them.
    """
    paths = list(extra)
    cccl = os.path.join(cuda_home, "include", "cccl")
    if os.path.isdir(cccl):
        paths.append(cccl)
    for site in site_packages:
        for sub in ("cu13", "cu12"):
            inc = os.path.join(site, "nvidia", sub, "include")
            if os.path.isdir(inc):
                paths.append(inc)
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return seen


def find_header(name: str, folders: list[str]) -> str | None:
    """The first folder/name that exists, or None."""
    for folder in folders:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def non_nvlink_pairs(topo_text: str, num_gpus: int) -> list[tuple[str, str, str]] | None:
    """GPU pairs among GPU0..GPU(num_gpus-1) that `nvidia-smi topo -m` does not show as NVLink (NV#).

    [] when all pairs are NVLink, None when the matrix cannot be read (then nothing is concluded).
    Uses the project's topology parser (plugins/module_utils/nvidia.py).
    """
    try:
        topology = parse_topology(topo_text)
    except ValueError:
        return None
    gpus = topology["gpus"][:num_gpus]
    if len(gpus) < num_gpus:
        return None
    bad = []
    for i, first in enumerate(gpus):
        for second in gpus[i + 1 :]:
            link = topology["matrix"][first][second]
            if not link.startswith("NV"):
                bad.append((first, second, link))
    return bad


def classify_build_log(text: str) -> str | None:
    """A one-line diagnosis of a failed DeepEP build from its log, when a known signature matches."""
    rules = [
        (
            r"infiniband/mlx5dv\.h: No such file",
            "mlx5dv.h missing: install libibverbs-dev (Debian/Ubuntu) or "
            "point deepep_extra_include_dirs at a folder holding "
            "infiniband/",
        ),
        (
            r"cuda/std/\S+: No such file|thrust/\S+: No such file|cub/\S+: No such file",
            "CCCL headers not found: CUDA 13 keeps them in CUDA_HOME/include/cccl",
        ),
        (
            r"cusparse\.h: No such file|cublas_v2\.h: No such file|cublas\.h: No such file",
            "CUDA library headers missing: install the nvidia-cu* header wheels into the env "
            "or a full toolkit",
        ),
        (
            r"The detected CUDA version \([\d.]+\) mismatches the version that was used to compile PyTorch",
            "nvcc's CUDA version differs from torch's: use the stack's toolkit",
        ),
        (r"Unsupported gpu architecture|nvcc fatal\s*:\s*Unsupported", "nvcc does not know a target arch"),
        (r"libnvshmem_host\.so not found|NVSHMEM directory does not exist", "NVSHMEM not found"),
        (r"No module named 'torch'", "torch is not installed in the build env"),
        (r"invalid command 'bdist_wheel'|No module named 'wheel'", "the env lacks the `wheel` package"),
        (r"Killed signal terminated program|out of memory", "the compiler ran out of memory: lower MAX_JOBS"),
    ]
    for pattern, diagnosis in rules:
        if re.search(pattern, text):
            return diagnosis
    return None


# ---------------------------------------------------------------- the stack's prebuilt wheel

# Bumped when what a prebuilt verdict stamp holds, or the rule that makes it, changes: every stamp is re-read.
PREBUILT_STAMP_VERSION = 1
# The binaries of a wheel whose SASS decides (DeepEP's extension; host-only helpers are left out).
PREBUILT_BINARY_PATTERNS = ["*.so"]


def prebuilt_wheel_glob(requirement: str) -> str:
    """The file pattern pip download gives a requirement: 'sgl-deep-ep==0.1.2.post1' ->
    'sgl_deep_ep-0.1.2.post1-*.whl' (any version when the requirement pins none)."""
    name = re.sub(r"[=<>!~;\[].*$", "", requirement, flags=re.DOTALL).strip()
    pinned = re.search(r"==\s*([^;\s]+)", requirement)
    return f"{re.sub(r'[-.]', '_', name)}-{pinned.group(1) if pinned else '*'}-*.whl"


def prebuilt_stamp_key(wheel_sha256: str, required_archs: list[str]) -> str:
    """What a prebuilt wheel's arch verdict depends on: the wheel's bytes and the requested archs (in order:
    the verdict message lists them so), plus the reading rule."""
    return digest(
        {
            "stamp": PREBUILT_STAMP_VERSION,
            "wheel_sha256": wheel_sha256,
            "required_archs": [str(a) for a in required_archs],
            "patterns": PREBUILT_BINARY_PATTERNS,
        }
    )


def prebuilt_verdict(requirement: str, archs: list[str], reading: dict, error: str) -> tuple[bool, str]:
    """(usable, one-line verdict) of a prebuilt wheel from its reading {'sass_archs', 'missing_archs',
    'files'} or the error that prevented it."""
    text = f"{requirement} carries SASS {', '.join(reading.get('sass_archs', []))}"
    missing = reading.get("missing_archs", [])
    if missing:
        text += f" and lacks {', '.join(missing)} needed for arch list {';'.join(str(a) for a in archs)}"
    if error:
        text += f" (cuobjdump failed: {error})"
    elif not reading.get("files"):
        text += " (no binary with device code in the wheel)"
    return (not error and bool(reading.get("files")) and not missing), text
