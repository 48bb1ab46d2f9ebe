"""Distribution names (plugins/module_utils/pynames.py): PEP 503 normalisation and the name a requirement
names, whatever follows it (extras, specifiers, a URL, a marker, spaces or none)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    dist_info_name_version,
    normalize,
    requirement_key,
    requirement_name,
    wheel_name_version,
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


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("fastapi-0.115.0-py3-none-any.whl", ("fastapi", "0.115.0")),
        ("/w/sgl_deep_ep-0.1.2.post1-cp310-abi3-linux_x86_64.whl", ("sgl-deep-ep", "0.1.2.post1")),
        ("deep_ep-1.2.1+9af0e0d-1-cp311-cp311-linux_x86_64.whl", ("deep-ep", "1.2.1+9af0e0d")),  # a build tag
        ("fastapi-0.115.0.tar.gz", None),
        ("fastapi-0.115.0.whl", None),
    ],
)
def test_wheel_name_version(filename, expected):
    assert wheel_name_version(filename) == expected


@pytest.mark.parametrize(
    ("dirname", "expected"),
    [
        ("Flashinfer_Python-0.7.2.dist-info", ("flashinfer-python", "0.7.2")),
        (
            "/env/lib/python3.11/site-packages/nvidia_nccl_cu13-2.28.9.dist-info/",
            ("nvidia-nccl-cu13", "2.28.9"),
        ),
        ("torch-2.11.0+cu130.dist-info", ("torch", "2.11.0+cu130")),
        ("torch.egg-info", None),
        ("torch.dist-info", None),
    ],
)
def test_dist_info_name_version(dirname, expected):
    assert dist_info_name_version(dirname) == expected


# A second reader of a wheel or .dist-info name: the suffix sliced off, the rest split on '-'.
SECOND_READER = re.compile(
    r"""len\(\s*["']\.dist-info["']\s*\)|\.dist-info\$|\.whl["']\)\]|\[:\s*-4\s*\]\.split"""
)


def test_no_second_reader_of_wheel_or_dist_info_names():
    found = []
    for path in sorted([*ROOT.glob("plugins/**/*.py"), *ROOT.glob("library/*.py")]):
        if path.name == "pynames.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SECOND_READER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "read the names with module_utils/pynames.py:\n" + "\n".join(found)
