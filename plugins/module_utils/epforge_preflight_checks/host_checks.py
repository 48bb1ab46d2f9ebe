"""module epforge_preflight_checks' first job: the host checks in their fixed order - GPU presence, driver,
driver CUDA, GPU arch, the ML env's python, free disk - each a row {name, status, detail}, and which GPU steps
this host can run. Pure functions of the GPU facts and the module's options (the python is started early and
answers later: start_python). Unit-tested in tests/unit/test_preflight_checks.py."""

from __future__ import annotations

import json
import os
import shutil
import sys

from ansible_collections.epforge.ep.plugins.module_utils.arch import base_arch
from ansible_collections.epforge.ep.plugins.module_utils.known_issues import (
    stack_summary,
    version_tuple,
)
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv
from ansible_collections.epforge.ep.plugins.module_utils.payloads import python_layout
from ansible_collections.epforge.ep.plugins.module_utils.process import start_bounded

GIB = 1024**3
# What a run that builds nothing writes under the state dir at most: server and client logs, results, the
# FlashInfer and DeepGEMM JIT caches of one model (GiB).
RUN_NEED_GIB = 2


def _check(name: str, status: str, detail: str) -> dict:
    return {"name": name, "ok": status != "failed", "status": status, "detail": detail}


def _ver(parts: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in parts)


def no_gpu_checks(gpu_facts: dict, require_gpu: bool) -> list[dict]:
    """Without a usable GPU: gpu fails (require_gpu) or is skipped; the other GPU checks are skipped."""
    reason = gpu_facts.get("reason") or "no GPU facts (nvidia_gpu_facts did not report a GPU)"
    if require_gpu:
        gpu = _check(
            "gpu",
            "failed",
            f"no usable GPU: {reason}. epforge_require_gpu is true: run on a host whose NVIDIA "
            "driver and nvidia-smi work, or set epforge_require_gpu: false for build-only work",
        )
    else:
        gpu = _check(
            "gpu",
            "skipped",
            f"skipped: no usable GPU ({reason}); build-only work goes on, GPU-runtime steps are skipped",
        )
    skip = f"skipped: no usable GPU ({reason})"
    return [
        gpu,
        _check("driver", "skipped", skip),
        _check("driver_cuda", "skipped", skip),
        _check("gpu_arch", "skipped", skip),
    ]


def gpu_present_check(gpu_facts: dict, gpus: list) -> dict:
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")})
    return _check(
        "gpu",
        "passed",
        f"{gpu_facts.get('gpu_count')} GPU(s): {', '.join(names) or 'unnamed'}; "
        f"interconnect {gpu_facts.get('interconnect', 'unknown')}",
    )


def _floor_check(
    name: str,
    have: str,
    need: str,
    *,
    unknown: tuple[str, str],
    too_old: str,
    ok: str,
    parts: int | None = None,
) -> dict:
    """A version floor: have >= need (on their first `parts` components); an unreadable have gives unknown."""
    if not version_tuple(have):
        return _check(name, *unknown)
    if version_tuple(have)[:parts] < version_tuple(need)[:parts]:
        return _check(name, "failed", too_old)
    return _check(name, "passed", ok)


def driver_check(summary: dict, gpu_facts: dict) -> dict:
    """Check driver: the driver version is at least the stack's driver.min_version."""
    name = summary["name"]
    driver = str(gpu_facts.get("driver_version") or "")
    need = str(summary["driver_min"] or "")
    if not version_tuple(need):
        return _check("driver", "skipped", f"skipped: stack {name} names no driver.min_version")
    unreadable = (
        f"the NVIDIA driver version could not be read (got '{driver}'): check that "
        "`nvidia-smi --query-gpu=driver_version --format=csv` works"
    )
    too_old = (
        f"NVIDIA driver {driver} is older than {need}, the minimum for stack {name} "
        f"(CUDA {summary['cuda']}): upgrade the driver to >= {need}, or choose a stack "
        "for an older CUDA (epforge_stack)"
    )
    ok = f"NVIDIA driver {driver} >= {need} (stack {name})"
    return _floor_check("driver", driver, need, unknown=("failed", unreadable), too_old=too_old, ok=ok)


def driver_cuda_check(summary: dict, gpu_facts: dict) -> dict:
    """Check driver_cuda: the CUDA version the driver supports covers the stack's CUDA (MAJOR.MINOR)."""
    name = summary["name"]
    need = str(summary["driver_min"] or "")
    cuda = str(summary["cuda"] or "")
    driver_cuda = str(gpu_facts.get("cuda_driver_version") or "")
    unreported = "skipped: the driver reported no CUDA version (driver.min_version applies)"
    too_old = (
        f"the NVIDIA driver supports CUDA up to {driver_cuda} but stack {name} needs "
        f"CUDA {cuda}: upgrade the driver (>= {need or 'the CUDA ' + cuda + ' minimum'})"
        " or choose a stack for an older CUDA (epforge_stack)"
    )
    ok = f"driver supports CUDA {driver_cuda} >= {cuda} (stack {name})"
    return _floor_check(
        "driver_cuda", driver_cuda, cuda, unknown=("skipped", unreported), too_old=too_old, ok=ok, parts=2
    )


def gpu_arch_check(summary: dict, gpus: list) -> dict:
    """Check gpu_arch: every GPU's arch is in the stack's arch_list."""
    name = summary["name"]
    allowed = set(summary["archs"])
    wrong = []
    for gpu in gpus:
        if not isinstance(gpu, dict):
            continue
        arch = base_arch(gpu.get("arch") or gpu.get("compute_capability") or "")
        if arch not in allowed:
            wrong.append(f"GPU {gpu.get('index')} ({gpu.get('name')}) is arch {arch or 'unknown'}")
    if not gpus:
        wrong.append("the GPU facts list no GPUs")
    if wrong:
        return _check(
            "gpu_arch",
            "failed",
            f"{'; '.join(wrong)} but stack {name} builds for "
            f"{', '.join(summary['arch_list'])} only: choose a stack whose arch_list covers "
            f"these GPUs, or add their arch to arch_list in stacks/{name}.yml",
        )
    archs = sorted(
        {base_arch(g.get("arch") or g.get("compute_capability") or "") for g in gpus if isinstance(g, dict)}
    )
    return _check(
        "gpu_arch",
        "passed",
        f"every GPU's arch ({', '.join(archs)}) is in the stack's arch_list "
        f"({', '.join(summary['arch_list'])})",
    )


def gpu_checks(stack: dict, gpu_facts: dict, require_gpu: bool) -> list[dict]:
    """The checks that read only the GPU facts and the stack: gpu, driver, driver_cuda, gpu_arch."""
    summary = stack_summary(stack)
    gpu_facts = gpu_facts or {}
    available = bool(gpu_facts.get("available")) and int(gpu_facts.get("gpu_count") or 0) > 0
    if not available:
        return no_gpu_checks(gpu_facts, require_gpu)
    gpus = gpu_facts.get("gpus") or []
    return [
        gpu_present_check(gpu_facts, gpus),
        driver_check(summary, gpu_facts),
        driver_cuda_check(summary, gpu_facts),
        gpu_arch_check(summary, gpus),
    ]


def python_check(stack: dict, python: str, version: str, error: str = "") -> dict:
    """Check python: the host's interpreter is at least the stack's python.min_version."""
    summary = stack_summary(stack)
    need = str(summary["python_min"] or "")
    label = python or "this module's Python"
    if not version_tuple(version):
        return _check(
            "python",
            "failed",
            f"cannot run {label} ({error or 'no version printed'}): install Python >= "
            f"{need or '3'} (Debian/Ubuntu: apt-get install python3 python3-venv) or set "
            "preflight_python to an interpreter's path",
        )
    if need and version_tuple(version) < version_tuple(need):
        return _check(
            "python",
            "failed",
            f"{label} is Python {version}, older than {need} that stack {summary['name']} needs: "
            f"install Python >= {need} and set preflight_python to it",
        )
    return _check("python", "passed", f"{label} {version} >= {need or 'any'} (stack {summary['name']})")


def existing_parent(path: str) -> str:
    """The path itself or its nearest existing parent."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_need_gib(min_free_gib: float, builds: bool) -> float:
    """GiB the run needs free: min_free_gib for a building run, at most RUN_NEED_GIB for one that is not."""
    return min_free_gib if builds else min(min_free_gib, RUN_NEED_GIB)


def disk_check(
    path: str, min_free_gib: float, free_bytes: int | None, measured_on: str, builds: bool = True
) -> dict:
    """Check disk: free space on the filesystem of path (measured on its nearest existing parent); the
    status is this run's (builds: site.yml's and provision.yml's need, else a run's).

    A passing detail holds no free-byte count, so the result is stable across reruns, and says what the
    space is enough for whatever the run: a run that builds and one that does not then write the same fact
    (on the lent H200, 2026-12-04, provision.yml after serve.yml rewrote it each time: changed=1).
    """
    if not min_free_gib or min_free_gib <= 0:
        return _check("disk", "skipped", "skipped: preflight_min_free_gib is 0")
    need = disk_need_gib(min_free_gib, builds)
    what = (
        "toolkit, torch and SGLang environments, extension builds"
        if builds
        else "a run that builds nothing: logs, results, JIT caches"
    )
    # The passing detail names only the requested path: the measured parent changes once later roles
    # create the directory, and the fact must not change with it.
    where = path if measured_on == path else f"{path} (measured on {measured_on})"
    if free_bytes is None:
        return _check(
            "disk", "failed", f"cannot read free space of {where}: check that the path is reachable"
        )
    if free_bytes < need * GIB:
        return _check(
            "disk",
            "failed",
            f"{free_bytes / GIB:.1f} GiB free on {where}, {need:g} GiB needed ({what}): free space there, "
            "point preflight_disk_path at a larger filesystem, or lower preflight_min_free_gib",
        )
    build_need = disk_need_gib(min_free_gib, True)
    if free_bytes >= build_need * GIB:
        return _check("disk", "passed", f"at least {build_need:g} GiB free on {path}")
    run_need = disk_need_gib(min_free_gib, False)
    return _check(
        "disk",
        "passed",
        f"at least {run_need:g} GiB free on {path}: enough for a run that builds nothing, not for one that "
        f"builds ({build_need:g} GiB)",
    )


def gpu_runtime(gpu_facts: dict, steps: list[str]) -> dict:
    """Whether GPU-runtime steps can run here, and which are skipped otherwise."""
    gpu_facts = gpu_facts or {}
    count = int(gpu_facts.get("gpu_count") or 0)
    if gpu_facts.get("available") and count > 0:
        return {"available": True, "reason": f"{count} usable GPU(s)", "skipped_steps": []}
    reason = gpu_facts.get("reason") or "no GPU facts (nvidia_gpu_facts did not report a GPU)"
    return {"available": False, "reason": f"no usable GPU: {reason}", "skipped_steps": list(steps)}


def start_python(python: str):
    """Start finding an interpreter's (version, error) and return a function that gives it: the module does
    its other work while the interpreter starts (a pyenv shim costs a tenth of a second or more).
    '' python means the one running this module."""
    own = ".".join(str(part) for part in sys.version_info[:3]), ""
    if not python:
        return lambda: own
    path = python if os.path.isabs(python) else shutil.which(python)
    if not path or not os.access(path, os.X_OK):
        missing = "", f"'{python}' not found on PATH"
        return lambda: missing
    if os.path.realpath(path) == os.path.realpath(sys.executable):
        # The binary running this module (usual: python3 on PATH is the host's interpreter): its version
        # without a second interpreter start.
        return lambda: own
    pending = start_bounded(payload_argv(path, python_layout)[0], timeout=30)

    def answer() -> tuple[str, str]:
        proc = pending.result()
        if proc.rc != 0:
            return "", f"rc {proc.rc}: {proc.err.strip()[-300:]}"
        try:
            layout = json.loads(proc.out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return "", f"no version in its answer: {proc.out.strip()[-300:]}"
        return "{major}.{minor}.{micro}".format(**layout), ""

    return answer


def run_python(python: str) -> tuple[str, str]:
    """(version, error) of an interpreter; '' python means the one running this module."""
    return start_python(python)()


def host_checks(params: dict, gpu_facts: dict, python_version=None) -> dict:
    """The host checks in their fixed order (gpu, driver, driver_cuda, gpu_arch, python, disk);
    python_version: the answer of start_python, started earlier (else it runs here)."""
    stack = params["stack"]
    checks = gpu_checks(stack, gpu_facts, params["require_gpu"])
    version, error = (python_version or start_python(params["python"] or ""))()
    checks.append(python_check(stack, params["python"] or "", version, error))
    measured_on = existing_parent(params["disk_path"])
    try:
        stat = os.statvfs(measured_on)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        free = None
    checks.append(
        disk_check(params["disk_path"], params["min_free_gib"], free, measured_on, params["builds"])
    )
    return {
        "checks": checks,
        "failed_checks": [c["name"] for c in checks if c["status"] == "failed"],
        "python_version": version,
        "gpu_runtime": gpu_runtime(gpu_facts, params["gpu_steps"]),
    }
