"""Module python_locate (issue 40: the queries roles deepep and gateway had written as Python strings in their
task files), run against a real venv that holds a package with compiled-extension files, a single-file
extension and a distribution's metadata, and against interpreters that are missing or do not run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from moduletools import run_module


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv whose site-packages hold package `pkg` (two .so files, one in a subfolder), the single-file
    extension `single_ext`, and the metadata of distribution `Pkg-Dist` 1.2.3."""
    root = tmp_path_factory.mktemp("locate")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    from pathlib import Path  # noqa: PLC0415

    site = Path(site)
    (site / "pkg" / "sub").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("raise SystemExit('imported, which the module must not do')\n")
    (site / "pkg" / "b.so").write_bytes(b"")
    (site / "pkg" / "sub" / "a.so").write_bytes(b"")
    (site / "pkg" / "notes.txt").write_text("")
    (site / "single_ext.abi3.so").write_bytes(b"")
    dist = site / "Pkg_Dist-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: Pkg-Dist\nVersion: 1.2.3\n")
    return str(python), site


def test_modules_are_located_with_their_binaries_and_nothing_is_imported(venv):
    python, site = venv
    rc, res = run_module(
        "python_locate", {"python": python, "modules": ["pkg", "single_ext", "absent", "absent_parent.child"]}
    )
    assert rc == 0 and res["changed"] is False and res["python_exists"] is True, res
    found = res["modules"]
    assert found["pkg"]["found"] and found["pkg"]["origin"] == str(site / "pkg" / "__init__.py")
    assert found["pkg"]["binaries"] == [str(site / "pkg" / "b.so"), str(site / "pkg" / "sub" / "a.so")]
    assert found["single_ext"]["binaries"] == [str(site / "single_ext.abi3.so")]
    assert found["absent"] == {"found": False, "origin": None, "binaries": [], "error": ""}
    assert not found["absent_parent.child"]["found"]
    assert found["absent_parent.child"]["error"].startswith("ModuleNotFoundError")
    assert res["binaries"] == found["pkg"]["binaries"] + found["single_ext"]["binaries"]
    assert res["distributions"] == {}


def test_distribution_versions_come_from_metadata(venv):
    python, _site = venv
    rc, res = run_module(
        "python_locate", {"python": python, "distributions": ["Pkg-Dist", "pkg_dist", "nope"]}
    )
    assert rc == 0 and res["distributions"] == {"Pkg-Dist": "1.2.3", "pkg_dist": "1.2.3", "nope": None}, res
    assert res["modules"] == {} and res["binaries"] == []


def test_a_missing_python_is_refused_or_answered_empty_as_asked(tmp_path):
    missing = str(tmp_path / "no-venv" / "bin" / "python")
    rc, res = run_module("python_locate", {"python": missing, "distributions": ["smg"]})
    assert rc != 0 and res["msg"] == f"python {missing} does not exist", res
    args = {"python": missing, "modules": ["deep_ep"], "distributions": ["smg"], "python_missing": "empty"}
    rc, res = run_module("python_locate", args, check=True)
    assert rc == 0 and res["python_exists"] is False and res["distributions"] == {"smg": None}, res
    assert res["modules"]["deep_ep"]["found"] is False and res["binaries"] == []


def test_a_python_that_fails_is_refused_with_the_payload_named(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    rc, res = run_module("python_locate", {"python": str(broken), "modules": ["x"]})
    assert rc != 0 and res["rc"] == 3 and res["cmd"][2] == "<payload module_files>", res
    assert "cannot start" in res["log_tail"]
