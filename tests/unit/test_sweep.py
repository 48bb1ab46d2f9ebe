"""playbooks/sweep.yml end to end on this machine: five configurations, each checked against the
known-issues table, launched and verified by the sglang_server role (process manager, the SGLang stand-in:
a TEST DOUBLE told to crash for one configuration), benchmarked by the sglang_benchmark role with SGLang's
REAL bench_serving client, and stopped. One configuration crashes at start, one dies of CUDA out of memory
under its benchmark (classified from the server's log first, the client's symptom second: issue 34 item 4),
one is refused by the table; the sweep goes on and records every outcome, then starts the server that ran
before it again, and fails the run. SGLang's REAL parser (the cached parser-only venv of
tests/sglang_parser_env.py) judges each configuration before its launch, as on a real host
(sglang_server_require_verdict true); the NCCL configuration differs from the baseline only in env.

The server role creates its unprivileged service account: this test uses `epforge-sweep-test` and removes it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
import sglang_parser_env

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

from playbooks import LOCAL_INVENTORY, run_playbook  # noqa: E402

USER = "epforge-sweep-test"
PLAYBOOK = ROOT / "playbooks" / "sweep.yml"
SERVE = ROOT / "playbooks" / "serve.yml"
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
sglang_env = sglang_parser_env.sglang_env
# The server runs as the unprivileged service account: a python it can execute (the stand-in needs only the
# standard library; the project's venv python may live under root's home).


def sweep_configurations(tok: str) -> list[dict]:
    return [
        {"name": "tp-baseline", "server": {}},
        {
            "name": "tp-eagle3-speculative",
            "server": {
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": tok,
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4,
            },
            "env": {"SGLANG_STANDIN_ACCEPT_LENGTH": "2.7"},
        },
        # the stand-in is told to crash the way SGLang does on a host without DeepEP
        {
            "name": "ep-deepep-low-latency",
            "server": {"moe_a2a_backend": "deepep", "deepep_mode": "low_latency"},
            "env": {
                "SGLANG_STANDIN_CRASH_AFTER": "0.2",
                "SGLANG_STANDIN_CRASH_LINE": "ModuleNotFoundError: No module named 'deep_ep'",
            },
        },
        {"name": "tp-nccl-tree", "server": {}, "env": {"NCCL_ALGO": "Tree"}},
        {
            "name": "tp-nccl-p2p-sys-ll",
            "server": {},
            "env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple"},
        },
        # ready and verified (two generations), then dead under the benchmark's first request
        {
            "name": "tp-oom-under-load",
            "server": {},
            "env": {
                "SGLANG_STANDIN_CRASH_ON_REQUEST": "3",
                "SGLANG_STANDIN_CRASH_LINE": OOM_LINE,
            },
        },
    ]


@pytest.fixture
def base_dir():
    """A world-readable base directory: the server runs as the unprivileged service account."""
    with bench_env.service_base_dir("epforge-sweep-", USER) as path:
        yield path


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def assert_each_outcome(outcomes: dict) -> None:
    """ok with figures; a crash at start classified by the launch; a death under the benchmark classified from
    the server's log first (the cause), the client's symptom second; refused by the known-issues table."""
    for name in ("tp-baseline", "tp-eagle3-speculative", "tp-nccl-p2p-sys-ll"):
        assert outcomes[name]["outcome"] == "ok", outcomes[name]
        assert outcomes[name]["figures"]["completed"] == 8
        assert outcomes[name]["figures"]["output_throughput"] > 0
    assert outcomes["tp-eagle3-speculative"]["figures"]["accept_length"] == 2.7
    assert outcomes["tp-baseline"]["figures"]["accept_length"] is None
    crashed = outcomes["ep-deepep-low-latency"]
    assert crashed["outcome"] == "failed" and crashed["stage"] == "sglang_server"
    assert crashed["class"] == "deep_ep_missing", crashed
    oom = outcomes["tp-oom-under-load"]
    assert (
        oom["outcome"] == "failed"
        and oom["stage"] == "sglang_benchmark"
        and oom["class"] == "cuda_out_of_memory"
    )
    assert "CUDA out of memory" in oom["cause"]["line"] and oom["symptom"]["class"] not in ("", "failed"), oom
    assert oom["reason"].startswith(oom["cause"]["summary"]) and "; client: " in oom["reason"], oom
    refused = outcomes["tp-nccl-tree"]
    assert refused["outcome"] == "refused" and refused["class"] == "nccl_algo_tree_with_cuda_graphs"
    assert "Tree" in refused["reason"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_sweep_records_ok_refused_and_failed_and_restores_the_server_before_it(
    bench_client, sglang_env, base_dir
):
    python, tok = bench_client
    port = bench_env.free_port()
    facts = base_dir / "facts"
    extra = {
        **bench_env.standin_server_vars(base_dir, tok, port, USER, sglang_env["python"]),
        "sglang_server_poll_interval": 0.1,
        "sglang_benchmark_python": str(python),
        "sglang_benchmark_require_gpu": False,
        "sglang_benchmark_warmup": False,
        "sglang_benchmark_timeout": 300,
        "sglang_benchmark_sweep": sweep_configurations(str(tok)),
    }
    vars_file = base_dir / "vars.json"
    vars_file.write_text(json.dumps(extra))
    # The workload comes from the inventory (not -e), as on a real host: role params then outrank it, which
    # once made the sweep's per-configuration workload a self-referencing template (seen on the lent H200).
    workload = {"name": "sweep-smoke", "input_len": 64, "output_len": 16, "num_prompts": 8}
    workload["max_concurrency"] = 4
    host_vars = {"localhost": {"sglang_benchmark_workload": workload}}
    inventory = base_dir / "workload-inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": host_vars}}))
    # a server runs before the sweep: the sweep starts it again at its end
    served = run_playbook(SERVE, vars_file=vars_file, timeout=600)
    assert served.returncode == 0, served.stdout[-4000:]
    before = json.loads((facts / "epforge_sglang_server.fact").read_text())["settings_digest"]
    started = time.monotonic()
    proc = run_playbook(PLAYBOOK, vars_file=vars_file, inventories=(LOCAL_INVENTORY, inventory), timeout=1200)
    elapsed = time.monotonic() - started
    (base_dir.parent / f"{base_dir.name}-playbook.log").write_text(proc.stdout + proc.stderr)
    # a configuration failed: the run fails, after the outcomes were recorded and the server restored
    assert proc.returncode != 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Fail where one of these steps recorded a failure: sweep" in proc.stdout
    assert "sweep failed: tp-baseline: ok" in proc.stdout

    outcomes = {
        o["name"]: o for o in json.loads((facts / "epforge_sweep.fact").read_text())["configurations"]
    }
    assert list(outcomes) == [c["name"] for c in extra["sglang_benchmark_sweep"]]
    assert_each_outcome(outcomes)
    # every launched configuration's digest has its verdict (the NCCL one shares the baseline's argv)
    verdicts = json.loads((base_dir / "state" / "sglang-flags-check.json").read_text())["verdicts"]
    ok_digests = {o["settings_digest"] for o in outcomes.values() if o["outcome"] == "ok"}
    assert len(ok_digests) == 3 and ok_digests <= {v["digest"] for v in verdicts}
    # five launched (the crashing ones too: judged before their launch), five verdicts of this sweep's plan
    assert len({v["digest"] for v in verdicts if v["plan"].startswith("sweep-")}) == 5

    history = json.loads((facts / "epforge_bench.fact").read_text())["history"]
    labels = ["tp-baseline", "tp-eagle3-speculative", "tp-nccl-p2p-sys-ll", "tp-oom-under-load"]
    assert [e["label"] for e in history] == labels
    assert [e["status"] for e in history] == ["ok", "ok", "ok", "failed"]
    assert history[1]["server"]["speculative_algorithm"] == "EAGLE3"
    assert history[2]["server"]["env"]["NCCL_P2P_LEVEL"] == "SYS"
    assert "tp-nccl-tree: refused" in proc.stdout and "ep-deepep-low-latency: failed" in proc.stdout
    # the server that ran before the sweep runs again
    running = json.loads((facts / "epforge_sglang_server.fact").read_text())
    assert running["state"] == "started" and running["settings_digest"] == before
    stop = base_dir / "stop-vars.json"
    stop.write_text(json.dumps({**extra, "sglang_server_state": "stopped"}))
    assert run_playbook(SERVE, vars_file=stop, timeout=300).returncode == 0
    assert port_is_free(port)
    print(f"sweep of 6 configurations took {elapsed:.0f} s")
