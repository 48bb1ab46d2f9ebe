"""The tuning run's journal (library/tune_journal.py, issue 22): results kept on disk as each candidate
finishes, a rerun of the same plan resuming from them, the ranking by steady-state figures under
constraints, and the early-stop verdict on a first window. The module runs as Ansible runs it."""

from __future__ import annotations

import json
import os
import time

import moduletools
import pytest

PLAN = {"candidates": [["fast-but-slow-ttft", "d1"], ["second", "d2"], ["cold-heavy", "d3"], ["crash", "d4"]]}
OBJECTIVE = {
    "metric": "output_throughput",
    "goal": "max",
    "concurrency": 16,
    "constraints": [{"figure": "ttft_p99_ms", "max": 500}],
}


def journal(tmp_path, state="read", result=None, check=False, **extra) -> tuple[int, dict]:
    args = {"directory": str(tmp_path / "tuning"), "plan": PLAN, "objective": OBJECTIVE, "state": state}
    if result is not None:
        args["result"] = result
    return moduletools.run_module("tune_journal", {**args, **extra}, check=check)


def ok(name, throughput, ttft, cold_throughput=None) -> dict:
    result = {
        "name": name,
        "status": "ok",
        "steady": {"16": {"output_throughput": throughput, "ttft_p99_ms": ttft}},
        "seconds": 100.0,
    }
    if cold_throughput is not None:
        result["cold"] = {"output_throughput": cold_throughput, "ttft_p99_ms": 5000.0}
    return result


def test_the_fastest_candidate_that_breaks_the_ttft_constraint_loses_to_the_second(tmp_path):
    for result in (
        ok("fast-but-slow-ttft", 1200.0, 900.0),
        ok("second", 1100.0, 300.0),
        # its cold burst is awful (JIT, graph capture) and never ranks; its steady state is third
        ok("cold-heavy", 1000.0, 200.0, cold_throughput=90.0),
        {"name": "crash", "status": "failed", "reason": "died: RuntimeError (class crashed)"},
    ):
        rc, answer = journal(tmp_path, "record", result)
        assert rc == 0 and answer["changed"] is True, answer.get("msg")
    ranking = answer["ranking"]
    assert ranking["winner"] == "second" and ranking["value"] == 1100.0
    assert ranking["valid"] == ["second", "cold-heavy"]
    assert ranking["invalid"]["fast-but-slow-ttft"] == "breaks its constraints: ttft_p99_ms 900 > 500"
    assert ranking["invalid"]["crash"].startswith("failed: died")
    # the file holds every result, 0600, written whole
    path = answer["path"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [r["name"] for r in json.loads(open(path).read())["results"]] == answer["finished"]


def test_a_rerun_of_the_same_plan_resumes_and_another_plan_starts_fresh(tmp_path):
    journal(tmp_path, "record", ok("second", 1100.0, 300.0))
    rc, again = journal(tmp_path)
    assert rc == 0 and again["finished"] == ["second"] and again["changed"] is False
    rc, same = journal(tmp_path, "record", ok("second", 1100.0, 300.0))
    assert same["changed"] is False  # recording the same result again changes nothing
    rc, other = journal(tmp_path, plan={"candidates": [["another", "d9"]]})
    assert other["finished"] == [] and other["path"] != again["path"]


def test_check_mode_reports_a_record_and_writes_nothing(tmp_path):
    rc, answer = journal(tmp_path, "record", ok("second", 1100.0, 300.0), check=True)
    assert rc == 0 and answer["changed"] is True
    assert not os.path.exists(answer["path"])


@pytest.mark.parametrize(
    ("figures", "stop", "why"),
    [
        (
            {"output_throughput": 700.0, "ttft_p99_ms": 200.0},
            True,
            "more than 10% below the incumbent's 1100",
        ),
        ({"output_throughput": 1050.0, "ttft_p99_ms": 200.0}, False, "within 10%"),
        (
            {"output_throughput": 1500.0, "ttft_p99_ms": 800.0},
            True,
            "breaks the constraints beyond the margin",
        ),
    ],
)
def test_a_first_window_is_stopped_early_only_when_it_cannot_win(tmp_path, figures, stop, why):
    journal(tmp_path, "record", ok("second", 1100.0, 300.0))
    started = time.monotonic()
    rc, answer = journal(tmp_path, "window", {"name": "cold-heavy", "figures": figures})
    assert rc == 0 and answer["stop_early"] is stop and why in answer["reason"], answer
    assert answer["changed"] is False and time.monotonic() - started < 30


def test_without_an_incumbent_nothing_is_stopped_for_its_speed(tmp_path):
    rc, answer = journal(tmp_path, "window", {"name": "second", "figures": {"output_throughput": 1.0}})
    assert rc == 0 and answer["stop_early"] is False and answer["reason"] == "no incumbent to compare with"


@pytest.mark.parametrize(
    ("objective", "expect"),
    [
        ({"metric": "output_tput"}, "not a bench figure"),
        ({"metric": "output_throughput", "goal": "best"}, "max or min"),
        (
            {"metric": "tpot_median_ms", "goal": "min", "constraints": [{"figure": "ttft_p99_ms"}]},
            "exactly one",
        ),
    ],
)
def test_a_malformed_objective_is_refused_naming_the_fault(tmp_path, objective, expect):
    rc, answer = journal(tmp_path, objective=objective)
    assert rc != 0 and expect in answer["msg"], answer["msg"]


def test_the_lowest_tpot_wins_a_min_objective(tmp_path):
    objective = {"metric": "tpot_median_ms", "goal": "min", "concurrency": 1}
    for name, tpot in (("a", 9.0), ("b", 7.5), ("c", 8.0)):
        result = {"name": name, "status": "ok", "steady": {"1": {"tpot_median_ms": tpot}}}
        rc, answer = journal(tmp_path, "record", result, objective=objective)
        assert rc == 0, answer.get("msg")
    assert answer["ranking"]["winner"] == "b" and answer["ranking"]["valid"] == ["b", "c", "a"]
