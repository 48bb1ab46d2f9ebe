"""The installer owner (plugins/module_utils/installer.py) with a real pip and a real uv, offline: a
wheelhouse given as role wheelhouse gives it (PIP_NO_INDEX + PIP_FIND_LINKS, no pip config file) is
translated for uv, uv installs the same set pip does, a wheelhouse without uv's wheel falls back to pip
with the reason, and `installer: uv` fails there instead. Module env_install (role flashinfer's install)
over the same: check mode installs nothing, a caller's pip arguments mean pip, a failure names the command
and the log. uv's wheel comes from PyPI once into the test cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CACHE, cache_lock
from moduletools import run_module
from tiny_wheels import build_wheel

from ansible_collections.epforge.ep.plugins.module_utils.installer import (
    UV_OWN_FLAGS,
    UV_REQUIREMENT,
    Installer,
    InstallerUnavailable,
)
from ansible_collections.epforge.ep.plugins.module_utils.pip_settings import (
    UV_LIST_FLAGS,
    UV_SWITCHES,
    UV_VALUE_FLAGS,
)


@pytest.fixture(scope="module")
def uv_wheel() -> Path:
    """uv's wheel (UV_REQUIREMENT) in the test cache, downloaded by pip once."""
    target = CACHE / "uv-wheel"
    with cache_lock("uv-wheel"):
        found = sorted(target.glob("uv-*.whl"))
        if not found:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "-d",
                    str(target),
                    UV_REQUIREMENT,
                ],
                check=True,
                timeout=600,
            )
            found = sorted(target.glob("uv-*.whl"))
    return found[0]


def offline(monkeypatch, wheelhouse: Path) -> None:
    """pip's settings as role wheelhouse gives them, and nothing else of this machine's pip config."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    for name in [n for n in os.environ if n.startswith("UV_")]:
        monkeypatch.delenv(name)


def new_env(path: Path) -> str:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return str(path / "bin" / "python")


def installed(python: str) -> list[str]:
    out = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    build_wheel(house, "epf_app", "1.0", ("epf_lib>=2",))
    build_wheel(house, "epf_lib", "2.0")
    build_wheel(house, "epf_lib", "2.1")
    return house


def test_uv_installs_from_the_wheelhouse_alone_the_same_set_pip_installs(
    tmp_path, monkeypatch, wheelhouse, uv_wheel
):
    shutil.copy(uv_wheel, wheelhouse)
    offline(monkeypatch, wheelhouse)
    results = {}
    for choice in ("uv", "pip"):
        python = new_env(tmp_path / f"env-{choice}")
        installer = Installer(
            python, str(tmp_path / "install.log"), choice=choice, uv_home=str(tmp_path / "uv")
        )
        rc, _seconds, argv = installer.install(["epf_app"], header=f"test {choice}", timeout=300)
        assert rc == 0, (tmp_path / "install.log").read_text()[-2000:]
        assert installer.name == choice
        results[choice] = installed(python)
        if choice == "uv":
            assert argv[:3] == [str(tmp_path / "uv" / "bin" / "uv"), "pip", "install"]
            assert "--no-index" in argv and argv[argv.index("--find-links") + 1] == str(wheelhouse)
            assert "find-links, no-index" in installer.report()["why"]
    assert results["uv"] == results["pip"] == ["epf_app==1.0", "epf_lib==2.1"]
    # the same state too: each module's bytecode written at install time, as pip writes it
    for choice in ("uv", "pip"):
        assert list((tmp_path / f"env-{choice}").glob("lib/python3*/site-packages/__pycache__/epf_app.*.pyc"))
    # every flag the translation or the owner can give is one this uv release takes
    uv_help = subprocess.run(
        [str(tmp_path / "uv" / "bin" / "uv"), "pip", "install", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    flags = {
        *UV_LIST_FLAGS.values(),
        *UV_VALUE_FLAGS.values(),
        *UV_OWN_FLAGS,
        "--index-strategy",
        "--reinstall",
    }
    flags |= {switch[0] for switch in UV_SWITCHES.values()} | {"--no-deps", "--python"}
    assert sorted(f for f in flags if f not in uv_help.split()) == []
    # the env got nothing of the installer's; a second installer reuses the uv it finds
    assert not list((tmp_path / "env-uv").glob("lib/python3*/site-packages/uv*"))
    again = Installer(
        new_env(tmp_path / "env-3"), str(tmp_path / "install.log"), uv_home=str(tmp_path / "uv")
    )
    assert again.decide() == "uv"
    assert (tmp_path / "install.log").read_text().count(f"installer: {UV_REQUIREMENT}") == 1


def test_uv_variables_that_choose_sources_are_not_passed_on(tmp_path, monkeypatch, wheelhouse, uv_wheel):
    """pip would not see UV_CONSTRAINT (or UV_INDEX_URL, UV_TORCH_BACKEND): uv must not either."""
    shutil.copy(uv_wheel, wheelhouse)
    offline(monkeypatch, wheelhouse)
    (tmp_path / "pins.txt").write_text("epf_lib==2.0\n")
    monkeypatch.setenv("UV_CONSTRAINT", str(tmp_path / "pins.txt"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    python = new_env(tmp_path / "env")
    installer = Installer(python, str(tmp_path / "install.log"), uv_home=str(tmp_path / "uv"))
    rc, _seconds, _argv = installer.install(["epf_app"], header="test uv variables", timeout=300)
    assert rc == 0 and installer.name == "uv"
    assert installed(python) == ["epf_app==1.0", "epf_lib==2.1"]
    assert "UV_CONSTRAINT" not in installer.environment() and (tmp_path / "uv-cache").is_dir()


def test_a_wheelhouse_without_uv_falls_back_to_pip_and_installer_uv_refuses(
    tmp_path, monkeypatch, wheelhouse
):
    offline(monkeypatch, wheelhouse)
    python = new_env(tmp_path / "env")
    auto = Installer(python, str(tmp_path / "install.log"), uv_home=str(tmp_path / "uv"))
    rc, _seconds, argv = auto.install(["epf_app"], header="test auto", timeout=300)
    assert rc == 0 and auto.name == "pip" and argv[1:3] == ["-m", "pip"]
    assert f"installing {UV_REQUIREMENT} failed" in auto.report()["why"]
    # nothing half-made left where uv would live
    assert not (tmp_path / "uv").exists() and not (tmp_path / "uv.building").exists()
    with pytest.raises(InstallerUnavailable, match="installer uv cannot stand in for pip here"):
        Installer(python, str(tmp_path / "install.log"), choice="uv", uv_home=str(tmp_path / "uv")).decide()


def test_a_pip_setting_with_no_uv_translation_means_pip_named_with_it(tmp_path, monkeypatch, wheelhouse):
    offline(monkeypatch, wheelhouse)
    monkeypatch.setenv("PIP_UPGRADE_STRATEGY", "eager")
    installer = Installer(
        new_env(tmp_path / "env"), str(tmp_path / "install.log"), uv_home=str(tmp_path / "uv")
    )
    assert installer.decide() == "pip"
    assert "upgrade-strategy='eager' has no uv translation" in installer.report()["why"]
    assert not (tmp_path / "uv").exists()


# -- module env_install ------------------------------------------------------------------------------
def args(tmp_path, python: str, **more) -> dict:
    return {
        "python": python,
        "requirements": ["epf_app"],
        "log_path": str(tmp_path / "log" / "install.log"),
        "uv_home": str(tmp_path / "uv"),
        **more,
    }


def test_installs_with_uv_offline_and_check_mode_installs_nothing(
    tmp_path, monkeypatch, wheelhouse, uv_wheel
):
    shutil.copy(uv_wheel, wheelhouse)
    offline(monkeypatch, wheelhouse)
    python = new_env(tmp_path / "env")
    rc, res = run_module("env_install", args(tmp_path, python), check=True)
    assert rc == 0 and res["changed"] is True and res["requirements"] == ["epf_app"]
    assert installed(python) == [] and not (tmp_path / "log").exists()
    rc, res = run_module("env_install", args(tmp_path, python), timeout=300)
    assert rc == 0 and res["changed"] is True, res
    assert res["installer"]["name"] == "uv" and "find-links, no-index" in res["installer"]["why"]
    assert installed(python) == ["epf_app==1.0", "epf_lib==2.1"]


def test_pip_arguments_mean_pip_and_installer_uv_refuses_them(tmp_path, monkeypatch, wheelhouse):
    offline(monkeypatch, wheelhouse)
    python = new_env(tmp_path / "env")
    pinned = ["--constraint", str(tmp_path / "pins.txt")]
    (tmp_path / "pins.txt").write_text("epf_lib==2.0\n")
    rc, res = run_module("env_install", args(tmp_path, python, pip_args=pinned, installer="uv"), timeout=300)
    assert rc != 0 and "have no uv translation" in res["msg"] and "Nothing was installed" in res["msg"]
    assert installed(python) == []
    rc, res = run_module("env_install", args(tmp_path, python, pip_args=pinned), timeout=300)
    assert rc == 0 and res["installer"]["name"] == "pip", res
    assert "pip arguments given (--constraint" in res["installer"]["why"]
    # the caller's argument reached pip: the constraint chose the older epf_lib
    assert installed(python) == ["epf_app==1.0", "epf_lib==2.0"]


def test_a_failed_install_names_the_command_and_the_log(tmp_path, monkeypatch, wheelhouse):
    offline(monkeypatch, wheelhouse)
    python = new_env(tmp_path / "env")
    rc, res = run_module(
        "env_install", args(tmp_path, python, requirements=["epf_absent"], installer="pip"), timeout=300
    )
    assert rc != 0 and "installing epf_absent with pip failed" in res["msg"]
    assert res["cmd"][:3] == [python, "-m", "pip"] and res["rc"] != 0
    assert "epf_absent" in res["log_tail"]
