# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters tune_windows and tune_window_figures of role tuner: a tuning candidate's measurement windows (issue
38) - what its one bench client runs, in order, and how the windows' records fold into the candidate's result.

Per candidate: the cold burst (the first requests after the launch, concurrency 1: the first-use figure, never
ranks), then per steady concurrency (the objective's first, filter tune_run's order) a warm-up at that
window's own concurrency and lengths (tuner_warmup_rounds x the concurrency prompts: every request of the
first round of a ranked window meets a server that already ran that batch shape, so JIT compiles and lazy
graph capture land in the warm-up, which is recorded and never ranks), then the ranked window (and its
repeats, when a caller asks for them).

The sequence is split after the objective's concurrency: the first part ends with the window the early stop
judges, so the controller judges it (filter tune_verdict, the one owner of that rule) before the rest runs.
Each part is one client process (module sglang_bench's windows). Seeds are the workload's + the position in
the whole sequence, so no two windows of a candidate send the same prompts (random-ids prompts are drawn from
the seed: a repeat would be served from the prefix cache) while every candidate gets the same prompts.

The rules live here (their only user is the role, through these filters), tested by
tests/unit/test_tune_windows.py.
"""

from __future__ import annotations

import copy

from ansible.errors import AnsibleFilterError

DEFAULT_SEED = 42


def window_name(purpose: str, concurrency: int, repeat: int = 1) -> str:
    if purpose == "cold":
        return "cold"
    base = f"{'warmup' if purpose == 'warmup' else 'steady'}-c{concurrency}"
    return base if repeat == 1 else f"{base}-r{repeat}"


def candidate_windows(run: dict, cold_requests: int, warmup_rounds: int = 1, repeats: int = 1) -> dict:
    """{first: [windows up to the judged one], rest: [the others]}; each window {name, purpose (cold, warmup
    or ranked), concurrency, max_concurrency, num_prompts, seed, repeat}. run: filter tune_run's answer."""
    if int(cold_requests) < 1 or int(warmup_rounds) < 0 or int(repeats) < 1:
        raise ValueError(
            f"cold requests >= 1, warm-up rounds >= 0 and repeats >= 1, got {cold_requests}, "
            f"{warmup_rounds}, {repeats}"
        )
    workload = run.get("workload") or {}
    seed = int(workload.get("seed", DEFAULT_SEED))
    prompts = workload.get("num_prompts")
    groups = [[_window("cold", 1, int(cold_requests))]]
    for concurrency in (int(c) for c in run["concurrencies"]):
        group = []
        if int(warmup_rounds) > 0:
            group.append(_window("warmup", concurrency, int(warmup_rounds) * concurrency))
        group += [_window("ranked", concurrency, prompts, r) for r in range(1, int(repeats) + 1)]
        groups.append(group)
    ordered = [window for group in groups for window in group]
    for index, window in enumerate(ordered):
        window["seed"] = seed + index
    split = len(groups[0]) + len(groups[1])
    return {"first": ordered[:split], "rest": ordered[split:]}


def _window(purpose: str, concurrency: int, num_prompts, repeat: int = 1) -> dict:
    window = {
        "name": window_name(purpose, concurrency, repeat),
        "purpose": purpose,
        "concurrency": concurrency,
        "max_concurrency": concurrency,
        "repeat": repeat,
    }
    if num_prompts is not None:
        window["num_prompts"] = int(num_prompts)
    return window


def fold(windows: list[dict], into: dict | None = None) -> dict:
    """The candidate's figures from module sglang_bench's window records (added to `into`, a previous
    fold): {cold: figures, warmup: {concurrency: figures}, steady: {concurrency: the first repeat's figures},
    repeats: {concurrency: [figures of each repeat]}, invalid: [reasons of ranked windows]}. A warm-up or
    cold burst that came back short is recorded with its figures, not counted against the candidate."""
    folded = {"cold": {}, "warmup": {}, "steady": {}, "repeats": {}, "invalid": []}
    for key, value in (into or {}).items():
        folded[key] = copy.deepcopy(value)
    for window in windows or []:
        purpose, figures = window.get("purpose"), window.get("figures") or {}
        key = str(window.get("concurrency"))
        if purpose == "cold":
            folded["cold"] = figures
        elif purpose == "warmup":
            folded["warmup"][key] = figures
        elif purpose == "ranked":
            folded["repeats"][key] = [*folded["repeats"].get(key, []), figures]
            folded["steady"].setdefault(key, figures)
            folded["invalid"] += [f"{window['name']}: {r}" for r in window.get("invalid_reasons") or []]
    return folded


def tune_windows(run, cold_requests, warmup_rounds=1, repeats=1) -> dict:
    """{first, rest}: the windows of one candidate's client calls (run: filter tune_run's answer)."""
    try:
        return candidate_windows(run, int(cold_requests), int(warmup_rounds), int(repeats))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"tune_windows: {exc}") from None


def tune_window_figures(windows, previous=None) -> dict:
    """{cold, warmup, steady, repeats, invalid} of the window records (over a previous fold's)."""
    if not isinstance(windows, list):
        raise AnsibleFilterError(f"tune_window_figures needs module sglang_bench's windows, got {windows!r}")
    return fold(windows, previous if isinstance(previous, dict) else None)


class FilterModule:
    def filters(self):
        return {"tune_windows": tune_windows, "tune_window_figures": tune_window_figures}
