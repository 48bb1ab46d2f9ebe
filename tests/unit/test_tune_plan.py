"""The tuner's plan (library/tune_plan.py, issue 22): the search space of one host, every candidate checked
against the settings schema and judged by the real known-issues table before any launch.

The module runs as Ansible runs it (a JSON args file), with the project's real stack, known-issues table and
SGLang 0.5.23 flag table; the hosts are GPU facts in the shape nvidia_gpu_facts reports."""

from __future__ import annotations

import json

import moduletools
import pytest
import yaml
from conftest import ROOT
from gpu_fact_samples import gpu_facts

STACK = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
FLAGS = json.loads((ROOT / "data" / "sglang_flags" / f"{STACK['sglang']['version']}.json").read_text())
ONE_H200 = gpu_facts("9.0", 1, "none")
EIGHT_PCIE = gpu_facts("12.0", 8, "pcie")


def plan(host: dict, **args) -> tuple[int, dict]:
    base = {
        "server": {"model_path": "/models/m"},
        "gpu_facts": host,
        "stack": STACK,
        "table": TABLE,
        "flag_table": FLAGS,
        "sglang_version": STACK["sglang"]["version"],
        "concurrencies": [1, 16, 64],
    }
    return moduletools.run_module("tune_plan", {**base, **args})


def names(result: dict, status: str = "planned") -> list[str]:
    return [c["name"] for c in result["candidates"] if c["status"] == status]


def test_a_one_gpu_host_and_an_eight_gpu_pcie_host_get_different_default_spaces():
    rc, one = plan(ONE_H200)
    assert rc == 0, one.get("msg")
    assert names(one) == ["tp1+graph-default", "tp1+graph-bs64"]
    assert one["space"] == {"kind": "default", "dimensions": ["parallel", "cuda_graph"]}

    rc, eight = plan(EIGHT_PCIE, draft_model="/models/draft")
    assert rc == 0, eight.get("msg")
    assert eight["space"]["dimensions"] == ["parallel", "speculative", "cuda_graph", "nccl"]
    # 3 layouts (TP; EP with SGLang 0.5.23 backends none and deepep) x spec on/off x 2 graphs x 2 NCCL sets
    assert eight["counts"] == {"planned": 24, "duplicate": 0, "refused": 0}
    by_name = {c["name"]: c for c in eight["candidates"]}
    fastest_guess = by_name["tp8-ep8-deepep+eagle3+graph-bs64+nccl-pcie"]
    settings = fastest_guess["settings"]
    assert settings["ep_size"] == 8 and settings["moe_a2a_backend"] == "deepep"
    assert settings["speculative_algorithm"] == "EAGLE3" and settings["cuda_graph_max_bs"] == 64
    assert settings["env"] == {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple"}
    # judged by the known issues: PCIe turns DeepEP's normal mode to low_latency, and the object says so
    obj = fastest_guess["server_object"]
    assert "deepep_normal_mode_needs_nvlink" in fastest_guess["adjustments"]
    assert obj["settings"]["deepep_mode"] == "low_latency" and "--moe-a2a-backend" in obj["argv"]
    assert obj["env"]["NCCL_P2P_LEVEL"] == "SYS"
    # speculative off removes the keys, it does not set them empty
    assert "speculative_algorithm" not in by_name["tp8+nospec+graph-default+nccl-default"]["settings"]


def test_a_known_dead_end_is_listed_with_its_rule_and_never_planned():
    rc, result = plan(
        EIGHT_PCIE,
        space={"grid": {"tp_size": [8, 16], "env": [{}, {"NCCL_ALGO": "Tree"}]}},
    )
    assert rc == 0, result.get("msg")
    assert names(result) == ["tp_size=8+env-default"]
    refused = {c["name"]: c for c in result["candidates"] if c["status"] == "refused"}
    assert set(refused) == {
        "tp_size=8+env-NCCL_ALGO=Tree",
        "tp_size=16+env-default",
        "tp_size=16+env-NCCL_ALGO=Tree",
    }
    assert [r["id"] for r in refused["tp_size=16+env-default"]["refused_by"]] == ["tp_size_exceeds_gpus"]
    assert "nccl_algo_tree_with_cuda_graphs" in [
        r["id"] for r in refused["tp_size=8+env-NCCL_ALGO=Tree"]["refused_by"]
    ]
    assert all("server_object" not in c for c in refused.values())
    assert result["plan"][-1].startswith("  -  ") and "refused by the known issues" in result["plan"][-1]


def test_a_typo_in_the_space_fails_before_anything_is_judged_naming_the_setting():
    rc, result = plan(EIGHT_PCIE, space={"grid": {"cuda_graph_max_b": [32, 64]}})
    assert rc != 0
    assert "cuda_graph_max_b" in result["msg"] and "cuda_graph_max_bs" in result["msg"]  # did you mean
    assert "candidates" not in result


@pytest.mark.parametrize(
    ("space", "expect"),
    [
        ({"grid": {"tp_size": 8}}, "must be a non-empty list"),
        ({"grid": {}, "list": []}, "either"),
        ({"list": [{"name": "a b", "server": {}}]}, "letters, digits"),
        ({"list": [{"name": "x"}, {"name": "x"}]}, "used twice"),
        ({"list": [{"name": "x", "flags": {}}]}, "unknown keys"),
    ],
)
def test_a_malformed_space_is_refused_with_what_is_wrong(space, expect):
    rc, result = plan(ONE_H200, space=space)
    assert rc != 0 and expect in result["msg"], result["msg"]


def test_two_candidates_that_launch_the_same_server_are_one_launch():
    space = {
        "list": [{"name": "base", "server": {}}, {"name": "same", "server": {"model_path": "/models/m"}}]
    }
    rc, result = plan(ONE_H200, space=space)
    assert rc == 0, result.get("msg")
    [duplicate] = [c for c in result["candidates"] if c["status"] == "duplicate"]
    assert duplicate["name"] == "same" and duplicate["same_as"] == "base"


def test_the_probe_estimate_puts_the_cheaper_parallelism_first():
    ep_cheaper = [
        {"variant": "v", "tokens": 1, "mode": "graph", "tp_us": 90.0, "ep_us": 40.0, "cheaper": "ep"},
        {"variant": "v", "tokens": 64, "mode": "graph", "tp_us": 120.0, "ep_us": 70.0, "cheaper": "ep"},
        {"variant": "v", "tokens": 1, "mode": "eager", "tp_us": 30.0, "ep_us": 60.0, "cheaper": "tp"},
    ]
    rc, result = plan(EIGHT_PCIE, estimate=ep_cheaper)
    assert rc == 0, result.get("msg")
    first = result["candidates"][0]
    assert first["settings"]["ep_size"] == 8, first["name"]
    assert "EP cheaper per decode step in 2 of 2 estimates" in result["order"]
    rc, unordered = plan(EIGHT_PCIE)
    assert unordered["candidates"][0]["name"] == "tp8+graph-default+nccl-default"
    assert "no collective-probe estimate" in unordered["order"]


def test_a_space_past_the_limit_is_refused_before_anything_is_judged():
    rc, result = plan(EIGHT_PCIE, max_candidates=5)
    assert rc != 0 and "12 candidates, more than max_candidates (5)" in result["msg"]


def test_the_api_key_of_the_request_never_shows_in_the_plan():
    rc, result = plan(ONE_H200, server={"model_path": "/models/m", "api_key": "sk-tune-secret"})
    assert rc == 0, result.get("msg")
    assert "sk-tune-secret" not in json.dumps(result)


def curve_points(variant: str, env: dict, per_size_us: float) -> list[dict]:
    """A probe curve in the fact's shape (the tuner role adds each point's variant env)."""
    return [
        {
            "variant": variant,
            "env": env,
            "op": op,
            "size": size,
            "median_us": per_size_us * (1 + size / 2**20),
        }
        for op in ("allreduce", "all_to_all")
        for size in (1024, 65536, 1048576, 16 * 2**20)
    ]


def test_the_latency_curve_puts_the_faster_nccl_settings_first():
    """Within the parallelism the estimate orders, the NCCL settings whose allreduce curve (decode sizes) was
    lowest come first: here the PCIe tuning (NCCL_P2P_LEVEL=SYS, NCCL_PROTO) beat NCCL as it is."""
    pcie = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple"}
    curve = curve_points("default", {}, 40.0) + curve_points("nccl_pcie", pcie, 30.0)
    rc, result = plan(EIGHT_PCIE, curve=curve)
    assert rc == 0, result.get("msg")
    planned = [c for c in result["candidates"] if c["status"] == "planned"]
    first_default = next(i for i, c in enumerate(planned) if c["name"].endswith("nccl-default"))
    assert all(c["name"].endswith("nccl-pcie") for c in planned[:first_default])
    assert planned[0]["settings"]["env"]["NCCL_P2P_LEVEL"] == "SYS"
    assert "lowest with variant nccl_pcie" in result["order"]
    # the other way round when NCCL as it is was faster
    rc, other = plan(
        EIGHT_PCIE, curve=curve_points("default", {}, 20.0) + curve_points("nccl_pcie", pcie, 30.0)
    )
    assert other["candidates"][0]["name"].endswith("nccl-default")
    assert "no latency curve" in plan(EIGHT_PCIE)[1]["order"]
