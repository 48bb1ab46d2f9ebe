"""The tuner's decision in the report (local fact epforge_tuning, role tuner): the decision table of every
candidate (median and spread, launches, ties and re-measures), the winner's settings as an `epforge_server:`
block to paste into an inventory, and the Pareto plot (output throughput against TTFT p99 and TPOT p99 per
concurrency, error bars where the decision measured a spread, the front through valid candidates only,
crashed and constraint-breaking ones apart, winner marked)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

from epforge.report.tables import fmt

DECISION_HEAD = [
    "candidate",
    "outcome",
    "metric (median)",
    "spread",
    "launches",
    "output tok/s",
    "TTFT p99 ms",
    "TPOT p99 ms",
    "accept len",
    "cached %",
    "cold TTFT p99 ms",
    "seconds",
    "why",
]


def _objective_figures(result: dict, concurrency: int) -> dict:
    return (result.get("steady") or {}).get(str(concurrency)) or {}


# the figure columns of a row that measured nothing (refused, duplicate, not tried)
BLANK = [""] * (len(DECISION_HEAD) - 3)


def _figure(figures: dict, result: dict, concurrency, name: str):
    """A figure of the decision's figures, else of the candidate's window at the objective's concurrency."""
    value = figures.get(name)
    return value if value is not None else _objective_figures(result, concurrency).get(name)


def _accept(figures: dict, result: dict, concurrency) -> str:
    """The acceptance cell: the requests' median with their 10th-90th percentiles where the window kept them
    (accept_length_p50 ...), else the server's average; blank without speculation."""
    p50 = _figure(figures, result, concurrency, "accept_length_p50")
    if p50 is None:
        return fmt(_figure(figures, result, concurrency, "accept_length"), 2)
    low = _figure(figures, result, concurrency, "accept_length_p10")
    high = _figure(figures, result, concurrency, "accept_length_p90")
    return f"{fmt(p50, 2)} ({fmt(low, 2)}-{fmt(high, 2)})"


def _percent(share) -> str:
    return "-" if share is None else f"{float(share) * 100:.0f}"


def _clip(text: str, limit: int = 200) -> str:
    """A table cell's reason, cut at a word with an ellipsis (the whole reason stays in the fact)."""
    if len(text) <= limit:
        return text
    return textwrap.shorten(text, width=limit, placeholder=" ...")


def _outcome(name: str, result: dict, tuning: dict) -> str:
    tie = tuning.get("tie") or {}
    if name == tuning.get("winner"):
        return "WINNER (tie, by rule)" if tie else "WINNER"
    if name in (tie.get("names") or []):
        return "tie"
    return result.get("status", "")


def _spread(stats: dict) -> tuple[str, str]:
    """('+-N %' of one launch, 'L x W' launches and windows) of a candidate's decision stats."""
    if stats.get("spread") is None:
        return "", ""
    launches = int(stats.get("launches") or 0)
    return f"+-{100 * float(stats['spread']):.0f} %", f"{launches} ({int(stats.get('windows') or 0)} windows)"


def verdict_text(tuning: dict) -> str:
    """The decision's verdict in words: a tie and its rule, a re-measure, or a clear winner ('' for facts
    written before the tuner measured its noise)."""
    tie = tuning.get("tie") or {}
    relaunched = int(tuning.get("relaunches") or 0)
    again = f" after {relaunched} relaunch(es) of the leaders" if relaunched else ""
    if tie:
        return (
            f"TIE: {', '.join(tie.get('names') or [])} were not told apart{again}; "
            f"{tie.get('picked')} was picked by the rule ({tie.get('rule')})"
            + (f": by {tie['picked_by']}." if tie.get("picked_by") else ".")
        )
    if tuning.get("verdict") == "clear":
        return f"Clear winner{again}: {tuning.get('verdict_reason', '')}."
    return ""


def decision_rows(tuning: dict) -> list[list[str]]:
    """One row per candidate: finished ones by rank (winner first), then refused, duplicates, not tried."""
    objective = tuning.get("objective") or {}
    concurrency = objective.get("concurrency")
    metric = objective.get("metric", "output_throughput")
    ranking = tuning.get("ranking") or {}
    valid = list(ranking.get("valid") or [])
    invalid = ranking.get("invalid") or {}
    results = {r.get("name"): r for r in tuning.get("results") or []}
    all_stats = tuning.get("stats") or {}
    tie = tuning.get("tie") or {}
    order = valid + [n for n in results if n not in valid]
    rows = []
    for name in order:
        r = results[name]
        stats = all_stats.get(name) or {}
        # the decision's median figures where it measured them (repeats, relaunches), else the one window
        f = stats.get("figures") or _objective_figures(r, concurrency)
        why = r.get("reason") or invalid.get(name, "")
        if name in (tie.get("names") or []):
            why = why or f"not told apart from {', '.join(n for n in tie['names'] if n != name)}"
        elif name in valid and name != tuning.get("winner"):
            why = why or "valid, lower rank"
        if r.get("relaunches"):
            why = f"relaunched {len(r['relaunches'])}x (re-measure); {why}".rstrip("; ")
        spread, launches = _spread(stats)
        rows.append(
            [
                name,
                _outcome(name, r, tuning),
                fmt(stats.get("value", f.get(metric)), 2),
                spread,
                launches,
                fmt(f.get("output_throughput")),
                fmt(f.get("ttft_p99_ms")),
                fmt(f.get("tpot_p99_ms"), 2),
                # speculation's acceptance and prefix reuse beside the throughput they explain (issue 39)
                _accept(f, r, concurrency),
                _percent(_figure(f, r, concurrency, "cached_token_share")),
                fmt((r.get("cold") or {}).get("ttft_p99_ms")),
                fmt(r.get("seconds")),
                _clip(str(why)),
            ]
        )
    for refused in tuning.get("refused") or []:
        rules = ", ".join(x.get("id", "") for x in refused.get("refused_by") or [])
        rows.append([refused.get("name", ""), "refused", *BLANK, f"known issue: {rules}"])
    for name in tuning.get("duplicates") or []:
        rows.append([name, "duplicate", *BLANK, "same argv and environment as another"])
    for name in tuning.get("not_tried") or []:
        rows.append([name, "not tried", *BLANK, "the budget was spent"])
    return rows


def summary_text(host: str, tuning: dict) -> str:
    objective = tuning.get("objective") or {}
    constraints = "; ".join(
        f"{c.get('figure')} {'<=' if 'max' in c else '>='} {c.get('max', c.get('min'))}"
        for c in objective.get("constraints") or []
    )
    budget = tuning.get("budget") or {}
    return (
        f"{host}: {tuning.get('decision', '')}. Objective: {objective.get('goal', 'max')} "
        f"{objective.get('metric', '')} at concurrency {objective.get('concurrency')}"
        f"{' with ' + constraints if constraints else ''}; only steady windows rank (the cold burst of "
        f"{tuning.get('cold_requests', '?')} requests after each launch is shown apart). Budget "
        f"{fmt(budget.get('spent_s'))} of {fmt(budget.get('budget_s'))} s."
        + (f" {verdict_text(tuning)}" if verdict_text(tuning) else "")
    )


def paste_block(tuning: dict) -> str:
    """The winner's settings as the inventory block to paste ('' without a winner)."""
    settings = tuning.get("winner_settings") or {}
    if not tuning.get("winner") or not settings:
        return ""
    return yaml.safe_dump({"epforge_server": settings}, sort_keys=True, default_flow_style=False).rstrip()


def tuning_sections(hosts: dict[str, dict]) -> list[tuple[str, str, list, str]]:
    """(heading, text, [(head, body)], block to paste) per host with a tuning fact."""
    sections = []
    for host, facts in hosts.items():
        tuning = facts.get("tuning")
        if not tuning:
            continue
        sections.append(
            (
                f"Tuning on {host}",
                summary_text(host, tuning),
                [(DECISION_HEAD, decision_rows(tuning))],
                paste_block(tuning),
            )
        )
    return sections


def pareto_front(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other point beats on both axes (lower latency x, higher throughput y), by x."""
    front = []
    for x, y, name in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y, name))
    return front


def _point(result: dict, concurrency: int, key: str, tuning: dict) -> tuple | None:
    """(latency, throughput, yerr (low, high) or None) of a candidate at a concurrency: the decision's median
    and interval at the objective's concurrency, the one window elsewhere."""
    stats = (tuning.get("stats") or {}).get(result.get("name")) or {}
    objective = (tuning.get("objective") or {}).get("concurrency")
    figures = (result.get("steady") or {}).get(str(concurrency)) or {}
    err = None
    if concurrency == objective and stats.get("figures"):
        figures = stats["figures"]
        low, high = stats.get("interval") or (None, None)
        value = figures.get("output_throughput")
        if (
            low is not None
            and value is not None
            and (tuning.get("objective") or {}).get("metric") == ("output_throughput")
        ):
            err = (max(value - float(low), 0.0), max(float(high) - value, 0.0))
    if figures.get(key) is None or figures.get("output_throughput") is None:
        return None
    return float(figures[key]), float(figures["output_throughput"]), err


# how each kind of candidate is drawn: (marker, colour, legend)
STYLES = {
    "valid": ("o", "#1565c0", "valid (median, interval of the decision)"),
    "winner": ("*", "#2e7d32", "winner"),
    "invalid": ("s", "#ef6c00", "stopped early or breaks a constraint"),
    "failed": ("x", "#757575", "crashed or failed"),
}


def _kind(result: dict, valid: set, winner: str | None) -> str:
    if result.get("name") == winner:
        return "winner"
    if result.get("name") in valid:
        return "valid"
    return "failed" if result.get("status") == "failed" else "invalid"


def front_of(tuning: dict, concurrency: int, key: str) -> list[tuple[float, float, str]]:
    """The Pareto front at a concurrency against a latency figure, through the valid candidates only (a
    crashed or constraint-breaking candidate may be fast; it is no choice)."""
    valid = set((tuning.get("ranking") or {}).get("valid") or [])
    points = []
    for result in tuning.get("results") or []:
        point = _point(result, concurrency, key, tuning) if result.get("name") in valid else None
        if point is not None:
            points.append((point[0], point[1], result["name"]))
    return pareto_front(points)


def plot_pareto(tuning: dict, path: Path, host: str) -> Path | None:
    """Output throughput against TTFT p99 (top) and TPOT p99 (bottom), one column per measured
    concurrency; every finished candidate a point (error bars where the decision measured a spread), the
    Pareto front a line through the valid candidates only, crashed and constraint-breaking ones drawn apart,
    the winner a star."""
    import matplotlib  # noqa: PLC0415 - matplotlib loads only for reports

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.lines import Line2D  # noqa: PLC0415

    results = [r for r in tuning.get("results") or [] if r.get("steady")]
    concurrencies = sorted({int(c) for r in results for c in r["steady"]})
    if not concurrencies:
        return None
    valid = set((tuning.get("ranking") or {}).get("valid") or [])
    winner = tuning.get("winner")
    latencies = (("ttft_p99_ms", "TTFT p99 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"))
    fig, axes = plt.subplots(
        len(latencies), len(concurrencies), figsize=(max(5.2 * len(concurrencies), 7.0), 8.0), squeeze=False
    )
    for col, concurrency in enumerate(concurrencies):
        for row, (key, label) in enumerate(latencies):
            ax = axes[row][col]
            for r in results:
                point = _point(r, concurrency, key, tuning)
                if point is None:
                    continue
                x, y, err = point
                kind = _kind(r, valid, winner)
                marker, colour, _legend = STYLES[kind]
                if err is not None:
                    ax.errorbar(
                        [x], [y], yerr=[[err[0]], [err[1]]], fmt="none", ecolor=colour, capsize=3, lw=1
                    )
                ax.scatter([x], [y], marker=marker, s=200 if kind == "winner" else 40, color=colour, zorder=3)
                ax.annotate(r["name"], (x, y), fontsize=7, xytext=(5, 3), textcoords="offset points")
            front = front_of(tuning, concurrency, key)
            if len(front) > 1:
                ax.plot([p[0] for p in front], [p[1] for p in front], "--", color="#9e9e9e")
            for c in (tuning.get("objective") or {}).get("constraints") or []:
                if c.get("figure") == key and "max" in c:
                    ax.axvline(float(c["max"]), color="#c62828", lw=1)
                    ax.annotate(
                        f"max {c['max']:g}",
                        (float(c["max"]), 1.0),
                        xycoords=("data", "axes fraction"),
                        fontsize=7,
                        color="#c62828",
                        xytext=(3, -10),
                        textcoords="offset points",
                    )
            ax.margins(x=0.15, y=0.08)  # room for the names beside the points at the edges
            ax.set_xlabel(label)
            ax.set_ylabel("output tokens/s")
            ax.set_title(f"concurrency {concurrency}: {label.split(' (')[0]}", fontsize=9)
            ax.grid(alpha=0.3)
    handles = [
        Line2D([], [], marker=m, color=c, linestyle="", markersize=10 if k == "winner" else 6, label=text)
        for k, (m, c, text) in STYLES.items()
    ] + [Line2D([], [], color="#9e9e9e", linestyle="--", label="Pareto front (valid only)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    tie = tuning.get("tie") or {}
    fig.suptitle(f"Tuning on {host}" + (f" - TIE, {tie.get('picked')} by rule" if tie else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
