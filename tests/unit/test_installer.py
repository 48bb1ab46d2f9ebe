"""The installer owner (plugins/module_utils/installer.py) with a real pip and a real uv, offline: a
wheelhouse given as role wheelhouse gives it (PIP_NO_INDEX + PIP_FIND_LINKS, no pip config file) is
translated for uv, uv installs the same set pip does, a wheelhouse without uv's wheel falls back to pip
with the reason, and `installer: uv` fails there instead. uv's wheel comes from PyPI once into the test
cache."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import CACHE, cache_lock

from ansible_collections.epforge.ep.plugins.module_utils.installer import (
    UV_REQUIREMENT,
    Installer,
    InstallerUnavailable,
)

WHEEL = b"Wheel-Version: 1.0\nGenerator: epforge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def tiny_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel with a correct RECORD: a package `name` whose module says its version."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{dist}/METADATA": "".join(
            [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
            + [f"Requires-Dist: {r}\n" for r in requires]
        ).encode(),
        f"{dist}/WHEEL": WHEEL,
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


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
    tiny_wheel(house, "epf_app", "1.0", ("epf_lib>=2",))
    tiny_wheel(house, "epf_lib", "2.0")
    tiny_wheel(house, "epf_lib", "2.1")
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
    # the env got nothing of the installer's; a second installer reuses the uv it finds
    assert not list((tmp_path / "env-uv").glob("lib/python3*/site-packages/uv*"))
    again = Installer(
        new_env(tmp_path / "env-3"), str(tmp_path / "install.log"), uv_home=str(tmp_path / "uv")
    )
    assert again.decide() == "uv"
    assert (tmp_path / "install.log").read_text().count(f"installer: {UV_REQUIREMENT}") == 1


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
