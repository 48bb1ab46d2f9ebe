"""The tuner's rules in Python (issue 38): the objective and its defaults, the order of a candidate's
windows, the early stop, the ranking and the winner's pick, and a request with a candidate's variation over
it (plugins/module_utils/tune_objective.py, tune_settings.py, through role tuner's filters in
plugins/filter/tune.py), and the role's argument spec that types tuner_objective and tuner_workload (checked
once, at the role's start). Pure functions: no host, no server."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.filter.tune import (
    tune_decision,
    tune_run,
    tune_settings,
    tune_verdict,
)
from ansible_collections.epforge.ep.plugins.module_utils.tune_objective import GOALS, largest
from ansible_collections.epforge.ep.plugins.module_utils.tune_plan.space import default_dimensions
from ansible_collections.epforge.ep.plugins.module_utils.workload_defaults import WORKLOAD_DEFAULTS

TUNER = ROOT / "roles" / "tuner"
SPEC = yaml.safe_load((TUNER / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
    "options"
]
DEFAULTS = yaml.safe_load((TUNER / "defaults" / "main.yml").read_text())
WORKLOAD = {"name": "w", "input_len": 8, "output_len": 8, "num_prompts": 4, "concurrencies": [1, 16, 4]}
OBJECTIVE = {"metric": "output_throughput", "constraints": [{"figure": "ttft_p99_ms", "max": 500}]}


def ok(name: str, throughput: float, ttft: float, concurrency: int = 16) -> dict:
    figures = {"output_throughput": throughput, "ttft_p99_ms": ttft, "duration_s": 1.5, "completed": 64}
    return {"name": name, "status": "ok", "steady": {str(concurrency): figures}}


# ------------------------------------------------------------------------- the objective and its defaults


def test_an_objective_without_goal_or_concurrency_gets_max_and_the_largest_of_the_workload():
    run = tune_run(OBJECTIVE, WORKLOAD)
    assert run["objective"] == {**OBJECTIVE, "goal": "max", "concurrency": 16}
    # the objective's window first (the one judged for an early stop), then the others in their order
    assert run["concurrencies"] == [16, 1, 4]
    # one window's workload: each window sets its own concurrency
    assert run["workload"] == {k: v for k, v in WORKLOAD.items() if k != "concurrencies"}
    assert tune_run({"metric": "tpot_median_ms", "goal": "min", "concurrency": 4}, WORKLOAD)[
        "concurrencies"
    ] == [
        4,
        1,
        16,
    ]


def test_the_role_defaults_resolve_and_strings_from_the_command_line_become_numbers():
    run = tune_run(DEFAULTS["tuner_objective"], DEFAULTS["tuner_workload"])
    assert run["objective"]["concurrency"] == max(DEFAULTS["tuner_workload"]["concurrencies"])
    given = {
        "metric": "output_throughput",
        "concurrency": "8",
        "constraints": [{"figure": "ttft_p99_ms", "max": "250"}],
    }
    run = tune_run(given, {"concurrencies": ["1", "8"]})
    assert run["objective"]["concurrency"] == 8 and run["objective"]["constraints"] == [
        {"figure": "ttft_p99_ms", "max": 250.0}
    ]
    assert run["concurrencies"] == [8, 1]


@pytest.mark.parametrize(
    ("objective", "concurrencies", "expect"),
    [
        ({"metric": "output_tput"}, [1], "not a bench figure"),
        ({"metric": "output_throughput", "goal": "best"}, [1], "max or min"),
        ({"metric": "output_throughput", "concurrency": 0}, [1], "positive integer"),
        ({"metric": "output_throughput", "constraints": [{"figure": "ttft_p99_ms"}]}, [1], "exactly one"),
        (
            {"metric": "output_throughput", "constraints": [{"figure": "x", "max": 1}]},
            [1],
            "name a bench figure",
        ),
        ({"metric": "output_throughput"}, [], "non-empty list of positive integers"),
        ({"metric": "output_throughput"}, [0, 4], "non-empty list of positive integers"),
    ],
)
def test_a_malformed_objective_fails_once_naming_the_fault(objective, concurrencies, expect):
    with pytest.raises(AnsibleFilterError, match="the tuning objective is malformed") as failed:
        tune_run(objective, {"concurrencies": concurrencies})
    assert expect in str(failed.value)


def test_steady_figures_default_to_the_largest_concurrency_by_the_same_rule():
    """An objective that names no concurrency (tune_journal called directly) ranks by the largest window
    measured: the rule tune_run applies to the workload's concurrencies."""
    result = {"steady": {"4": {"x": 1}, "16": {"x": 2}, "1": {"x": 3}}}
    assert largest(result["steady"]) == 16
    assert (
        tune_run({"metric": "output_throughput"}, {"concurrencies": [4, 16, 1]})["objective"]["concurrency"]
        == 16
    )


# ----------------------------------------------------------------------------- the early stop and the pick


def test_a_first_window_stops_early_only_against_an_incumbent_or_a_broken_constraint():
    objective = tune_run(OBJECTIVE, WORKLOAD)["objective"]
    first = {"output_throughput": 1.0, "ttft_p99_ms": 10, "duration_s": 1.5, "completed": 64}
    assert tune_verdict([], first, objective) == {
        "stop_early": False,
        "reason": "no incumbent to compare with",
    }
    finished = [ok("a", 1000.0, 300.0), ok("b", 1200.0, 900.0)]  # b breaks the TTFT bound: not the incumbent
    window = {"ttft_p99_ms": 10, "duration_s": 1.5, "completed": 64}
    slow = tune_verdict(finished, {**window, "output_throughput": 300.0}, objective, 0.1)
    assert slow["stop_early"] and "70% below the incumbent's 1000" in slow["reason"]
    # 15 % below: beyond the margin, not beyond the spread of one launch (issue 38: +-10 % per launch)
    assert not tune_verdict(finished, {**window, "output_throughput": 850.0}, objective, 0.1)["stop_early"]
    broken = tune_verdict([], {**window, "output_throughput": 5000.0, "ttft_p99_ms": 1700}, objective, 0.1)
    assert broken["stop_early"] and "ttft_p99_ms 1700 > 500" in broken["reason"]


def test_the_winner_is_the_planned_candidate_the_ranking_names_with_its_figures():
    objective = tune_run(OBJECTIVE, WORKLOAD)["objective"]
    plan = [
        {"name": "a", "status": "planned", "settings": {"tp_size": 1}, "server_object": {"digest": "da"}},
        {"name": "b", "status": "planned", "settings": {"tp_size": 2}, "server_object": {"digest": "db"}},
        {"name": "c", "status": "refused", "settings": {}},
    ]
    results = [
        ok("a", 1000.0, 300.0),
        ok("b", 3000.0, 400.0),  # told apart beyond the spread of one launch (tune_decision)
        {"name": "x", "status": "failed", "reason": "died"},
    ]
    decided = tune_decision(results, plan, objective)
    assert decided["winner"] is plan[1] and decided["ranking"]["valid"] == ["b", "a"]
    assert decided["figures"]["output_throughput"] == 3000.0 and decided["figures"]["ttft_p99_ms"] == 400.0
    assert decided["ranking"]["invalid"] == {"x": "failed: died"}
    none = tune_decision([ok("a", 1000.0, 900.0)], plan, objective)
    assert none["winner"] == {} and none["figures"] == {} and none["ranking"]["winner"] is None
    with pytest.raises(AnsibleFilterError, match="not a candidate of this plan"):
        tune_decision([ok("gone", 1.0, 1.0)], plan, objective)


# ------------------------------------------------------------------------------- request + variation


def test_a_hosts_request_with_the_winners_variation_drops_what_the_winner_cleared():
    """A host of tuner_group builds the group's winner over its own request by the rule the measuring host
    planned with: a default-space graph candidate clears the request's graph batch size (None removes it;
    the role's Jinja merge before issue 38 set it to None instead) and lays its env over the request's."""
    request = {"model_path": "/m", "cuda_graph_max_bs": 32, "env": {"A": "1", "NCCL_PROTO": "Simple"}}
    dimensions = dict(default_dimensions({"gpu_count": 8, "interconnect": "pcie"}, concurrencies=[1, 16]))
    graph_off = next(changes for label, changes, *_ in dimensions["cuda_graph"] if label == "graph-off")
    nccl_env = next(env for label, _changes, env, *_ in dimensions["nccl"] if label == "nccl-pcie")
    settings = tune_settings(request, {"changes": graph_off, "env": nccl_env})
    assert "cuda_graph_max_bs" not in settings and settings["disable_cuda_graph"] is True
    assert settings["env"] == {"A": "1", **nccl_env}
    assert request["cuda_graph_max_bs"] == 32 and request["env"]["NCCL_PROTO"] == "Simple"  # not changed


# ------------------------------------------------------------------------------ the role's argument spec


def validate(**role_vars) -> list[str]:
    """The role's argument spec applied as its start applies it (validate_argument_spec)."""
    values = {**DEFAULTS, **role_vars}
    provided = {k: v for k, v in values.items() if k in SPEC and "{{" not in str(v)}
    return ArgumentSpecValidator(SPEC).validate(provided, validate_role_argument_spec=True).error_messages


def test_the_role_spec_types_the_objective_and_the_workload_with_nested_options():
    assert validate() == []
    assert any(
        "goal" in e and "max, min" in e for e in validate(tuner_objective={"metric": "x", "goal": "best"})
    )
    both = {"metric": "x", "constraints": [{"figure": "ttft_p99_ms", "max": 1, "min": 0}]}
    assert any("mutually exclusive" in e for e in validate(tuner_objective=both))
    neither = {"metric": "x", "constraints": [{"figure": "ttft_p99_ms"}]}
    assert any("one of the following is required" in e for e in validate(tuner_objective=neither))
    assert any("concurrencies" in e for e in validate(tuner_workload={"name": "w"}))
    assert any("max_concurrency" in e for e in validate(tuner_workload={**WORKLOAD, "max_concurrency": 4}))


def test_the_role_spec_agrees_with_the_python_owners():
    """The spec's nested options are data whose owners are Python: the objective's goals, and the workload
    keys of module sglang_bench (each window sets its own max_concurrency)."""
    objective = SPEC["tuner_objective"]["options"]
    assert tuple(objective["goal"]["choices"]) == GOALS
    assert set(objective) == {"metric", "goal", "concurrency", "constraints"}
    assert set(objective["constraints"]["options"]) == {"figure", "max", "min"}
    workload = SPEC["tuner_workload"]["options"]
    # prompt_file is the role's own (a controller path, copied to the host and handed on as dataset_path)
    assert set(workload) == (set(WORKLOAD_DEFAULTS) - {"max_concurrency"}) | {"concurrencies", "prompt_file"}


def test_the_objective_is_resolved_once_per_run_and_no_task_hands_it_to_the_journal():
    """Before issue 38 each tune_journal call re-checked the objective: 2 + 2n times for n candidates."""
    tasks = {p.name: p.read_text() for p in (TUNER / "tasks").glob("*.yml")}
    assert sum(text.count("epforge.ep.tune_run(") for text in tasks.values()) == 1
    for name, text in tasks.items():
        for task in yaml.safe_load(text) or []:
            for inner in [task, *task.get("block", []), *task.get("rescue", [])]:
                assert "objective" not in (inner.get("epforge.ep.tune_journal") or {}), (name, inner["name"])


def test_every_filter_of_the_tuner_has_its_documentation():
    docs = {p.stem for p in Path(ROOT / "plugins" / "filter").glob("tune_*.yml")}
    assert docs == {
        "tune_run",
        "tune_verdict",
        "tune_decision",
        "tune_spent",
        "tune_settings",
        "tune_windows",
        "tune_window_figures",
    }
    # and every filter the two plugin files define has one (a new filter without its doc fails here)
    defined = set()
    for plugin in ("tune", "tune_windows"):
        spec = importlib.util.spec_from_file_location(
            f"_filter_{plugin}", ROOT / "plugins" / "filter" / f"{plugin}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        defined |= set(module.FilterModule().filters())
    assert defined == docs
