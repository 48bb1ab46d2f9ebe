"""The tuning run's journal (library/tune_journal.py, issue 22): results kept on disk as each candidate
finishes, a rerun of the same plan resuming from them, the ranking by steady-state figures under
constraints, and the early-stop verdict on a first window - both by role tuner's own decision rule
(plugins/module_utils/tune_decision.py: candidates closer than the noise are a declared tie, the early stop
needs the margin and the spread). The module runs as Ansible runs it."""

from __future__ import annotations

import json
import os
import sys
import time

import moduletools
import pytest
import yaml

from playbooks import JSON_CALLBACK, json_report, run_playbook

PLAN = {"candidates": [["fast-but-slow-ttft", "d1"], ["second", "d2"], ["cold-heavy", "d3"], ["crash", "d4"]]}
SEAL_KEY = "0f" * 32
OBJECTIVE = {
    "metric": "output_throughput",
    "goal": "max",
    "concurrency": 16,
    "constraints": [{"figure": "ttft_p99_ms", "max": 500}],
}


def journal(tmp_path, state="read", result=None, check=False, **extra) -> tuple[int, dict]:
    args = {
        "directory": str(tmp_path / "tuning"),
        "plan": PLAN,
        "objective": OBJECTIVE,
        "state": state,
        "seal_key": SEAL_KEY,  # what the action plugin passes (a key derived from the controller's secret)
    }
    if result is not None:
        args["result"] = result
    return moduletools.run_module("tune_journal", {**args, **extra}, check=check)


def window(throughput, ttft) -> dict:
    """One steady window's figures: every one of its 64 requests completed, so it ranks."""
    return {"output_throughput": throughput, "ttft_p99_ms": ttft, "completed": 64, "duration_s": 2.0}


def ok(name, throughput, ttft, cold_throughput=None) -> dict:
    result = {
        "name": name,
        "status": "ok",
        "steady": {"16": window(throughput, ttft)},
        "seconds": 100.0,
    }
    if cold_throughput is not None:
        result["cold"] = {"output_throughput": cold_throughput, "ttft_p99_ms": 5000.0}
    return result


def test_the_fastest_candidate_that_breaks_the_ttft_constraint_loses_to_the_second(tmp_path):
    for result in (
        ok("fast-but-slow-ttft", 4000.0, 900.0),
        ok("second", 2000.0, 300.0),
        # its cold burst is awful (JIT, graph capture) and never ranks; its steady state is third
        ok("cold-heavy", 1000.0, 200.0, cold_throughput=90.0),
        {"name": "crash", "status": "failed", "reason": "died: RuntimeError (class crashed)"},
    ):
        rc, answer = journal(tmp_path, "record", result)
        assert rc == 0 and answer["changed"] is True, answer.get("msg")
    ranking = answer["ranking"]
    assert ranking["winner"] == "second" and ranking["value"] == 2000.0 and ranking["verdict"] == "clear"
    assert ranking["valid"] == ["second", "cold-heavy"]
    assert ranking["invalid"]["fast-but-slow-ttft"] == "breaks its constraints: ttft_p99_ms 900 > 500"
    assert ranking["invalid"]["crash"].startswith("failed: died")
    # the file holds every result, 0600, written whole
    path = answer["path"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [r["name"] for r in json.loads(open(path).read())["results"]] == answer["finished_candidates"]


def test_a_rerun_of_the_same_plan_resumes_and_another_plan_starts_fresh(tmp_path):
    journal(tmp_path, "record", ok("second", 1100.0, 300.0))
    rc, again = journal(tmp_path)
    assert rc == 0 and again["finished_candidates"] == ["second"] and again["changed"] is False
    rc, same = journal(tmp_path, "record", ok("second", 1100.0, 300.0))
    assert same["changed"] is False  # recording the same result again changes nothing
    rc, other = journal(tmp_path, plan={"candidates": [["another", "d9"]]})
    assert other["finished_candidates"] == [] and other["path"] != again["path"]


def test_check_mode_reports_a_record_and_writes_nothing(tmp_path):
    rc, answer = journal(tmp_path, "record", ok("second", 1100.0, 300.0), check=True)
    assert rc == 0 and answer["changed"] is True
    assert not os.path.exists(answer["path"])


@pytest.mark.parametrize(
    ("figures", "stop", "why"),
    [
        (window(700.0, 200.0), True, "65% below the incumbent's 2000: beyond the margin 10%"),
        # 25 % below: beyond the margin, not beyond the spread of one window against one launch
        (window(1500.0, 200.0), False, "within the margin 10% and the spread"),
        (window(3000.0, 800.0), True, "breaks the constraints beyond the margin and the spread"),
    ],
)
def test_a_first_window_is_stopped_early_only_when_it_cannot_win(tmp_path, figures, stop, why):
    journal(tmp_path, "record", ok("second", 2000.0, 300.0))
    started = time.monotonic()
    rc, answer = journal(tmp_path, "window", {"name": "cold-heavy", "figures": figures})
    assert rc == 0 and answer["stop_early"] is stop and why in answer["reason"], answer
    assert answer["changed"] is False and time.monotonic() - started < 30


def test_without_an_incumbent_nothing_is_stopped_for_its_speed(tmp_path):
    rc, answer = journal(tmp_path, "window", {"name": "second", "figures": window(1.0, 10.0)})
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
    for name, tpot in (("a", 12.0), ("b", 4.0), ("c", 7.0)):
        result = {"name": name, "status": "ok", "steady": {"1": {"tpot_median_ms": tpot, "completed": 64}}}
        rc, answer = journal(tmp_path, "record", result, objective=objective)
        assert rc == 0, answer.get("msg")
    assert answer["ranking"]["winner"] == "b" and answer["ranking"]["valid"] == ["b", "c", "a"]


JOURNAL_PLAY = """
- name: The journal as the tuner keeps it
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: {python}
    edit: [{python}, -c, "{edit}"]
    plan: {plan}
    objective: {objective}
  tasks:
    - name: Record the honest candidate
      epforge.ep.tune_journal: &journal
        directory: {directory}
        plan: "{{{{ plan }}}}"
        objective: "{{{{ objective }}}}"
        state: record
        result: {honest}
      register: recorded
    - name: Forge a winner in the file, its seal left as it was
      ansible.builtin.command:
        argv: "{{{{ edit + ['forge', recorded.path] }}}}"
    - name: Read the forged journal
      epforge.ep.tune_journal: {{<<: *journal, state: read}}
    - name: Record again after the forgery
      epforge.ep.tune_journal: *journal
    - name: Cut the journal off
      ansible.builtin.command:
        argv: "{{{{ edit + ['truncate', recorded.path] }}}}"
    - name: Read the cut-off journal
      epforge.ep.tune_journal: {{<<: *journal, state: read}}
    - name: Record again after the cut
      epforge.ep.tune_journal: *journal
    - name: Read the journal written by this controller
      epforge.ep.tune_journal: {{<<: *journal, state: read}}
"""

EDIT = (
    "import json, sys; how, path = sys.argv[1:]; text = open(path).read(); "
    "data = json.loads(text) if how == 'forge' else None; "
    "how == 'forge' and data['results'].append(dict(data['results'][0], name='fake', "
    "steady={'16': {'output_throughput': 99999.0, 'ttft_p99_ms': 1.0}})); "
    "open(path, 'w').write(json.dumps(data) if how == 'forge' else text[: len(text) // 2])"
)


def test_a_journal_edited_by_hand_or_cut_off_is_not_believed_and_the_file_is_named(tmp_path):
    """Issue 35 item 11: the journal is sealed with a key derived from the controller's secret (the probe
    cache's, plugins/module_utils/seal.py). A fake 99999 tok/s winner added by hand is not believed and a
    journal cut in half is not dropped silently: each is a warning naming the file, its candidates run again,
    the file is kept as .rejected; a journal this controller wrote resumes as before."""
    directory = tmp_path / "tuning"
    play = tmp_path / "journal.yml"
    play.write_text(
        JOURNAL_PLAY.format(
            python=sys.executable,
            edit=EDIT.replace('"', '\\"'),
            plan=json.dumps(PLAN),
            objective=json.dumps(OBJECTIVE),
            directory=directory,
            honest=json.dumps(ok("honest", 1000.0, 300.0)),
        )
    )
    yaml.safe_load(play.read_text())
    home = tmp_path / "home"  # the controller's secret, made at first use: a fresh one
    proc = run_playbook(play, env={**JSON_CALLBACK, "HOME": str(home)}, timeout=120)
    tasks = json_report(proc)["plays"][0]["tasks"]
    assert proc.returncode == 0, proc.stdout[-3000:]
    answers = {t["task"]["name"]: t["hosts"]["localhost"] for t in tasks}
    path = answers["Record the honest candidate"]["path"]

    forged = answers["Read the forged journal"]
    assert forged["ranking"]["winner"] is None and forged["finished_candidates"] == [], forged["ranking"]
    warning = " ".join(forged.get("warnings", []))
    assert f"tuning journal {path} is not sealed by this controller" in warning, forged
    assert "its 2 results are not believed" in warning and "candidates run again" in warning

    cut = answers["Read the cut-off journal"]
    assert cut["finished_candidates"] == [] and f"tuning journal {path} is not a whole journal" in " ".join(
        cut.get("warnings", [])
    ), cut
    assert os.path.getsize(f"{path}.rejected") > 0  # the cut-off file, kept aside by the next record

    resumed = answers["Read the journal written by this controller"]
    assert resumed["finished_candidates"] == ["honest"] and not resumed.get("warnings"), resumed
    assert resumed["ranking"]["winner"] == "honest"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert (home / ".cache" / "epforge" / "probe-cache.key").stat().st_mode & 0o777 == 0o600


def test_candidates_closer_than_the_noise_are_a_declared_tie_as_the_tuner_decides(tmp_path):
    """The journal judges by the tuner's rule, not a second one: 1100 and 1000 tok/s from one launch each are
    within the H200's per-launch spread, so neither is claimed faster; the tie goes by the stated rule (here
    the lower TTFT p99, the plan naming no settings: 200 against 400 ms is told apart beyond its noise)."""
    for result in (ok("second", 1100.0, 400.0), ok("cold-heavy", 1000.0, 200.0)):
        rc, answer = journal(tmp_path, "record", result)
        assert rc == 0, answer.get("msg")
    ranking = answer["ranking"]
    assert ranking["verdict"] == "tie" and set(ranking["tie"]["names"]) == {"second", "cold-heavy"}
    assert ranking["winner"] == "cold-heavy" and "TIE" in ranking["reason"]
