"""flashinfer: the sm_12x arch rule (plugins/module_utils/flashinfer.py), on the host through nvcc_arch_rule,
against real nvcc --version outputs: a captured 13.0 one and a stand-in nvcc script printing a 12.8
release; the module flashinfer_probe (role flashinfer's one call that applies the rule) against a real venv
holding FlashInfer's distribution metadata and the same nvcc outputs, with the same answers and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from moduletools import changed_paths, clear_import_path_variables, run_module, watched_states

from ansible_collections.epforge.ep.plugins.module_utils.flashinfer import (
    FlashInferArchError,
    FlashInferRuleFailure,
    classify_jit_error,
    flashinfer_arch_list,
    nvcc_arch_rule,
    parse_nvcc_version,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "flashinfer"


def run(args: dict) -> tuple[int, dict]:
    """The rule on the host for these arguments, as (rc, result): its answer, or the fields a module fails
    with (nvcc_arch_rule is what flashinfer_probe applies first)."""
    try:
        return 0, nvcc_arch_rule(args["cuda_home"], args["arch_list"])
    except FlashInferRuleFailure as exc:
        return 1, exc.fields


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


def test_host_rule_with_a_12_8_nvcc_refuses_plain_12_0(tmp_path):
    home = fake_cuda(tmp_path, "12.8")
    rc, res = run({"cuda_home": str(home), "arch_list": ["12.0"]})
    assert rc != 0 and res["nvcc_version"] == "12.8" and "sm75" in res["msg"] and "12.0a" in res["msg"]
    rc, res = run({"cuda_home": str(home), "arch_list": ["12.0a"]})
    assert rc == 0 and res["arch_list"] == "12.0a" and res["sass_archs"] == ["sm_120a"]


def test_host_rule_with_a_13_0_nvcc(tmp_path):
    rc, res = run({"cuda_home": str(fake_cuda(tmp_path, "13.0")), "arch_list": ["12.0"]})
    assert rc == 0 and res == {"arch_list": "12.0", "sass_archs": ["sm_120"], "nvcc_version": "13.0"}


def test_host_rule_without_nvcc(tmp_path):
    rc, res = run({"cuda_home": str(tmp_path), "arch_list": ["12.0"]})
    assert rc != 0 and "no nvcc" in res["msg"]
    assert res["cmd"] == [str(tmp_path / "bin" / "nvcc"), "--version"] and res["nvcc_version"] == ""


def test_host_rule_with_the_real_nvcc(cuda13_home):
    rc, res = run({"cuda_home": str(cuda13_home), "arch_list": ["12.0"]})
    assert rc == 0 and res["nvcc_version"] == "13.0"


# ------------------------------------------------------------------------------------ module flashinfer_probe


@pytest.fixture
def probe_env(tmp_path):
    """A real venv (no pip) holding flashinfer-python 0.7.2 as distribution metadata only, a kernel library
    file, a JIT stamp naming it with the role's inputs, and the probe's arguments."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    dist = site / "flashinfer_python-0.7.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.7.2\n")
    library = tmp_path / "silu_and_mul.so"
    library.write_bytes(b"\x7fELF")
    home = fake_cuda(tmp_path, "13.0")
    inputs = {"flashinfer": "0.7.2", "cuda_home": str(home), "activation": "silu"}
    # The stamp the role's jit.yml writes: the role's inputs plus the rule's arch_list and nvcc.
    stamp = tmp_path / "state" / "flashinfer-jit.stamp.json"
    stamp.parent.mkdir()
    stamped = {**inputs, "arch_list": "12.0", "nvcc": "13.0"}
    stamp.write_text(
        json.dumps({"inputs": stamped, "library": str(library), "sass_archs": ["sm_120"], "seconds": 93.7})
    )
    args = {
        "cuda_home": str(home),
        "arch_list": ["12.0"],
        "python": str(venv / "bin" / "python"),
        "requirements": ["flashinfer-python==0.7.2"],
        "stamp_path": str(stamp),
        "inputs": inputs,
        "facts_dir": str(tmp_path / "facts"),
        "fact": {"package": "flashinfer-python", "version": "0.7.2", "jit_kernel": "silu_and_mul"},
    }
    return args, library


def test_probe_records_the_fact_once_when_current(probe_env, tmp_path):
    args, library = probe_env
    fact_file = tmp_path / "facts" / "epforge_flashinfer.fact"
    rc, res = run_module("flashinfer_probe", args, check=True, diff=True)
    assert rc == 0 and res["current"] is True and res["changed"] is True and res["fact_changed"] is True, res
    assert not fact_file.exists() and "silu_and_mul.so" in res["diff"]["after"]  # check mode writes nothing
    rc, res = run_module("flashinfer_probe", args)
    assert rc == 0 and res["changed"] is True and res["missing"] == [] and res["stamp_ok"] is True
    assert json.loads(fact_file.read_text()) == {
        **args["fact"],
        "nvcc": "13.0",
        "jit_arch_list": "12.0",
        "jit_library": str(library),
        "jit_sass_archs": ["sm_120"],
        "jit_seconds": 93.7,
    }
    assert res["kernel"] == {
        "library": str(library),
        "sass_archs": ["sm_120"],
        "seconds": 93.7,
        "rebuilt": False,
    }
    mtime = fact_file.stat().st_mtime_ns
    rc, res = run_module("flashinfer_probe", args)
    assert rc == 0 and res["changed"] is False and res["fact_changed"] is False
    assert fact_file.stat().st_mtime_ns == mtime


def test_probe_reports_work_and_writes_nothing_when_not_current(probe_env, tmp_path):
    args, library = probe_env
    rc, res = run_module(
        "flashinfer_probe", {**args, "requirements": ["flashinfer-python==0.7.3", "flashinfer-cubin"]}
    )
    assert rc == 0 and res["current"] is False and res["changed"] is False
    assert res["missing"] == ["flashinfer-python==0.7.3", "flashinfer-cubin"] and res["stamp_ok"] is True
    rc, res = run_module("flashinfer_probe", {**args, "arch_list": ["12.0a"]})  # the rule's answer changes
    assert rc == 0 and res["current"] is False and res["stamp_ok"] is False and res["missing"] == []
    library.unlink()  # the kernel the stamp names is gone: compile again
    rc, res = run_module("flashinfer_probe", args)
    assert rc == 0 and res["current"] is False and res["stamp_ok"] is False
    # Without the JIT proof the stamp does not matter: current, and the fact has no kernel.
    rc, res = run_module("flashinfer_probe", {**args, "jit_verify": False})
    assert rc == 0 and res["current"] is True
    fact = json.loads((tmp_path / "facts" / "epforge_flashinfer.fact").read_text())
    assert (fact["jit_library"], fact["jit_sass_archs"], fact["jit_seconds"]) == ("", [], None)
    rc, res = run_module("flashinfer_probe", {**args, "python": str(tmp_path / "nope" / "python")})
    assert (
        rc != 0 and "reading the installed versions" in res["msg"] and res["cmd"][0].endswith("nope/python")
    )


def test_probe_answers_as_the_arch_rule_with_the_real_nvcc(probe_env, cuda13_home):
    """The probe answers as the rule on the host (nvcc_arch_rule) with the real CUDA 13.0 nvcc; the probe's
    inputs (what the stamp must hold) carry the rule's arch list and nvcc release."""
    args, _ = probe_env
    rc, rule = run({"cuda_home": str(cuda13_home), "arch_list": ["12.0"]})
    assert rc == 0
    rc, res = run_module("flashinfer_probe", {**args, "cuda_home": str(cuda13_home)})
    assert rc == 0 and res["rule"] == {key: rule[key] for key in ("arch_list", "sass_archs", "nvcc_version")}
    assert res["rule"] == {"arch_list": "12.0", "sass_archs": ["sm_120"], "nvcc_version": "13.0"}
    assert res["inputs"] == {**args["inputs"], "arch_list": "12.0", "nvcc": "13.0"}
    assert res["fact"] == {**args["fact"], "nvcc": "13.0", "jit_arch_list": "12.0"}


def test_probe_refuses_as_the_arch_rule_before_writing(probe_env, tmp_path):
    """A 12.8 nvcc with plain 12.0, no nvcc, an unreadable release: the probe fails with the rule's message
    and writes no fact, even with everything else current."""
    args, _ = probe_env
    fact_file = tmp_path / "facts" / "epforge_flashinfer.fact"
    old = fake_cuda(tmp_path, "12.8")
    rc, rule = run({"cuda_home": str(old), "arch_list": ["12.0"]})
    rc_probe, res = run_module("flashinfer_probe", {**args, "cuda_home": str(old)})
    assert rc != 0 and rc_probe != 0 and res["msg"] == rule["msg"] and "12.0a" in res["msg"]
    assert res["nvcc_version"] == "12.8" and res["cmd"] == [str(old / "bin" / "nvcc"), "--version"]
    rc, res = run_module("flashinfer_probe", {**args, "cuda_home": str(tmp_path / "none")})
    assert rc != 0 and "no nvcc" in res["msg"]
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "nvcc").write_text("#!/bin/sh\necho 'nvcc: unknown' >&2\nexit 3\n")
    (broken / "bin" / "nvcc").chmod(0o755)
    rc, res = run_module("flashinfer_probe", {**args, "cuda_home": str(broken)})
    assert rc != 0 and "could not read the nvcc release" in res["msg"] and res["rc"] == 3
    assert "nvcc: unknown" in res["log_tail"]
    assert not fact_file.exists()
    # 12.0a is what CUDA 12.8 accepts: the probe answers (the stamp's inputs differ, so there is work).
    rc, res = run_module("flashinfer_probe", {**args, "cuda_home": str(old), "arch_list": ["12.0a"]})
    assert rc == 0 and res["rule"]["arch_list"] == "12.0a" and res["current"] is False


def test_probe_watch_names_what_a_current_answer_depends_on_and_a_change_there_changes_it(
    probe_env, tmp_path, monkeypatch
):
    """The probe cache's contract (plugins/module_utils/watch.py): a current, unchanged answer names the nvcc,
    the python, its site dir, the stamp, the kernel and the fact; changing any of them changes a watched
    path's state and the real rerun's answer."""
    clear_import_path_variables(monkeypatch)
    args, library = probe_env
    fact_file = tmp_path / "facts" / "epforge_flashinfer.fact"
    rc, first = run_module("flashinfer_probe", args)
    assert rc == 0 and first["changed"] and first["watch"] == []  # the fact was written: not a no-op
    rc, res = run_module("flashinfer_probe", args)
    assert rc == 0 and not res["changed"] and res["current"], res
    watch = res["watch"]
    venv = Path(args["python"]).parent.parent
    site = next((venv / "lib").glob("python3*/site-packages")).resolve()
    nvcc = Path(args["cuda_home"]) / "bin" / "nvcc"
    expected = {str(nvcc), args["python"], str(Path(args["python"]).resolve()), str(venv / "pyvenv.cfg")}
    expected |= {str(site), args["stamp_path"], str(library), str(fact_file)}
    assert expected <= set(watch) and watch == sorted(set(watch)), sorted(expected - set(watch))

    def rerun_after(change) -> dict:
        before = watched_states(watch)
        change()
        assert changed_paths(before), "no watched path saw the change"
        return run_module("flashinfer_probe", args)[1]

    dist = site / "flashinfer_python-0.7.2.dist-info"
    gone = rerun_after(lambda: dist.rename(tmp_path / dist.name))  # as pip uninstall does
    assert not gone["current"] and gone["missing"] == ["flashinfer-python==0.7.2"] and gone["watch"] == []
    (tmp_path / dist.name).rename(dist)

    stamp = json.loads(Path(args["stamp_path"]).read_text())
    edited = {**stamp, "inputs": {**stamp["inputs"], "activation": "gelu"}}
    other = rerun_after(lambda: Path(args["stamp_path"]).write_text(json.dumps(edited)))
    assert not other["current"] and not other["stamp_ok"]
    Path(args["stamp_path"]).write_text(json.dumps(stamp))

    deleted = rerun_after(fact_file.unlink)
    assert deleted["changed"] and deleted["fact_changed"] and fact_file.exists()

    assert run_module("flashinfer_probe", args)[1]["watch"] == watch  # settled again
    old = fake_cuda(tmp_path, "12.8")
    # another toolkit's nvcc in its place (a 12.8 release): the rule refuses plain 12.0
    refused = rerun_after(lambda: (old / "bin" / "nvcc").replace(nvcc))
    assert refused.get("failed") and "12.0a" in refused["msg"]


# ---- module flashinfer_jit_check: check mode against a real run (a stand-in python plays the JIT) ----

# Stands in for `python -c SCRIPT ACT`: FlashInfer's JIT cache under FLASHINFER_WORKSPACE_BASE builds the
# kernel once (built true), then finds it up to date (built false); prints the module's marker line.
STANDIN_JIT = """#!/bin/sh
lib="$FLASHINFER_WORKSPACE_BASE/cached/act_and_mul.so"
built=false
if [ ! -e "$lib" ]; then mkdir -p "$(dirname "$lib")" && : > "$lib" && built=true; fi
echo "EPFORGE_FI_JIT {\\"library\\": \\"$lib\\", \\"built\\": $built, \\"exists\\": true}"
"""


def disk_state(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


def jit_args(python: Path, cuda: Path, state: Path) -> dict:
    """flashinfer_jit_check's arguments for a stand-in python, a toolkit folder and a state folder."""
    return {
        "python": str(python),
        "cuda_home": str(cuda),
        "arch_list": "12.0",
        "workspace": str(state / "workspace"),
        "stub_dir": str(state / "stubs"),
        "log_path": str(state / "log" / "jit.log"),
    }


def test_jit_check_mode_predicts_the_link_stub_and_writes_nothing(tmp_path):
    """Check mode's changed is the real run's where it can be known without building: the link stub a real
    run makes (a change) or finds; the JIT's own rebuild decision is left to FlashInfer's build (documented
    in the module's check_mode details, shown last)."""
    python = tmp_path / "python"
    python.write_text(STANDIN_JIT)
    python.chmod(0o755)
    cuda = tmp_path / "cuda"  # no lib64/stubs: a driverless build host without a full toolkit
    (cuda / "bin").mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    args = jit_args(python, cuda, state)

    def check_then_real(expected: bool, **over) -> tuple[dict, dict]:
        before = disk_state(state)
        rc, predicted = run_module("flashinfer_jit_check", {**args, **over}, check=True)
        assert rc == 0 and disk_state(state) == before, predicted
        rc, real = run_module("flashinfer_jit_check", {**args, **over})
        assert rc == 0, real
        assert predicted["changed"] == real["changed"] == expected, (predicted, real)
        assert predicted["libcuda"] == real["libcuda"]
        return predicted, real

    predicted, real = check_then_real(True)  # the stub made, the kernel built
    assert predicted["would_make_stub"] is True and real["made_stub"] is True and real["built"] is True
    assert (state / "stubs" / "libcuda.so").is_file()
    predicted, real = check_then_real(False)  # the rerun: the stub found, the kernel up to date
    assert predicted["would_make_stub"] is False and (real["made_stub"], real["built"]) == (False, False)

    # No stub allowed and none found: check mode fails as the real run does, writing nothing.
    no_stub = {**args, "stub_dir": str(state / "none"), "make_libcuda_stub": False}
    before = disk_state(state)
    rc, predicted = run_module("flashinfer_jit_check", no_stub, check=True)
    assert rc != 0 and disk_state(state) == before
    rc, real = run_module("flashinfer_jit_check", no_stub)
    assert rc != 0 and real["msg"] == predicted["msg"]

    # The documented gap: with the stub in place, a JIT cache that would compile is not predicted.
    other = {**args, "workspace": str(state / "other-workspace")}
    rc, predicted = run_module("flashinfer_jit_check", other, check=True)
    assert rc == 0 and predicted["changed"] is False and "known only by building" in predicted["msg"]
    rc, real = run_module("flashinfer_jit_check", other)
    assert rc == 0 and real["changed"] is True and real["built"] is True


def test_the_jit_finds_the_envs_own_ninja_first(tmp_path):
    """FlashInfer's JIT runs ninja by name; the env's bin/ (pip's ninja wheel) comes first on its PATH, as on
    a server's (a fresh Debian 12 has no other ninja: bench/first_run.py, 2026-12-04). The stand-in python
    (a TEST DOUBLE) builds only when the ninja it finds is the env's."""
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "ninja").write_text("#!/bin/sh\nexit 0\n")
    (env_bin / "ninja").chmod(0o755)
    python = env_bin / "python"
    python.write_text(
        STANDIN_JIT.replace(
            "#!/bin/sh\n", f'#!/bin/sh\n[ "$(command -v ninja)" = "{env_bin}/ninja" ] || exit 7\n'
        )
    )
    python.chmod(0o755)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    rc, result = run_module("flashinfer_jit_check", jit_args(python, cuda, tmp_path / "state"))
    assert rc == 0 and result["built"] is True, result
