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
    "fabric": {"available": False, "reason": "nvidia-smi not found on PATH"},
}


# The lent H200's driver and the newest CUDA it supports: a sample host's unless a test names others.
DRIVER = "580.159.04"
DRIVER_CUDA = "13.0"


def gpu_facts(arch="12.0", count=8, interconnect="pcie", *, driver=DRIVER, cuda=DRIVER_CUDA) -> dict:
    """count GPUs of one arch (str such as '12.0'), their interconnect, the driver and its CUDA."""
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


def fabric_of(**spec) -> dict:
    """The fabric facts pci_fabric.gather_fabric reads from a WRITTEN sysfs tree (tests/fixtures/fabric/
    sysfs_trees.py two_switch_host: 8 GPUs behind two PCIe switches on two sockets; spec overrides its
    defaults: ACS redirect on, IOMMU translating, GPU 5 trained at x8, BAR1 256 MiB)."""
    import sys  # noqa: PLC0415 - only for the samples that need a tree
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "fabric"))
    from sysfs_trees import two_switch_host, written_tree  # noqa: PLC0415

    from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import gather_fabric  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as scratch:
        root, gpus, lspci = written_tree(Path(scratch), two_switch_host(**spec))
        return gather_fabric(str(root), gpus, lspci)


def sm120_box(**spec) -> dict:
    """8 SM120 GPUs over PCIe with the fabric facts of fabric_of(**spec)."""
    return {**gpu_facts("12.0", 8, "pcie"), "fabric": fabric_of(**spec)}
