"""Role tuner's windows (plugins/filter/tune_windows.py: filters tune_windows and tune_window_figures):
the order a candidate's one client runs them in, their seeds, the split after the judged window, and how
their records fold into the candidate's result."""

from __future__ import annotations

import pytest

from ansible_collections.epforge.ep.plugins.filter.tune_windows import (
    candidate_windows,
    fold,
    tune_window_figures,
    tune_windows,
)

RUN = {
    "objective": {"metric": "output_throughput", "goal": "max", "concurrency": 16, "constraints": []},
    "concurrencies": [16, 1, 4],
    "workload": {"name": "tune", "input_len": 1024, "output_len": 256, "num_prompts": 64, "seed": 100},
}


def names(windows):
    return [w["name"] for w in windows]


def test_cold_then_a_warm_up_before_each_ranked_window_split_after_the_objective_s():
    got = candidate_windows(RUN, 4)
    assert names(got["first"]) == ["cold", "warmup-c16", "steady-c16"]
    assert names(got["rest"]) == ["warmup-c1", "steady-c1", "warmup-c4", "steady-c4"]
    every = got["first"] + got["rest"]
    # the warm-up runs at its window's own concurrency, one round of it; the ranked window the workload's
    assert [(w["purpose"], w["max_concurrency"], w.get("num_prompts")) for w in every] == [
        ("cold", 1, 4),
        ("warmup", 16, 16),
        ("ranked", 16, 64),
        ("warmup", 1, 1),
        ("ranked", 1, 64),
        ("warmup", 4, 4),
        ("ranked", 4, 64),
    ]


def test_every_window_of_a_candidate_has_its_own_seed_the_same_for_every_candidate():
    got = candidate_windows(RUN, 4)
    seeds = [w["seed"] for w in got["first"] + got["rest"]]
    assert seeds == list(range(100, 107))
    assert candidate_windows(RUN, 4) == got  # the next candidate is sent the same prompts


def test_repeats_and_rounds_and_no_warm_up():
    got = candidate_windows(RUN, 2, warmup_rounds=2, repeats=3)
    assert names(got["first"]) == ["cold", "warmup-c16", "steady-c16", "steady-c16-r2", "steady-c16-r3"]
    assert got["first"][1]["num_prompts"] == 32
    bare = candidate_windows(RUN, 2, warmup_rounds=0)
    assert names(bare["first"]) == ["cold", "steady-c16"] and names(bare["rest"]) == [
        "steady-c1",
        "steady-c4",
    ]
    single = candidate_windows({**RUN, "concurrencies": [16]}, 2)
    assert single["rest"] == []


@pytest.mark.parametrize("bad", [{"cold_requests": 0}, {"warmup_rounds": -1}, {"repeats": 0}])
def test_bad_counts_are_refused(bad):
    counts = {"cold_requests": 4, "warmup_rounds": 1, "repeats": 1, **bad}
    with pytest.raises(ValueError, match="cold requests >= 1"):
        candidate_windows(RUN, **counts)


def record(window: dict, throughput: float, reasons=()) -> dict:
    """A window record as module sglang_bench returns it (the item's own keys, figures, invalid reasons)."""
    return {**window, "figures": {"output_throughput": throughput}, "invalid_reasons": list(reasons)}


def test_the_records_fold_into_cold_warm_up_and_steady_figures_over_both_calls():
    got = tune_windows(RUN, 4)
    first = [record(w, t) for w, t in zip(got["first"], (10.0, 50.0, 90.0), strict=True)]
    folded = tune_window_figures(first, {})
    assert folded["cold"] == {"output_throughput": 10.0}
    assert folded["warmup"] == {"16": {"output_throughput": 50.0}}
    assert folded["steady"] == {"16": {"output_throughput": 90.0}}
    rest = [record(w, t) for w, t in zip(got["rest"], (1.0, 2.0, 3.0, 4.0), strict=True)]
    rest[1]["invalid_reasons"] = ["completed 60 of 64 requests"]
    rest[2]["invalid_reasons"] = ["a warm-up's short run is recorded, not counted"]
    both = tune_window_figures(rest, folded)
    assert both["steady"] == {
        "16": {"output_throughput": 90.0},
        "1": {"output_throughput": 2.0},
        "4": {"output_throughput": 4.0},
    }
    assert both["warmup"]["1"] == {"output_throughput": 1.0} and both["cold"] == {"output_throughput": 10.0}
    assert both["invalid"] == ["steady-c1: completed 60 of 64 requests"]
    assert folded["steady"] == {"16": {"output_throughput": 90.0}}  # the previous fold is left as it was


def test_repeats_fold_into_a_list_with_the_first_as_the_steady_figure():
    got = candidate_windows(RUN, 4, repeats=2)
    folded = fold([record(w, t) for w, t in zip(got["first"], (1.0, 2.0, 3.0, 5.0), strict=True)])
    assert folded["repeats"] == {"16": [{"output_throughput": 3.0}, {"output_throughput": 5.0}]}
    assert folded["steady"] == {"16": {"output_throughput": 3.0}}
