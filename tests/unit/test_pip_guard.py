"""plugins/module_utils/sglang_install/pip_guard.py with real pip (its --dry-run --report plan) against a
venv that holds
torch 2.11.0+cu130 (a fake torch package with real dist-info: tests/fixtures/fake_torch), and tiny wheels
built here in a local find-links directory (no index): a plan that would replace the kept torch is refused
naming it, a harmless plan passes, nothing is ever installed; and module sglang_install refuses, before
any install, an SGLang whose pins would replace the adopted torch."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from moduletools import run_module

from ansible_collections.epforge.ep.plugins.module_utils.sglang_install import pip_guard as guard

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "fake_torch"))
from make_fake_torch import make_fake_torch_venv  # noqa: E402

ARCHS = ["sm_90", "sm_120"]
KEEP = ["torch==2.11.0"]


def make_wheel(
    directory: Path, name: str, version: str, requires: list[str] = (), members: dict[str, str] | None = None
) -> Path:
    """A minimal valid py3-none-any wheel (METADATA, WHEEL, RECORD with hashes) holding one module, or the
    given members (path in the wheel -> text)."""
    dist = name.replace("-", "_")
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    files = {
        **(members or {f"{dist}_pkg.py": "VALUE = 1\n"}),
        f"{dist}-{version}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: epforge-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(data)}")
            whl.writestr(member, data)
        record.append(f"{dist}-{version}.dist-info/RECORD,,")
        whl.writestr(f"{dist}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def wheels(tmp_path):
    directory = tmp_path / "wheels"
    directory.mkdir()
    make_wheel(directory, "torch", "2.14.1")
    make_wheel(directory, "torch", "2.11.0+cu128")
    make_wheel(directory, "needs-new-torch", "1.0", ["torch==2.14.1"])
    make_wheel(directory, "fits-any-torch", "1.0", ["torch"])
    return directory


@pytest.fixture
def image_python(tmp_path):
    return make_fake_torch_venv(tmp_path / "image", "2.11.0+cu130", "13.0", ARCHS)


class Refused(Exception):
    pass


class Module:
    """What refuse_replacing uses of AnsibleModule: fail_json ends the run (here: raises)."""

    def fail_json(self, **kwargs):
        raise Refused(kwargs)


def pip_install(python: Path, wheels: Path, *requirements: str) -> list[str]:
    """pip install against PYTHON's env (pip --python: the fake venv has no pip of its own)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        str(wheels),
        *requirements,
    ]


def site_listing(python: Path) -> list[str]:
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    return sorted(p.name for p in site.iterdir())


def test_a_plan_that_replaces_the_kept_torch_is_refused_naming_it(image_python, wheels):
    before = site_listing(image_python)
    with pytest.raises(Refused) as refused:
        argv = pip_install(image_python, wheels, "needs-new-torch")
        guard.refuse_replacing(Module(), str(image_python), argv, KEEP)
    msg = refused.value.args[0]["msg"]
    assert "would replace torch 2.11.0+cu130 -> 2.14.1" in msg and "Nothing was installed" in msg
    assert site_listing(image_python) == before


def test_the_same_version_of_another_build_is_caught_too(image_python, wheels):
    """A pin torch==2.11.0 lets 2.11.0+cu128 through on a forced reinstall; the plan shows it."""
    argv = pip_install(image_python, wheels, "--force-reinstall", "torch==2.11.0")
    with pytest.raises(Refused) as refused:
        guard.refuse_replacing(Module(), str(image_python), argv, KEEP)
    assert "torch 2.11.0+cu130 -> 2.11.0+cu128" in refused.value.args[0]["msg"]


def test_keep_pins_on_the_argv_make_pip_refuse_and_the_guard_says_so(image_python, wheels):
    with pytest.raises(Refused) as refused:
        guard.refuse_replacing(
            Module(), str(image_python), pip_install(image_python, wheels, "needs-new-torch", *KEEP), KEEP
        )
    msg = refused.value.args[0]["msg"]
    assert "pip cannot make a plan that keeps torch==2.11.0" in msg and "needs-new-torch" in msg


def test_a_plan_that_keeps_torch_passes_and_installs_nothing(image_python, wheels):
    before = site_listing(image_python)
    assert (
        guard.refuse_replacing(
            Module(), str(image_python), pip_install(image_python, wheels, "fits-any-torch", *KEEP), KEEP
        )
        is None
    )
    assert site_listing(image_python) == before  # a dry run only


def test_replacements_reads_pips_report():
    report = {
        "install": [
            {"metadata": {"name": "Torch", "version": "2.14.1"}},
            {"metadata": {"name": "numpy", "version": "2.4.0"}},
        ]
    }
    assert guard.replacements(report, {"torch": "2.11.0+cu130"}, KEEP) == ["torch 2.11.0+cu130 -> 2.14.1"]
    assert guard.replacements(report, {}, KEEP) == []  # a first install replaces nothing
    assert guard.replacements(report, {"numpy": "2.3.0", "torch": "2.11.0"}, []) == []


def test_sglang_install_refuses_an_sglang_whose_pins_replace_the_adopted_torch(tmp_path, wheels):
    """The real module: a venv (with pip) holding the adopted torch, an SGLang wheel pinning 2.14.1."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    site = next((env / "lib").glob("python3*/site-packages"))
    fake = make_fake_torch_venv(tmp_path / "donor", "2.11.0+cu130", "13.0", ARCHS).parent.parent
    donor_site = next((fake / "lib").glob("python3*/site-packages"))
    for item in ("torch", "torch-2.11.0+cu130.dist-info"):
        (donor_site / item).rename(site / item)
    make_wheel(wheels, "sglang", "0.5.99", ["torch==2.14.1"])
    before = sorted(p.name for p in site.iterdir())
    rc, res = run_module(
        "sglang_install",
        {
            "python": str(env / "bin" / "python"),
            "version": "0.5.99",
            "install_deps": True,
            "keep": KEEP,
            "pip_args": ["--no-index", "--find-links", str(wheels)],
            "log_path": str(tmp_path / "log" / "sglang.log"),
            "stamp_path": str(tmp_path / "state" / "s.json"),
        },
        timeout=300,
    )
    assert rc != 0 and "pip cannot make a plan that keeps torch==2.11.0" in res["msg"], res
    assert "sglang 0.5.99 depends on torch==2.14.1" in res["msg"]
    assert sorted(p.name for p in site.iterdir()) == before
    assert not (tmp_path / "state" / "s.json").exists()
