"""GPU arch names and the rules that match them: the one parser of arch strings in epforge, and the one rule
set for which SASS/PTX covers which target. Every module and module_util that reads an arch goes here.

Spellings (one rule everywhere):
- An arch is (major, minor, suffix): suffix '' (generic), 'a' (arch-specific: runs on exactly that compute
  capability) or 'f' (family-specific, CUDA >= 12.9: runs on later minors of the same major).
- Accepted: dotted '12.0', '12.0a', '12.0f' (nvidia-smi's compute_cap, TORCH_CUDA_ARCH_LIST) and the
  compiler names 'sm_120', 'sm_120a', 'compute_120', 'lto_120' (nvcc, cuobjdump, torch.cuda.get_arch_list).
- Refused: a bare number ('120', '12'). No tool prints one, and it is ambiguous ('120' could be 12.0 or a
  typo for 1.20); epforge answers with the spellings above rather than guess.
- Arch *lists* handed to build tools (TORCH_CUDA_ARCH_LIST, FLASHINFER_CUDA_ARCH_LIST, the stack's
  arch_list) take the dotted spelling only, with torch's optional '+PTX': that is what those tools read.
- The SASS name of a target, as cuobjdump prints it: 12.0 -> sm_120, 12.0a -> sm_120a, and 12.0f -> sm_120
  (cuobjdump prints a family cubin as plain sm_XY: tests/fixtures/cuobjdump/sm120f.o.txt).

Unit-tested in tests/unit/test_arch.py.
"""

from __future__ import annotations

import re

ARCH_DOTTED_RE = re.compile(r"^(\d+)\.(\d)([af]?)$")
ARCH_SM_RE = re.compile(r"^(?:sm_|compute_|lto_)(\d+)(\d)([af]?)$")
PTX_SUFFIX = "+PTX"
SPELLINGS = "such as 9.0, 12.0, 12.0a, 12.0f or sm_120"

Arch = tuple[int, int, str]


class ArchError(ValueError):
    """Text that is no GPU arch, or an arch list a build tool would not read."""


def parse_arch(text) -> Arch | None:
    """'12.0' / '12.0a' / '12.0f' / 'sm_120' / 'sm_120a' / 'compute_90' -> (12, 0, '') etc.; None if no
    arch (a bare number such as '120' included)."""
    value = str(text).strip().lower()
    for regex in (ARCH_DOTTED_RE, ARCH_SM_RE):
        match = regex.match(value)
        if match:
            return int(match.group(1)), int(match.group(2)), match.group(3)
    return None


def require_arch(text) -> Arch:
    """parse_arch, or ArchError naming the accepted spellings."""
    arch = parse_arch(text)
    if arch is None:
        raise ArchError(f"'{text}' is not a GPU arch {SPELLINGS}")
    return arch


def sm_name(arch: Arch) -> str:
    """(12, 0, 'a') -> 'sm_120a'."""
    return f"sm_{arch[0]}{arch[1]}{arch[2]}"


def dotted(arch: Arch) -> str:
    """(12, 0, 'a') -> '12.0a' (the TORCH_CUDA_ARCH_LIST spelling)."""
    return f"{arch[0]}.{arch[1]}{arch[2]}"


def base_arch(text) -> str | None:
    """'12.0a' / '12.0f' / '12.0' / 'sm_120' -> '12.0' (the compute capability); None for text that is no
    arch."""
    arch = parse_arch(text)
    return None if arch is None else f"{arch[0]}.{arch[1]}"


def sass_name(text) -> str:
    """The SASS name cuobjdump prints for a target: 12.0 -> sm_120, 12.0a -> sm_120a, 12.0f -> sm_120."""
    major, minor, suffix = require_arch(str(text).strip().removesuffix(PTX_SUFFIX))
    return sm_name((major, minor, "a" if suffix == "a" else ""))


def arch_sort_key(name: str) -> tuple[int, int, str]:
    return parse_arch(name) or (0, 0, name)


def arch_list(archs) -> list[str]:
    """A build tool's arch list: '9.0;12.0', '9.0 12.0' or ['12.0', '9.0'] -> ['9.0', '12.0'] (sorted,
    unique; dotted spelling, torch's '+PTX' kept). ArchError names the first entry a build tool would not
    read, or an empty list."""
    if isinstance(archs, str):
        items = re.split(r"[;,\s]+", archs.strip())
    else:
        items = [str(a).strip() for a in archs or []]
    items = [a for a in items if a]
    if not items:
        raise ArchError("the arch list is empty: name at least one target such as 12.0")
    for item in items:
        arch = parse_arch(item.removesuffix(PTX_SUFFIX))
        if arch is None or not ARCH_DOTTED_RE.match(item.removesuffix(PTX_SUFFIX)):
            hint = f" (write it {dotted(arch)})" if arch else ""
            raise ArchError(f"'{item}' is not an arch list entry such as 9.0, 12.0, 12.0a or 12.0f{hint}")
    return sorted(set(items), key=lambda item: (arch_sort_key(item.removesuffix(PTX_SUFFIX)), item))


def torch_arch_list(archs) -> str:
    """The TORCH_CUDA_ARCH_LIST value for these targets ('9.0;12.0')."""
    return ";".join(arch_list(archs))


# ---------------------------------------------------------------------------------------------------------
# Coverage: which compiled code serves which target.


def sass_satisfies(found: Arch, required: Arch) -> bool:
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


def ptx_satisfies(found: Arch, required: Arch) -> bool:
    """Can PTX for `found` be JIT-compiled for the required arch at load time?

    Generic PTX compiles forward to any later arch; arch/family-specific PTX only for its own base.
    """
    if found[2] == "":
        return found[:2] <= required[:2] and required[2] != "a"
    return found[:2] == required[:2] and (found[2] == required[2] or required[2] == "")


def check_required(sass: list[str], ptx: list[str], required: list[str], accept_ptx: bool = False) -> dict:
    """Which required archs a binary's SASS/PTX names cover, and by what.

    Returns {'missing': [...], 'covered': {req: 'sass sm_120' | 'ptx sm_90'}}; required names are kept as
    the caller spelled them ('+PTX' ignored). PTX counts only when accept_ptx is true. ArchError for a
    required name that is no arch.
    """
    covered: dict[str, str] = {}
    missing: list[str] = []
    sass_t = [(name, parse_arch(name)) for name in sass]
    ptx_t = [(name, parse_arch(name)) for name in ptx]
    for req in required:
        req_t = require_arch(str(req).strip().removesuffix(PTX_SUFFIX))
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


def torch_arch_missing(torch_archs, targets) -> list[str]:
    """Targets that torch.cuda.get_arch_list() (['sm_90', 'sm_120']) does not cover: torch's prebuilt
    kernels serve a target by its base, so an 'a'/'f' target is covered by its sm_XY."""
    have = {parse_arch(name)[:2] for name in torch_archs or [] if parse_arch(name)}
    return [t for t in arch_list(targets) if require_arch(t.removesuffix(PTX_SUFFIX))[:2] not in have]


def nvcc_missing_archs(gpu_code: list[str], gpu_arch: list[str], required: list[str]) -> list[str]:
    """Required archs (any spelling) whose base is absent from nvcc's --list-gpu-code (sm_XY) or
    --list-gpu-arch (compute_XY) output: nvcc lists sm_120 / compute_120, not sm_120a."""
    have_code = {parse_arch(x)[:2] for x in gpu_code if parse_arch(x)}
    have_arch = {parse_arch(x)[:2] for x in gpu_arch if parse_arch(x)}
    missing = []
    for req in required:
        req_t = parse_arch(req)
        if req_t is None or req_t[:2] not in have_code or req_t[:2] not in have_arch:
            missing.append(req)
    return missing
