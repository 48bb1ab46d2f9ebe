"""ml_env method existing: module ml_env_existing adopts a python whose torch matches the stack and refuses
one that does not (another version, another CUDA major, a CPU build, missing archs), changing nothing; and
the ml_env role in a real play adopts one (rerun changed=0, check mode) and refuses a mismatching one.

The pythons are real venvs holding a fake torch package (tests/fixtures/fake_torch: a real torch install is
too heavy to make one per case); one case adopts and refuses the real torch 2.14.1+cu130 of the session
fixture torch_venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from moduletools import run_module

from playbooks import changed_count, run_playbook, write_vars

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "fake_torch"))
from make_fake_torch import make_fake_torch_venv  # noqa: E402

# torch 2.11.0+cu130 as on the lent H200 image (stack cu130-torch211), arch list of the cu130 builds.
ARCHS_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
STACK = {"torch_version": "2.11.0", "torch_cuda": "13.0", "toolkit_cuda": "13.0", "archs": ["12.0"]}


@pytest.fixture
def fake_torch(tmp_path):
    """make(name, version, cuda, archs) -> python of a venv holding that fake torch."""

    def make(
        name: str, version: str = "2.11.0+cu130", cuda: str | None = "13.0", archs: list[str] | None = None
    ) -> Path:
        return make_fake_torch_venv(tmp_path / name, version, cuda, ARCHS_CU130 if archs is None else archs)

    return make


def tree(path: Path) -> dict:
    return {
        str(p.relative_to(path)): p.stat().st_mtime_ns
        for p in sorted(path.rglob("*"))
        if "__pycache__" not in p.parts
    }


def test_matching_torch_is_adopted_and_nothing_changes(fake_torch):
    python = fake_torch("image")
    venv = python.parent.parent
    before = tree(venv)
    for check in (False, True):
        rc, res = run_module("ml_env_existing", {"python": str(python), **STACK}, check=check)
        assert rc == 0, res
        assert res["changed"] is False and res["verified"] is True and res["actions"] == []
        assert res["reason"] == "adopted" and res["python"] == str(python)
        assert res["torch_version"] == "2.11.0+cu130" and res["torch_cuda"] == "13.0"
        assert res["torch_arch_list"] == ARCHS_CU130 and res["prefix"] == str(venv)
        assert res["torch_location"].startswith(str(venv))
    assert tree(venv) == before


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        ({"version": "2.14.1+cu130"}, "its torch is 2.14.1+cu130, the stack wants 2.11.0"),
        (
            {"version": "2.11.0+cu128", "cuda": "12.8"},
            "its torch 2.11.0+cu128 is built for CUDA 12.8, the stack wants CUDA 13.0 (major 13)",
        ),
        ({"version": "2.11.0+cpu", "cuda": None}, "is a build without CUDA"),
        ({"archs": ["sm_90", "sm_100"]}, "does not cover 12.0"),
    ],
)
def test_mismatching_torch_is_refused_naming_both_sides(fake_torch, torch, expected):
    python = fake_torch("image", **torch)
    before = tree(python.parent.parent)
    rc, res = run_module("ml_env_existing", {"python": str(python), **STACK})
    assert rc != 0 and expected in res["msg"], res["msg"]
    assert "ml_env method existing refuses" in res["msg"] and "Nothing was changed" in res["msg"]
    assert tree(python.parent.parent) == before


def test_stack_torch_for_another_cuda_major_is_refused_before_python_runs(tmp_path):
    rc, res = run_module(
        "ml_env_existing", {"python": str(tmp_path / "no-such-python"), **STACK, "torch_cuda": "12.8"}
    )
    assert rc != 0 and "built for CUDA 12.8 but the toolkit is CUDA 13.0" in res["msg"]


def test_missing_python_and_python_without_torch_are_refused(tmp_path):
    rc, res = run_module("ml_env_existing", {"python": str(tmp_path / "nope" / "python"), **STACK})
    assert rc != 0 and "does not exist or is not executable" in res["msg"]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    rc, res = run_module("ml_env_existing", {"python": str(tmp_path / "bare" / "bin" / "python"), **STACK})
    assert rc != 0 and "importing torch" in res["msg"] and "ModuleNotFoundError" in res["log_tail"]


PLAY = """---
- name: Adopt an existing torch env
  hosts: localhost
  gather_facts: false
  roles:
    - role: ml_env
  post_tasks:
    - name: Save what later roles see
      ansible.builtin.copy:
        dest: "{{ seen_file }}"
        mode: "0644"
        content: "{{ {'python': ml_env_python, 'torch': ml_env_torch_version, 'keep': ml_env_keep,
                      'steps': epforge_steps} | to_json }}"
"""


def play(tmp_path: Path, python: Path, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(PLAY)
    vars_file = write_vars(
        tmp_path / "vars.json",
        {
            "epforge_stack": "cu130-torch211",
            "epforge_facts_dir": str(tmp_path / "facts"),
            "epforge_log_dir": str(tmp_path / "log"),
            "epforge_state_dir": str(tmp_path / "state"),
            "ml_env_method": "existing",
            "ml_env_existing_python": str(python),
            "ml_env_path": str(tmp_path / "must-not-exist"),
            "seen_file": str(tmp_path / "seen.json"),
        },
    )
    return run_playbook(tmp_path / "play.yml", *extra, vars_file=vars_file)


def test_adopting_records_the_fact_in_the_same_call_only_on_change(fake_torch, tmp_path):
    """With facts_dir the adopting call writes epforge_ml_env itself: never in check mode, once for real,
    then changed=false (the env itself is never touched)."""
    python = fake_torch("image")
    venv = python.parent.parent
    before = tree(venv)
    facts = tmp_path / "facts"
    args = {"python": str(python), **STACK, "facts_dir": str(facts)}
    rc, res = run_module("ml_env_existing", args, check=True)
    assert rc == 0 and res["changed"] is True and res["fact_changed"] is True and not facts.exists()
    rc, res = run_module("ml_env_existing", args)
    assert rc == 0 and res["changed"] is True and res["actions"] == []
    fact = json.loads((facts / "epforge_ml_env.fact").read_text())
    assert fact["method"] == "existing" and fact["path"] == str(venv) and fact["keep"] == ["torch==2.11.0"]
    assert fact["pip_source"] == "none (adopted env, nothing installed)" and fact["key"] == res["key"]
    rc, res = run_module("ml_env_existing", args)
    assert rc == 0 and res["changed"] is False and res["fact_changed"] is False
    assert tree(venv) == before


def test_role_adopts_a_matching_env_then_changes_nothing(tmp_path, fake_torch):
    python = fake_torch("image")
    first = play(tmp_path, python)
    assert first.returncode == 0, first.stdout[-3000:]
    fact = json.loads((tmp_path / "facts" / "epforge_ml_env.fact").read_text())
    assert fact["method"] == "existing" and fact["python"] == str(python)
    assert fact["path"] == str(python.parent.parent) and fact["torch_version"] == "2.11.0+cu130"
    assert fact["torch_cuda"] == "13.0" and fact["torch_arch_list"] == ARCHS_CU130
    assert fact["keep"] == ["torch==2.11.0"]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["python"] == str(python) and seen["keep"] == ["torch==2.11.0"]
    step = next(s for s in seen["steps"] if s["step"] == "ml_env")
    assert "adopted torch 2.11.0+cu130" in step["detail"]
    assert "nothing installed or replaced" in step["detail"]
    assert not (tmp_path / "must-not-exist").exists()

    again = play(tmp_path, python)
    assert again.returncode == 0 and changed_count(again) == 0, again.stdout[-3000:]
    (tmp_path / "seen.json").unlink()
    dry = play(tmp_path, python, "--check")
    assert (
        dry.returncode == 0 and changed_count(dry) == 1
    )  # only the test's own seen file, which check mode skips
    assert not (tmp_path / "seen.json").exists()


def test_role_refuses_a_mismatching_env_before_any_change(tmp_path, fake_torch):
    python = fake_torch("image", version="2.14.1+cu130")
    proc = play(tmp_path, python)
    assert proc.returncode != 0
    assert "its torch is 2.14.1+cu130, the stack wants 2.11.0" in proc.stdout
    assert not (tmp_path / "facts").exists() and not (tmp_path / "must-not-exist").exists()


def test_role_refuses_the_existing_method_without_a_python_and_an_unknown_method(tmp_path, fake_torch):
    """The existing method without ml_env_existing_python fails on its own sentence before anything is read;
    an unknown method fails the role's argument check (its choices)."""
    (tmp_path / "no-python.json").write_text(json.dumps({"ml_env_existing_python": ""}))
    proc = play(tmp_path, fake_torch("unused"), "-e", f"@{tmp_path / 'no-python.json'}")
    assert proc.returncode != 0 and "which is empty: set it, or use ml_env_method venv" in proc.stdout
    assert "Verify and adopt" not in proc.stdout and not (tmp_path / "facts").exists()
    (tmp_path / "bad-method.json").write_text(json.dumps({"ml_env_method": "conda"}))
    proc = play(tmp_path, fake_torch("unused2"), "-e", f"@{tmp_path / 'bad-method.json'}")
    assert proc.returncode != 0 and "ml_env_method" in proc.stdout and "conda" in proc.stdout
    assert not (tmp_path / "facts").exists() and not (tmp_path / "must-not-exist").exists()


def test_role_default_method_venv_still_plans_its_own_venv(tmp_path, fake_torch):
    """Method venv still runs ml_env_torch: in check mode it plans the venv and creates none."""
    (tmp_path / "vars-venv.json").write_text(json.dumps({"ml_env_method": "venv"}))
    proc = play(tmp_path, fake_torch("unused"), "--check", "-e", f"@{tmp_path / 'vars-venv.json'}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Ensure torch and the build tools in the venv" in proc.stdout
    assert "Verify and adopt" not in proc.stdout and not (tmp_path / "must-not-exist").exists()


def test_a_real_torch_is_adopted_or_refused_by_the_stack(torch_venv):
    """The real torch 2.14.1+cu130 of the torch_venv fixture (tests/conftest.py): adopted for stack cu130's
    torch, refused for cu130-torch211's 2.11.0."""
    python = str(torch_venv / "bin" / "python")
    args = {"python": python, **STACK, "torch_version": "2.14.1"}
    rc, res = run_module("ml_env_existing", args, timeout=300)
    assert rc == 0 and res["reason"] == "adopted" and res["changed"] is False, res
    assert res["torch_version"].startswith("2.14.1") and res["torch_cuda"].startswith("13.")
    assert "sm_120" in res["torch_arch_list"]
    rc, res = run_module("ml_env_existing", {"python": python, **STACK}, timeout=300)
    assert rc != 0 and f"its torch is {res['torch_version']}, the stack wants 2.11.0" in res["msg"]
