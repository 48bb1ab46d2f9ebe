#!/usr/bin/env python3
"""What the gateway costs and what it buys: SGLang's own bench_serving (the real client) against the SGLang
stand-in (a TEST DOUBLE of the server) directly and through the real smg (Shepherd Model Gateway, PyPI), and
through smg in front of 3 stand-ins against 1.

The stand-ins are sleep-bound (a first-token delay and a per-token delay, no computation) with a capacity
(--max-running-requests: at most that many generations at once, the rest queued), so the run measures the
path, not this 2-core machine's CPU; the CPU the direct run used is reported (target: under half the cores).

1. Overhead, interleaved A/B pairs (the order alternates): one stand-in, concurrency = its capacity.
   Reported: output throughput ratio through/direct (median of pairs; target >= 0.97) and the TTFT median
   added by the gateway (median of pair differences; target <= 2 ms).
2. Scaling: smg in front of 3 stand-ins against smg in front of 1, concurrency 3x the capacity.
   Reported: output throughput ratio (median of pairs; target >= 2.7x).

Usage: .venv/bin/python bench/gateway_overhead.py [--pairs 3] [--prompts 96] [--policy cache_aware]
       [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "collections"))
import bench_env  # noqa: E402
from hub_mirror import free_port  # noqa: E402

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (  # noqa: E402
    bench_argv,
    extract_figures,
    normalize_workload,
    parse_result_lines,
)

CAPACITY = 4  # --max-running-requests of every stand-in
STANDIN_ENV = {"SGLANG_STANDIN_TOKEN_DELAY_MS": "8", "SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS": "40"}
MODEL = "/models/gateway-bench"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_workers(count: int) -> list[tuple[subprocess.Popen, str]]:
    return [
        bench_env.start_standin(MODEL, env=STANDIN_ENV, extra_args=["--max-running-requests", str(CAPACITY)])
        for _ in range(count)
    ]


def start_gateway(urls: list[str], policy: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--worker-urls", *urls, "--policy", policy, "--health-check-interval-secs", "5"]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/workers", timeout=2) as response:  # noqa: S310 - http on loopback
                workers = json.load(response).get("workers") or []
            if len(workers) == len(urls) and all(w.get("is_healthy") for w in workers):
                return proc, url
        except OSError:
            pass
        time.sleep(0.25)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"smg did not list {len(urls)} healthy workers in 60 s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def run_client(python: Path, url: str, tok: Path, workload: dict, out: Path) -> tuple[dict, float]:
    """One bench_serving run; (figures, CPU seconds the client used)."""
    out.unlink(missing_ok=True)
    argv = bench_argv(str(python), url, workload, str(out), tokenizer=str(tok))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_serving failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return extract_figures(parse_result_lines(out.read_text())[-1]), cpu


def overhead(python: Path, tok: Path, args, work: Path) -> dict:
    workload = normalize_workload(
        {
            "name": "gateway-overhead",
            "input_len": 32,
            "output_len": 64,
            "num_prompts": args.prompts,
            "max_concurrency": CAPACITY,
            "seed": 1,
        }
    )
    workers = start_workers(1)
    (server, direct_url) = workers[0]
    gateway, gateway_url = start_gateway([direct_url], args.policy, work / "smg-overhead.log")
    pairs = []
    try:
        run_client(python, direct_url, tok, workload, work / "warm.jsonl")  # warm both paths once
        run_client(python, gateway_url, tok, workload, work / "warm.jsonl")
        for i in range(args.pairs):
            order = [("direct", direct_url), ("gateway", gateway_url)]
            if i % 2:
                order.reverse()
            pair = {}
            for name, url in order:
                server_cpu0 = cpu_seconds(server.pid)
                started = time.monotonic()
                figures, client_cpu = run_client(python, url, tok, workload, work / f"{name}.jsonl")
                wall = time.monotonic() - started
                used = (client_cpu + cpu_seconds(server.pid) - server_cpu0) / wall
                pair[name] = {"figures": figures, "cores_used": round(used, 3)}
            pairs.append(pair)
    finally:
        stop(gateway)
        bench_env.stop(server)
    ratios = [
        p["gateway"]["figures"]["output_throughput"] / p["direct"]["figures"]["output_throughput"]
        for p in pairs
    ]
    added = [
        p["gateway"]["figures"]["ttft_median_ms"] - p["direct"]["figures"]["ttft_median_ms"] for p in pairs
    ]
    return {
        "workload": workload,
        "pairs": pairs,
        "throughput_ratio": round(statistics.median(ratios), 4),
        "ttft_added_ms": round(statistics.median(added), 3),
        "direct_cores_used": max(p["direct"]["cores_used"] for p in pairs),
    }


def scaling(python: Path, tok: Path, args, work: Path) -> dict:
    workload = normalize_workload(
        {
            "name": "gateway-scaling",
            "input_len": 32,
            "output_len": 64,
            "num_prompts": args.prompts,
            "max_concurrency": 3 * CAPACITY,
            "seed": 2,
        }
    )
    workers = start_workers(3)
    gateways = {}
    try:
        gateways["1"] = start_gateway([workers[0][1]], args.policy, work / "smg-1.log")
        gateways["3"] = start_gateway([url for _, url in workers], args.policy, work / "smg-3.log")
        pairs = []
        for i in range(args.pairs):
            order = ["1", "3"] if i % 2 == 0 else ["3", "1"]
            pairs.append(
                {
                    n: run_client(python, gateways[n][1], tok, workload, work / f"scale-{n}.jsonl")[0]
                    for n in order
                }
            )
    finally:
        for proc, _ in gateways.values():
            stop(proc)
        for proc, _ in workers:
            bench_env.stop(proc)
    ratios = [p["3"]["output_throughput"] / p["1"]["output_throughput"] for p in pairs]
    return {"workload": workload, "pairs": pairs, "ratio_3_vs_1": round(statistics.median(ratios), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--policy", default="cache_aware")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    python = bench_env.bench_client_python()
    with tempfile.TemporaryDirectory(prefix="epforge-gateway-bench-") as tmp:
        work = Path(tmp)
        tok = bench_env.make_tokenizer_with(python, work / "tokenizer")
        result = {
            "machine": f"{os.cpu_count()} cores, {os.uname().nodename}",
            "policy": args.policy,
            "capacity_per_worker": CAPACITY,
            "standin_env": STANDIN_ENV,
            "smg": subprocess.run(
                [sys.executable, "-m", "smg", "--version"], check=False, capture_output=True, text=True
            ).stdout.strip(),
            "overhead": overhead(python, tok, args, work),
            "scaling": scaling(python, tok, args, work),
        }
    o, s = result["overhead"], result["scaling"]
    print(f"{result['smg']}, policy {args.policy}, {args.pairs} interleaved pairs of {args.prompts} prompts")
    print(
        f"through smg / direct, output throughput: {o['throughput_ratio']:.4f} (target >= 0.97); TTFT median "
        f"added: {o['ttft_added_ms']:+.2f} ms (target <= 2); direct run used {o['direct_cores_used']:.2f} "
        f"of {os.cpu_count()} cores"
    )
    print(f"3 workers / 1 worker behind smg, output throughput: {s['ratio_3_vs_1']:.2f}x (target >= 2.7)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
