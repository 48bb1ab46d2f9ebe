"""flashinfer: the sm_12x arch rule (module_utils/epforge_flashinfer.py) and the module flashinfer_arch_rule
against real nvcc --version outputs: a captured 13.0 one and a stand-in nvcc script printing a 12.8
release."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.epforge_flashinfer import (
    FlashInferArchError,
    classify_jit_error,
    flashinfer_arch_list,
    parse_nvcc_version,
)
from moduletools import run_module

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "flashinfer"


def run(args: dict) -> tuple[int, dict]:
    return run_module("flashinfer_arch_rule", args)


def fake_cuda(tmp_path: Path, release: str) -> Path:
    """A CUDA_HOME whose bin/nvcc prints `nvcc --version` in NVIDIA's format for the given release."""
    major, minor = release.split(".")
    text = (
        (FIX / "nvcc-13.0-version.txt")
        .read_text()
        .replace("release 13.0, V13.0.88", f"release {release}, V{major}.{minor}.93")
    )
    home = tmp_path / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    (home / "nvcc-version.txt").write_text(text)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat '{home / 'nvcc-version.txt'}'\n")
    nvcc.chmod(0o755)
    return home


def test_parse_real_nvcc_output():
    assert parse_nvcc_version((FIX / "nvcc-13.0-version.txt").read_text()) == (13, 0)
    assert parse_nvcc_version("garbage") is None


def test_rule_nvcc_13_keeps_12_0():
    assert flashinfer_arch_list(["12.0"], (13, 0)) == ("12.0", ["sm_120"])
    assert flashinfer_arch_list(["9.0", "12.0"], (12, 9)) == ("9.0 12.0", ["sm_90", "sm_120"])


def test_rule_nvcc_12_8_needs_12_0a():
    with pytest.raises(FlashInferArchError, match="sm75") as err:
        flashinfer_arch_list(["12.0"], (12, 8))
    assert "['12.0a']" in str(err.value) and ">= 12.9" in str(err.value)
    assert flashinfer_arch_list(["12.0a"], (12, 8)) == ("12.0a", ["sm_120a"])  # compute_120a,code=sm_120a
    with pytest.raises(FlashInferArchError, match=r"nvcc >= 12\.9"):
        flashinfer_arch_list(["12.1a"], (12, 8))
    with pytest.raises(FlashInferArchError, match=r"12\.0f"):
        flashinfer_arch_list(["12.0f"], (12, 8))


def test_rule_old_nvcc_and_bad_entries():
    with pytest.raises(FlashInferArchError, match=r"CUDA >= 12\.8"):
        flashinfer_arch_list(["12.0a"], (12, 4))
    with pytest.raises(FlashInferArchError, match="cannot compile for sm_100"):
        flashinfer_arch_list(["10.0"], (12, 6))
    with pytest.raises(FlashInferArchError):
        flashinfer_arch_list(["sm_120"], (13, 0))
    with pytest.raises(FlashInferArchError, match="empty"):
        flashinfer_arch_list([], (13, 0))


def test_jit_error_diagnosis():
    assert "misleading" in classify_jit_error("RuntimeError: FlashInfer requires GPUs with sm75 or higher")
    assert "link stub" in classify_jit_error("/usr/bin/ld: cannot find -lcuda: No such file or directory")
    assert classify_jit_error("ok") is None


def test_module_with_a_12_8_nvcc_refuses_plain_12_0(tmp_path):
    home = fake_cuda(tmp_path, "12.8")
    rc, res = run({"cuda_home": str(home), "arch_list": ["12.0"]})
    assert rc != 0 and res["nvcc_version"] == "12.8" and "sm75" in res["msg"] and "12.0a" in res["msg"]
    rc, res = run({"cuda_home": str(home), "arch_list": ["12.0a"]})
    assert rc == 0 and res["arch_list"] == "12.0a" and res["sass_archs"] == ["sm_120a"]


def test_module_with_a_13_0_nvcc(tmp_path):
    rc, res = run({"cuda_home": str(fake_cuda(tmp_path, "13.0")), "arch_list": ["12.0"]})
    assert rc == 0 and res == {**res, "arch_list": "12.0", "nvcc_version": "13.0", "changed": False}


def test_module_without_nvcc(tmp_path):
    rc, res = run({"cuda_home": str(tmp_path), "arch_list": ["12.0"]})
    assert rc != 0 and "no nvcc" in res["msg"]


def test_module_with_the_real_nvcc(cuda13_home):
    rc, res = run({"cuda_home": str(cuda13_home), "arch_list": ["12.0"]})
    assert rc == 0 and res["nvcc_version"] == "13.0"
