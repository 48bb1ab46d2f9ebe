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

from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import build_server_argv, flag_name

STACK = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
FLAGS = json.loads((ROOT / "data" / "sglang_flags" / f"{STACK['sglang']['version']}.json").read_text())
ONE_H200 = gpu_facts("9.0", 1, "none")
# Every pinned release: its stack, and the flag table of its SGLang (flag names move between releases).
STACKS = {
    path.stem: yaml.safe_load(path.read_text())["epforge_stack_spec"]
    for path in sorted((ROOT / "stacks").glob("*.yml"))
}
EIGHT_PCIE = gpu_facts("12.0", 8, "pcie")
BF16_CONFIG = json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "torch_dtype": "bfloat16"})


def plan(host: dict, timeout: float = 120, **args) -> tuple[int, dict]:
    base = {
        "server": {"model_path": "/models/m"},
        "gpu_facts": host,
        "stack": STACK,
        "table": TABLE,
        "flag_table": FLAGS,
        "sglang_version": STACK["sglang"]["version"],
        "concurrencies": [1, 16, 64],
    }
    return moduletools.run_module("tune_plan", {**base, **args}, timeout=timeout)


def names(result: dict, status: str = "planned") -> list[str]:
    return [c["name"] for c in result["candidates"] if c["status"] == status]


def test_a_one_gpu_host_and_an_eight_gpu_pcie_host_get_different_default_spaces():
    rc, one = plan(ONE_H200)
    assert rc == 0, one.get("msg")
    assert names(one) == ["tp1+graph-default", "tp1+graph-bs64", "tp1+graph-off"]
    assert one["space"] == {"kind": "default", "dimensions": ["parallel", "cuda_graph"]}

    rc, eight = plan(EIGHT_PCIE, draft_model="/models/draft", model_config=BF16_CONFIG)
    assert rc == 0, eight.get("msg")
    assert eight["space"]["dimensions"] == ["parallel", "speculative", "cuda_graph", "nccl"]
    # 3 layouts (TP; EP with SGLang 0.5.23 backends none and deepep) x spec off and EAGLE3 at two parameter
    # sets x 3 graphs x 3 all-reduce options (NCCL as it is, NCCL tuned for PCIe, SGLang's PCIe-IPC
    # all-reduce with NCCL as it is)
    assert eight["counts"] == {"planned": 81, "duplicate": 0, "refused": 0}
    assert (
        "PCIe-IPC all-reduce tried (on, NCCL as it is): TP 8 over PCIe, a bfloat16 model" in eight["plan"][1]
    )
    by_name = {c["name"]: c for c in eight["candidates"]}
    fastest_guess = by_name["tp8-ep8-deepep+eagle3-s5k4d8+graph-bs64+nccl-pcie"]
    settings = fastest_guess["settings"]
    assert settings["ep_size"] == 8 and settings["moe_a2a_backend"] == "deepep"
    assert settings["speculative_algorithm"] == "EAGLE3" and settings["cuda_graph_max_bs"] == 64
    assert (settings["speculative_num_steps"], settings["speculative_eagle_topk"]) == (5, 4)
    assert settings["speculative_num_draft_tokens"] == 8
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


def test_this_host_s_earlier_decision_puts_its_valid_candidates_first_winner_first():
    """Likely winners first (issue 38): the earlier run's winner becomes the incumbent at once, so the
    weaker candidates can stop early; the earlier decision outranks the probe's estimate (it measured the
    candidates themselves on this host). A fact that is no JSON is ignored, and the order says so."""
    rc, unordered = plan(EIGHT_PCIE)
    assert rc == 0, unordered.get("msg")
    default_order = names(unordered)
    winner, runner_up = default_order[-1], default_order[-3]
    earlier = {"winner": winner, "ranking": {"valid": [runner_up, winner], "invalid": {}}}
    rc, result = plan(EIGHT_PCIE, earlier=json.dumps(earlier))
    assert rc == 0, result.get("msg")
    order = names(result)
    assert order[:2] == [winner, runner_up]
    assert order[2:] == [n for n in default_order if n not in (winner, runner_up)]
    assert f"its winner {winner} and the 1 other(s) it found valid first" in result["order"]
    assert "no earlier tuning decision on this host" in unordered["order"]
    rc, broken = plan(EIGHT_PCIE, earlier="{cut off")
    assert rc == 0 and names(broken) == default_order and "not JSON: ignored" in broken["order"]


def test_a_space_past_the_limit_is_refused_before_anything_is_judged():
    rc, result = plan(EIGHT_PCIE, max_candidates=5)
    assert rc != 0 and "27 candidates, more than max_candidates (5)" in result["msg"]


def test_a_huge_grid_is_refused_from_its_size_before_any_candidate_is_built():
    """Issue 35 (2): a 4 x 100-value grid is 10^8 candidates; building them all before max_candidates was
    looked at grew the worker to 6.7 GB in 49 s. The space is counted from its dimensions first: refused at
    once (well within the 10 s this allows), naming the count, the dimensions and the limit."""
    grid = {
        key: list(range(1, 101))
        for key in ("max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "cuda_graph_max_bs")
    }
    rc, result = plan(ONE_H200, space={"grid": grid}, timeout=10)
    assert rc != 0, result
    assert "holds 100000000 candidates, more than max_candidates (128)" in result["msg"], result["msg"]
    assert "100 max_running_requests x 100 chunked_prefill_size" in result["msg"]
    assert "before any candidate was built" in result["msg"]


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


def release_plan(stack: dict, server: dict, concurrencies: list[int]) -> dict:
    """The default plan of the one-GPU H200 for this stack's SGLang release."""
    version = stack["sglang"]["version"]
    flag_table = json.loads((ROOT / "data" / "sglang_flags" / f"{version}.json").read_text())
    rc, result = plan(
        ONE_H200,
        server=server,
        stack=stack,
        flag_table=flag_table,
        sglang_version=version,
        concurrencies=concurrencies,
    )
    assert rc == 0, result.get("msg")
    for candidate in result["candidates"]:
        obj = candidate.get("server_object")
        if obj:  # the argv is what the server's one rendering function makes of the object's settings
            assert obj["argv"] == build_server_argv(
                obj["settings"], sglang_version=version, flag_table=flag_table
            )
    return result


def argv_of(result: dict, name: str) -> list[str]:
    return next(c for c in result["candidates"] if c["name"] == name)["server_object"]["argv"]


@pytest.mark.parametrize("stack", STACKS, ids=list(STACKS))
def test_a_request_without_cuda_graphs_still_gets_graphs_tried_and_the_plan_says_so(stack):
    """Issue 34 on an H200: the request had disable_cuda_graph true, and both default candidates ran without
    graphs (graph-bs16 rendered `--cuda-graph-max-bs 16 --disable-cuda-graph`)."""
    stack = STACKS[stack]
    version = stack["sglang"]["version"]
    max_bs = flag_name("cuda_graph_max_bs", version)
    request = {"model_path": "/models/m", "disable_cuda_graph": True}
    result = release_plan(stack, request, [1, 16])
    assert names(result) == ["tp1+graph-default", "tp1+graph-bs16", "tp1+graph-off"]
    default, bs16, off = (argv_of(result, n) for n in names(result))
    assert "--disable-cuda-graph" not in default and not [a for a in default if "cuda-graph" in a]
    assert "--disable-cuda-graph" not in bs16 and bs16[bs16.index(max_bs) :][:2] == [max_bs, "16"]
    assert "--disable-cuda-graph" in off and not [a for a in off if a.startswith("--cuda-graph")]
    # the request's own setting is a candidate (graphs off), and the plan says what each one does with it
    notes = {c["name"]: c["note"] for c in result["candidates"]}
    assert notes["tp1+graph-off"] == "the request's own CUDA-graph settings (disable_cuda_graph: true)"
    assert notes["tp1+graph-bs16"].endswith("in place of the request's disable_cuda_graph: true")
    assert result["plan"][1].startswith(
        "cuda_graph: every candidate sets CUDA graphs itself over the request's disable_cuda_graph: true"
    )
    assert result["plan"][3].startswith("  2. tp1+graph-bs16: planned - CUDA graphs up to batch size 16")


def test_a_request_with_its_own_graph_batch_size_keeps_it_as_one_more_candidate():
    stack = STACKS["cu130-torch211"]  # SGLang 0.5.16, the H200's stack
    result = release_plan(stack, {"model_path": "/models/m", "cuda_graph_max_bs": 48}, [1, 64])
    assert names(result) == ["tp1+graph-default", "tp1+graph-bs64", "tp1+graph-off", "tp1+graph-request"]
    assert argv_of(result, "tp1+graph-request")[-2:] == ["--cuda-graph-max-bs", "48"]
    assert argv_of(result, "tp1+graph-bs64")[-2:] == ["--cuda-graph-max-bs", "64"]
    off = argv_of(result, "tp1+graph-off")
    assert "--disable-cuda-graph" in off and "--cuda-graph-max-bs" not in off  # graphs off drop the size
    assert "--cuda-graph-max-bs" not in argv_of(result, "tp1+graph-default")
    assert result["plan"][-1] == (
        "  4. tp1+graph-request: planned - the request's own CUDA-graph settings (cuda_graph_max_bs: 48)"
    )
    # a request whose size is the largest concurrency's is graph-bs64 itself: no extra candidate
    same = release_plan(stack, {"model_path": "/models/m", "cuda_graph_max_bs": 64}, [1, 64])
    assert names(same) == ["tp1+graph-default", "tp1+graph-bs64", "tp1+graph-off"]
    # a request without graph settings: no notes, the plan as before
    plain = release_plan(stack, {"model_path": "/models/m"}, [1, 64])
    assert all("note" not in c for c in plain["candidates"]) and not plain["plan"][1].startswith("cuda_graph")


def test_a_candidate_with_graphs_off_and_a_graph_batch_size_is_refused_naming_both():
    for space in (
        {"list": [{"name": "off-bs16", "server": {"disable_cuda_graph": True, "cuda_graph_max_bs": 16}}]},
        {"grid": {"cuda_graph_max_bs": [16, 32]}},  # over a request with disable_cuda_graph true
    ):
        rc, result = plan(
            ONE_H200, space=space, server={"model_path": "/models/m", "disable_cuda_graph": True}
        )
        assert rc != 0 and "candidates" not in result
        assert (
            "disable_cuda_graph: true (--disable-cuda-graph) turns CUDA graphs off, but cuda_graph_max_bs: 16"
            in (result["msg"])
        )
        assert (
            "remove cuda_graph_max_bs to run without CUDA graphs, or remove disable_cuda_graph"
            in result["msg"]
        )


# ---------------------------------------------------------------- SGLang's PCIe-IPC all-reduce (issue 37)


def nccl_options(result: dict) -> set[str]:
    return {c["name"].rsplit("+", 1)[1] for c in result["candidates"] if c["status"] == "planned"}


def test_pcie_ipc_is_tried_with_nccl_as_it_is_only_where_it_can_act():
    """On the 8x PCIe host with SGLang 0.5.23 + FlashInfer 0.7.2 and a bf16 model: one more all-reduce option,
    the variable on and no NCCL setting (crossed with NCCL as it is, not with every NCCL set); its object
    carries the variable and the known-issues row no longer warns for it."""
    rc, result = plan(EIGHT_PCIE, model_config=BF16_CONFIG)
    assert rc == 0, result.get("msg")
    assert nccl_options(result) == {"nccl-default", "nccl-pcie", "pcie-ipc"}
    assert result["counts"]["planned"] == 27  # 3 layouts x 3 graphs x 3 all-reduce options
    ipc = next(c for c in result["candidates"] if c["name"] == "tp8+graph-default+pcie-ipc")
    assert ipc["settings"]["env"] == {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert ipc["server_object"]["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert not any(k.startswith("NCCL_") for k in ipc["server_object"]["env"])


@pytest.mark.parametrize(
    ("host", "args", "why"),
    [
        # a float16 model: the kernels serve bf16 only, SGLang would keep every all-reduce on NCCL
        (EIGHT_PCIE, {"model_config": json.dumps({"torch_dtype": "float16"})}, "the model is" and "float16"),
        (
            EIGHT_PCIE,
            {"server": {"model_path": "/models/m", "dtype": "float16"}},
            "the request's dtype is float16",
        ),
        # TP 3 (three GPUs): the kernels build IPC channels for 2, 4 or 8 ranks
        (gpu_facts("12.0", 3, "pcie"), {"model_config": BF16_CONFIG}, "does not apply to TP 3"),
        # deterministic inference turns it off in SGLang
        (
            EIGHT_PCIE,
            {"server": {"model_path": "/models/m", "enable_deterministic_inference": True}},
            "does not apply",
        ),
        # the request already decided: every candidate keeps its value
        (
            EIGHT_PCIE,
            {"server": {"model_path": "/models/m", "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"}}},
            "the request sets SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
        ),
    ],
)
def test_pcie_ipc_is_left_out_where_it_cannot_act_and_the_plan_says_why(host, args, why):
    rc, result = plan(host, **args)
    assert rc == 0, result.get("msg")
    assert "pcie-ipc" not in nccl_options(result) and not any("pcie-ipc" in n for n in names(result))
    line = next(line for line in result["plan"] if "PCIe-IPC" in line)
    assert why in line, line


def test_pcie_ipc_is_left_out_for_a_release_without_it():
    """SGLang 0.5.16 (stack cu130-torch211) has no PCIe-IPC all-reduce: the default space is as before."""
    stack = STACKS["cu130-torch211"]
    assert stack["sglang"]["version"] == "0.5.16"
    flags = json.loads((ROOT / "data" / "sglang_flags" / "0.5.16.json").read_text())
    rc, result = plan(
        EIGHT_PCIE, stack=stack, flag_table=flags, sglang_version="0.5.16", model_config=BF16_CONFIG
    )
    assert rc == 0, result.get("msg")
    assert nccl_options(result) == {"nccl-default", "nccl-pcie"}
    assert any("does not apply to TP 8" in line for line in result["plan"])


def test_no_pcie_ipc_line_where_the_question_does_not_arise():
    """One GPU, or GPUs over NVLink: no all-reduce between PCIe peers, no option and no plan line."""
    for host in (ONE_H200, gpu_facts("9.0", 8, "nvlink")):
        rc, result = plan(host, model_config=BF16_CONFIG)
        assert rc == 0, result.get("msg")
        assert not any("pcie-ipc" in n for n in names(result))
        assert not any("PCIe-IPC" in line for line in result["plan"])


def test_an_unread_model_config_plans_pcie_ipc_and_says_so():
    rc, result = plan(EIGHT_PCIE)
    assert rc == 0, result.get("msg")
    assert "pcie-ipc" in nccl_options(result)
    assert any("the model's dtype is unread" in line for line in result["plan"])


def warnings_of(result: dict) -> list[str]:
    """The module's warnings as text (ansible-core 2.19 returns each as a structured summary)."""
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def test_speculative_candidates_planned_on_random_ids_are_warned_about():
    """Issue 39: a draft's acceptance on random token ids says nothing about real text."""
    rc, on_ids = plan(EIGHT_PCIE, draft_model="/models/draft", model_config=BF16_CONFIG)
    assert rc == 0, on_ids.get("msg")
    warned = [w for w in warnings_of(on_ids) if "planned on random-ids" in w]
    assert len(warned) == 1 and warned[0].startswith("54 speculative candidate(s) (tp8+eagle3-s3k1d4+")
    rc, on_file = plan(EIGHT_PCIE, draft_model="/models/draft", model_config=BF16_CONFIG, dataset="custom")
    assert rc == 0 and not [w for w in warnings_of(on_file) if "random-ids" in w]
    # on the user's prompts NGRAM joins the speculative dimension (SGLang 0.5.23 has it): 3 x 4 x 3 x 3
    assert on_file["counts"]["planned"] == 108
    assert "tp8+ngram+graph-default+nccl-default" in names(on_file)
    rc, no_draft = plan(ONE_H200)
    assert rc == 0 and not [w for w in warnings_of(no_draft) if "random-ids" in w]
