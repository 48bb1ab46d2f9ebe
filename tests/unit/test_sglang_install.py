"""Module sglang_install end to end with real pip, offline: a fresh venv, tiny local wheels (an `sglang` that
imports like SGLang does for the module's proof: sglang.__version__ and sglang.srt.server_args), the server
profile (SGLang with --no-deps, then the server deps pinned to SGLang's own Requires-Dist), the stamp and a
rerun that changes nothing; and the failure when the installed SGLang imports as another version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from moduletools import run_module
from test_pip_guard import make_wheel


def sglang_wheel(wheels: Path, version: str, imports_as: str, requires: list[str]) -> Path:
    members = {
        "sglang/__init__.py": f"__version__ = {imports_as!r}\n",
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
    }
    return make_wheel(wheels, "sglang", version, requires, members=members)


def venv_python(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def module_args(tmp_path: Path, python: Path, wheels: Path, version: str) -> dict:
    return {
        "python": str(python),
        "version": version,
        "profile": "server",
        "server_deps": ["fakedep"],
        "pip_args": ["--no-index", "--find-links", str(wheels)],
        "log_path": str(tmp_path / "log" / "sglang.log"),
        "stamp_path": str(tmp_path / "state" / "sglang.json"),
    }


def installed(python: Path, name: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_server_profile_pins_server_deps_from_sglang_metadata_and_reruns_as_a_noop(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.99", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    make_wheel(wheels, "fakedep", "2.0")  # the newest: only SGLang's pin keeps pip from taking it
    python = venv_python(tmp_path / "env")
    args = module_args(tmp_path, python, wheels, "0.5.99")

    rc, first = run_module("sglang_install", args, timeout=300)
    assert rc == 0, first.get("msg")
    assert first["changed"] is True and first["version"] == "0.5.99" and first["mode"] == "server"
    assert installed(python, "fakedep") == "1.0"
    assert any("fakedep==1.0" in action for action in first["actions"]), first["actions"]
    assert first["actions"][-1] == "verified: import sglang 0.5.99 and sglang.srt.server_args"
    assert (tmp_path / "state" / "sglang.json").exists()
    assert "sglang_install" in (tmp_path / "log" / "sglang.log").read_text()

    rc, again = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and again["changed"] is False and again["actions"] == []


def test_an_sglang_that_imports_as_another_version_fails_and_writes_no_stamp(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.1", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    python = venv_python(tmp_path / "env")

    rc, res = run_module("sglang_install", module_args(tmp_path, python, wheels, "0.5.99"), timeout=300)
    assert rc != 0 and res["msg"].startswith("SGLang imports as 0.5.1, not 0.5.99"), res
    assert res["cmd"][0] == str(python) and res["rc"] == 0
    assert not (tmp_path / "state" / "sglang.json").exists()
