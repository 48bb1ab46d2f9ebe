"""Module server_jit_check: the server's first JIT step, run in provision as a real unprivileged account with
the environment module sglang_server gives the server (issue 34 item 1: every real launch died on ninja).

A real account (useradd, removed afterwards), a real env directory whose bin/ holds the python and ninja, the
real module process; the env holds no FlashInfer, so the module resolves the JIT tools on the server's PATH.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from moduletools import run_module_in

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "server_jit_check.py"
# pip's ninja wheel in the test venv (the test extra), as in a real SGLang env
NINJA = shutil.which("ninja", path=str(Path(sys.executable).parent))


@pytest.fixture
def account():
    """A system account with its own home under /tmp (reachable by it), removed afterwards."""
    name = f"epforge-jit-{os.getpid()}"
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))
    subprocess.run(
        ["useradd", "--system", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name], check=True
    )
    entry = pwd.getpwnam(name)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    yield entry
    subprocess.run(["userdel", name], check=False)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def env_dir():
    """An env whose bin/ holds a python (the system's, runnable by any account) and ninja (pip's wheel)."""
    top = Path(tempfile.mkdtemp(prefix="epforge-jit-env-", dir="/tmp"))
    (top / "bin").mkdir()
    (top / "bin" / "python").symlink_to("/usr/bin/python3")
    shutil.copy2(NINJA, top / "bin" / "ninja")
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def args(account, env_dir: Path, tmp_path: Path, **over) -> dict:
    return {
        "python": str(env_dir / "bin" / "python"),
        "user": account.pw_name,
        "cuda_home": "",
        "toolkit_fact": str(tmp_path / "no-toolkit.fact"),
        "env": {"HF_HUB_OFFLINE": "1"},
        "gpu": True,
        "stamp_path": str(tmp_path / "stamp.json"),
        "log_path": str(tmp_path / "log" / "server-jit.log"),
        **over,
    }


def test_the_tools_resolve_on_the_servers_path_as_its_account_then_a_rerun_is_stamped(
    account, env_dir, tmp_path
):
    first = run_module_in(tmp_path, MODULE, args(account, env_dir, tmp_path))
    assert first["_rc"] == 0, first["_stdout"][-2000:]
    # The env's own bin/ comes first: its ninja is the one a server's JIT would run.
    assert first["tools"]["ninja"] == str(env_dir / "bin" / "ninja")
    assert first["env"]["HOME"] == account.pw_dir and first["env"]["USER"] == account.pw_name
    assert first["env"]["PATH"].split(":")[0] == str(env_dir / "bin")
    assert first["check"] == "run" and first["kernel"] == ""
    assert oct(Path(tmp_path / "stamp.json").stat().st_mode & 0o777) == "0o600"
    again = run_module_in(tmp_path, MODULE, args(account, env_dir, tmp_path))
    assert again["_rc"] == 0 and again["check"] == "stamp" and again["changed"] is False, again


def test_a_server_path_without_ninja_fails_in_provision_as_the_server_would(account, env_dir, tmp_path):
    """What killed every launch on the H200: a PATH without the env's bin/ (here a request env that sets its
    own PATH). The module fails before any launch, with the server's own error and the remedy."""
    failed = run_module_in(
        tmp_path, MODULE, args(account, env_dir, tmp_path, env={"PATH": "/usr/sbin:/sbin"})
    )
    assert failed["_rc"] != 0 and failed.get("failed"), failed["_stdout"][-2000:]
    assert "No such file or directory: 'ninja'" in failed["log_tail"]
    assert "first JIT build failed as " + account.pw_name in failed["msg"]
    assert failed["rc"] == 1 and failed["cmd"][0] == str(env_dir / "bin" / "python")
    assert not (tmp_path / "stamp.json").exists()  # a failure is never stamped
