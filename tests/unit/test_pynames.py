"""Distribution names (plugins/module_utils/pynames.py): PEP 503 normalisation and the name a requirement
names, whatever follows it (extras, specifiers, a URL, a marker, spaces or none)."""

from __future__ import annotations

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
    requirement_key,
    requirement_name,
)


@pytest.mark.parametrize(
    ("name", "normal"),
    [
        ("Flashinfer_Python", "flashinfer-python"),
        ("nvidia_cuda.NVCC", "nvidia-cuda-nvcc"),
        ("sgl-kernel", "sgl-kernel"),
        ("deep__ep", "deep-ep"),
        ("a-_.b", "a-b"),
        ("torch", "torch"),
        ("", ""),
    ],
)
def test_normalize_is_pep_503(name, normal):
    assert normalize(name) == normal


def test_wheel_and_dist_info_spellings_compare_equal_through_normalize():
    assert normalize("deep_ep") == normalize("deep-ep") == normalize("Deep.EP")
    assert normalize("sgl_deep_ep") != normalize("deep_ep")


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("torch==2.14.1+cu130", "torch"),
        ("sglang-kernel==0.4.10", "sglang-kernel"),
        ("deep_ep @ file:///wheels/deep_ep-1.2.1-cp311-linux_x86_64.whl", "deep_ep"),
        ("deep_ep@file:///wheels/deep_ep.whl", "deep_ep"),
        ("flashinfer_python[cu13]==0.7.2", "flashinfer_python"),
        ('pyzmq>=25; python_version >= "3.10"', "pyzmq"),
        ("pyzmq;python_version>='3.10'", "pyzmq"),
        ("nvidia-cuda-nvcc ~= 13.0", "nvidia-cuda-nvcc"),
        ("uvloop!=0.15", "uvloop"),
        ("  fastapi\t", "fastapi"),
        ("requests (>=2.0)", "requests"),  # an old-style Requires-Dist entry
        ("starlette", "starlette"),
        ("zope.interface<6", "zope.interface"),
        ("", ""),
        ("==1.0", ""),
        ("@file:///x.whl", ""),
    ],
)
def test_requirement_name_is_the_name_as_written(requirement, name):
    assert requirement_name(requirement) == name


def test_requirement_key_is_the_normalised_name():
    assert requirement_key("Deep_EP@file:///w/x.whl") == "deep-ep"
    assert requirement_key("nvidia_cuda.NVCC==13.0.88") == "nvidia-cuda-nvcc"
    assert requirement_key("Flashinfer_Python[cu13]>=0.7 ; extra == 'x'") == "flashinfer-python"
    assert requirement_key("==1.0") == ""
