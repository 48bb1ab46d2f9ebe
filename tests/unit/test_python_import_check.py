"""python_import_check: real interpreters importing real modules, each failure kind classified, and the
'no usable GPU' case told apart from a broken install by the host's evidence."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import python_import_check as pic
from moduletools import run_module

ROOT = Path(__file__).resolve().parents[2]
NO_GPU_HERE = not os.path.exists("/dev/nvidiactl")


def run(args: dict, check: bool = False) -> tuple[int, dict]:
    return run_module("python_import_check", args, check=check, timeout=300)


@pytest.fixture
def pkgs(tmp_path) -> Path:
    """Importable stand-ins for the failure kinds seen in real packages."""
    (tmp_path / "needs_gpu.py").write_text(
        # sgl-deep-ep's prerequisite check raises exactly this on a host without a usable GPU.
        'raise ImportError("The NVIDIA driver does not expose a usable CUDA device")\n'
    )
    (tmp_path / "bad_symbol.py").write_text(
        'raise ImportError("/venv/deep_ep_cpp.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")\n'
    )
    (tmp_path / "needs_dep.py").write_text("import a_dependency_that_is_absent\n")
    (tmp_path / "aborts.py").write_text("import os\nos.abort()\n")
    (tmp_path / "fine.py").write_text('__version__ = "1.2.3"\n')
    return tmp_path


def test_ok_reports_file_and_version(pkgs):
    rc, res = run({"python": sys.executable, "name": "fine", "environment": {"PYTHONPATH": str(pkgs)}})
    assert rc == 0 and res["status"] == "ok" and res["version"] == "1.2.3"
    assert res["file"] == str(pkgs / "fine.py") and res["name"] == "fine" and not res["changed"]


def test_missing_module_is_missing(pkgs):
    rc, res = run({"python": sys.executable, "name": "deep_ep_that_is_not_installed"})
    assert rc != 0 and res["status"] == "missing" and "not installed in this env" in res["msg"]
    assert "ModuleNotFoundError" in res["error"]


def test_missing_dependency_is_broken_not_missing(pkgs):
    rc, res = run({"python": sys.executable, "name": "needs_dep", "environment": {"PYTHONPATH": str(pkgs)}})
    assert rc != 0 and res["status"] == "broken" and "a_dependency_that_is_absent" in res["error"]


def test_undefined_symbol_is_broken(pkgs):
    rc, res = run({"python": sys.executable, "name": "bad_symbol", "environment": {"PYTHONPATH": str(pkgs)}})
    assert rc != 0 and res["status"] == "broken" and "undefined symbol" in res["msg"]


@pytest.mark.skipif(not NO_GPU_HERE, reason="GPU: this host has an NVIDIA device (the test is about none)")
def test_no_gpu_is_told_apart_and_allowed_or_not(pkgs):
    env = {"PYTHONPATH": str(pkgs)}
    rc, res = run({"python": sys.executable, "name": "needs_gpu", "environment": env})
    assert rc == 0 and res["status"] == "no_gpu" and res["gpu"]["dev_nvidiactl"] is False
    rc, res = run({"python": sys.executable, "name": "needs_gpu", "environment": env, "allow_no_gpu": False})
    assert rc != 0 and res["status"] == "no_gpu" and "needs a usable CUDA device" in res["msg"]


def test_no_gpu_signature_on_a_gpu_host_is_broken():
    result = {
        "ok": False,
        "error_type": "ImportError",
        "error": "ImportError: The NVIDIA driver does not expose a usable CUDA device",
        "gpu": {"dev_nvidiactl": True, "torch_cuda_available": True},
    }
    assert pic.classify(result, "deep_ep") == "broken"
    result["gpu"] = {"dev_nvidiactl": False}
    assert pic.classify(result, "deep_ep") == "no_gpu"
    result["gpu"] = {"dev_nvidiactl": True, "torch_cuda_available": False}
    assert pic.classify(result, "deep_ep") == "no_gpu"


def test_interpreter_killed_by_import_is_broken(pkgs):
    rc, res = run({"python": sys.executable, "name": "aborts", "environment": {"PYTHONPATH": str(pkgs)}})
    assert rc != 0 and res["status"] == "broken" and "killed the interpreter" in res["msg"]


def test_absent_interpreter(tmp_path):
    rc, res = run({"python": str(tmp_path / "bin" / "python"), "name": "json"})
    assert rc != 0 and "does not exist or is not executable" in res["msg"]


def test_argv_survives_quotes(pkgs):
    # The motivating story: shell quoting ate an import check. A name with quotes is passed verbatim.
    rc, res = run({"python": sys.executable, "name": "x'; import os; os._exit(0); '"})
    assert rc != 0 and res["status"] in ("missing", "broken") and "x'; import os" in res["name"]
