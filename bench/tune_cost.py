#!/usr/bin/env python3
"""What the tuner's early stop saves: playbooks/tune.yml against an exhaustive search of the same space, side
by side in one run, on the SGLang stand-in (tests/sglang_standin, a TEST DOUBLE) with SGLang's real
bench_serving client.

- The space: 14 candidates (a list space); 12 launchable ones differ in seconds per token (so their ranking
  is known in advance) and in time to ready, one crashes at start-up, one is refused by the known-issues
  table (never launched by either).
- Time to ready is the real server's scaled down: 57-140 s on the lent H200 (docs/gpu-runs.md) times
  --scale (default 0.01: 0.57-1.40 s), spread over the candidates.
- The same workload for both: a cold burst, then steady windows at concurrencies 2 (the objective's), 8, 1.
  (Concurrency 8 does not rank: 8 prompts in one round on a busy 2-core machine measured the stand-in's
  scheduling more than its delays.)
- Exhaustive: every candidate measured in full (tuner_margin so large that nothing stops early).
  Tuner: tuner_margin 0.1 - a candidate whose first window is more than 10% below the incumbent stops there.
  The savings come only from the windows the stopped candidates skip; both launch the same candidates.

Prints each run's wall time, launches, windows measured and winner, and the ratio tuner / exhaustive
(target <= 0.6, issue 22); the winners must be the same.

--breakdown (issue 34 item 7: on the H200 a window's start to the next one's took 21-25 s for 1-5 s of
traffic): the tuner run alone, every task timed (bench/callback_plugins/task_times.py), and for each pair of
windows in a row the time from one window's start to the next one's split into: the traffic (bench_serving's
own duration), the client's start-up and wind-down inside its run (its wall time less the traffic), the
module around the client (the task's wall time less the client's), and the Ansible tasks between the two
(named, slowest first). The client's start-up is split further by two side measurements in the same run:
importing sglang.bench_serving and loading the tokenizer, each in a fresh process. Pairs with a launch
between them (the next candidate) are left out. Since issue 38 one client runs a part of a candidate's
windows: within_client gives one window's end to the next one's start inside it, per_candidate each
candidate's client processes, windows, traffic and client overhead (wall less traffic). --reread TIMES reads
a task times file kept by an earlier --breakdown (an older checkout's too: one client per window). Needs root
(the server role creates a service account) and the bench client venv (built once by
tests/fixtures/bench_serving/bench_env.py).

    .venv/bin/python bench/tune_cost.py [--scale 0.01] [--json OUT] [--breakdown] [--reread TIMES]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
USER = "epforge-tune-bench"
TARGET = 0.6
# ms per token of the 12 launchable candidates, in the order tried: the best, 6 ms, is second, and the next
# best is 50% slower, so that the stand-in's ranking holds on a busy 2-core machine (3, 4 and 5 ms did not:
# the client's own CPU time blurred them, and two runs picked different winners)
DELAYS_MS = [12, 6, 16, 20, 9, 24, 28, 10, 32, 40, 48, 60]
READY_S = (57.0, 140.0)  # the real server's time to ready on the lent H200 (docs/gpu-runs.md)


def space(scale: float) -> list[dict]:
    low, high = READY_S
    step = (high - low) / (len(DELAYS_MS) - 1)
    candidates = [
        {
            "name": f"delay-{delay}ms",
            "env": {
                "SGLANG_STANDIN_TOKEN_DELAY_MS": str(delay),
                "SGLANG_STANDIN_LOAD_SECONDS": f"{(low + i * step) * scale:.2f}",
            },
        }
        for i, delay in enumerate(DELAYS_MS)
    ]
    candidates.append(
        {
            "name": "crashes",
            "env": {
                "SGLANG_STANDIN_CRASH_AFTER": "0.2",
                "SGLANG_STANDIN_CRASH_LINE": "ModuleNotFoundError: No module named 'deep_ep'",
            },
        }
    )
    candidates.append({"name": "nccl-tree", "env": {"NCCL_ALGO": "Tree"}})
    return candidates


def run(
    label: str, base: Path, python: Path, tok: Path, *, scale: float, margin: float, times: Path | None = None
) -> dict:
    port = bench_env.free_port()
    extra = {
        **bench_env.standin_server_vars(base, tok, port, USER),
        "sglang_server_poll_interval": 0.1,
        "tuner_require_gpu": False,
        "tuner_python": str(python),
        "tuner_space": {"list": space(scale)},
        "tuner_workload": {
            "name": "tune-cost",
            "input_len": 32,
            "output_len": 64,
            "num_prompts": 8,
            "concurrencies": [2, 8, 1],
        },
        "tuner_cold_requests": 2,
        "tuner_objective": {"metric": "output_throughput", "goal": "max", "concurrency": 2},
        "tuner_margin": margin,
        "tuner_candidate_limit_s": 600,
        # the stand-in's windows hold 8 prompts: they rank (the H200's default is 64); no re-measure rounds,
        # so both runs launch the same candidates once - this measures the early stop, and the re-measure is
        # bench/tune_decision_sim.py's to judge
        "tuner_min_window_requests": 8,
        "tuner_max_relaunches": 0,
    }
    vars_file = base / f"{label}.json"
    vars_file.write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    if times is not None:
        env.update(
            ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "bench" / "callback_plugins"),
            ANSIBLE_CALLBACKS_ENABLED="epforge.ep.preload,task_times",
            EPFORGE_TASK_TIMES=str(times),
        )
    started = time.monotonic()
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(ROOT / "playbooks" / "tune.yml"), "-e", f"@{vars_file}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    seconds = time.monotonic() - started
    (base / f"{label}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(
            f"{label} run failed (rc {proc.returncode}); log {base / f'{label}.log'}:\n{proc.stdout[-3000:]}"
        )
    fact = json.loads((base / "facts" / "epforge_tuning.fact").read_text())
    stop = dict(extra, sglang_server_state="stopped")
    vars_file.write_text(json.dumps(stop))
    subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(ROOT / "playbooks" / "serve.yml"), "-e", f"@{vars_file}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    return {
        "seconds": round(seconds, 1),
        "launches": proc.stdout.count("TASK [Launch and verify "),
        "windows": sum(len(r.get("steady") or {}) for r in fact["results"]),
        "stopped_early": sum(1 for r in fact["results"] if r["status"] == "stopped_early"),
        "winner": fact["winner"],
        "value": fact["ranking"]["value"],
    }


# Before issue 38 each window was one client run (one task); since, one client runs a part of a candidate's
# windows (module sglang_bench's windows, one task, each window with its own times). Both are read, so a task
# times file kept from an older checkout reads the same way (--reread).
WINDOW_TASKS = ("Measure the cold first burst", "Run the steady window at concurrency")
CLIENT_TASK = "Run the windows in one client"


def side_seconds(python: Path, code: str) -> float:
    """Wall seconds of code in a fresh process of the client's python (its own clock, import included)."""
    timed = f"import time; t = time.monotonic(); {code}; print(time.monotonic() - t)"
    out = subprocess.run([str(python), "-c", timed], capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def is_client(task: dict) -> bool:
    return task["status"] == "ok" and (
        CLIENT_TASK in task["task"] or any(w in task["task"] for w in WINDOW_TASKS)
    )


def traffic(task: dict) -> float:
    if "windows" in task:
        return sum(w["traffic_s"] or 0.0 for w in task["windows"])
    return task["traffic_s"] or 0.0


def candidates(tasks: list[dict]) -> list[list[dict]]:
    """Each launched candidate's client tasks, in order (a launch starts the next candidate)."""
    groups: list[list[dict]] = []
    for task in tasks:
        if "Launch and verify" in task["task"]:
            groups.append([])
        elif groups and is_client(task):
            groups[-1].append(task)
    return [group for group in groups if group]


def per_candidate(tasks: list[dict]) -> dict:
    """Mean per measured candidate: client processes, windows, their wall time, the traffic in it, the
    client's overhead (wall less traffic: start-up, tokenizer, the release's own warm-up request and pause,
    wind-down) and the measurement's wall time (first client task's start to the last one's end)."""
    rows = []
    for group in candidates(tasks):
        client_s = sum(t["client_s"] or 0.0 for t in group)
        moved = sum(traffic(t) for t in group)
        rows.append(
            {
                "clients": len(group),
                "windows": sum(len(t["windows"]) if "windows" in t else 1 for t in group),
                "client_s": client_s,
                "traffic_s": moved,
                "client_overhead_s": client_s - moved,
                "measure_wall_s": group[-1]["end"] - group[0]["start"],
            }
        )
    if not rows:
        return {"candidates": 0}
    return {"candidates": len(rows), **{k: round(statistics.fmean(r[k] for r in rows), 2) for k in rows[0]}}


def within_client(tasks: list[dict]) -> dict:
    """Windows in a row inside one client (one client task): one's end to the next one's start, and each
    window's time in the client beyond its traffic."""
    gaps_s, overhead = [], []
    for task in tasks:
        windows = task.get("windows") if is_client(task) else None
        for a, b in itertools.pairwise(windows or []):
            gaps_s.append(b["started"] - a["finished"])
            overhead.append((a["seconds"] or 0.0) - (a["traffic_s"] or 0.0))
    if not gaps_s:
        return {"pairs": 0}
    return {
        "pairs": len(gaps_s),
        "gap_mean_s": round(statistics.fmean(gaps_s), 3),
        "gap_max_s": round(max(gaps_s), 3),
        "window_overhead_mean_s": round(statistics.fmean(overhead), 2),
    }


def gaps(times: Path) -> dict:
    """Each window's start to the next one's across client tasks, split by part (see the module docstring);
    the windows in a row inside one client; each candidate's client overhead."""
    tasks = [json.loads(line) for line in times.read_text().splitlines() if line.strip()]
    # names as Ansible gives them: "ROLE : NAME"
    windows = [i for i, t in enumerate(tasks) if is_client(t)]
    pairs, between_by_task = [], {}
    for a, b in itertools.pairwise(windows):
        if any("Launch and verify" in t["task"] for t in tasks[a + 1 : b]):
            continue  # the next candidate: its launch is not a gap between windows
        this, after = tasks[a], tasks[b]
        client = this["client_s"] or 0.0
        moved = traffic(this)
        for t in tasks[a + 1 : b]:
            name = t["task"].split(" : ", 1)[-1].split(":")[0].split(" of ")[0]
            between_by_task[name] = between_by_task.get(name, 0.0) + t["end"] - t["start"]
        pairs.append(
            {
                "start_to_start_s": after["start"] - this["start"],
                "traffic_s": moved,
                "client_overhead_s": client - moved,
                "module_overhead_s": (this["end"] - this["start"]) - client,
                "between_tasks_s": after["start"] - this["end"],
                "tasks_between": b - a - 1,
            }
        )
    found: dict = {"per_candidate": per_candidate(tasks), "within_client": within_client(tasks)}
    if not pairs:
        return {"pairs": 0, **found}
    mean = {k: round(statistics.fmean(p[k] for p in pairs), 2) for k in pairs[0]}
    top = sorted(between_by_task.items(), key=lambda kv: -kv[1])[:8]
    return {
        "pairs": len(pairs),
        "mean": mean,
        "between_slowest_total_s": {k: round(v, 2) for k, v in top},
        **found,
    }


def breakdown(python: Path, scale: float) -> dict:
    with bench_env.service_base_dir("epforge-tune-cost-breakdown-", USER) as base:
        tok = bench_env.make_tokenizer_with(python, base / "tokenizer")
        times = base / "task-times.jsonl"
        result = run("breakdown", base, python, tok, scale=scale, margin=0.1, times=times)
        shutil.copy(
            times, Path(tempfile.gettempdir()) / "epforge-tune-cost-task-times.jsonl"
        )  # kept to read again
        split = gaps(times)
        split["client_import_s"] = round(side_seconds(python, "import sglang.bench_serving"), 2)
        split["tokenizer_load_s"] = round(
            side_seconds(
                python, f"from transformers import AutoTokenizer; AutoTokenizer.from_pretrained({str(tok)!r})"
            ),
            2,
        )
    return {"run": result, "gap": split}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.01, help="time to ready: the real server's x this")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--breakdown", action="store_true", help="the gap between windows, part by part")
    parser.add_argument("--reread", help="only read a task times file kept by an earlier --breakdown")
    args = parser.parse_args()
    if args.reread:
        print(json.dumps(gaps(Path(args.reread)), indent=1))
        return 0
    if os.geteuid() != 0:
        sys.exit("tune_cost needs root: the server role creates the service account it runs the stand-in as")
    python = bench_env.bench_client_python()
    if args.breakdown:
        found = breakdown(python, args.scale)
        print(json.dumps(found, indent=1))
        print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        if args.json:
            Path(args.json).write_text(json.dumps(found, indent=1))
        return 0
    results = {}
    for label, margin in (("exhaustive", 1000.0), ("tuner", 0.1)):
        with bench_env.service_base_dir(f"epforge-tune-cost-{label}-", USER) as base:
            tok = bench_env.make_tokenizer_with(python, base / "tokenizer")
            results[label] = run(label, base, python, tok, scale=args.scale, margin=margin)
            print(f"{label}: {json.dumps(results[label])}", flush=True)
    ratio = results["tuner"]["seconds"] / results["exhaustive"]["seconds"]
    same = results["tuner"]["winner"] == results["exhaustive"]["winner"]
    verdict = "OK" if ratio <= TARGET and same else "OVER TARGET" if same else "DIFFERENT WINNERS"
    print(
        f"space of {len(space(args.scale))} candidates, time to ready {READY_S[0] * args.scale:.2f}-"
        f"{READY_S[1] * args.scale:.2f} s (the H200's x {args.scale:g}); "
        f"tuner {results['tuner']['seconds']} s "
        f"({results['tuner']['launches']} launches, {results['tuner']['windows']} windows) vs exhaustive "
        f"{results['exhaustive']['seconds']} s ({results['exhaustive']['launches']} launches, "
        f"{results['exhaustive']['windows']} windows): ratio {ratio:.2f}x (target <= {TARGET}x); winner "
        f"{results['tuner']['winner']} in both: {same}: {verdict}"
    )
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"ratio": ratio, "same_winner": same, **results}, indent=1))
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
