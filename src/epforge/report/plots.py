"""PNG plots with matplotlib (Agg, no display): throughput and latency per configuration, throughput over
the history, and each host's collective probe."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from epforge.report.tables import LATENCIES


def plot_throughput(rows: list[dict], path: Path) -> Path | None:
    if not rows:
        return None
    labels = [
        f"{r['name']}\n({r['host']})" if len({x["host"] for x in rows}) > 1 else r["name"] for r in rows
    ]
    values = [float(r["figures"].get("output_throughput") or 0.0) for r in rows]
    colors = {"ok": "#2e7d32", "failed": "#c62828", "refused": "#ef6c00", "invalid": "#f9a825"}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.2))
    top = max([*values, 1.0])
    # a configuration without valid figures (failed, refused, invalid) gets a short stub in its colour,
    # labelled
    heights = [v if r["outcome"] == "ok" else top * 0.03 for r, v in zip(rows, values, strict=True)]
    bars = ax.bar(range(len(rows)), heights, color=[colors.get(r["outcome"], "#757575") for r in rows])
    for bar, r, v in zip(bars, rows, values, strict=True):
        text = f"{v:.0f}" if r["outcome"] == "ok" else r["outcome"]
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            bar.get_height() + top * 0.02,
            text,
            ha="center",
            va="bottom",
            fontsize=8,
            rotation=0,
        )
    ax.set_xticks(range(len(rows)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(0, top * 1.18)
    ax.set_title("Output throughput per configuration (red: failed, orange: refused, amber: invalid)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency(rows: list[dict], path: Path) -> Path | None:
    ok = [r for r in rows if r["outcome"] == "ok" and r["figures"]]
    if not ok:
        return None
    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(4.0 * len(LATENCIES), 4.0))
    width = 0.38
    for ax, (key, title) in zip(axes, LATENCIES, strict=True):
        med = [float(r["figures"].get(f"{key}_median_ms") or 0) for r in ok]
        p99 = [float(r["figures"].get(f"{key}_p99_ms") or 0) for r in ok]
        xs = range(len(ok))
        ax.bar([x - width / 2 for x in xs], med, width, label="median", color="#1565c0")
        ax.bar([x + width / 2 for x in xs], p99, width, label="p99", color="#90caf9")
        ax.set_xticks(list(xs), [r["name"] for r in ok], rotation=30, ha="right", fontsize=7)
        ax.set_title(f"{title} (ms)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Latency per configuration: median vs p99")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(hosts: dict[str, dict], path: Path) -> Path | None:
    series: dict[str, list[tuple[int, float]]] = {}
    for host, facts in hosts.items():
        for i, e in enumerate((facts.get("bench") or {}).get("history") or []):
            if e.get("status") == "ok" and (e.get("figures") or {}).get("output_throughput") is not None:
                key = f"{e.get('label', '?')}" + (f" @{host}" if len(hosts) > 1 else "")
                series.setdefault(key, []).append((i, float(e["figures"]["output_throughput"])))
    if not series or max(len(v) for v in series.values()) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for key, points in sorted(series.items()):
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
    ax.set_xlabel("history entry")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Throughput over the recorded history")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_probe(probe: dict, path: Path, title: str) -> Path | None:
    table = probe.get("table") or []
    if not table:
        return None
    modes = sorted({r["mode"] for r in table})
    fig, axes = plt.subplots(1, len(modes), figsize=(6.0 * len(modes), 4.2), squeeze=False)
    styles = {"allreduce": "-", "all_to_all": "--"}
    markers = {"allreduce": "o", "all_to_all": "s"}
    variants = sorted({r["variant"] for r in table})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    tokens = sorted({r["tokens"] for r in table})
    for ax, mode in zip(axes[0], modes, strict=True):
        for i, variant in enumerate(variants):
            for op in ("allreduce", "all_to_all"):
                pts = sorted(
                    (r["tokens"], r["mean_us"])
                    for r in table
                    if r["mode"] == mode and r["variant"] == variant and r["op"] == op
                )
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        styles[op],
                        marker=markers[op],
                        color=palette[i % len(palette)],
                        label=f"{op}, {variant}",
                    )
        _log_log_axes(ax, tokens, [str(t) for t in tokens], "tokens per message ([tokens x hidden] bf16)")
        ax.set_ylabel("mean latency per call (us)")
        ax.set_title(f"{mode}")
    fig.suptitle(title, fontsize=9)
    return _saved(fig, path)


def _log_log_axes(ax, ticks: list, labels: list[str], xlabel: str) -> None:
    """Latency against message size: both scales logarithmic (size in powers of two), a grid, a legend."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ticks, labels)
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def _saved(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curve(probe: dict, path: Path, title: str) -> Path | None:
    """The probe's latency curve: median us per call against message size, both log scales, one line per op
    and NCCL variant (allreduce solid, all_to_all dashed)."""
    curve = probe.get("curve") or []
    if not curve:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, variant in enumerate(sorted({p["variant"] for p in curve})):
        for op, style in (("allreduce", "-"), ("all_to_all", "--")):
            pts = sorted(
                (p["size"], p["median_us"]) for p in curve if p["variant"] == variant and p["op"] == op
            )
            if pts:
                ax.plot(
                    [x for x, _ in pts],
                    [y for _, y in pts],
                    style,
                    marker="o" if op == "allreduce" else "s",
                    markersize=3,
                    color=palette[i % len(palette)],
                    label=f"{op}, {variant}",
                )
    sizes = sorted({p["size"] for p in curve})
    ticks = sizes[:: max(1, len(sizes) // 8)]
    _log_log_axes(ax, ticks, [_size_label(b) for b in ticks], "message size per rank")
    ax.set_ylabel("median latency per call (us, eager)")
    ax.set_title(title, fontsize=9)
    return _saved(fig, path)


def _size_label(size: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def all_plots(
    hosts: dict[str, dict], rows: list[dict], out: Path, skipped: list[str] | None = None
) -> list[tuple[str, Path]]:
    """(caption, PNG) of every plot there is data for. A host's plot file is named with
    read.host_file_name, so it is always inside out; a plot its data cannot make is left out and named in
    skipped (with the fact it was drawn from), the other plots are still made."""
    from epforge.report.read import host_file_name  # noqa: PLC0415
    from epforge.report.tuning import plot_pareto  # noqa: PLC0415 - one owner of the tuning view

    images: list[tuple[str, Path]] = []
    plots = [
        (
            "Output throughput per configuration",
            "the configurations",
            plot_throughput,
            (rows, out / "throughput.png"),
        ),
        (
            "Latency per configuration (median and p99)",
            "the configurations",
            plot_latency,
            (rows, out / "latency.png"),
        ),
        ("Throughput over the history", "the bench histories", plot_history, (hosts, out / "history.png")),
    ]
    for host, facts in hosts.items():
        name = host_file_name(host)
        if facts.get("tuning"):
            plots.append(
                (
                    f"Tuning on {host}: throughput against TTFT and TPOT",
                    f"{host}: fact epforge_tuning",
                    plot_pareto,
                    (facts["tuning"], out / f"tuning-{name}.png", host),
                )
            )
        collective = facts.get("collective") or {}
        if collective.get("table"):
            args = (collective, out / f"collective-{name}.png", f"NCCL per-call latency on {host}")
            plots.append(
                (f"Collective probe on {host}", f"{host}: fact epforge_collective", plot_probe, args)
            )
        if collective.get("curve"):
            args = (collective, out / f"collective-curve-{name}.png", f"NCCL latency curve on {host}")
            plots.append(
                (f"Collective latency curve on {host}", f"{host}: fact epforge_collective", plot_curve, args)
            )
    for caption, source, plot, args in plots:
        try:
            made = plot(*args)
        except Exception as exc:  # a fact's content: the plot is left out and named
            if skipped is None:
                raise
            skipped.append(f"skipped the plot {caption!r} ({source}): {type(exc).__name__}: {exc}")
            continue
        if made:
            images.append((caption, made))
    return images
