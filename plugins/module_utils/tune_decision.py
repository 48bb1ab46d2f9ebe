"""The tuner's decision under noise it can see (issue 38): rankable windows, median and spread per candidate,
re-measures of close leaders, ties and their rule.

Why: on one H200 the same settings read 8403 then 6923 output tok/s (graphs-bs16) and 7802 then 8277
(graphs-bs64) in two launches minutes apart, so one window of one launch cannot order candidates a few percent
apart. The noise has two parts (docs/tuning.md, bench/tune_decision_sim.py):

- per launch: log-normal, sigma 0.10 (the two pairs above: sqrt(mean(ln(a/b)^2) / 2) = 0.101);
- per window (1 s, 64 prompts, a warm server): sigma 0.03 ("a few percent", docs/gpu-runs.md).

The rule:

1. A window ranks only when it completed at least min_requests (a fixed count, set before it runs). One that
   lasted less than min_window_s still ranks and is listed as short: its duration is the measurement itself
   (a fixed prompt count finishes sooner the faster the server), so dropping short windows kept only the slow
   ones - on the H200 (2026-12-03) every graph candidate's ranked value came from its one slowest window
   (7487 of 11104, 10636, 7487 tok/s). A launch's value is the median of its rankable windows (repeats); a
   candidate's value is the median of its launches' values; the spread is the relative standard deviation of
   one launch's value on this host: what every candidate's repeated launches show, pooled, never below the
   prior (launch and window parts).
2. The candidate's uncertainty is spread / sqrt(launches). Two candidates are told apart when their values
   differ (in log) by more than z times the root of their squared uncertainties.
3. When the best two valid candidates are not told apart, they are relaunched in turn (A, B, A, B: rounds of
   one relaunch each, the leader first), max_relaunches rounds (the bound: 2 x max_relaunches launches more
   per run), and judged again only after the last round (two looks in all, so the wrong-claim rate stays
   near that of one test); still not told apart, the run declares a TIE among every valid candidate not
   told apart from the best, and breaks it by the stated rule: fewer settings away from the request, then
   SGLang's default (every change removes a setting, no env), then the lower TTFT p99 where it is told apart
   beyond its own noise (the same test on the launches' TTFT p99, its spread pooled over the tied and never
   below the prior), then the plan's order. A plain lower TTFT p99 flipped the pick between two runs on one
   H200 (graph-bs64 at 42.9 against 50.2 ms, then graph-bs16 at 38.6 against 41.2 ms, each inside the other
   run's spread; docs/gpu-runs.md, 2026-12-04 fourth lease). The tie and its rule are in the decision.
4. Early stop: a candidate's first window stops it only when it is worse than the incumbent's value beyond
   the margin AND beyond z times the spread of one window of one launch against the incumbent's uncertainty.

Pure functions over the journal's results: no Ansible, no I/O.
"""

from __future__ import annotations

import math
import statistics

from ansible_collections.epforge.ep.plugins.module_utils.tune_objective import DEFAULT_GOAL, broken

# Defaults fitted to the H200 run (module docstring); role tuner's variables override each.
NOISE_DEFAULTS = {
    "min_window_s": 1.0,
    "min_requests": 64,
    "launch_spread": 0.10,
    "window_spread": 0.03,
    "z": 3.0,  # bench/tune_decision_sim.py: 2.8 claimed 0.9-1.1 % wrong winners at a 0 % gap, 3.0 0.5 %
    "max_relaunches": 2,  # rounds: at most 4 launches more in a run, the two leaders in turn
}
TIE_RULE = (
    "fewer settings away from the request, then SGLang's default, then the lower TTFT p99 where told apart "
    "beyond its noise, then the plan's order"
)


def noise_of(noise: dict | None) -> dict:
    """The noise settings with the defaults filled in, numbers as numbers."""
    given = {key: value for key, value in (noise or {}).items() if value is not None}
    merged = {**NOISE_DEFAULTS, **given}
    return {
        key: (int(merged[key]) if key in ("min_requests", "max_relaunches") else float(merged[key]))
        for key in NOISE_DEFAULTS
    }


def window_problem(figures: dict, noise: dict) -> str:
    """Why a window does not rank ('' when it does): fewer requests completed than the minimum. Never its
    duration: that is the measured speed, and a rule on it selects windows by the value they rank with."""
    completed = figures.get("completed")
    if completed is None or int(completed) < noise["min_requests"]:
        return f"not rankable: completed {_g(completed)} requests < {noise['min_requests']}"
    return ""


def window_short(figures: dict, noise: dict) -> str:
    """Why a ranked window is short ('' when it is not): it lasted less than min_window_s, so its own noise
    may exceed the prior; it still ranks (window_problem says why), and the decision lists it."""
    duration = figures.get("duration_s")
    if duration is None or float(duration) < noise["min_window_s"]:
        return f"short: lasted {_g(duration)} s < {noise['min_window_s']:g} s"
    return ""


def _g(value) -> str:
    return "unknown" if value is None else f"{float(value):g}"


def launches_of(result: dict, concurrency: int) -> list[list[dict]]:
    """The windows at one concurrency, per launch: the result's own (launch 1), then each re-measure's
    (result['relaunches']); a launch's windows are its repeats ({repeats: {concurrency: [figures, ...]}},
    module_utils/tune_windows.fold) or its one steady window ({steady: {concurrency: figures}})."""
    key = str(concurrency)
    found = []
    for launch in [result, *list(result.get("relaunches") or [])]:
        windows = (launch.get("repeats") or {}).get(key) or (launch.get("steady") or {}).get(key)
        if windows:
            found.append(list(windows) if isinstance(windows, list) else [windows])
    return found


def prior_spread(noise: dict, windows_per_launch: float = 1.0) -> float:
    """The spread of one launch's value before any is observed: its launch part and its windows' part."""
    return math.sqrt(noise["launch_spread"] ** 2 + noise["window_spread"] ** 2 / max(windows_per_launch, 1.0))


def pooled_spread(log_values: list[list[float]], noise: dict, windows_per_launch: float = 1.0) -> float:
    """One launch's spread on this host: what every candidate's repeated launches show, pooled (the per-launch
    noise is the host's, not a candidate's), never below the prior. A floor, not a blend: with the few
    launches a run affords, a spread estimated below the prior claimed wrong winners in 2 % of the
    simulated 0 % gaps (bench/tune_decision_sim.py), against the bound of 1 %."""
    squares = sum(
        sum((x - statistics.fmean(logs)) ** 2 for x in logs) for logs in log_values if len(logs) > 1
    )
    df = sum(len(logs) - 1 for logs in log_values if len(logs) > 1)
    return max(math.sqrt(squares / df) if df else 0.0, prior_spread(noise, windows_per_launch))


def candidate_stats(result: dict, objective: dict, noise: dict, spread: float | None = None) -> dict:
    """{value, spread, uncertainty, launches, windows, values, interval, ttft_p99_ms, unrankable, short,
    breaks}:
    the candidate's median over launches (of each launch's median window), its spread and what did not rank.
    value is None when no window ranked."""
    metric = objective["metric"]
    launch_values, unrankable, short, ttft, windows_used, all_windows = [], [], [], [], 0, []
    launch_ttft = []
    for number, windows in enumerate(launches_of(result, objective["concurrency"]), 1):
        ranked, ranked_ttft = [], []
        for index, figures in enumerate(windows, 1):
            problem = window_problem(figures, noise)
            brief = window_short(figures, noise)
            if brief and not problem:
                short.append(f"launch {number} window {index} {brief}")
            if problem:
                unrankable.append(f"launch {number} window {index} {problem}")
            elif figures.get(metric) is not None and float(figures[metric]) > 0:
                ranked.append(float(figures[metric]))
                all_windows.append(figures)
                if figures.get("ttft_p99_ms") is not None and float(figures["ttft_p99_ms"]) > 0:
                    ranked_ttft.append(float(figures["ttft_p99_ms"]))
        ttft.extend(ranked_ttft)
        if ranked_ttft:
            launch_ttft.append(statistics.median(ranked_ttft))
        if ranked:
            launch_values.append(statistics.median(ranked))
            windows_used += len(ranked)
    stats = {
        "unrankable": unrankable,
        "short": short,
        "launches": len(launch_values),
        "windows": windows_used,
    }
    if not launch_values:
        return {**stats, "value": None, "spread": None, "uncertainty": None, "values": [], "breaks": []}
    logs = [math.log(v) for v in launch_values]
    observed = statistics.stdev(logs) if len(logs) > 1 else 0.0
    if spread is None:
        spread = pooled_spread([logs], noise, windows_used / len(launch_values))
    value = statistics.median(launch_values)
    uncertainty = spread / math.sqrt(len(launch_values))
    # the constraints are judged on the median window of every launch's (a window's figures are one sample)
    median_figures = {
        key: statistics.median(float(w[key]) for w in all_windows if w.get(key) is not None)
        for key in {k for w in all_windows for k, v in w.items() if isinstance(v, (int, float))}
    }
    return {
        **stats,
        "value": value,
        "values": [round(v, 3) for v in launch_values],
        "log_values": logs,
        "spread": round(spread, 4),
        "observed_spread": round(observed, 4),
        "uncertainty": round(uncertainty, 4),
        "interval": [
            round(value * math.exp(-noise["z"] * uncertainty), 3),
            round(value * math.exp(noise["z"] * uncertainty), 3),
        ],
        "ttft_p99_ms": statistics.median(ttft) if ttft else None,
        "ttft_launch_values": [round(v, 3) for v in launch_ttft],
        "figures": median_figures,
        "breaks": broken(median_figures, objective),
    }


def told_apart(a: dict, b: dict, noise: dict) -> bool:
    """Whether two candidates' values differ beyond z times their combined uncertainty."""
    gap = abs(math.log(a["value"] / b["value"]))
    return gap > noise["z"] * math.hypot(a["uncertainty"], b["uncertainty"])


def _better(a: float, b: float, goal: str) -> bool:
    return a > b if goal == "max" else a < b


def settings_key(candidate: dict) -> tuple:
    """The tie rule's first two steps: settings away from the request, then not SGLang's default."""
    changes = candidate.get("changes") or {}
    env = candidate.get("env") or {}
    sglang_default = not env and all(value is None for value in changes.values())
    return (len(changes) + len(env), 0 if sglang_default else 1)


def ttft_not_told_apart(names: list[str], stats: dict, noise: dict) -> list[str]:
    """Of names, those whose TTFT p99 is not told apart from the lowest one's (in the given order); a name
    without a TTFT p99 is left out when any has one. The spread of one launch's TTFT p99 is pooled over the
    names' repeated launches, never below the prior, as for the objective."""
    timed = [n for n in names if stats[n].get("ttft_launch_values")]
    if not timed:
        return list(names)
    logs = [[math.log(v) for v in stats[n]["ttft_launch_values"]] for n in timed]
    spread = pooled_spread(logs, noise)

    def median_log(name: str) -> float:
        return math.log(statistics.median(stats[name]["ttft_launch_values"]))

    def uncertainty(name: str) -> float:
        return spread / math.sqrt(len(stats[name]["ttft_launch_values"]))

    fastest = min(timed, key=median_log)
    return [
        n
        for n in timed
        if median_log(n) - median_log(fastest)
        <= noise["z"] * math.hypot(uncertainty(fastest), uncertainty(n))
    ]


def pick_tie(tied: list[str], by_name: dict, stats: dict, order: dict, noise: dict) -> tuple[str, str]:
    """The tie rule (TIE_RULE) over the tied names: (the pick, the step of the rule that made it)."""
    in_plan = sorted(tied, key=lambda n: order.get(n, len(order)))
    keys = {n: settings_key(by_name.get(n, {})) for n in in_plan}
    fewest = min(keys.values())
    left = [n for n in in_plan if keys[n] == fewest]
    if len(left) == 1:
        closest = [n for n in in_plan if keys[n][0] == fewest[0]]
        return left[0], "fewer settings away" if len(closest) == 1 else "SGLang's default"
    fast = ttft_not_told_apart(left, stats, noise)
    return fast[0], "the lower TTFT p99" if len(fast) == 1 else "the plan's order"


def decide(
    results: list[dict],
    candidates: list[dict],
    objective: dict,
    noise: dict | None = None,
    final: bool = False,
) -> dict:
    """The decision over the finished results (plan order):

    {verdict: clear|remeasure|tie|none, winner, value, valid: [names best first], invalid: {name: reason},
     stats: {name: candidate_stats}, remeasure: the names to relaunch next, in turn (verdict remeasure) or
     None,
     tie: {names, rule, picked} or None, reason}. final: no re-measure is due any more (the rounds ran, or
    the budget is spent): leaders still close are a tie now.
    """
    noise = noise_of(noise)
    goal = objective.get("goal", DEFAULT_GOAL)
    order = {c.get("name"): i for i, c in enumerate(candidates or [])}
    by_name = {c.get("name"): c for c in candidates or []}
    stats, invalid, valid = {}, {}, []
    first = {r["name"]: candidate_stats(r, objective, noise) for r in results}
    measured = [s for s in first.values() if s["value"] is not None]
    per_launch = sum(s["windows"] for s in measured) / max(sum(s["launches"] for s in measured), 1)
    spread = pooled_spread([s["log_values"] for s in measured], noise, per_launch)
    for result in results:
        name = result["name"]
        found = (
            candidate_stats(result, objective, noise, spread)
            if first[name]["value"] is not None
            else first[name]
        )
        stats[name] = found
        if result.get("status") != "ok":
            invalid[name] = f"{result.get('status', 'unknown')}: {result.get('reason', '')}".rstrip(": ")
        elif found["value"] is None:
            invalid[name] = (
                f"no rankable steady {objective['metric']} at concurrency {objective['concurrency']}"
                + (" (" + "; ".join(found["unrankable"]) + ")" if found["unrankable"] else "")
            )
        elif found["breaks"]:
            invalid[name] = "breaks its constraints: " + "; ".join(found["breaks"])
        else:
            valid.append(name)
    ordered = []
    for name in valid:  # stable: an equal value keeps the plan's order
        position = next(
            (
                i
                for i, other in enumerate(ordered)
                if _better(stats[name]["value"], stats[other]["value"], goal)
            ),
            len(ordered),
        )
        ordered.insert(position, name)
    base = {
        "valid": ordered,
        "invalid": invalid,
        "stats": stats,
        "remeasure": None,
        "tie": None,
        "noise": noise,
    }
    if not ordered:
        return {**base, "verdict": "none", "winner": None, "value": None, "reason": "no candidate qualified"}
    best = ordered[0]
    close = [n for n in ordered[1:] if not told_apart(stats[best], stats[n], noise)]
    rounds = max((len(r.get("relaunches") or []) for r in results), default=0)
    if not final and 0 < rounds < noise["max_relaunches"]:
        # a re-measure runs to its bound before it is judged again: one look more, not one per relaunch
        pair = [n for n in ordered if len(_result(results, n).get("relaunches") or []) == rounds]
        return _remeasure(base, pair, rounds, noise)
    if not close:
        reason = (
            f"{best} is told apart from every other valid candidate"
            + (f" after {rounds} relaunches of the leaders" if rounds else "")
            if len(ordered) > 1
            else f"{best} is the only valid candidate"
        )
        return {**base, "verdict": "clear", "winner": best, "value": stats[best]["value"], "reason": reason}
    if not final and rounds == 0 and noise["max_relaunches"] > 0:
        return _remeasure(base, [best, close[0]], rounds, noise)
    tied = [best, *close]
    picked, step = pick_tie(tied, by_name, stats, order, noise)
    return {
        **base,
        "verdict": "tie",
        "winner": picked,
        "value": stats[picked]["value"],
        "tie": {"names": tied, "rule": TIE_RULE, "picked": picked, "picked_by": step},
        "reason": (
            f"TIE: {', '.join(tied)} not told apart after {rounds} relaunch round(s) of the leaders; "
            f"{picked} picked by the rule ({TIE_RULE}): by {step}"
        ),
    }


def spent_s(results: list[dict]) -> float:
    """Seconds a run's journal says it spent: every finished candidate's and every relaunch's (a failed
    relaunch's too). The budget counts both; counting candidates alone made the rerun of a finished tune on
    the H200 (2026-12-04, docs/gpu-runs.md) find 9 s of a 660 s budget left after 851 s spent, and relaunch
    its leaders again instead of launching nothing."""
    total = 0.0
    for result in results or []:
        total += float(result.get("seconds") or 0)
        total += sum(
            float(r.get("seconds") or 0) for r in result.get("relaunches") or [] if isinstance(r, dict)
        )
    return round(total, 1)


def _remeasure(base: dict, pair: list[str], rounds: int, noise: dict) -> dict:
    """The next round of the re-measure: each of the pair relaunched once, in turn (the leader first)."""
    return {
        **base,
        "verdict": "remeasure",
        "winner": None,
        "value": None,
        "remeasure": pair,
        "reason": (
            f"{' and '.join(pair)} are closer than their spread: relaunched in turn, round {rounds + 1} of "
            f"{noise['max_relaunches']}"
        ),
    }


def _result(results: list[dict], name: str) -> dict:
    return next((r for r in results if r["name"] == name), {})


def margin_in_log(margin: float, goal: str) -> float:
    """How much worse than the incumbent, in log, the margin allows: a throughput (max) margin-fraction below
    it, a latency (min) margin-fraction above it. A margin of 1 or more never stops a max goal for its speed
    (nothing is 100 % below): infinity, not a math domain error (bench/tune_cost.py's exhaustive run asks
    for 1000)."""
    if goal != "max":
        return math.log1p(margin)
    return math.inf if margin >= 1 else -math.log1p(-margin)


def stop_early(
    window: dict, incumbent: dict | None, objective: dict, margin: float, noise: dict | None = None
):
    """(stop, reason) for a candidate's first window against the incumbent's stats (candidate_stats of the
    best finished so far, or None): beyond the margin and the spread, else it goes on."""
    noise = noise_of(noise)
    single = prior_spread(noise)
    problem = window_problem(window, noise)
    if problem:
        return False, f"its first window is {problem}, so it cannot stop the candidate"
    room = math.exp(noise["z"] * single)
    breaks = broken(window, objective, (1 + margin) * room - 1, unmeasured_breaks=False)
    if breaks:
        return True, "its first window breaks the constraints beyond the margin and the spread: " + "; ".join(
            breaks
        )
    value = window.get(objective["metric"])
    if incumbent is None or incumbent.get("value") is None or value is None:
        return False, "no incumbent to compare with" if value is not None else "metric not measured"
    goal = objective.get("goal", DEFAULT_GOAL)
    spread = math.hypot(single, incumbent["uncertainty"])
    shortfall = math.log(incumbent["value"] / float(value)) * (1 if goal == "max" else -1)
    threshold = margin_in_log(margin, goal) + noise["z"] * spread
    if shortfall > threshold:
        return True, (
            f"its first window's {objective['metric']} {float(value):g} is {1 - math.exp(-shortfall):.0%} "
            f"{'below' if goal == 'max' else 'above'} the incumbent's {incumbent['value']:g}: beyond the "
            f"margin {margin:.0%} and {noise['z']:g} x the spread ({spread:.1%})"
        )
    return False, f"within the margin {margin:.0%} and the spread of the incumbent, or better"
