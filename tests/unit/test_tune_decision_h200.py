"""The tuner's decision replayed over its real journal from one H200 (SGLang 0.5.16, 2026-12-03;
tests/fixtures/gpu_h200_tune/ORIGIN.md): what the CPU tests and the stand-in did not show.

The graph candidates' steady windows (64 prompts) lasted 0.74-0.99 s, and a rule that dropped windows
shorter than 1 s kept only the slow ones: a fixed prompt count finishes sooner the faster the server, so
the duration is the measurement. A window now ranks by its completed requests alone; a short one is listed.
One relaunch of graph-bs16-chunk2048 ran 35 % slower in all three of its windows: the host's per-launch
spread (0.19 pooled) is above the prior (0.10), and the rule uses what it sees."""

from __future__ import annotations

import json
import math
import statistics

import yaml
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.module_utils.tune_decision import (
    NOISE_DEFAULTS,
    decide,
    noise_of,
    spent_s,
    ttft_not_told_apart,
    window_problem,
)

FIXTURE = ROOT / "tests" / "fixtures" / "gpu_h200_tune"
JOURNAL = json.loads((FIXTURE / "journal-20261203.json").read_text())
SPACE = yaml.safe_load((ROOT / "scripts" / "gpu" / "h200-tune.yml").read_text())
REQUEST = yaml.safe_load((ROOT / "scripts" / "gpu" / "h200-inventory.yml").read_text())["all"]["vars"][
    "epforge_server"
]
# The candidates as tune_plan names them: each one's server keys that differ from the request.
CANDIDATES = [
    {"name": c["name"], "changes": {k: v for k, v in c["server"].items() if REQUEST.get(k) != v}, "env": {}}
    for c in SPACE["tuner_space"]["list"]
]
OBJECTIVE = {**SPACE["tuner_objective"]}
RESULTS = JOURNAL["results"]
FIRST_LAUNCHES = [{k: v for k, v in r.items() if k != "relaunches"} for r in RESULTS]


def test_the_journal_is_the_run_of_the_committed_space():
    assert [r["name"] for r in RESULTS] == [
        "graphs-off",
        "graph-bs16",
        "graph-bs16-chunk8192",
        "graph-bs64",
        "graph-bs16-chunk2048",
    ]
    assert {c["name"] for c in CANDIDATES} == {r["name"] for r in RESULTS}
    assert all(r["status"] == "ok" for r in RESULTS)


def test_on_the_h200_the_windows_under_one_second_were_the_fast_ones():
    """Why a duration rule cannot decide which windows rank: within a candidate, the longer window is the
    slower one, so a floor on duration keeps the slowest."""
    noise = noise_of(None)
    for result in RESULTS[1:]:
        windows = result["repeats"]["16"]
        short = [w for w in windows if w["duration_s"] < noise["min_window_s"]]
        long = [w for w in windows if w["duration_s"] >= noise["min_window_s"]]
        if short and long:
            assert max(w["output_throughput"] for w in long) < min(w["output_throughput"] for w in short)
    bs64 = [w["output_throughput"] for w in RESULTS[3]["repeats"]["16"]]
    assert [round(v) for v in bs64] == [11104, 10636, 7487]


def test_every_complete_window_ranks_and_the_short_ones_are_listed():
    decision = decide(FIRST_LAUNCHES, CANDIDATES, OBJECTIVE)
    assert decision["invalid"] == {}
    stats = decision["stats"]
    assert all(s["windows"] == 3 for s in stats.values())
    # each launch's value is the median of its three windows, not its slowest
    assert round(stats["graph-bs64"]["value"]) == 10636
    assert round(stats["graph-bs16"]["value"]) == round(
        statistics.median(w["output_throughput"] for w in RESULTS[1]["repeats"]["16"])
    )
    assert len(stats["graph-bs16"]["short"]) == 3 and "short: lasted 0.88" in stats["graph-bs16"]["short"][0]
    assert stats["graphs-off"]["short"] == []
    assert all(window_problem(w, noise_of(None)) == "" for r in RESULTS for w in r["repeats"]["16"])


def test_the_first_look_relaunches_the_two_leaders_as_the_run_did():
    decision = decide(FIRST_LAUNCHES, CANDIDATES, OBJECTIVE)
    assert decision["verdict"] == "remeasure"
    assert decision["remeasure"] == ["graph-bs64", "graph-bs16-chunk2048"]
    assert decision["valid"][-1] == "graphs-off"


def test_after_the_rounds_the_host_s_spread_makes_the_graph_candidates_a_declared_tie():
    decision = decide(RESULTS, CANDIDATES, OBJECTIVE, final=True)
    stats = decision["stats"]
    assert [round(v) for v in stats["graph-bs16-chunk2048"]["values"]] == [9986, 6656, 10647]
    # the pooled per-launch spread of this host, above the prior the rule starts from
    assert 0.18 < stats["graph-bs64"]["spread"] < 0.20 > NOISE_DEFAULTS["launch_spread"]
    assert decision["verdict"] == "tie"
    assert set(decision["tie"]["names"]) == {
        "graph-bs64",
        "graph-bs16-chunk2048",
        "graph-bs16-chunk8192",
        "graph-bs16",
    }
    # graphs-off (2.8x slower) is told apart from the tie; bs64 and bs16 are each two settings away from
    # the request; bs64's TTFT p99 is lower (34.4 against 40.7 ms) but not beyond its noise: the plan's order
    assert "graphs-off" not in decision["tie"]["names"]
    assert stats["graph-bs64"]["ttft_p99_ms"] < stats["graph-bs16"]["ttft_p99_ms"]
    assert decision["winner"] == "graph-bs16" and decision["tie"]["picked_by"] == "the plan's order"


# 2026-12-04: the same space on the same kind of machine, the code of be8c02a (128-prompt windows). The lease
# ended during graph-bs16-chunk2048's second relaunch, before the decision; the journal is as it was left.
JOURNAL_2 = json.loads((FIXTURE / "journal-20261204.json").read_text())
RESULTS_2 = JOURNAL_2["results"]
TIMELINE_2 = [
    json.loads(line)
    for line in (FIXTURE / "timeline-graph-bs16-chunk8192-relaunch2-20261204.jsonl").read_text().splitlines()
]


def _launch_values(result):
    """Each launch's median steady window (the first launch's, then every relaunch's)."""
    launches = [result, *result.get("relaunches", [])]
    return [statistics.median(w["output_throughput"] for w in launch["repeats"]["16"]) for launch in launches]


def test_the_second_journal_holds_the_rounds_the_run_reached():
    assert JOURNAL_2["plan_digest"] != JOURNAL["plan_digest"]  # a plan of its own (128-prompt windows)
    relaunched = {r["name"]: len(r.get("relaunches", [])) for r in RESULTS_2}
    assert relaunched == {
        "graphs-off": 0,
        "graph-bs16": 0,
        "graph-bs64": 0,
        "graph-bs16-chunk2048": 1,
        "graph-bs16-chunk8192": 2,
    }
    assert all(w["completed"] == 128 for r in RESULTS_2 for w in r["repeats"]["16"])


def test_the_second_run_s_first_look_names_the_leaders_it_relaunched():
    first = [{k: v for k, v in r.items() if k != "relaunches"} for r in RESULTS_2]
    decision = decide(first, CANDIDATES, OBJECTIVE)
    assert decision["verdict"] == "remeasure"
    assert decision["remeasure"] == ["graph-bs16-chunk8192", "graph-bs16-chunk2048"]


def test_the_second_host_was_quieter_and_the_prior_is_the_floor():
    for name in ("graph-bs16-chunk8192", "graph-bs16-chunk2048"):
        values = _launch_values(next(r for r in RESULTS_2 if r["name"] == name))
        logs = [math.log(v) for v in values]
        assert statistics.stdev(logs) < 0.07
    decision = decide(RESULTS_2, CANDIDATES, OBJECTIVE, final=True)
    assert round(decision["stats"]["graph-bs16-chunk8192"]["spread"], 2) == NOISE_DEFAULTS["launch_spread"]


def test_both_runs_replayed_end_in_the_same_tie_and_the_same_pick():
    """The measured leaders differ between the two runs (bs64 and chunk2048, then chunk8192 and chunk2048);
    the rule's answer does not: the four graph candidates tie and graph-bs16 is picked in both."""
    answers = [decide(results, CANDIDATES, OBJECTIVE, final=True) for results in (RESULTS, RESULTS_2)]
    assert [a["verdict"] for a in answers] == ["tie", "tie"]
    assert {frozenset(a["tie"]["names"]) for a in answers} == {
        frozenset({"graph-bs64", "graph-bs16-chunk2048", "graph-bs16-chunk8192", "graph-bs16"})
    }
    assert [a["winner"] for a in answers] == ["graph-bs16", "graph-bs16"]
    # the highest median over launches was a different candidate in each run
    leaders = [max(a["stats"], key=lambda n, a=a: a["stats"][n]["value"]) for a in answers]
    assert leaders == ["graph-bs64", "graph-bs16-chunk8192"]


def test_the_windows_of_one_launch_run_back_to_back():
    """Issue 36's share between windows (<= 10 % of a launch): one client, windows back to back; what a
    window takes beyond its traffic (its prompts built, its results written) is counted against the launch."""
    starts = {e["index"]: e["time"] for e in TIMELINE_2 if e["event"] == "window_start"}
    ends = {e["index"]: e["time"] for e in TIMELINE_2 if e["event"] == "window_end"}
    assert sorted(starts) == sorted(ends) == [0, 1, 2, 3, 4]
    assert all(starts[i + 1] - ends[i] < 0.05 for i in range(4))
    relaunch = next(r for r in RESULTS_2 if r["name"] == "graph-bs16-chunk8192")["relaunches"][1]
    traffic = relaunch["cold"]["duration_s"] + relaunch["warmup"]["16"]["duration_s"]
    traffic += sum(w["duration_s"] for w in relaunch["repeats"]["16"])
    beside = (ends[4] - starts[0]) - traffic
    assert 0 < beside / relaunch["seconds"] < 0.10


# 2026-12-04, third lease: the whole tune on the code of b4c6748 - every window from an empty prefix cache
# (--flush-cache), the two leaders relaunched once, the budget (660 s) spent before round 2, the decision
# recorded on the host and graph-bs64 left serving. The journal as the run finished it.
JOURNAL_3 = json.loads((FIXTURE / "journal-20261204c.json").read_text())
RESULTS_3 = JOURNAL_3["results"]
BUDGET_S = SPACE["tuner_budget_s"]


def test_the_third_run_recorded_the_tie_both_earlier_replays_declare():
    """What the host recorded (epforge_tuning: TIE of the four graph candidates after one relaunch round) is
    the rule's answer over its journal, the same set as the replays of the two cut runs. The host picked
    graph-bs64 by its lower TTFT p99 (42.4 against 50.2 ms); the rule now heeds that figure's noise, and
    graph-bs16 is the pick, as in every other run (test_four_runs_one_pick)."""
    relaunched = {r["name"]: len(r.get("relaunches", [])) for r in RESULTS_3}
    assert relaunched == {
        "graphs-off": 0,
        "graph-bs16": 0,
        "graph-bs16-chunk2048": 0,
        "graph-bs16-chunk8192": 1,
        "graph-bs64": 1,
    }
    first = [{k: v for k, v in r.items() if k != "relaunches"} for r in RESULTS_3]
    assert decide(first, CANDIDATES, OBJECTIVE)["remeasure"] == ["graph-bs16-chunk8192", "graph-bs64"]
    decision = decide(RESULTS_3, CANDIDATES, OBJECTIVE, final=True)
    assert decision["verdict"] == "tie" and decision["winner"] == "graph-bs16"
    assert set(decision["tie"]["names"]) == {
        "graph-bs64",
        "graph-bs16-chunk2048",
        "graph-bs16-chunk8192",
        "graph-bs16",
    }
    assert round(decision["stats"]["graph-bs64"]["value"], 1) == 8775.5  # the value the host's decision shows


def test_a_rerun_of_the_finished_third_tune_finds_its_budget_spent():
    """The same tune again on that host (same journal) skipped its candidates but relaunched the leaders: it
    counted the candidates' seconds alone (651.4 s of 660 s) and found budget left, though the run had
    spent 831.7 s with its relaunches. The count now includes them: nothing left to spend, no round runs."""
    candidates_only = sum(r["seconds"] for r in RESULTS_3)
    assert round(candidates_only, 1) == 651.4 and candidates_only < BUDGET_S
    assert spent_s(RESULTS_3) == 831.7 and spent_s(RESULTS_3) > BUDGET_S


def test_every_window_of_the_third_run_started_from_an_empty_cache():
    """--flush-cache met SGLang 0.5.16: each warm-up found 0 % of its prompts cached, and each steady window
    only its own prompts' reuse (random ids over the smoke tokenizer's 428 base tokens: 36-38 %), where
    the second lease's windows of one launch found 47, 68 and then 98-100 %."""
    shares = [w["cached_token_share"] for r in RESULTS_3 for w in r["repeats"]["16"]]
    assert all(r["warmup"]["16"]["cached_token_share"] == 0.0 for r in RESULTS_3)
    assert max(shares) < 0.45, shares


# 2026-12-04, fourth lease (docs/gpu-runs.md): the whole tune again on a fresh host, the code of d761304,
# and a two-candidate tune (graph-bs16, graph-bs64: scripts/gpu/h200-tune-stray.yml) after it.
JOURNAL_4 = json.loads((FIXTURE / "journal-20261204d.json").read_text())
JOURNAL_4_TWO = json.loads((FIXTURE / "journal-20261204d-two.json").read_text())
ALL_RUNS = {
    "2026-12-03": RESULTS,
    "2026-12-04": RESULTS_2,
    "2026-12-04c": RESULTS_3,
    "2026-12-04d": JOURNAL_4["results"],
    "2026-12-04d-two": JOURNAL_4_TWO["results"],
}


def test_the_fourth_run_s_tie_flipped_its_pick_on_ttft_p99_inside_the_noise():
    """The host recorded the same TIE of the four graph candidates as the third run, but picked graph-bs16
    (TTFT p99 38.6 against graph-bs64's 41.2 ms) where the third picked graph-bs64 (42.4 against 50.2 ms):
    a plain lower TTFT p99 flipped the pick. Each gap sits inside the launches' own TTFT spread."""
    decision = decide(JOURNAL_4["results"], CANDIDATES, OBJECTIVE, final=True)
    assert decision["verdict"] == "tie"
    assert set(decision["tie"]["names"]) == {
        "graph-bs16",
        "graph-bs64",
        "graph-bs16-chunk8192",
        "graph-bs16-chunk2048",
    }
    third = decide(RESULTS_3, CANDIDATES, OBJECTIVE, final=True)["stats"]
    fourth = decision["stats"]
    assert third["graph-bs64"]["ttft_p99_ms"] < third["graph-bs16"]["ttft_p99_ms"]
    assert fourth["graph-bs16"]["ttft_p99_ms"] < fourth["graph-bs64"]["ttft_p99_ms"]
    pair = ["graph-bs16", "graph-bs64"]
    noise = noise_of(None)
    assert ttft_not_told_apart(pair, third, noise) == ttft_not_told_apart(pair, fourth, noise) == pair


def test_four_runs_one_pick():
    """Every run of the space on one H200, replayed: the graph candidates tie, and the pick, made by
    the plan's order once TTFT p99 is judged against its noise, is graph-bs16 in all of them."""
    answers = {run: decide(results, CANDIDATES, OBJECTIVE, final=True) for run, results in ALL_RUNS.items()}
    assert {run: a["verdict"] for run, a in answers.items()} == dict.fromkeys(ALL_RUNS, "tie")
    assert {run: a["winner"] for run, a in answers.items()} == dict.fromkeys(ALL_RUNS, "graph-bs16")
    assert {run: a["tie"]["picked_by"] for run, a in answers.items()} == dict.fromkeys(
        ALL_RUNS, "the plan's order"
    )


def test_the_fourth_run_s_rerun_had_nothing_left_to_spend():
    """The same tune again on the same host and journal ran 20 s and launched nothing (h200_run.sh stage
    tune-rerun: 0 launch or stop tasks): the journal's seconds, relaunches included, exceed the budget."""
    assert spent_s(JOURNAL_4["results"]) == 774.2 > BUDGET_S


# 2026-12-05 (docs/gpu-runs.md): the two-candidate tune on a host whose first run was cut by its call's limit
# during graph-bs64's launch; the same tune again read the journal, ran graph-bs64 alone and was cut in the
# relaunch round it had begun.
JOURNAL_5_CUT = json.loads((FIXTURE / "journal-20261205-two-cut.json").read_text())


def test_the_resumed_tune_s_journal_holds_each_candidate_once():
    """The run after the cut did not measure graph-bs16 again: the journal keeps one result per candidate,
    each with its three steady windows, and no relaunch yet."""
    results = JOURNAL_5_CUT["results"]
    assert [r["name"] for r in results] == ["graph-bs16", "graph-bs64"]
    assert all(r["status"] == "ok" and len(r["repeats"]["16"]) == 3 for r in results)
    assert not any(r.get("relaunches") for r in results)


def test_the_cut_run_was_right_to_relaunch_and_picks_as_the_others_did():
    """Over these first launches (medians 6018 and 7944 tok/s, one launch each) the rule asks for a relaunch
    round - what the host had begun when the cut came; judged final there, it is the same tie with the same
    pick, graph-bs16 by the plan's order, as every earlier run of this space."""
    results = JOURNAL_5_CUT["results"]
    assert decide(results, CANDIDATES, OBJECTIVE, final=False)["verdict"] == "remeasure"
    final = decide(results, CANDIDATES, OBJECTIVE, final=True)
    picked = (final["verdict"], final["winner"], final["tie"]["picked_by"])
    assert picked == ("tie", "graph-bs16", "the plan's order")
