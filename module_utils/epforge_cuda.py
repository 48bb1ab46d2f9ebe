"""CUDA toolchain facts as pure functions: nvcc and cuobjdump output parsers, GPU arch names and the rule
that decides whether a binary's SASS/PTX covers a required arch, the layout of a CUDA_HOME assembled from
NVIDIA's PyPI wheels, the libcuda link stub, and input stamps.

Used by library/cuda_binary_archs.py, library/cuda_toolkit_pypi.py and library/cuda_toolkit_verify.py;
unit-tested in tests/unit/test_cuda_binary_archs.py and tests/unit/test_cuda_toolkit.py.
"""

from __future__ import annotations

import hashlib
import json
import re

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
        if re.fullmatch(r"(sm|compute|lto)_\d+[af]?", token) and token not in seen:
            seen.append(token)
    return seen


# ---------------------------------------------------------------------------------------------------------
# Arch names. An arch is (major, minor, suffix): suffix '' (generic), 'a' (arch-specific: runs on exactly
# that compute capability) or 'f' (family-specific: runs on later minors of the same major).

ARCH_DOTTED_RE = re.compile(r"^(\d+)\.(\d)([af]?)$")
ARCH_SM_RE = re.compile(r"^(?:sm_|compute_|lto_)(\d+)(\d)([af]?)$")


def parse_arch(text: str) -> tuple[int, int, str] | None:
    """'12.0' / '12.0a' / 'sm_120' / 'sm_120a' / 'compute_90' -> (12, 0, '') etc.; None if no arch.

    A bare number ('120', '12') is refused: it is ambiguous."""
    value = str(text).strip().lower()
    for regex in (ARCH_DOTTED_RE, ARCH_SM_RE):
        match = regex.match(value)
        if match:
            return int(match.group(1)), int(match.group(2)), match.group(3)
    return None


def sm_name(arch: tuple[int, int, str]) -> str:
    """(12, 0, 'a') -> 'sm_120a' (the name cuobjdump prints)."""
    return f"sm_{arch[0]}{arch[1]}{arch[2]}"


def dotted(arch: tuple[int, int, str]) -> str:
    """(12, 0, 'a') -> '12.0a' (the TORCH_CUDA_ARCH_LIST spelling)."""
    return f"{arch[0]}.{arch[1]}{arch[2]}"


def arch_sort_key(name: str) -> tuple[int, int, str]:
    return parse_arch(name) or (0, 0, name)


def sass_satisfies(found: tuple[int, int, str], required: tuple[int, int, str]) -> bool:
    """Does a SASS cubin for `found` cover the required arch?

    - required X.Y  (a GPU of compute capability X.Y must run it): sm_XY or sm_XYa. An sm_XYa cubin uses
      arch-specific instructions of exactly CC X.Y, so it runs on that GPU. (cuobjdump prints a family build,
      sm_XYf, as plain sm_XY: both are covered by the first case.)
    - required X.Ya (arch-specific kernels wanted, e.g. FlashInfer's 12.0a JIT cache): only sm_XYa.
    - required X.Yf (the family build): sm_XY (how cuobjdump shows both generic and family cubins).
    The base (X.Y) must match exactly: this check does not rely on SASS minor-version compatibility.
    """
    if found[:2] != required[:2]:
        return False
    if required[2] == "":
        return found[2] in ("", "a", "f")
    if required[2] == "a":
        return found[2] == "a"
    return found[2] in ("", "f")


def ptx_satisfies(found: tuple[int, int, str], required: tuple[int, int, str]) -> bool:
    """Can PTX for `found` be JIT-compiled for the required arch at load time?

    Generic PTX compiles forward to any later arch; arch/family-specific PTX only for its own base.
    """
    if found[2] == "":
        return found[:2] <= required[:2] and required[2] != "a"
    return found[:2] == required[:2] and (found[2] == required[2] or required[2] == "")


# ---------------------------------------------------------------------------------------------------------
# cuobjdump output

CUOBJDUMP_ENTRY_RE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+(\S+?)\s*$")
CUOBJDUMP_ARCH_RE = re.compile(r"\.((?:sm|compute)_\d+[af]?)\.(?:cubin|ptx)$")
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
        if not arch_match:
            continue
        arch = arch_match.group(1).replace("compute_", "sm_")
        (sass if match.group(1) == "ELF" else ptx).add(arch)
    return {
        "sass": sorted(sass, key=arch_sort_key),
        "ptx": sorted(ptx, key=arch_sort_key),
        "entries": entries,
        "host_only": entries == 0 and NO_DEVICE_CODE in (text or ""),
    }


def check_required(sass: list[str], ptx: list[str], required: list[str], accept_ptx: bool = False) -> dict:
    """Which required archs a file covers, and by what.

    Returns {'missing': [...], 'covered': {req: 'sass sm_120' | 'ptx sm_90'}}; required names are kept as
    the caller spelled them. PTX counts only when accept_ptx is true.
    """
    covered: dict[str, str] = {}
    missing: list[str] = []
    sass_t = [(name, parse_arch(name)) for name in sass]
    ptx_t = [(name, parse_arch(name)) for name in ptx]
    for req in required:
        req_t = parse_arch(req)
        if req_t is None:
            raise ValueError(f"'{req}' is not a GPU arch (use 12.0, 12.0a or sm_120)")
        hit = next((name for name, t in sass_t if t and sass_satisfies(t, req_t)), None)
        if hit:
            covered[req] = f"sass {hit}"
            continue
        if accept_ptx:
            hit = next((name for name, t in ptx_t if t and ptx_satisfies(t, req_t)), None)
            if hit:
                covered[req] = f"ptx {hit}"
                continue
        missing.append(req)
    return {"missing": missing, "covered": covered}


# ---------------------------------------------------------------------------------------------------------
# The nvcc arch lists cover required archs by base: nvcc lists sm_120 / compute_120, not sm_120a.


def nvcc_missing_archs(gpu_code: list[str], gpu_arch: list[str], required: list[str]) -> list[str]:
    """Required archs (any spelling) whose base is absent from nvcc's --list-gpu-code (sm_XY) or
    --list-gpu-arch (compute_XY) output."""
    have_code = {parse_arch(x)[:2] for x in gpu_code if parse_arch(x)}
    have_arch = {parse_arch(x)[:2] for x in gpu_arch if parse_arch(x)}
    missing = []
    for req in required:
        req_t = parse_arch(req)
        if req_t is None or req_t[:2] not in have_code or req_t[:2] not in have_arch:
            missing.append(req)
    return missing


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


# ---------------------------------------------------------------------------------------------------------
# Stamps: the inputs that decide whether work is redone.


def stamp_of(inputs: dict) -> dict:
    """{'inputs': ..., 'digest': sha256 of the canonical JSON of inputs}."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return {"inputs": inputs, "digest": hashlib.sha256(canonical.encode()).hexdigest()}
