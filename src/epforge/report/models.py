"""The models section: per host, each model the server runs (fact epforge_model, written by role model) -
where it came from, the commit, its size, and what the last fetch moved."""

from __future__ import annotations

from epforge.report.tables import fmt

HEAD = ["host", "setting", "model", "source", "commit", "files", "GiB", "verified", "last fetch"]
TEXT = (
    "The weights each host serves (epforge_model, role model): fetched from the Hub or a mirror, sent by the "
    "controller, or a directory of the host's own, each file checked against its hash."
)


def model_table(hosts: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    body = []
    for host, facts in sorted(hosts.items()):
        for setting, record in sorted((facts.get("model") or {}).items()):
            if not isinstance(record, dict):
                continue
            fetched = record.get("bytes_fetched") or 0
            body.append(
                [
                    host,
                    setting,
                    record.get("repo") or record.get("path", ""),
                    record.get("source", ""),
                    (record.get("commit") or "")[:12] or "-",
                    str(record.get("files", "")),
                    fmt((record.get("bytes") or 0) / 2**30, 2),
                    f"{record.get('verified', 0)}/{record.get('files', 0)}",
                    f"{fmt(fetched / 2**30, 2)} GiB in {fmt(record.get('seconds'), 1)} s"
                    if fetched
                    else "nothing",
                ]
            )
    return HEAD, body
