"""CUDA toolchain facts as pure functions: nvcc and cuobjdump output parsers, the layout of a CUDA_HOME
assembled from NVIDIA's PyPI wheels and the libcuda link stub. Input stamps: plugins/module_utils/digests.py;
arch names and which SASS/PTX covers which target: plugins/module_utils/arch.py.

Used by library/cuda_binary_archs.py, library/cuda_toolkit_pypi.py and library/cuda_toolkit_verify.py;
unit-tested in tests/unit/test_cuda_binary_archs.py and tests/unit/test_cuda_toolkit.py.
"""

from __future__ import annotations

import re

from ansible_collections.epforge.ep.plugins.module_utils.arch import ARCH_SM_RE, arch_sort_key, parse_arch

# ---------------------------------------------------------------------------------------------------------
# nvcc output

NVCC_RELEASE_RE = re.compile(r"release\s+(\d+)\.(\d+),\s*V(\d+(?:\.\d+)*)")


def parse_nvcc_release(text: str) -> tuple[str, str] | None:
    """`nvcc --version` output -> ('13.0', '13.0.88'); None when no release line is found."""
    match = NVCC_RELEASE_RE.search(text or "")
    if not match:
        return None
    return f"{match.group(1)}.{match.group(2)}", match.group(3)


def parse_gpu_list(text: str) -> list[str]:
    """`nvcc --list-gpu-code` / `--list-gpu-arch` output -> ['sm_75', ..., 'sm_120'] (order kept)."""
    seen: list[str] = []
    for token in (text or "").split():
        if ARCH_SM_RE.match(token) and token not in seen:
            seen.append(token)
    return seen


# ---------------------------------------------------------------------------------------------------------
# cuobjdump output

CUOBJDUMP_ENTRY_RE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+(\S+?)\s*$")
# The member name's arch token ('k.1.sm_120a.cubin'); epforge_arch decides whether it is an arch.
CUOBJDUMP_ARCH_RE = re.compile(r"\.((?:sm|compute)_\w+)\.(?:cubin|ptx)$")
NO_DEVICE_CODE = "does not contain device code"


def parse_cuobjdump_listing(text: str) -> dict:
    """Output of `cuobjdump -lelf -lptx FILE` -> {'sass': [...], 'ptx': [...], 'entries': n,
    'host_only': bool}. Arch names are sorted and unique, as cuobjdump prints them ('sm_120a'); the 'info'
    lines ("No PTX file found ...") are ignored; archive members are merged."""
    sass: set[str] = set()
    ptx: set[str] = set()
    entries = 0
    for line in (text or "").splitlines():
        match = CUOBJDUMP_ENTRY_RE.match(line.strip())
        if not match:
            continue
        entries += 1
        arch_match = CUOBJDUMP_ARCH_RE.search(match.group(2))
        if not arch_match or parse_arch(arch_match.group(1)) is None:
            continue
        arch = arch_match.group(1).replace("compute_", "sm_")
        (sass if match.group(1) == "ELF" else ptx).add(arch)
    return {
        "sass": sorted(sass, key=arch_sort_key),
        "ptx": sorted(ptx, key=arch_sort_key),
        "entries": entries,
        "host_only": entries == 0 and NO_DEVICE_CODE in (text or ""),
    }


# ---------------------------------------------------------------------------------------------------------
# CUDA_HOME assembled from NVIDIA's PyPI wheels

# Links a full toolkit has and the wheels lack: lib64 (torch's cpp_extension and CMake look there),
# targets/<arch>-linux (nvcc.profile's $(_TARGET_DIR_) include/lib paths), unversioned .so names (-lcudart).
TOOLKIT_LINKS = {
    "lib64": "lib",
    "targets/x86_64-linux/include": "../../include",
    "targets/x86_64-linux/lib": "../../lib",
}


def wheel_root(cuda_major: int) -> str:
    """Where CUDA 13 wheels put the toolkit inside site-packages: 'nvidia/cu13'."""
    return f"nvidia/cu{cuda_major}"


def unversioned_links(lib_names: list[str]) -> dict[str, str]:
    """['libcudart.so.13', 'libnvvm.so.4', 'libfoo.a'] -> {'libcudart.so': 'libcudart.so.13', ...}."""
    links = {}
    for name in sorted(lib_names):
        match = re.match(r"^(lib[\w+-]+\.so)\.\d+$", name)
        if match and match.group(1) not in lib_names:
            links.setdefault(match.group(1), name)
    return links


def package_name(requirement: str) -> str:
    """'nvidia-cuda-nvcc==13.0.88' -> 'nvidia-cuda-nvcc' (PEP 503 normalised)."""
    name = re.split(r"[<>=!~;\[\s]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------------------
# libcuda link stub (a full toolkit ships lib64/stubs/libcuda.so; the wheels do not)

DRIVER_API_RE = re.compile(r"\bCUresult\s+(cu[A-Z][A-Za-z0-9_]*)\s*\(")
# CUDA_ERROR_STUB_LIBRARY: what NVIDIA's own stub returns if it is ever loaded at run time.
STUB_RESULT = 34


def driver_api_symbols(preprocessed: str) -> list[str]:
    """Names of driver API functions declared in preprocessed cuda.h text (`gcc -E`)."""
    return sorted(set(DRIVER_API_RE.findall(preprocessed or "")))


def stub_source(symbols: list[str]) -> str:
    """C source of a link-only libcuda: every driver API symbol, each returning CUDA_ERROR_STUB_LIBRARY."""
    lines = [
        "/* Link-only stub of libcuda.so.1 generated by epforge (roles/cuda_toolkit) from this",
        " * toolkit's cuda.h. Linkers resolve -lcuda against it; at run time the NVIDIA driver's",
        " * libcuda.so.1 is used. */",
    ]
    lines += [f"int {name}(void) {{ return {STUB_RESULT}; }}" for name in symbols]
    return "\n".join(lines) + "\n"
