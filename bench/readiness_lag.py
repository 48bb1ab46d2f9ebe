"""Readiness lag of the sglang_server module: how long after a server becomes ready does the module say so?

The SGLang stand-in (tests/sglang_standin, a TEST DOUBLE) is told to become ready at a known instant
(SGLANG_STANDIN_READY_AT, epoch seconds); the sglang_server module (manager `process`) starts it and waits.
For each run this measures
  detect lag  = ready_at (when the module's probe first saw HTTP 200) - the known instant
  report lag  = the moment the module process returned its result - the known instant
                (includes the settings check via /get_server_info and the module's exit)
and, from the stand-in's access log, the real rate of /health probes the server received while loading.

Usage: .venv/bin/python bench/readiness_lag.py [--runs 7] [--poll-interval 0.25] [--load 2.0] [--json F]
Exit status 1 when the median report lag exceeds --target (default 0.5 s) or the probe rate exceeds
1 / (minimum interval 0.05 s).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from module_runner import call_module

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "library" / "sglang_server.py"
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "epforge_sglang_launch.py"
STANDIN = ROOT / "tests" / "sglang_standin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_module(args: dict, workdir: Path) -> tuple[dict, float]:
    """Run the module like Ansible does; return (result, epoch time its process ended)."""
    return call_module(MODULE, args, workdir, timeout=300)


def one_run(index: int, interval: float, load: float, workdir: Path) -> dict:
    run_dir = workdir / f"run{index}"
    run_dir.mkdir()
    log = run_dir / "server.log"
    ready_at = time.time() + load
    args = {
        "name": f"readiness-{index}",
        "manager": "process",
        "settings": {
            "model_path": "/models/standin",
            "port": free_port(),
            "env": {
                "PYTHONPATH": str(STANDIN),
                "SGLANG_STANDIN_READY_AT": f"{ready_at:.6f}",
                "SGLANG_STANDIN_ACCESS_LOG": "1",
            },
        },
        "python": sys.executable,
        "launcher": str(LAUNCHER),
        "log_path": str(log),
        "state_dir": str(run_dir / "state"),
        "timeout": 60,
        "poll_interval": interval,
    }
    try:
        result, ended = run_module(args, run_dir)
    finally:
        run_module({**args, "state": "absent"}, run_dir)
    if result.get("failed"):
        sys.exit(f"run {index}: the module failed: {result.get('msg')}")
    health_hits = sum(1 for line in log.read_text().splitlines() if '"GET /health ' in line)
    return {
        "run": index,
        "detect_lag_s": result["ready_at"] - ready_at,
        "report_lag_s": ended - ready_at,
        "polls": result["polls"],
        "wait_s": result["ready_s"],
        "interval_s": result["poll_interval"],
        "health_requests_seen_by_server": health_hits,
        "server_side_rate_hz": health_hits / result["ready_s"] if result["ready_s"] else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--poll-interval", type=float, default=0.25)
    parser.add_argument("--load", type=float, default=2.0, help="seconds from launch to the ready instant")
    parser.add_argument("--target", type=float, default=0.5, help="median report lag to stay under (s)")
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="epforge-readiness-") as tmp:
        runs = [one_run(i, opts.poll_interval, opts.load, Path(tmp)) for i in range(opts.runs)]
    for r in runs:
        print(
            f"run {r['run']}: detect lag {r['detect_lag_s'] * 1000:7.1f} ms, report lag "
            f"{r['report_lag_s'] * 1000:7.1f} ms, {r['polls']} probes in {r['wait_s']:.2f} s "
            f"(server saw {r['health_requests_seen_by_server']}, {r['server_side_rate_hz']:.1f}/s)"
        )
    summary = {
        "runs": len(runs),
        "poll_interval_s": runs[0]["interval_s"],
        "median_detect_lag_s": statistics.median(r["detect_lag_s"] for r in runs),
        "median_report_lag_s": statistics.median(r["report_lag_s"] for r in runs),
        "max_report_lag_s": max(r["report_lag_s"] for r in runs),
        "max_probe_rate_hz": max(r["server_side_rate_hz"] for r in runs),
        "target_s": opts.target,
    }
    ok = summary["median_report_lag_s"] <= opts.target and summary["max_probe_rate_hz"] <= 1 / 0.05
    ms = {key: round(value * 1000) for key, value in summary.items() if key.endswith("lag_s")}
    print(
        f"median detect lag {ms['median_detect_lag_s']} ms, median report lag "
        f"{ms['median_report_lag_s']} ms (max {ms['max_report_lag_s']} ms), "
        f"target <= {opts.target * 1000:.0f} ms: {'PASS' if ok else 'FAIL'}; poll interval "
        f"{summary['poll_interval_s']} s, highest probe rate the server saw "
        f"{summary['max_probe_rate_hz']:.1f}/s"
    )
    if opts.json:
        opts.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
