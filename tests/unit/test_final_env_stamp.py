"""final_env_check's fast path: an unchanged env is answered from the stamp, a changed one is checked in full.

Real venvs holding the small real wheels of test_final_env.py (kernels compiled here, read with a real
cuobjdump). Behaviour, not timing: the result's `check` and `stamp_reason`, the log line, the fact file.
"""

from __future__ import annotations

import json
import os
import subprocess

import moduletools
import pytest
from test_final_env import imported_build, kit, make_env, run  # noqa: F401 (kit is a fixture)

pytestmark = pytest.mark.build


def stamped(tmp_path, **extra) -> dict:
    return {
        "stamp_path": str(tmp_path / "final-env-stamp.json"),
        "facts_dir": str(tmp_path / "facts.d"),
        "serving_fact": str(tmp_path / "facts.d" / "epforge_sglang.fact"),
        **extra,
    }


def test_unchanged_env_is_answered_from_the_stamp_and_a_change_runs_the_full_check(tmp_path, kit):  # noqa: F811
    python = make_env(tmp_path, kit, "torch", "flashinfer", "sglang_kernel", "source_deep_ep")
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "epforge_sglang.fact").write_text(json.dumps({"can_serve": True}))
    args = stamped(tmp_path, settings={"moe_a2a_backend": "deepep"}, deepep_wheel=str(kit["source_deep_ep"]))
    fact = tmp_path / "facts.d" / "epforge_final_env.fact"

    first = run(tmp_path, kit, python, **args)
    assert first["_rc"] == 0 and first["check"] == "full" and first["stamp_reason"] == "no stamp", first
    assert first["changed"] and first["fact_changed"] and first["deep_ep"]["state"] == "verified"
    written = fact.stat().st_mtime_ns
    assert json.loads(fact.read_text())["deep_ep"]["state"] == "verified"

    # unchanged env: the stored verdict, the same components, the fact left alone, the log says so
    again = run(tmp_path, kit, python, **args)
    assert again["_rc"] == 0 and again["check"] == "stamp" and not again["changed"], again
    assert again["components"] == first["components"] and again["ok"]
    assert fact.stat().st_mtime_ns == written
    assert "verdict reused, nothing hashed" in (tmp_path / "final-env.log").read_text().splitlines()[-1]

    # other inputs: the full check runs again
    other = run(tmp_path, kit, python, **{**args, "archs": ["9.0"]})
    assert other["check"] == "full" and other["stamp_reason"] == "inputs changed", other

    # a full SGLang install after it (sgl-deep-ep installed last owns deep_ep): pip rewrote RECORDs, so the
    # full check runs, sees the wrong owner and puts the verified wheel back
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(kit["sgl_deep_ep"])],
        check=True,
        timeout=300,
    )
    assert imported_build(python) == "sgl-deep-ep"
    changed = run(tmp_path, kit, python, **args)
    assert changed["_rc"] == 0 and changed["check"] == "full", changed
    assert changed["stamp_reason"].startswith("env files changed: "), changed
    assert changed["changed"] and changed["deep_ep"]["state"] == "repaired"
    assert imported_build(python) == "source v1.2.1"
    # the fact records the verified DeepEP, not the repair
    assert json.loads(fact.read_text())["deep_ep"]["state"] == "verified"
    assert "replaced" not in json.loads(fact.read_text())["deep_ep"]

    # after a repair the next run checks in full (and changes nothing), the one after answers from the stamp
    settled = run(tmp_path, kit, python, **args)
    assert settled["check"] == "full" and not settled["changed"] and settled["deep_ep"]["state"] == "verified"
    assert run(tmp_path, kit, python, **args)["check"] == "stamp"


def test_serving_follows_the_sglang_fact_and_check_mode_without_env_changes_nothing(tmp_path, kit):  # noqa: F811
    python = make_env(tmp_path, kit, "torch", "flashinfer", "sglang_kernel")
    args = stamped(tmp_path, settings={"extra_args": ["--attention-backend", "fa3"]})
    # no sglang fact (a parser-only env or none yet): recorded, not failed; check mode writes no fact
    dry = run(tmp_path, kit, python, check=True, **args)
    assert dry["_rc"] == 0 and dry["changed"] and dry["fact_changed"] and not dry["ok"], dry
    assert not (tmp_path / "facts.d").exists() and not (tmp_path / "final-env-stamp.json").exists()
    # the sglang fact says the env serves: fa3 without sm_120 kernels fails (a failing verdict is not
    # stamped: every run checks it in full)
    (tmp_path / "facts.d").mkdir()
    (tmp_path / "facts.d" / "epforge_sglang.fact").write_text(json.dumps({"can_serve": True}))
    for _ in range(2):
        failed = run(tmp_path, kit, python, **args)
        assert failed["_rc"] != 0 and "attention_backend fa3 needs sgl_kernel.flash_ops" in failed["msg"]
    # check mode on a host whose env does not exist yet
    missing = run(tmp_path, kit, tmp_path / "nowhere" / "python", check=True, **args)
    assert missing["_rc"] == 0 and missing["env_missing"] and not missing["changed"], missing
    real = run(tmp_path, kit, tmp_path / "nowhere" / "python", **args)
    assert real["_rc"] != 0 and "run role ml_env first" in real["msg"]


def test_a_verdict_from_the_stamp_names_what_it_depends_on_and_a_change_there_changes_the_answer(
    tmp_path,
    kit,  # noqa: F811
):
    """The probe cache's contract (plugins/module_utils/watch.py): the watch list of a no-op answer names the
    stamp, the facts, the python, cuobjdump, the site dir and its RECORDs; removing a distribution or the fact
    changes a watched path's state, and the real rerun answers differently."""
    python = make_env(tmp_path, kit, "torch", "flashinfer", "sglang_kernel")
    (tmp_path / "facts.d").mkdir()
    # a parser-only env: a component that goes away is recorded, not failed
    (tmp_path / "facts.d" / "epforge_sglang.fact").write_text(json.dumps({"can_serve": False}))
    args = stamped(tmp_path, log_path=str(tmp_path / "log" / "final-env.log"))
    first = run(tmp_path, kit, python, **args)
    assert first["_rc"] == 0 and first["check"] == "full" and first["watch"] == [], first
    again = run(tmp_path, kit, python, **args)
    assert again["_rc"] == 0 and again["check"] == "stamp" and not again["changed"], again
    watch = again["watch"]
    assert watch == sorted(set(watch)) and all(p.startswith("/") for p in watch)
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages")).resolve()
    records = [str(p) for p in site.glob("*.dist-info/RECORD")]
    fact_file = str(tmp_path / "facts.d" / "epforge_final_env.fact")
    expected = [args["stamp_path"], fact_file, args["serving_fact"], str(tmp_path / "log"), str(site)]
    expected += [str(python), str(python.resolve()), kit["cuobjdump"], *records]
    expected += again["components"]["torch"]["binaries"]
    assert set(expected) <= set(watch), sorted(set(expected) - set(watch))

    # the verdict depends on flashinfer being installed: remove it as an uninstall would
    before = moduletools.watched_states(watch)
    dist = next(site.glob("flashinfer*.dist-info"))
    dist.rename(tmp_path / dist.name)
    assert str(site) in moduletools.changed_paths(before)
    removed = run(tmp_path, kit, python, **args)
    assert removed["check"] == "full", removed
    assert removed["components"]["flashinfer"] != again["components"]["flashinfer"]
    assert removed["watch"] == []
    (tmp_path / dist.name).rename(dist)
    run(tmp_path, kit, python, **args)
    settled = run(tmp_path, kit, python, **args)
    assert settled["check"] == "stamp" and settled["watch"], settled

    # the fact it compares is deleted: a watched path is missing, the rerun writes it again
    before = moduletools.watched_states(settled["watch"])
    os.unlink(fact_file)
    assert moduletools.changed_paths(before) == [fact_file]
    rewritten = run(tmp_path, kit, python, **args)
    assert rewritten["changed"] and rewritten["fact_changed"] and rewritten["watch"] == [], rewritten
