"""Test of the installed epforge canary: import always; run the kernels only where a GPU exists.

Run with the venv's interpreter: `python extensions/canary/test_canary.py` (exit 0 = pass), or with pytest.
"""

from __future__ import annotations

import sys

import epforge_canary
import torch


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def run_canary() -> str:
    """Import the canary; where a GPU exists, run both kernels and check them. Returns what was proved."""
    path = epforge_canary.extension_path()
    check(path.endswith(".so"), f"unexpected extension path {path}")
    if not torch.cuda.is_available():
        return f"imported {path}; no usable GPU here, kernel not run"
    a = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    b = torch.full_like(a, 0.5)
    out = epforge_canary.add(a, b)
    torch.cuda.synchronize()
    check(torch.equal(out, a + b), "canary add kernel gave a wrong result")
    major, minor = torch.cuda.get_device_capability(0)
    arch = epforge_canary.compiled_arch(0)
    check(arch // 10 <= major * 10 + minor, f"ran code for arch {arch} on a {major}.{minor} device")
    return (
        f"kernel ran on {torch.cuda.get_device_name(0)} ({major}.{minor}) with code for __CUDA_ARCH__={arch}"
    )


def test_canary() -> None:
    print(run_canary())


if __name__ == "__main__":
    try:
        print(run_canary())
    except AssertionError as err:
        print(f"FAIL: {err}")
        sys.exit(1)
