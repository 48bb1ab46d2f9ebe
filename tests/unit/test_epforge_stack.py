"""Coherence rules of stacks (plugins/module_utils/stack.py) on the real stack files and on broken copies."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.module_utils.stack import check_stack, version_tuple


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"{name}.yml").read_text())["epforge_stack_spec"]


@pytest.mark.parametrize("name", ["cu128", "cu130", "cu130-torch211"])
def test_shipped_stacks_are_coherent(name):
    assert check_stack(load(name), name) == []


def test_torch_cuda_major_must_match_toolkit():
    spec = load("cu128")
    spec["torch"]["version"], spec["torch"]["cuda"] = "2.14.1", "13.0"
    spec["sglang"]["requires_torch"] = "2.14.1"
    problems = check_stack(spec, "cu128")
    assert any("built for CUDA 13.0 but the toolkit is CUDA 12.8" in p for p in problems)


def test_sglang_pinning_another_torch_is_refused():
    spec = load("cu130")
    spec["sglang"]["requires_torch"] = "2.13.0"
    (problem,) = check_stack(spec, "cu130")
    assert "pins torch==2.13.0" in problem and "torch 2.14.1" in problem


def test_default_index_torch_build_must_match_declared_cuda():
    spec = load("cu130")
    spec["torch"]["version"] = "2.9.1"  # default PyPI build is cu128
    spec["sglang"]["requires_torch"] = "2.9.1"
    problems = check_stack(spec, "cu130")
    assert any("default PyPI index is built for CUDA 12.8" in p for p in problems)
    spec["torch"]["index_url"] = "https://example.invalid/whl/cu130"
    assert check_stack(spec, "cu130") == []


def test_cu130_torch211_holds_the_sglang_0516_pins():
    """Pins from sglang 0.5.16's METADATA (see the stack header); overrides for a transformers 5.17 image."""
    spec = load("cu130-torch211")
    assert (spec["torch"]["version"], spec["torch"]["cuda"]) == ("2.11.0", "13.0")
    assert spec["sglang"]["version"] == "0.5.16"
    assert spec["sglang"]["kernel_package"] == "sglang-kernel==0.4.5"
    assert spec["flashinfer"]["version"] == "0.6.14"
    assert (spec["deepep"]["ref"], spec["deepep"]["commit"]) == ("v1.2.1", "9af0e0d")
    assert "prebuilt_wheel" not in spec["deepep"]  # 0.5.16 does not depend on sgl-deep-ep
    assert (spec["nvshmem"]["package"], spec["nvshmem"]["version"]) == ("nvidia-nvshmem-cu13", "3.4.5")
    assert spec["sglang"]["package_overrides"] == ["transformers==5.12.1", "tokenizers==0.22.2"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["transformers>=5.12"], "is not an exact pin NAME==VERSION"),
        (["Torch==2.14.1"], "would replace the stack's torch"),
        ("transformers==5.12.1", "must be a list"),
    ],
)
def test_package_overrides_must_be_exact_pins_and_never_torch(overrides, expected):
    spec = load("cu130-torch211")
    spec["sglang"]["package_overrides"] = overrides
    (problem,) = check_stack(spec, "cu130-torch211")
    assert expected in problem


def test_pypi_method_refused_for_cuda12():
    spec = load("cu128")
    spec["cuda"]["default_method"] = "pypi"
    (problem,) = check_stack(spec, "cu128")
    assert "CUDA 12 wheels carry no nvcc" in problem


def test_nvshmem_package_must_match_cuda_major():
    spec = load("cu130")
    spec["nvshmem"]["package"] = "nvidia-nvshmem-cu12"
    (problem,) = check_stack(spec, "cu130")
    assert "use nvidia-nvshmem-cu13" in problem


def test_arch_rules():
    spec = load("cu128")
    spec["arch_list"] = ["12.0f", "banana", "10.3"]
    problems = check_stack(spec, "cu128")
    assert any("12.0f (family target) needs CUDA >= 12.9" in p for p in problems)
    assert any("'banana' is not an arch" in p for p in problems)
    assert any("arch 10.3 needs CUDA >= 12.9" in p for p in problems)
    spec["arch_list"] = []
    assert any("arch_list is empty" in p for p in check_stack(spec, "cu128"))


def test_missing_keys_and_name_mismatch():
    spec = copy.deepcopy(load("cu130"))
    del spec["torch"]
    assert check_stack(spec, "cu130") == ["stack key 'torch' is missing or not a dict"]
    assert check_stack(load("cu130"), "cu999")[0].startswith("stack file for 'cu999' declares name 'cu130'")
    assert check_stack("not a mapping") != []


def test_version_and_arch_helpers():
    assert version_tuple("570.124.06") == (570, 124, 6)
    assert version_tuple("12.8") == (12, 8)
    assert version_tuple("0.5.10.post1") == (0, 5, 10)
