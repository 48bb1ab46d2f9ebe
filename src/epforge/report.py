"""Render what epforge recorded on the hosts into a Markdown and an HTML report: a fleet overview from the
provisioning facts (epforge_preflight, _cuda_toolkit, _ml_env, _cuda_extensions, _deepep, _flashinfer,
_sglang, _steps), the final env's arch coverage as a host x component matrix (epforge_final_env), and
benchmark, sweep and probe tables with PNG plots (epforge_bench, _sweep, _collective).

Input: {host: {fact_name: fact}} where fact_name is the local fact's name without the `epforge_` prefix
(bench, sweep, collective, preflight, ...), as `epforge report` collects it from ansible_local or reads it
from a directory of saved facts (DIR/HOST/epforge_NAME.fact).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))


# ------------------------------------------------------------------------------------------------ input


def load_fact_dir(directory: str | Path) -> dict[str, dict]:
    """Facts saved as DIR/HOST/epforge_NAME.fact (or .json) -> {host: {NAME: fact}}."""
    hosts: dict[str, dict] = {}
    base = Path(directory)
    if not base.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory of saved facts (DIR/HOST/epforge_NAME.fact)")
    for host_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        facts = {}
        for path in sorted(host_dir.iterdir()):
            if path.suffix not in (".fact", ".json") or not path.stem.startswith("epforge_"):
                continue
            facts[path.stem[len("epforge_") :]] = json.loads(path.read_text())
        if facts:
            hosts[host_dir.name] = facts
    return hosts


def from_ansible_local(ansible_local: dict) -> dict:
    """ansible_local (setup's local facts) -> {NAME: fact} for the epforge_* facts."""
    return {k[len("epforge_") :]: v for k, v in (ansible_local or {}).items() if k.startswith("epforge_")}


def save_fact_dir(hosts: dict[str, dict], directory: str | Path) -> None:
    for host, facts in hosts.items():
        host_dir = Path(directory) / host
        host_dir.mkdir(parents=True, exist_ok=True)
        for name, fact in facts.items():
            (host_dir / f"epforge_{name}.fact").write_text(json.dumps(fact, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------- tables


def configuration_rows(hosts: dict[str, dict]) -> list[dict]:
    """One row per host and configuration: the sweep's outcome when there was a sweep, else the last
    benchmark entry of each label in the history."""
    rows = []
    for host, facts in hosts.items():
        sweep = (facts.get("sweep") or {}).get("configurations") or []
        if sweep:
            for outcome in sweep:
                rows.append(
                    {
                        "host": host,
                        "name": outcome.get("name", "?"),
                        "outcome": outcome.get("outcome", "?"),
                        "figures": outcome.get("figures") or {},
                        "reason": outcome.get("class") or outcome.get("reason") or "",
                        "detail": outcome.get("reason") or "",
                    }
                )
            continue
        last_by_label: dict[str, dict] = {}
        for entry in (facts.get("bench") or {}).get("history") or []:
            last_by_label[entry.get("label", "?")] = entry
        for label, entry in last_by_label.items():
            error = entry.get("error") or {}
            rows.append(
                {
                    "host": host,
                    "name": label,
                    "outcome": entry.get("status", "?"),
                    "figures": entry.get("figures") or {},
                    # an invalid run (fewer requests or tokens than asked) says why
                    "reason": error.get("class", "") or "; ".join(entry.get("invalid_reasons") or []),
                    "detail": error.get("msg", "") or "; ".join(entry.get("invalid_reasons") or []),
                }
            )
    return rows


def fmt(value, digits: int = 1) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def config_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = [
        "host",
        "configuration",
        "outcome",
        "output tok/s",
        "total tok/s",
        "req/s",
        "TTFT med/p99 ms",
        "TPOT med/p99 ms",
        "ITL med/p99 ms",
        "E2E med/p99 ms",
        "accept len",
        "reason",
    ]
    body = []
    for r in rows:
        f = r["figures"]
        body.append(
            [
                r["host"],
                r["name"],
                r["outcome"],
                fmt(f.get("output_throughput")),
                fmt(f.get("total_throughput")),
                fmt(f.get("request_throughput"), 2),
            ]
            + [f"{fmt(f.get(k + '_median_ms'))} / {fmt(f.get(k + '_p99_ms'))}" for k, _ in LATENCIES]
            + [fmt(f.get("accept_length"), 2), r["reason"]]
        )
    return head, body


def history_table(hosts: dict[str, dict], last: int = 20) -> tuple[list[str], list[list[str]]]:
    head = [
        "host",
        "when (UTC)",
        "label",
        "status",
        "output tok/s",
        "TTFT med ms",
        "TPOT med ms",
        "workload",
        "stack",
    ]
    body = []
    for host, facts in hosts.items():
        for e in ((facts.get("bench") or {}).get("history") or [])[-last:]:
            f = e.get("figures") or {}
            w = e.get("workload") or {}
            stack = e.get("stack") or {}
            body.append(
                [
                    host,
                    str(e.get("timestamp", "")).replace("T", " ").rstrip("Z"),
                    e.get("label", ""),
                    e.get("status", "")
                    + (f" ({e['error']['class']})" if e.get("error") else "")
                    + (
                        f" ({'; '.join(e.get('invalid_reasons') or [])})"
                        if e.get("status") == "invalid"
                        else ""
                    ),
                    fmt(f.get("output_throughput")),
                    fmt(f.get("ttft_median_ms")),
                    fmt(f.get("tpot_median_ms"), 2),
                    f"{w.get('name', '')} in{w.get('input_len', '')}/out{w.get('output_len', '')} "
                    f"c{w.get('max_concurrency', '')} n{w.get('num_prompts', '')}",
                    stack.get("name", "") if isinstance(stack, dict) else str(stack),
                ]
            )
    return head, body


def probe_tables(
    hosts: dict[str, dict],
) -> list[tuple[str, list[str], list[list[str]], list[str], list[list[str]]]]:
    out = []
    for host, facts in hosts.items():
        probe = facts.get("collective") or {}
        table = probe.get("table") or []
        if not table:
            continue
        tokens = sorted({r["tokens"] for r in table})
        head = ["variant", "op", "mode", *[f"{t} tok (us)" for t in tokens]]
        cells: dict[tuple, dict] = {}
        for r in table:
            cells.setdefault((r["variant"], r["op"], r["mode"]), {})[r["tokens"]] = r
        body = [
            [v, op, mode, *[fmt((cells[(v, op, mode)].get(t) or {}).get("mean_us")) for t in tokens]]
            for (v, op, mode) in sorted(cells)
        ]
        est_head = ["variant", "mode", "tokens", "TP per step (ms)", "EP per step (ms)", "EP/TP", "cheaper"]
        est_body = [
            [
                e["variant"],
                e["mode"],
                str(e["tokens"]),
                fmt(e["tp_us"] / 1000, 2),
                fmt(e["ep_us"] / 1000, 2),
                fmt(e.get("ep_over_tp"), 2),
                e["cheaper"].upper(),
            ]
            for e in probe.get("estimate") or []
        ]
        gpus = probe.get("variants", {})
        first = next(iter(gpus.values()), {}) if gpus else {}
        title = (
            f"{host}: {first.get('world_size', '?')}x {first.get('gpu_name', '?')}, "
            f"NCCL {first.get('nccl', '?')},"
            f" torch {first.get('torch', '?')}, measured {probe.get('measured_at', '?')}"
        )
        out.append((title, head, body, est_head, est_body))
    return out


# ------------------------------------------------------------------------------------ fleet overview


def _ids(items) -> str:
    return ", ".join(str((i or {}).get("id", i)) for i in items or []) or "none"


def overview_rows(hosts: dict[str, dict]) -> list[dict]:
    """One row per host from the provisioning facts: GPUs and interconnect, stack, toolkit, torch, each
    extension and its archs, DeepEP and FlashInfer state, SGLang, known issues applied, steps skipped."""
    rows = []
    for host, facts in hosts.items():
        pre = facts.get("preflight") or {}
        if not any(facts.get(k) for k in ("preflight", "cuda_toolkit", "ml_env", "final_env", "steps")):
            continue
        gpu = pre.get("gpu") or {}
        if gpu.get("gpu_count"):
            gpus = (
                f"{gpu['gpu_count']}x {'/'.join(gpu.get('names') or ['?'])} "
                f"({'/'.join(gpu.get('archs') or [])}), {gpu.get('interconnect', '?')}, "
                f"driver {gpu.get('driver_version') or '?'}"
            )
        else:
            gpus = f"no GPU ({gpu.get('reason') or 'not probed'})" if pre else "-"
        stack = pre.get("stack") or {}
        tk = facts.get("cuda_toolkit") or {}
        ml = facts.get("ml_env") or {}
        exts = facts.get("cuda_extensions") or {}
        dep = facts.get("deepep") or {}
        fi = facts.get("flashinfer") or {}
        sg = facts.get("sglang") or {}
        ki = pre.get("known_issues") or {}
        steps = (facts.get("steps") or {}).get("steps") or []
        not_done = [s for s in steps if s.get("status") != "done"]
        rows.append(
            {
                "host": host,
                "gpus": gpus,
                "stack": f"{stack.get('name', '?')} (CUDA {stack.get('cuda', '?')}, archs "
                f"{', '.join(stack.get('arch_list') or [])})"
                if stack
                else "-",
                "toolkit": f"CUDA {tk.get('nvcc_release') or tk.get('version', '?')} "
                f"({tk.get('method', '?')}) at {tk.get('home', '?')}"
                if tk
                else "-",
                "torch": f"{ml.get('torch_version', '?')} (CUDA {ml.get('torch_cuda', '?')}; "
                f"{', '.join(ml.get('torch_arch_list') or [])})"
                if ml
                else "-",
                "extensions": "; ".join(
                    f"{name}: {', '.join(e.get('archs_found') or []) or 'not checked'}"
                    for name, e in sorted(exts.items())
                )
                or "-",
                "deepep": (
                    f"{dep.get('version', '?')} ({dep.get('source', '?')} {str(dep.get('commit', ''))[:7]}), "
                    f"SASS {', '.join(dep.get('sass_archs') or [])}, import {dep.get('import_status', '?')}, "
                    + (
                        f"GPU round trip on {dep['gpu_verify'].get('gpus')} GPUs"
                        if (dep.get("gpu_verify") or {}).get("result")
                        else "no GPU round trip"
                    )
                )
                if dep
                else "-",
                "flashinfer": f"{fi.get('version', '?')}, JIT {fi.get('jit_kernel', '?')} for "
                f"{fi.get('jit_arch_list', '?')}: SASS {', '.join(fi.get('jit_sass_archs') or [])}"
                if fi
                else "-",
                "sglang": f"{sg.get('version', '?')} ({sg.get('mode', '?')})" if sg else "-",
                "known_issues": f"adjusted: {_ids(ki.get('adjustments'))}; "
                f"warnings: {_ids(ki.get('warnings'))}"
                if ki
                else "-",
                "not_done": "; ".join(
                    f"{s.get('step')}: {s.get('status')} ({s.get('reason') or s.get('detail') or '?'})"
                    for s in not_done
                )
                if steps
                else ("-" if not facts.get("steps") else "none"),
            }
        )
    return rows


OVERVIEW_COLUMNS = (
    ("host", "host"),
    ("gpus", "GPUs and interconnect"),
    ("stack", "stack"),
    ("toolkit", "toolkit"),
    ("torch", "torch"),
    ("extensions", "extensions (SASS)"),
    ("deepep", "DeepEP"),
    ("flashinfer", "FlashInfer"),
    ("sglang", "SGLang"),
    ("known_issues", "known issues applied"),
    ("not_done", "steps skipped and why"),
)

COMPONENT_ORDER = ("torch", "sgl_kernel", "sgl_kernel.flash_ops", "flashinfer", "deep_ep")


MATRIX_TITLE = "Final env: arch coverage (host x component)"
MATRIX_TEXT = (
    "What the server will import (epforge_final_env): the distribution that provides each component and "
    "whether its SASS covers the hosts' GPU archs; JIT components compile at first use."
)


def coverage_matrix(hosts: dict[str, dict]) -> tuple[list[str], list[dict]]:
    """Host x component from epforge_final_env: per cell a status (ok, missing, jit, absent, ...), its text,
    and the features without kernels per host."""
    components: list[str] = []
    for facts in hosts.values():
        for name in (facts.get("final_env") or {}).get("components") or {}:
            if name not in components:
                components.append(name)
    components.sort(key=lambda n: (COMPONENT_ORDER.index(n) if n in COMPONENT_ORDER else 99, n))
    rows = []
    for host, facts in hosts.items():
        final = facts.get("final_env") or {}
        if not final.get("components"):
            continue
        cells = {}
        for name in components:
            c = final["components"].get(name)
            if not c:
                cells[name] = {"status": "absent", "text": "-"}
                continue
            status = c.get("status", "?")
            who = f"{c.get('distribution') or 'not installed'} {c.get('version') or ''}".strip()
            if status in ("ok", "missing_archs"):
                found = ", ".join(c.get("sass") or []) or "none"
                tail = "" if not c.get("missing") else f"; lacks {', '.join(c['missing'])}"
                text = f"{who}: SASS {found}{tail}"
                status = "ok" if not c.get("missing") else "missing"
            elif status == "jit":
                text = f"{who}: JIT at first use"
            else:
                text = f"{who}: {status.replace('_', ' ')}"
            cells[name] = {"status": status, "text": text}
        lacking = [f for f in final.get("features") or [] if not f.get("kernels")]
        rows.append(
            {
                "host": host,
                "archs": ", ".join(final.get("archs") or []),
                "cells": cells,
                "deep_ep": (final.get("deep_ep") or {}).get("state", ""),
                "lacking": "; ".join(
                    f"{f['feature']}{' (REQUESTED)' if f.get('requested') else ''}: no kernels for "
                    f"{', '.join(f.get('missing') or [])}"
                    for f in lacking
                )
                or "none",
            }
        )
    return components, rows


def matrix_md(components: list[str], rows: list[dict]) -> str:
    head = ["host", "archs", *components, "deep_ep owner", "features without kernels"]
    body = [
        [r["host"], r["archs"], *[r["cells"][c]["text"] for c in components], r["deep_ep"], r["lacking"]]
        for r in rows
    ]
    return md_table(head, body)


def matrix_html(components: list[str], rows: list[dict]) -> str:
    out = [
        "<table class='coverage'>",
        "<tr><th>host</th><th>archs</th>"
        + "".join(f"<th>{html.escape(c)}</th>" for c in components)
        + "<th>deep_ep owner</th><th>features without kernels</th></tr>",
    ]
    for r in rows:
        cells = "".join(
            f"<td class='cov-{html.escape(r['cells'][c]['status'])}' data-component='{html.escape(c)}'>"
            f"{html.escape(r['cells'][c]['text'])}</td>"
            for c in components
        )
        out.append(
            f"<tr data-host='{html.escape(r['host'])}'><td>{html.escape(r['host'])}</td>"
            f"<td>{html.escape(r['archs'])}</td>{cells}<td>{html.escape(r['deep_ep'])}</td>"
            f"<td>{html.escape(r['lacking'])}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- plots


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
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(tokens, [str(t) for t in tokens])
        ax.minorticks_off()
        ax.set_xlabel("tokens per message ([tokens x hidden] bf16)")
        ax.set_ylabel("mean latency per call (us)")
        ax.set_title(f"{mode}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------- writers


def md_text(text: str) -> str:
    """A fact's text as Markdown text, never markup: HTML as entities, no table cell, link or line break."""
    text = html.escape(str(text), quote=False)
    for char in ("|", "[", "]"):
        text = text.replace(char, "\\" + char)
    return " ".join(text.splitlines())


def md_table(head: list[str], body: list[list[str]]) -> str:
    esc = [[md_text(c) for c in row] for row in [head, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
    return "\n".join(lines)


def html_table(head: list[str], body: list[list[str]]) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in body:
        cls = ""
        if len(row) > 2 and row[2] in ("failed", "refused", "ok", "invalid"):
            cls = f' class="{row[2]}"'
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}tr.failed td{background:#fdecea}
tr.refused td{background:#fff3e0}tr.invalid td{background:#fffde7}tr.ok td:nth-child(3){color:#2e7d32}
img{max-width:100%;border:1px solid #ddd}td.cov-ok{background:#e8f5e9}td.cov-missing{background:#ffcdd2}
td.cov-jit{background:#e3f2fd}td.cov-absent,td.cov-no_binaries,td.cov-unowned{background:#eeeeee;color:#555}
td.cov-would_repair{background:#fff3e0}table.overview td{vertical-align:top;max-width:260px}"""


NO_FACTS_TEXT = "No epforge provisioning, benchmark, sweep or probe facts were found on these hosts."


def _plots(hosts: dict[str, dict], rows: list[dict], out: Path) -> list[tuple[str, Path]]:
    """(caption, PNG) of every plot there is data for."""
    images: list[tuple[str, Path]] = []
    for caption, made in (
        ("Output throughput per configuration", plot_throughput(rows, out / "throughput.png")),
        ("Latency per configuration (median and p99)", plot_latency(rows, out / "latency.png")),
        ("Throughput over the history", plot_history(hosts, out / "history.png")),
    ):
        if made:
            images.append((caption, made))
    for host, facts in hosts.items():
        if (facts.get("collective") or {}).get("table"):
            made = plot_probe(
                facts["collective"], out / f"collective-{host}.png", f"NCCL per-call latency on {host}"
            )
            if made:
                images.append((f"Collective probe on {host}", made))
    return images


def _sections(hosts: dict[str, dict], rows: list[dict], overview: list[dict]) -> list[tuple]:
    """(heading, text, [(head, body), ...]) of each table section there is data for, in report order."""
    sections = []
    if overview:
        sections.append(
            (
                "Fleet overview",
                "What provisioning did on each host (epforge_preflight, _cuda_toolkit, _ml_env, "
                "_cuda_extensions, _deepep, _flashinfer, _sglang and _steps facts).",
                [([t for _, t in OVERVIEW_COLUMNS], [[r[k] for k, _ in OVERVIEW_COLUMNS] for r in overview])],
            )
        )
    if rows:
        sections.append(
            (
                "Configurations",
                "Outcome and figures per configuration (the sweep's outcomes where a "
                "sweep ran, else the last benchmark of each label).",
                [config_table(rows)],
            )
        )
    history = history_table(hosts)
    if history[1]:
        sections.append(
            ("Benchmark history", "The most recent entries of each host's epforge_bench history.", [history])
        )
    for probe_title, head, body, est_head, est_body in probe_tables(hosts):
        sections.append(
            (
                f"Collective probe: {probe_title}",
                "Mean latency per call; the estimate multiplies "
                "by the model's layer counts (TP: allreduces; EP: all-to-alls + attention allreduces).",
                [(head, body), (est_head, est_body)],
            )
        )
    return sections


def _page_start(title: str, generated: str, hosts: dict[str, dict]) -> tuple[list[str], list[str]]:
    """The Markdown and HTML lines before the first section."""
    md = [f"# {title}", ""]
    html_parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
    ]
    if generated:
        md += [f"Generated {generated} from the local facts of {len(hosts)} host(s): {', '.join(hosts)}.", ""]
        html_parts.append(
            f"<p>Generated {html.escape(generated)} from the local facts of {len(hosts)} host(s): "
            f"{html.escape(', '.join(hosts))}.</p>"
        )
    return md, html_parts


def _add_section(md: list[str], html_parts: list[str], heading: str, text: str, tables: list) -> None:
    md += [f"## {heading}", "", text, ""]
    html_parts.append(f"<h2>{html.escape(heading)}</h2><p>{html.escape(text)}</p>")
    for head, body in tables:
        md += [md_table(head, body), ""]
        table = html_table(head, body)
        if heading == "Fleet overview":
            table = table.replace("<table>", "<table class='overview'>", 1)
        html_parts.append(table)


def _add_matrix(md: list[str], html_parts: list[str], matrix: tuple) -> None:
    md += [f"## {MATRIX_TITLE}", "", MATRIX_TEXT, "", matrix_md(*matrix), ""]
    html_parts.append(f"<h2>{html.escape(MATRIX_TITLE)}</h2><p>{html.escape(MATRIX_TEXT)}</p>")
    html_parts.append(matrix_html(*matrix))


def _add_plots(md: list[str], html_parts: list[str], images: list[tuple[str, Path]]) -> None:
    md += ["## Plots", ""]
    html_parts.append("<h2>Plots</h2>")
    for caption, path in images:
        md += [f"![{caption}]({path.name})", ""]
        html_parts.append(
            f"<h3>{html.escape(caption)}</h3><img src='{html.escape(path.name)}' "
            f"alt='{html.escape(caption)}'>"
        )


def render(
    hosts: dict[str, dict], out_dir: str | Path, title: str = "epforge report", generated: str = ""
) -> dict:
    """Write report.md, report.html and PNG plots into out_dir; return what was written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = configuration_rows(hosts)
    images = _plots(hosts, rows, out)
    overview = overview_rows(hosts)
    matrix = coverage_matrix(hosts)
    sections = _sections(hosts, rows, overview)
    md, html_parts = _page_start(title, generated, hosts)
    for index, section in enumerate(sections):
        _add_section(md, html_parts, *section)
        # The coverage matrix reads with the fleet overview, so it follows that first section.
        if index == 0 and overview and matrix[1]:
            _add_matrix(md, html_parts, matrix)
    if images:
        _add_plots(md, html_parts, images)
    if not sections:
        md += [NO_FACTS_TEXT, ""]
        html_parts.append(f"<p>{NO_FACTS_TEXT}</p>")
    html_parts.append("</body></html>")
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text("\n".join(html_parts))
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "images": [str(p) for _, p in images],
        "configurations": len(rows),
        "overview_hosts": [r["host"] for r in overview],
        "hosts": list(hosts),
    }
