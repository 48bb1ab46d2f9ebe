"""The benchmark, sweep and probe tables as (head, body) rows of text: one row per configuration (the
sweep's outcomes, else each label's last benchmark), the recent benchmark history, and per host the
collective probe's latencies with its TP/EP estimate (epforge_bench, _sweep, _collective)."""

from __future__ import annotations

import math

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))


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
                # a verdict row names each side's fastest variant (collective_probe estimate())
                f"TP {e['tp_variant']}, EP {e['ep_variant']}" if "tp_variant" in e else e["variant"],
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
