"""epforge canary: a tiny CUDA extension proving that a toolchain builds kernels that load and run.

Importing works without a GPU (only the shared object is loaded); the functions need one.
"""

from __future__ import annotations

import torch

from epforge_canary import _C

__all__ = ["add", "compiled_arch", "extension_path"]


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b computed by the canary's CUDA kernel (float32 CUDA tensors of one shape)."""
    return _C.add(a, b)


def compiled_arch(device: int = 0) -> int:
    """__CUDA_ARCH__ of the canary code that ran on `device` (1200 = sm_120)."""
    return int(_C.compiled_arch(device))


def extension_path() -> str:
    """Path of the compiled shared object (what cuobjdump inspects)."""
    return _C.__file__
