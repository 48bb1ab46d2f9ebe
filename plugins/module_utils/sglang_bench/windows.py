"""Several windows in one client process (issue 38): the module side of the one-client driver
(plugins/module_utils/sglang_bench/driver.py, run on the host by the client's python).

- window_workloads: each window's workload - the shared workload with the window's own keys over it (name,
  max_concurrency, num_prompts, seed, ...), validated like any workload; a window without a seed gets the
  shared seed + its position, so no two windows of a call send the same prompts (random-ids prompts are drawn
  from the seed: a repeated seed would find its prompts in the server's prefix cache).
- driver_spec: what the driver runs (each window's bench_serving argv and result file).
- read_timeline: the driver's events as per-window times, the gaps between windows and the client's start-up.

Pure functions; no Ansible.
"""

from __future__ import annotations

import itertools
import json

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    BenchError,
    normalize_workload,
)


def window_workloads(workload: dict | None, windows: list) -> list[dict]:
    """One normalized workload per window, in order; raises BenchError naming every problem (a window that
    is not a mapping, a bad key or value, two windows of one name - their result files would collide)."""
    if not isinstance(windows, list) or not windows:
        raise BenchError("windows must be a non-empty list of mappings (name, max_concurrency, ...)")
    base = dict(workload or {})
    try:
        base_seed = int(normalize_workload(base)["seed"])
    except BenchError:
        base_seed = 0  # the shared workload's own problems are named below, for each window
    problems, result = [], []
    for index, window in enumerate(windows):
        if not isinstance(window, dict):
            problems.append(f"windows[{index}] must be a mapping, got {window!r}")
            continue
        merged = {**base, **{k: v for k, v in window.items() if v is not None}}
        if window.get("seed") is None:
            merged["seed"] = base_seed + index
        try:
            result.append(normalize_workload(merged))
        except BenchError as exc:
            problems.append(f"windows[{index}] ({window.get('name', '?')}): {exc}")
    names = [w["name"] for w in result]
    problems += [f"window name {n!r} is used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise BenchError("bad benchmark windows: " + "; ".join(problems))
    return result


def driver_spec(client_module: str, timeline: str, windows: list[tuple[dict, list[str]]]) -> dict:
    """The driver's input: the client module, the timeline path, and per window its name and bench_serving
    arguments (the argv after `python -m MODULE`)."""
    return {
        "client_module": client_module,
        "timeline": timeline,
        "windows": [{"name": workload["name"], "argv": list(args)} for workload, args in windows],
    }


def read_timeline(text: str) -> dict:
    """{windows: {name: {started, finished, seconds, error[, accept_lengths]}}, order: [names as run],
    startup_s: the driver's start to the client module imported, tokenizer_s: the tokenizer's loads, gaps_s:
    each window's end to the next one's start}; lines a killed driver cut off are skipped. accept_lengths:
    each successful request's speculative acceptance, where the server reported one."""
    events = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record:
            events.append(record)
    times = {e["event"]: e["time"] for e in events if e["event"] in ("start", "imported")}
    windows: dict[str, dict] = {}
    order: list[str] = []
    for e in events:
        if e["event"] == "window_start":
            order.append(e["name"])
            windows[e["name"]] = {"started": e["time"], "finished": None, "seconds": None, "error": None}
        elif e["event"] == "window_end" and e.get("name") in windows:
            window = windows[e["name"]]
            window.update(finished=e["time"], error=e.get("error"))
            if isinstance(e.get("accept_lengths"), list):
                window["accept_lengths"] = e["accept_lengths"]
            window["seconds"] = round(e["time"] - window["started"], 3)
    gaps = [
        round(windows[b]["started"] - windows[a]["finished"], 3)
        for a, b in itertools.pairwise(order)
        if windows[a]["finished"] is not None
    ]
    return {
        "windows": windows,
        "order": order,
        "startup_s": round(times["imported"] - times["start"], 3) if len(times) == 2 else None,
        "tokenizer_s": round(sum(e.get("seconds", 0.0) for e in events if e["event"] == "tokenizer"), 3),
        "gaps_s": gaps,
    }
