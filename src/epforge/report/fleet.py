"""The fleet section: each gateway (fact epforge_gateway, role gateway) with its workers and what verified
it, and the fleet benchmark through it (epforge_fleet_bench) beside each worker host's own last benchmark
(epforge_bench): how much of the hosts' summed throughput the fleet delivers as users call it."""

from __future__ import annotations

from epforge.report.tables import fmt

SERVER_HEAD = ["server", "hosts", "url", "tp", "ep", "nodes joined", "model"]
GATEWAY_HEAD = ["gateway host", "url", "smg", "policy", "workers", "healthy", "every worker reached"]
THROUGHPUT_HEAD = ["measured", "hosts", "output tok/s", "req/s", "TTFT med ms", "failed requests", "status"]
TEXT = (
    "The servers (epforge_sglang_server; a model across nodes is one server, reached on its node_rank 0), "
    "gateways in front of verified servers (epforge_gateway, role gateway) and SGLang's bench_serving "
    "through each gateway (epforge_fleet_bench) beside each worker host's own last benchmark (epforge_bench)."
)


def server_table(hosts: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """One row per server: a one-node server per host, a multi-node group (same dist_init_addr) once."""
    groups: dict[str, list[tuple[str, dict]]] = {}
    body = []
    for host, facts in sorted(hosts.items()):
        server = facts.get("sglang_server") or {}
        if server.get("state") != "started":
            continue
        group = server.get("group") or {}
        if group:
            groups.setdefault(group.get("dist_init_addr", ""), []).append((host, server))
            continue
        settings = server.get("settings") or {}
        body.append(
            [
                server.get("name", ""),
                host,
                server.get("url", ""),
                fmt(settings.get("tp_size")),
                fmt(settings.get("ep_size")),
                "-",
                str(settings.get("model_path", "")),
            ]
        )
    for addr, ranks in sorted(groups.items()):
        ranks.sort(key=lambda item: (item[1].get("group") or {}).get("node_rank", 0))
        leader = ranks[0][1]
        settings = leader.get("settings") or {}
        nnodes = (leader.get("group") or {}).get("nnodes", len(ranks))
        joined = sum(1 for _, r in ranks if (r.get("group") or {}).get("joined"))
        body.append(
            [
                f"{leader.get('name', '')} (group at {addr})",
                ", ".join(h for h, _ in ranks),
                leader.get("url", ""),
                fmt(settings.get("tp_size")),
                fmt(settings.get("ep_size")),
                f"{joined}/{nnodes}",
                str(settings.get("model_path", "")),
            ]
        )
    return SERVER_HEAD, body


def gateway_table(hosts: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    body = []
    for host, facts in sorted(hosts.items()):
        gateway = facts.get("gateway") or {}
        if gateway.get("state") != "started":
            continue
        verify = gateway.get("verify") or {}
        workers = gateway.get("workers") or []
        body.append(
            [
                host,
                gateway.get("url", ""),
                gateway.get("version", ""),
                gateway.get("policy", ""),
                f"{len(workers)}: " + ", ".join(str(w.get("host", w.get("url", ""))) for w in workers),
                f"{verify.get('workers_healthy', 0)}/{len(workers)}",
                "yes" if verify.get("every_worker_reached") else "no",
            ]
        )
    return GATEWAY_HEAD, body


def last_entry(fact: dict | None, status: str | None = None) -> dict:
    history = (fact or {}).get("history") or []
    for entry in reversed(history):
        if status is None or entry.get("status") == status:
            return entry
    return {}


def _row(measured: str, hosts: str, entry: dict) -> list[str]:
    figures = entry.get("figures") or {}
    return [
        measured,
        hosts,
        fmt(figures.get("output_throughput")),
        fmt(figures.get("request_throughput"), 2),
        fmt(figures.get("ttft_median_ms")),
        fmt(figures.get("failed_requests")),
        entry.get("status", "-"),
    ]


def throughput_table(hosts: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """Per gateway: its last fleet run, each worker host's own last ok run, and their sum."""
    body = []
    for host, facts in sorted(hosts.items()):
        fleet = last_entry(facts.get("fleet_bench"))
        if not fleet:
            continue
        info = fleet.get("fleet") or {}
        workers = [str(w) for w in info.get("worker_hosts") or []]
        count = info.get("workers", len(workers))
        # a window where some worker was short of its share (module fleet_bench_record) is not a figure for
        # all of them: say how many served, and compare it with no sum of hosts alone
        served = info.get("served_workers", count)
        short = served is not None and int(served) < int(count)
        what = f"{served} of {count} workers served their share" if short else f"{count} workers"
        body.append(_row(f"fleet via {host} ({what})", ", ".join(workers), fleet))
        own_total = 0.0
        for worker in workers:
            own = last_entry((hosts.get(worker) or {}).get("bench"), "ok")
            body.append(
                _row(f"{worker} alone", worker, own)
                if own
                else [f"{worker} alone", worker] + ["-"] * 4 + ["not measured"]
            )
            own_total += float((own.get("figures") or {}).get("output_throughput") or 0)
        if own_total and not short:
            share = float((fleet.get("figures") or {}).get("output_throughput") or 0) / own_total
            body.append(
                [
                    "fleet / sum of hosts alone",
                    ", ".join(workers),
                    f"{share:.2f}x of {own_total:.1f}",
                    "-",
                    "-",
                    "-",
                    "-",
                ]
            )
    return THROUGHPUT_HEAD, body
