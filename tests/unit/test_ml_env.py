"""Module ml_env_torch: bad input refused before anything changes, the stamp short-cut, and (on the venv with
torch 2.14.1 that the session fixture torch_venv provides) the real verification of torch's CUDA version and
arch list."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from moduletools import changed_paths, run_module, watched_states

from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.ml_env_torch.dist_files import (
    integrity_paths,
    states_digest,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["setuptools", "wheel", "ninja", "packaging"]


def base_args(tmp_path: Path, venv: Path) -> dict:
    return {
        "path": str(venv),
        "torch_version": "2.14.1",
        "torch_cuda": "13.0",
        "toolkit_cuda": "13.0",
        "archs": ["12.0"],
        "packages": PACKAGES,
        "log_path": str(tmp_path / "log" / "ml_env.log"),
        "stamp_path": str(tmp_path / "state" / "ml_env.json"),
        "base_python": sys.executable,
    }


def overlay_venv(shared: Path, overlay: Path, private: list[str]) -> Path:
    """A venv at overlay that imports the shared venv's packages through symlinks, with its own copies of
    the site-packages files matching private (globs): a test may break those without touching what other
    tests (xdist workers, Molecule scenarios) import from the shared venv at the same time."""
    site = next((shared / "lib").glob("python3*/site-packages"))
    own_site = overlay / site.relative_to(shared)
    (overlay / "bin").mkdir(parents=True)
    (overlay / "pyvenv.cfg").write_bytes((shared / "pyvenv.cfg").read_bytes())
    (overlay / "bin" / "python").symlink_to((shared / "bin" / "python").resolve())
    copies = {path for pattern in private for path in site.glob(pattern)}
    parents = {parent for path in copies for parent in path.relative_to(site).parents if parent != Path(".")}
    _link_tree(site, own_site, copies, parents)
    return overlay


def _link_tree(source: Path, target: Path, copies: set[Path], parents: set[Path], top: Path | None = None):
    """Mirror source at target: a copied file for each of copies, a real directory for each of parents (the
    directories above a copy, relative to top), a symlink for everything else."""
    top = top or source
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        relative = entry.relative_to(top)
        if entry in copies:
            shutil.copy2(entry, target / entry.name)
        elif relative in parents:
            _link_tree(entry, target / entry.name, copies, parents, top)
        else:
            (target / entry.name).symlink_to(entry)


def test_torch_for_another_cuda_major_is_refused_before_anything_changes(tmp_path):
    venv = tmp_path / "venv"
    rc, res = run_module("ml_env_torch", {**base_args(tmp_path, venv), "torch_cuda": "12.8"})
    assert rc != 0
    assert "built for CUDA 12.8 but the toolkit is CUDA 13.0" in res["msg"]
    assert "Nothing was changed" in res["msg"]
    assert not venv.exists() and not (tmp_path / "log").exists() and not (tmp_path / "state").exists()


def test_bad_arch_is_refused(tmp_path):
    rc, res = run_module("ml_env_torch", {**base_args(tmp_path, tmp_path / "v"), "archs": ["sm_120"]})
    assert rc != 0 and "'sm_120' is not an arch" in res["msg"]


@pytest.fixture
def fake_venv(tmp_path):
    """A real venv (no pip) whose site-packages names torch and the build tools in dist-info dirs only."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for dist in ("torch-2.14.1", "setuptools-80.0.0", "wheel-0.45.0", "ninja-1.13.0", "packaging-25.0"):
        (site / f"{dist}.dist-info").mkdir()
    return venv, site


def test_matching_stamp_means_no_work_and_no_torch_import(tmp_path, fake_venv):
    venv, site = fake_venv
    args = base_args(tmp_path, venv)
    rc, res = run_module("ml_env_torch", args, check=True)
    assert rc == 0 and res["changed"] is True and res["reason"] == "no stamp"
    assert res["actions"] == ["verify torch"]  # everything is there: only the proof is missing
    evidence = {"torch": "2.14.1+cu130", "cuda": "13.0", "archs": ["sm_90", "sm_120"]}
    files = states_digest(integrity_paths(str(site), "torch"))
    write_json_atomic(args["stamp_path"], {"key": res["key"], "evidence": evidence, "files_digest": files})
    # No torch module exists in this venv: success proves the stamp decided, not an import.
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0, res
    assert res["changed"] is False and res["verified"] is False and res["reason"] == "stamp matches"
    assert res["torch_version"] == "2.14.1+cu130" and res["torch_arch_list"] == ["sm_90", "sm_120"]
    # An input change (another arch) invalidates the stamp.
    rc, res = run_module("ml_env_torch", {**args, "archs": ["9.0", "12.0"]}, check=True)
    assert res["changed"] is True and res["reason"] == "inputs changed"
    # A package that went missing is reinstalled (and only that one).
    (site / "ninja-1.13.0.dist-info").rmdir()
    rc, res = run_module("ml_env_torch", args, check=True)
    assert res["changed"] is True and res["actions"] == ["install ninja", "verify torch"]
    # Another torch version means reinstalling torch.
    (site / "torch-2.14.1.dist-info").rename(site / "torch-2.13.0.dist-info")
    rc, res = run_module("ml_env_torch", args, check=True)
    assert "install torch==2.14.1" in res["actions"]


def test_real_torch_is_verified_once_then_stamped(torch_venv, tmp_path):
    args = {**base_args(tmp_path, torch_venv), "base_python": "python3"}
    rc, res = run_module("ml_env_torch", args, timeout=300)
    assert rc == 0, res
    assert res["verified"] is True and res["actions"] == ["verify torch"]
    assert res["torch_version"].startswith("2.14.1") and res["torch_cuda"].startswith("13.")
    assert "sm_120" in res["torch_arch_list"]
    stamp = json.loads(Path(args["stamp_path"]).read_text())
    assert stamp["evidence"]["archs"] == res["torch_arch_list"]
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is False and res["verified"] is False
    site = next((torch_venv / "lib").glob("python3*/site-packages"))
    assert {str(site), args["stamp_path"], str(torch_venv / "bin" / "python")} <= set(res["watch"])
    # A target torch does not carry (12.1) fails after the import, naming what the build covers.
    rc, res = run_module("ml_env_torch", {**args, "archs": ["12.1"]}, timeout=300)
    assert rc != 0 and "does not cover 12.1" in res["msg"]
    # A toolkit of another major than the installed torch (declared consistently, wrongly) is caught too.
    rc, res = run_module("ml_env_torch", {**args, "torch_cuda": "12.8", "toolkit_cuda": "12.8"}, timeout=300)
    assert rc != 0 and "is built for CUDA 13.0 but the toolkit is CUDA 12.8" in res["msg"]
    assert os.path.exists(args["stamp_path"])


def test_the_no_op_call_records_the_fact_once_and_only_on_change(tmp_path, fake_venv):
    """The module that finds the venv current also writes the local fact epforge_ml_env (one call on a no-op
    rerun): check mode writes nothing, the first real call writes it, the second changes nothing, and a
    changed input (the pip source) rewrites it with a diff."""
    venv, site = fake_venv
    facts = tmp_path / "facts"
    args = {**base_args(tmp_path, venv), "facts_dir": str(facts), "pip_source": "registry"}
    rc, res = run_module("ml_env_torch", args, check=True)
    evidence = {"torch": "2.14.1+cu130", "cuda": "13.0", "archs": ["sm_90", "sm_120"]}
    files = states_digest(integrity_paths(str(site), "torch"))
    write_json_atomic(args["stamp_path"], {"key": res["key"], "evidence": evidence, "files_digest": files})
    fact_file = facts / "epforge_ml_env.fact"

    rc, res = run_module("ml_env_torch", args, check=True, diff=True)
    assert rc == 0 and res["changed"] is True and res["fact_changed"] is True, res
    assert not facts.exists()  # check mode writes nothing
    assert '"torch==2.14.1"' in res["diff"][0]["after"]

    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is True and res["fact_changed"] is True and res["verified"] is False
    fact = json.loads(fact_file.read_text())
    assert fact == {
        "method": "venv",
        "path": str(venv),
        "python": str(venv / "bin" / "python"),
        "torch_version": "2.14.1+cu130",
        "torch_cuda": "13.0",
        "torch_arch_list": ["sm_90", "sm_120"],
        "toolkit_cuda": "13.0",
        "archs": ["12.0"],
        "key": res["key"],
        "keep": ["torch==2.14.1"],
        "pip_source": "registry",
    }
    mtime = fact_file.stat().st_mtime_ns
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is False and res["fact_changed"] is False
    assert fact_file.stat().st_mtime_ns == mtime

    rc, res = run_module("ml_env_torch", {**args, "pip_source": "wheelhouse /srv/wheels"}, diff=True)
    assert rc == 0 and res["changed"] is True and res["reason"] == "stamp matches"
    assert '"registry"' in res["diff"][0]["before"] and "wheelhouse /srv/wheels" in res["diff"][0]["after"]
    assert json.loads(fact_file.read_text())["pip_source"] == "wheelhouse /srv/wheels"


def test_the_no_op_answer_watches_what_it_depends_on_and_a_change_there_changes_the_answer(
    tmp_path, fake_venv
):
    """The probe cache's contract: the no-op answer's watch list names the stamp, the fact, the site dir, the
    venv's lib/ and python (with its realpath); uninstalling a build tool, deleting the fact or editing the
    stamp each changes a watched path's state and the real rerun's answer."""
    venv, site = fake_venv
    facts = tmp_path / "facts"
    args = {**base_args(tmp_path, venv), "facts_dir": str(facts), "pip_source": "registry"}
    rc, res = run_module("ml_env_torch", args, check=True)
    assert res["watch"] == []  # no stamp: work to do
    evidence = {"torch": "2.14.1+cu130", "cuda": "13.0", "archs": ["sm_120"]}
    files = states_digest(integrity_paths(str(site), "torch"))
    write_json_atomic(args["stamp_path"], {"key": res["key"], "evidence": evidence, "files_digest": files})
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is True and res["watch"] == []  # it wrote the fact
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is False and res["reason"] == "stamp matches"
    watch = res["watch"]
    python = venv / "bin" / "python"
    fact = facts / "epforge_ml_env.fact"
    claimed = {
        args["stamp_path"],
        str(fact),
        str(site),
        str(venv / "lib"),
        str(python),
        os.path.realpath(python),
    }
    assert claimed <= set(watch) and watch == sorted(set(watch)) and all(os.path.isabs(p) for p in watch)

    # ninja uninstalled (its dist-info dir goes): the site dir changed, the rerun would install it
    before = watched_states(watch)
    (site / "ninja-1.13.0.dist-info").rmdir()
    assert changed_paths(before) == [str(site)]
    rc, res = run_module("ml_env_torch", args, check=True)
    assert rc == 0 and res["changed"] is True and res["actions"] == ["install ninja", "verify torch"]
    assert res["watch"] == []
    (site / "ninja-1.13.0.dist-info").mkdir()

    # the fact deleted: a watched path is missing, the rerun writes it again
    rc, res = run_module("ml_env_torch", args)
    before = watched_states(res["watch"])
    fact.unlink()
    assert changed_paths(before) == [str(fact)]
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is True and res["fact_changed"] is True and res["watch"] == []

    # the stamp edited (another key): the stamp's state changed, the rerun must verify again
    rc, res = run_module("ml_env_torch", args)
    before = watched_states(res["watch"])
    write_json_atomic(args["stamp_path"], {"key": "0" * 20, "evidence": evidence})
    assert changed_paths(before) == [args["stamp_path"]]
    rc, res = run_module("ml_env_torch", args, check=True)
    assert rc == 0 and res["changed"] is True and res["reason"] == "inputs changed" and res["watch"] == []


def test_torch_broken_under_a_matching_stamp_is_seen_and_reinstalled(torch_venv, tmp_path):
    """Issue 'nothing let in' (4): a deleted torch/__init__.py or a truncated torch/_C*.so under a stamp that
    still matches is not trusted: the changed file states make the module import torch again, and torch
    that no longer imports is planned for a forced reinstall (check mode here). The breaks happen in a private
    overlay of the shared venv (overlay_venv), never in the venv itself that other tests import at once."""
    private = ["torch/__init__.py", "torch/_C.*.so", "torch/nn/modules/linear.py"]
    venv = overlay_venv(torch_venv, tmp_path / "overlay", private=private)
    args = {**base_args(tmp_path, venv), "base_python": "python3"}
    rc, res = run_module("ml_env_torch", args, timeout=300)
    assert rc == 0, res
    rc, res = run_module("ml_env_torch", args)
    assert res["changed"] is False and res["verified"] is False, res
    torch_dir = next((venv / "lib").glob("python3*/site-packages")) / "torch"
    extension = next(torch_dir.glob("_C.*.so"))
    assert str(extension) in res["watch"] and str(torch_dir) in res["watch"]  # the probe cache sees them too

    # Issue 35 item 6: a module file deep in the tree deleted (import torch fails) was "stamp matches".
    linear, kept = torch_dir / "nn" / "modules" / "linear.py", tmp_path / "linear.py.kept"
    assert str(linear.parent) in res["watch"]
    linear.rename(kept)
    try:
        rc, res = run_module("ml_env_torch", args, check=True, timeout=300)
    finally:
        kept.rename(linear)
    assert rc == 0 and res["changed"] is True, res
    assert "torch/nn/modules/linear.py is missing" in res["reason"], res["reason"]
    assert res["actions"][0] == "install --force-reinstall torch==2.14.1", res["actions"]

    init, kept = torch_dir / "__init__.py", tmp_path / "init.py.kept"
    init.rename(kept)
    try:
        rc, res = run_module("ml_env_torch", args, check=True, timeout=300)
    finally:
        kept.rename(init)
    assert rc == 0 and res["changed"] is True, res
    assert res["actions"][0] == "install --force-reinstall torch==2.14.1", res["actions"]
    assert "torch/__init__.py is missing" in res["reason"], res["reason"]  # its RECORD tells, no import

    saved = extension.read_bytes()
    try:
        with open(extension, "r+b") as handle:
            handle.truncate(len(saved) // 2)
        rc, res = run_module("ml_env_torch", args, check=True, timeout=300)
    finally:
        extension.write_bytes(saved)
    assert res["changed"] is True and "its RECORD says" in res["reason"], res
    # Restored (other file states, same content): the import proves the stamp again, nothing to change.
    rc, res = run_module("ml_env_torch", args, timeout=300)
    assert rc == 0 and res["changed"] is False and res["verified"] is True, res
    assert "the import proves it again" in res["reason"]
    rc, res = run_module("ml_env_torch", args)
    assert res["changed"] is False and res["verified"] is False and res["reason"] == "stamp matches"


FAKE_TORCH = {
    "torch/__init__.py": "from torch import cuda, version\nfrom torch.nn.modules import linear\n"
    "__version__ = '2.14.1+cu130'\n",
    "torch/version.py": "cuda = '13.0'\n",
    "torch/cuda/__init__.py": "def get_arch_list():\n    return ['sm_90', 'sm_120']\n",
    "torch/nn/__init__.py": "",
    "torch/nn/modules/__init__.py": "",
    "torch/nn/modules/linear.py": "class Linear:\n    pass\n",
}


@pytest.fixture
def small_torch_venv(tmp_path):
    """A real venv whose torch is a small package that really imports (its version, CUDA and arch list as the
    stack's) with a pip-style RECORD (path,hash,size), and the build tools named by dist-info dirs: the
    module's real import and RECORD check run on it in seconds."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for dist in ("setuptools-80.0.0", "wheel-0.45.0", "ninja-1.13.0", "packaging-25.0"):
        (site / f"{dist}.dist-info").mkdir()
    info = site / "torch-2.14.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n\n")
    record = []
    for rel, text in FAKE_TORCH.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
        record.append(f"{rel},sha256=x,{len(text.encode())}")
    (info / "RECORD").write_text("\n".join([*record, "torch-2.14.1.dist-info/RECORD,,"]) + "\n")
    return venv, site


def test_a_torch_file_deleted_or_resized_deep_in_the_tree_is_seen_without_an_import(
    tmp_path, small_torch_venv
):
    """Issue 35 item 6: `rm torch/nn/modules/linear.py` (import torch fails) was answered "stamp matches":
    only torch/'s own directory state was in the digest. Every rerun now checks each .py/.so file the RECORD
    lists against its recorded size (a stat each, no import) and watches the directories holding them."""
    venv, site = small_torch_venv
    args = base_args(tmp_path, venv)
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["verified"] is True and res["torch_version"] == "2.14.1+cu130", res
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is False and res["reason"] == "stamp matches", res
    modules = site / "torch" / "nn" / "modules"
    assert str(modules) in res["watch"]  # the probe cache sees a deletion there too
    linear = modules / "linear.py"
    text = linear.read_text()

    linear.unlink()
    rc, res = run_module("ml_env_torch", args, check=True)
    assert rc == 0 and res["changed"] is True, res
    assert "torch/nn/modules/linear.py is missing" in res["reason"], res["reason"]
    assert res["actions"][0] == "install --force-reinstall torch==2.14.1", res["actions"]

    # Rewritten in place with another size: no directory changes; the RECORD's size still tells.
    linear.write_text(text + "# edited\n")
    rc, res = run_module("ml_env_torch", args, check=True)
    assert res["changed"] is True and "linear.py is" in res["reason"] and "its RECORD says" in res["reason"]

    linear.write_text(text)  # restored: the import proves the stamp again, then the stamp is trusted
    rc, res = run_module("ml_env_torch", args)
    assert rc == 0 and res["changed"] is False, res
    rc, res = run_module("ml_env_torch", args)
    assert res["changed"] is False and res["verified"] is False and res["reason"] == "stamp matches", res


def test_the_summary_names_the_installer_that_ran_each_install():
    """The run summary said "pip install torch" when uv had installed it: an install is named by its
    installer once one ran; check mode, where none runs, says "install"."""
    import ml_env_torch  # noqa: PLC0415 - the module file, as the other tests run it

    planned = ml_env_torch.planned_actions(True, ["torch==2.14.1"], ["ninja"])
    assert planned == ["create venv", "install torch==2.14.1", "install ninja", "verify torch"]
    assert ml_env_torch.named_by(planned, "uv") == [
        "create venv",
        "uv install torch==2.14.1",
        "uv install ninja",
        "verify torch",
    ]
