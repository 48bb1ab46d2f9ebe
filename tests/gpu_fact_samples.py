"""GPU facts in the schema of module nvidia_gpu_facts (ansible_facts.epforge_gpu_facts), for the tests of
what reads them (the known-issue rules, preflight). tests/unit/test_nvidia_gpu_facts.py checks that the
module reports NO_GPU (plus its topology keys) on a host without nvidia-smi: the samples keep its schema."""

from __future__ import annotations

GPU_NAMES = {"12.0": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "9.0": "NVIDIA H200"}

# A host without nvidia-smi, as nvidia_gpu_facts reports it.
NO_GPU = {
    "available": False,
    "reason": "nvidia-smi not found on PATH",
    "gpu_count": 0,
    "gpus": [],
    "driver_version": "",
    "cuda_driver_version": "",
    "interconnect": "none",
    "archs": [],
}


def gpu_facts(
    arch: str = "12.0",
    count: int = 8,
    interconnect: str = "pcie",
    *,
    driver: str = "580.159.04",
    cuda: str = "13.0",
) -> dict:
    """count GPUs of one arch; driver 580.159.04 with CUDA 13.0 as on the lent H200."""
    return {
        "available": True,
        "reason": "",
        "gpu_count": count,
        "gpus": [
            {"index": i, "name": GPU_NAMES.get(arch, f"GPU-{arch}"), "compute_capability": arch, "arch": arch}
            for i in range(count)
        ],
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "interconnect": interconnect,
        "archs": [arch],
    }
