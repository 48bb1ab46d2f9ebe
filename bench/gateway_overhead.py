#!/usr/bin/env python3
"""What the gateway costs and what it buys: SGLang's own bench_serving (the real client) against the SGLang
stand-in (a TEST DOUBLE of the server) directly and through the real smg (Shepherd Model Gateway, PyPI), and
through smg in front of 3 stand-ins against 1.

smg runs with the argv role gateway renders (plugins/module_utils/smg_gateway/request.py) with the role's
defaults (roles/gateway/defaults/main.yml: health checks, the health-check timeout derived from SGLang's
/health wait, worker overload protection off); --also-smg-defaults adds, in part 1, a second smg with its
own defaults (only the addresses, workers, policy and metrics port given), interleaved with the other two.

The stand-ins are sleep-bound (a first-token delay and a per-token delay, no computation) with a capacity
(--max-running-requests: at most that many generations at once, the rest queued), so the run measures the
path, not this 2-core machine's CPU; the CPU the direct run used is reported (target: under half the cores).

1. Overhead, interleaved A/B pairs (the order rotates): one stand-in, concurrency = its capacity.
   Reported: output throughput ratio through/direct (median of pairs; target >= 0.97), the TTFT median
   added by the gateway (median of pair differences; target <= 2 ms) and the CPU smg used per request.
2. Scaling: smg in front of 3 stand-ins against smg in front of 1, concurrency 3x the capacity.
   Reported: output throughput ratio (median of pairs; target >= 2.7x).

Usage: .venv/bin/python bench/gateway_overhead.py [--pairs 3] [--prompts 96] [--policy cache_aware]
       [--also-smg-defaults] [--keep-logs DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
import yaml  # noqa: E402
from hub_mirror import free_port  # noqa: E402

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (  # noqa: E402
    bench_argv,
    extract_figures,
    normalize_workload,
    parse_result_lines,
)
from ansible_collections.epforge.ep.plugins.module_utils.smg_gateway.request import GatewayRequest  # noqa: E402
from ansible_collections.epforge.ep.plugins.module_utils.smg_health import release_default  # noqa: E402

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


def role_flags(urls: list[str], policy: str, port: int) -> list[str]:
    """`smg launch` flags as role gateway renders them with its defaults, for the stand-in's release."""
    defaults = yaml.safe_load((ROOT / "roles" / "gateway" / "defaults" / "main.yml").read_text())
    table = json.loads((ROOT / "data" / "sglang_env" / f"{bench_env.SGLANG_VERSION}.json").read_text())
    params = {
        "workers": urls,
        "host": "127.0.0.1",
        "port": port,
        "metrics_port": free_port(),
        "policy": policy,
        "sglang_health_timeout": release_default(table, bench_env.SGLANG_VERSION),
        "api_key": "",
        "extra_args": [],
    }
    for name in (
        "health_check_interval",
        "health_failure_threshold",
        "health_check_timeout",
        "overload_protection",
        "overload_waiting_requests",
        "overload_token_usage",
    ):
        params[name] = defaults[f"gateway_{name}"]
    return GatewayRequest.from_params(params).flags()


def smg_default_flags(urls: list[str], policy: str, port: int) -> list[str]:
    return [
        "launch",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *urls,
        "--policy",
        policy,
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
    ]


def start_gateway(
    urls: list[str], policy: str, log: Path, flags_of=role_flags
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    flags = flags_of(urls, policy, port)
    argv = [sys.executable, "-m", "smg", *flags]
    with log.open("ab") as out:
        out.write((" ".join(argv) + "\n").encode())
        out.flush()
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
    gateways = {"gateway": start_gateway([direct_url], args.policy, work / "smg-overhead.log")}
    if args.also_smg_defaults:
        gateways["smg_defaults"] = start_gateway(
            [direct_url], args.policy, work / "smg-overhead-defaults.log", smg_default_flags
        )
    urls = {"direct": direct_url} | {name: url for name, (_, url) in gateways.items()}
    pairs = []
    try:
        for url in urls.values():  # warm every path once
            run_client(python, url, tok, workload, work / "warm.jsonl")
        for i in range(args.pairs):
            # each path takes each place in turn (with two, they alternate)
            order = list(urls.items())
            order = order[i % len(order) :] + order[: i % len(order)]
            pair = {}
            for name, url in order:
                server_cpu0 = cpu_seconds(server.pid)
                gateway_cpu0 = cpu_seconds(gateways[name][0].pid) if name in gateways else 0.0
                started = time.monotonic()
                figures, client_cpu = run_client(python, url, tok, workload, work / f"{name}.jsonl")
                wall = time.monotonic() - started
                used = (client_cpu + cpu_seconds(server.pid) - server_cpu0) / wall
                pair[name] = {"figures": figures, "cores_used": round(used, 3)}
                if name in gateways:
                    spent = cpu_seconds(gateways[name][0].pid) - gateway_cpu0
                    pair[name]["smg_cpu_ms_per_request"] = round(
                        1000 * spent / (figures["completed"] or 1), 3
                    )
            pairs.append(pair)
    finally:
        for proc, _ in gateways.values():
            stop(proc)
        bench_env.stop(server)
    result = {"workload": workload, "pairs": pairs}
    for name in gateways:
        ratios = [
            p[name]["figures"]["output_throughput"] / p["direct"]["figures"]["output_throughput"]
            for p in pairs
        ]
        added = [
            p[name]["figures"]["ttft_median_ms"] - p["direct"]["figures"]["ttft_median_ms"] for p in pairs
        ]
        figures = {
            "throughput_ratio": round(statistics.median(ratios), 4),
            "ttft_added_ms": round(statistics.median(added), 3),
            "smg_cpu_ms_per_request": round(
                statistics.median(p[name]["smg_cpu_ms_per_request"] for p in pairs), 3
            ),
        }
        if name == "gateway":
            result.update(figures)
        else:
            result[name] = figures
    result["direct_cores_used"] = max(p["direct"]["cores_used"] for p in pairs)
    return result


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
    parser.add_argument(
        "--also-smg-defaults", action="store_true", help="part 1 also through smg with its own defaults"
    )
    parser.add_argument("--keep-logs", type=Path, help="copy smg's logs into this directory")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    python = bench_env.bench_client_python()
    with tempfile.TemporaryDirectory(prefix="epforge-gateway-bench-") as tmp:
        work = Path(tmp)
        tok = bench_env.make_tokenizer_with(python, work / "tokenizer")
        result = {
            "machine": f"{os.cpu_count()} cores, {os.uname().nodename}",
            "policy": args.policy,
            "gateway_args": "role gateway's" + (", and smg's defaults" if args.also_smg_defaults else ""),
            "capacity_per_worker": CAPACITY,
            "standin_env": STANDIN_ENV,
            "smg": subprocess.run(
                [sys.executable, "-m", "smg", "--version"], check=False, capture_output=True, text=True
            ).stdout.strip(),
            "overhead": overhead(python, tok, args, work),
            "scaling": scaling(python, tok, args, work),
        }
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("smg-*.log"):
                shutil.copy(log, args.keep_logs / log.name)
    o, s = result["overhead"], result["scaling"]
    print(
        f"{result['smg']} ({result['gateway_args']} argv), policy {args.policy}, {args.pairs} interleaved "
        f"pairs of {args.prompts} prompts"
    )
    print(
        f"through smg / direct, output throughput: {o['throughput_ratio']:.4f} (target >= 0.97); TTFT median "
        f"added: {o['ttft_added_ms']:+.2f} ms (target <= 2); smg CPU {o['smg_cpu_ms_per_request']:.2f} ms "
        f"per request; direct run used {o['direct_cores_used']:.2f} of {os.cpu_count()} cores"
    )
    if "smg_defaults" in o:
        d = o["smg_defaults"]
        print(
            f"through smg with its own defaults / direct: {d['throughput_ratio']:.4f}; TTFT median added: "
            f"{d['ttft_added_ms']:+.2f} ms; smg CPU {d['smg_cpu_ms_per_request']:.2f} ms per request"
        )
    print(f"3 workers / 1 worker behind smg, output throughput: {s['ratio_3_vs_1']:.2f}x (target >= 2.7)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
