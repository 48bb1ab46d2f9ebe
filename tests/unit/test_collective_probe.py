"""collective_probe: the TP vs EP estimate on the real 2x H200 capture, input validation, the skip without a
GPU, and the module + probe script end to end on CPU processes (gloo backend: the same code path as NCCL,
no CUDA graphs; its figures say nothing about GPUs). The GPU run itself: tests/fixtures/collective_probe/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from collective_probe import estimate, estimate_by_variant, model_spec, probe_inputs, validate_variants
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from epforge.report.plots import all_plots

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "collective_probe.py"
SCRIPT = ROOT / "roles" / "collective_probe" / "files" / "epforge_collective_probe.py"
FIX = ROOT / "tests" / "fixtures" / "collective_probe"


def run_module(args: dict, tmp_path: Path, *, check: bool = False) -> dict:
    return run_module_in(tmp_path, MODULE, args, check=check, timeout=600)


def test_estimate_from_the_h200_capture():
    fact = json.loads((FIX / "epforge_collective.fact").read_text())
    rows = estimate_by_variant(fact["table"], model_spec({}))
    # the module's estimate of that day (per variant, no path recorded yet) is reproducible from its table
    assert [{k: v for k, v in r.items() if k != "tp_path"} for r in rows] == fact["estimate"]
    assert {r["tp_path"] for r in rows} == {"nccl"}
    by = {(r["variant"], r["mode"], r["tokens"]): r for r in rows}
    one = by[("default", "graph", 1)]
    ar = next(
        r["mean_us"]
        for r in fact["table"]
        if (r["variant"], r["op"], r["mode"], r["tokens"]) == ("default", "allreduce", "graph", 1)
    )
    a2a = next(
        r["mean_us"]
        for r in fact["table"]
        if (r["variant"], r["op"], r["mode"], r["tokens"]) == ("default", "all_to_all", "graph", 1)
    )
    assert one["tp_us"] == pytest.approx(122 * ar, abs=0.1)
    assert one["ep_us"] == pytest.approx(2 * ar + 60 * (ar + 2 * a2a), abs=0.1)
    # at 2 ranks an all_to_all costs about an allreduce, so EP (2 a2a + 1 allreduce per MoE layer) loses
    assert {r["cheaper"] for r in rows} == {"tp"}
    # with DP attention and a much cheaper all_to_all EP would win: the model is not hard-wired to TP
    cheap = [dict(r, mean_us=r["mean_us"] / 10) if r["op"] == "all_to_all" else r for r in fact["table"]]
    dp = estimate_by_variant(cheap, model_spec({"ep_attention_allreduce_per_layer": 0}))
    assert {r["cheaper"] for r in dp} == {"ep"}
    # the verdict rows: each side at its best variant - NVLink (default) has the faster allreduce everywhere
    fastest = estimate(fact["table"], model_spec({}))
    assert len(fastest) == len(rows) // 2 and {r["tp_variant"] for r in fastest} == {"default"}
    assert {r["cheaper"] for r in fastest} == {"tp"}


def test_h200_capture_shape():
    for name in ("default", "nccl_p2p_disabled"):
        raw = json.loads((FIX / f"collective-probe-{name}.json").read_text())
        assert raw["status"] == "ok" and raw["world_size"] == 2 and raw["gpu_name"] == "NVIDIA H200"
        assert len(raw["results"]) == 16 and raw["errors"] == []
        graph = {(r["op"], r["tokens"]): r for r in raw["results"] if r["mode"] == "graph"}
        # bigger messages never get cheaper; graphs beat eager for small messages
        assert graph[("allreduce", 512)]["mean_us"] > graph[("allreduce", 1)]["mean_us"]
    p2p = json.loads((FIX / "collective-probe-nccl_p2p_disabled.json").read_text())
    assert p2p["env"]["NCCL_P2P_DISABLE"] == "1"
    assert "changed=0" in (FIX / "playbook-run2.txt").read_text()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"num_layers": 10, "moe_layers": 11}, "cannot exceed"),
        ({"layers": 61}, "unknown model keys"),
        ({"num_layers": -1}, "must be an integer >= 0"),
    ],
)
def test_model_spec_refuses_bad_counts(bad, message):
    with pytest.raises(ValueError, match=message):
        model_spec(bad)


def test_variants_and_hash():
    assert validate_variants([{"name": "p2p-off", "env": {"NCCL_P2P_DISABLE": 1}}]) == [
        {"name": "p2p-off", "env": {"NCCL_P2P_DISABLE": "1"}}
    ]
    with pytest.raises(ValueError, match="appears twice"):
        validate_variants([{"name": "a"}, {"name": "a"}])
    with pytest.raises(ValueError, match="unknown keys"):
        validate_variants([{"name": "a", "environment": {}}])
    base = {
        "backend": "nccl",
        "gpus": [],
        "world_size": 0,
        "tokens": [1],
        "hidden": 7168,
        "dtype": "bfloat16",
        "iters": 200,
        "warmup": 20,
        "graph_calls": 10,
        "cuda_graphs": True,
        "variants": [],
        "env": {},
        "python": "/p",
    }
    key = digest(probe_inputs(base, "s"))
    assert key == digest(probe_inputs(dict(reversed(base.items())), "s"))
    assert key != digest(probe_inputs({**base, "tokens": [1, 8]}, "s"))
    assert key != digest(probe_inputs(base, "other-script"))


def test_no_gpu_is_a_skip_not_a_failure(tmp_path):
    result = run_module(
        {
            "python": sys.executable,
            "script": str(SCRIPT),
            "gpu_count": 0,
            "log_path": str(tmp_path / "probe.log"),
            "facts_dir": str(tmp_path),
        },
        tmp_path,
    )
    assert result["_rc"] == 0 and result["skipped"] is True and result["changed"] is False
    assert "no GPU" in result["msg"]
    assert not (tmp_path / "epforge_collective.fact").exists()
    bad = run_module(
        {
            "python": "python3",
            "script": str(SCRIPT),
            "tokens": [0],
            "world_size": 1,
            "variants": [{"name": "x y"}],
            "log_path": str(tmp_path / "p.log"),
        },
        tmp_path,
    )
    assert bad["_rc"] != 0
    assert "absolute path" in bad["msg"] and "tokens" in bad["msg"] and "world_size 1" in bad["msg"]


def test_script_reports_missing_cuda_as_skip(bench_client_python, tmp_path):
    """Where torch is importable but no CUDA device exists, the script says so (exit 3, status skipped)."""
    python = bench_client_python  # a python with torch (the bench client venv, built when absent)
    proc = subprocess.run(
        [str(python), str(SCRIPT), "--out", str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["status"] == "skipped" and "no usable CUDA device" in out["reason"]


def test_module_and_script_on_cpu_processes(bench_client_python, tmp_path):
    """The whole module path with real rank processes (gloo): measures, writes the fact; rerun changed=0."""
    python = bench_client_python  # a python with torch (the bench client venv, built when absent)
    args = {
        "python": str(python),
        "script": str(SCRIPT),
        "backend": "gloo",
        "tokens": [1, 8],
        "iters": 10,
        "warmup": 2,
        "variants": [{"name": "default", "env": {}}, {"name": "socket", "env": {"X": "1"}}],
        # SGLang's PCIe-IPC all-reduce cannot act on CPU processes: its variant is recorded as skipped
        "pcie_ipc": True,
        "pcie_ipc_reason": "asked by the test",
        "log_path": str(tmp_path / "log" / "probe.log"),
        "facts_dir": str(tmp_path),
        "output_dir": str(tmp_path / "raw"),
    }
    first = run_module(args, tmp_path)
    assert first["_rc"] == 0, first.get("msg")
    assert first["changed"] is True and first["measured"] is True
    fact = json.loads((tmp_path / "epforge_collective.fact").read_text())
    assert len(fact["table"]) == 2 * 2 * 2  # variants x ops x tokens (eager only on CPU)
    assert {r["mode"] for r in fact["table"]} == {"eager"}
    assert len(fact["estimate_by_variant"]) == 4 and fact["variants"]["socket"]["env"] == {"X": "1"}
    assert len(fact["estimate"]) == 2  # one verdict per mode and token count, each side's fastest variant
    assert {r["path"] for r in fact["table"]} == {"gloo"}
    skipped = fact["variants"]["pcie_ipc"]
    assert skipped["status"] == "skipped" and skipped["env"] == {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert "it needs CUDA devices, this run uses cpu" in skipped["reason"], skipped["reason"]
    assert fact["pcie_ipc"] == {"variants": ["pcie_ipc"], "reason": "asked by the test"}
    assert (tmp_path / "raw" / "collective-probe-socket.json").exists()
    assert "collective probe, variant socket" in (tmp_path / "log" / "probe.log").read_text()
    again = run_module(args, tmp_path)
    assert again["_rc"] == 0 and again["changed"] is False and again["measured"] is False
    assert again["ansible_facts"]["epforge_collective_probe"]["inputs_sha256"] == fact["inputs_sha256"]
    checked = run_module({**args, "force": True}, tmp_path, check=True)
    assert checked["changed"] is True and "would measure" in checked["msg"]


def test_the_latency_curve_on_cpu_processes(bench_client_python, tmp_path):
    """curve_sizes: each op timed on flat messages of each size, per variant (gloo on CPU processes here: the
    shape, not GPU figures); the points land in the fact's curve, and the sizes are part of the inputs."""
    sizes = [1024, 65536, 1048576]
    args = {
        "python": str(bench_client_python),
        "script": str(SCRIPT),
        "backend": "gloo",
        "tokens": [1],
        "curve_sizes": sizes,
        "iters": 5,
        "warmup": 1,
        "variants": [
            {"name": "default", "env": {}},
            {"name": "proto", "env": {"NCCL_PROTO": "LL,LL128,Simple"}},
        ],
        "log_path": str(tmp_path / "log" / "probe.log"),
        "facts_dir": str(tmp_path),
    }
    result = run_module(args, tmp_path)
    assert result["_rc"] == 0, result.get("msg")
    curve = json.loads((tmp_path / "epforge_collective.fact").read_text())["curve"]
    assert sorted((p["variant"], p["op"], p["size"]) for p in curve) == sorted(
        (v, op, size) for v in ("default", "proto") for op in ("allreduce", "all_to_all") for size in sizes
    )
    assert all(p["median_us"] > 0 and p["bytes"] <= p["size"] for p in curve)
    # the message really has the size asked for (bf16: half as many elements); CPU timings are not compared
    assert {p["bytes"] for p in curve if p["op"] == "allreduce"} == set(sizes)
    # epforge report plots it (one PNG per host with a curve)
    fact = json.loads((tmp_path / "epforge_collective.fact").read_text())
    images = dict(
        (caption, path) for caption, path in all_plots({"cpu-host": {"collective": fact}}, [], tmp_path)
    )
    png = images["Collective latency curve on cpu-host"]
    assert mpimg.imread(png).shape[1] > 600
    again = run_module({**args, "curve_sizes": [1024]}, tmp_path, check=True)
    assert again["changed"] is True  # other sizes: another measurement
    bad = run_module({**args, "curve_sizes": [0]}, tmp_path)
    assert bad["_rc"] != 0 and "curve_sizes must be message sizes" in bad["msg"]
