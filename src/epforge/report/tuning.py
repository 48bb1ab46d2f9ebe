"""The tuner's decision in the report (local fact epforge_tuning, role tuner): the decision table of every
candidate, the winner's settings as an `epforge_server:` block to paste into an inventory, and the Pareto plot
(output throughput against TTFT p99 and TPOT p99 per concurrency, winner marked)."""

from __future__ import annotations

from pathlib import Path

import yaml

from epforge.report.tables import fmt

DECISION_HEAD = [
    "candidate",
    "outcome",
    "metric",
    "output tok/s",
    "TTFT p99 ms",
    "TPOT p99 ms",
    "cold TTFT p99 ms",
    "seconds",
    "why",
]


def _objective_figures(result: dict, concurrency: int) -> dict:
    return (result.get("steady") or {}).get(str(concurrency)) or {}


def decision_rows(tuning: dict) -> list[list[str]]:
    """One row per candidate: finished ones by rank (winner first), then refused, duplicates, not tried."""
    objective = tuning.get("objective") or {}
    concurrency = objective.get("concurrency")
    metric = objective.get("metric", "output_throughput")
    ranking = tuning.get("ranking") or {}
    valid = list(ranking.get("valid") or [])
    invalid = ranking.get("invalid") or {}
    results = {r.get("name"): r for r in tuning.get("results") or []}
    order = valid + [n for n in results if n not in valid]
    rows = []
    for name in order:
        r = results[name]
        f = _objective_figures(r, concurrency)
        outcome = "WINNER" if name == tuning.get("winner") else r.get("status", "")
        why = r.get("reason") or invalid.get(name, "")
        if name in valid and name != tuning.get("winner"):
            why = why or "valid, lower rank"
        rows.append(
            [
                name,
                outcome,
                fmt(f.get(metric), 2),
                fmt(f.get("output_throughput")),
                fmt(f.get("ttft_p99_ms")),
                fmt(f.get("tpot_p99_ms"), 2),
                fmt((r.get("cold") or {}).get("ttft_p99_ms")),
                fmt(r.get("seconds")),
                str(why)[:200],
            ]
        )
    for refused in tuning.get("refused") or []:
        rules = ", ".join(x.get("id", "") for x in refused.get("refused_by") or [])
        rows.append([refused.get("name", ""), "refused", "", "", "", "", "", "", f"known issue: {rules}"])
    for name in tuning.get("duplicates") or []:
        rows.append([name, "duplicate", "", "", "", "", "", "", "same argv and environment as another"])
    for name in tuning.get("not_tried") or []:
        rows.append([name, "not tried", "", "", "", "", "", "", "the budget was spent"])
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


def plot_pareto(tuning: dict, path: Path, host: str) -> Path | None:
    """Output throughput against TTFT p99 (top) and TPOT p99 (bottom), one column per measured
    concurrency; every finished candidate a point, the Pareto front a line, the winner a star."""
    import matplotlib  # noqa: PLC0415 - matplotlib loads only for reports

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    results = [r for r in tuning.get("results") or [] if r.get("steady")]
    concurrencies = sorted({int(c) for r in results for c in r["steady"]})
    if not concurrencies:
        return None
    latencies = (("ttft_p99_ms", "TTFT p99 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"))
    fig, axes = plt.subplots(
        len(latencies), len(concurrencies), figsize=(4.6 * len(concurrencies), 7.2), squeeze=False
    )
    winner = tuning.get("winner")
    for col, concurrency in enumerate(concurrencies):
        for row, (key, label) in enumerate(latencies):
            ax = axes[row][col]
            points = []
            for r in results:
                f = r["steady"].get(str(concurrency)) or {}
                if f.get(key) is None or f.get("output_throughput") is None:
                    continue
                x, y = float(f[key]), float(f["output_throughput"])
                points.append((x, y, r["name"]))
                style = {"ok": "o", "stopped_early": "s", "failed": "x"}.get(r.get("status"), "o")
                ax.scatter(
                    [x], [y], marker=style, s=36, color="#1565c0" if r["name"] != winner else "#2e7d32"
                )
                ax.annotate(r["name"], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
                if r["name"] == winner:
                    ax.scatter([x], [y], marker="*", s=260, color="#2e7d32", zorder=3, label="winner")
            front = pareto_front(points)
            if len(front) > 1:
                ax.plot(
                    [p[0] for p in front], [p[1] for p in front], "--", color="#9e9e9e", label="Pareto front"
                )
            for c in (tuning.get("objective") or {}).get("constraints") or []:
                if c.get("figure") == key and "max" in c:
                    ax.axvline(float(c["max"]), color="#c62828", lw=1, label=f"constraint {c['max']}")
            ax.set_xlabel(label)
            ax.set_ylabel("output tokens/s")
            ax.set_title(f"concurrency {concurrency}", fontsize=9)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle(
        f"Tuning on {host}: throughput against latency (o ok, s stopped early, x failed)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
