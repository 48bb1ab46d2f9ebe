"""Confirm the requested SGLang server settings against what the running server reports.

In: the requested settings (the keys of plugins/module_utils/sglang_args.py) and the server's own
/get_server_info (or /server_info) answer, a JSON mapping. Out: a report in which every requested setting
is either confirmed (the server reports the value asked for), mismatched (it reports another value) or
unconfirmed with the reason (the server does not report it, or under no name we know). Nothing is dropped:
SGLang has shipped releases that accepted a backend flag and silently ignored it, so a setting that cannot
be seen running is named, not assumed.

Pure functions (unit-tested with server_info captures in tests/unit/test_server_confirm.py); the
sglang_server module calls confirm_settings after the server is ready.
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import flag_pairs
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import is_secret_name
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    SETTINGS_SCHEMA,
    flag_name,
    renamed_partner,
)

# Settings that a running SGLang reports under another name: key -> the names to look for, newest first.
# cuda_graph_max_bs: --cuda-graph-max-bs became a deprecated alias of --cuda-graph-max-bs-decode (0.5.16
# already reports only cuda_graph_max_bs_decode in server_info; the old flag is gone in 0.5.20).
REPORTED_AS: dict[str, tuple[str, ...]] = {
    "cuda_graph_max_bs": ("cuda_graph_max_bs_decode",),
}

# The settings that decide what parallelism runs; settings_check strict fails when one of them, requested,
# cannot be confirmed.
CRITICAL = ("tp_size", "ep_size", "moe_a2a_backend", "deepep_mode")

HIDDEN = "********"


def _normalize_text(text: str):
    """A setting written as text: 'none'/'' as None, 'true'/'false' as booleans, numbers as floats."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("", "none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return float(text)
    except ValueError:
        return lowered


def normalize(value):
    """Comparable form of a setting: numbers as floats, strings case-folded, 'none'/'' as None."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _normalize_text(value)
    return value


def same(requested, running) -> bool:
    """Whether the running value is the requested one (false booleans match an unset running value)."""
    if requested is False and running in (None, False):
        return True
    return normalize(requested) == normalize(running)


def _names(key: str, sglang_version: str | None) -> list[str]:
    """The server_info names a setting may be reported under, most likely first."""
    names = [key]
    for name in (*REPORTED_AS.get(key, ()), flag_name(key, sglang_version)[2:].replace("-", "_")):
        if name not in names:
            names.append(name)
    return names


def _check(report: dict, key: str, requested, names: list[str], info: dict) -> None:
    version = info.get("version")
    present = [name for name in names if name in info]
    if not present:
        others = f" (nor as {', '.join(names[1:])})" if len(names) > 1 else ""
        report["unconfirmed"].append(
            {
                "key": key,
                "requested": requested,
                "reason": f"the running server (SGLang {version or 'of unknown version'}) does not report "
                f"'{names[0]}'{others} in its server info",
            }
        )
        return
    # Prefer a name whose value is set: a renamed setting leaves the old name at None in some releases.
    name = next((n for n in present if info[n] is not None), present[0])
    running = info[name]
    entry = {"key": key, "requested": requested, "running": running}
    if name != key:
        entry["reported_as"] = name
    if same(requested, running):
        report["confirmed"].append(entry)
    elif running is None:
        report["unconfirmed"].append({**entry, "reason": f"the running server reports '{name}' as null"})
    else:
        report["mismatched"].append(entry)


def confirm_settings(settings: dict, info: dict, sglang_version: str | None = None) -> dict:
    """{confirmed, mismatched, unconfirmed, running, version}: every requested (non-empty) setting in
    exactly one of the three lists. Entries: key, requested, running (when reported), reported_as (when
    found under another name), reason (unconfirmed). Secrets are compared by nobody and never returned."""
    info = info if isinstance(info, dict) else {}
    version = info.get("version")
    report: dict = {"confirmed": [], "mismatched": [], "unconfirmed": [], "version": version}
    for key, requested in (settings or {}).items():
        if requested is None or (isinstance(requested, str) and requested == ""):
            continue
        if is_secret_name(key):
            report["unconfirmed"].append(
                {
                    "key": key,
                    "requested": HIDDEN,
                    "reason": "a secret: server info redacts it, so it is not compared",
                }
            )
        elif key == "env":
            for name in sorted(requested):
                report["unconfirmed"].append(
                    {
                        "key": f"env.{name}",
                        "requested": requested[name],
                        "reason": "an environment variable of the server process: "
                        "server info does not report the environment",
                    }
                )
        elif key == "extra_args":
            for flag, value in flag_pairs(requested):
                dest = flag[2:].replace("-", "_")
                if is_secret_name(flag):
                    report["unconfirmed"].append(
                        {"key": f"extra_args {flag}", "requested": HIDDEN, "reason": "a secret: not compared"}
                    )
                    continue
                _check(report, f"extra_args {flag}", value, [dest], info)
        elif key not in SETTINGS_SCHEMA:
            # A flag of the release's table, named by its argparse dest: server info reports it so (a
            # renamed dest under either name).
            partner = renamed_partner(key)
            _check(report, key, requested, [key, partner] if partner else [key], info)
        else:
            _check(report, key, requested, _names(key, sglang_version), info)
    report["running"] = {e["key"]: e["running"] for e in report["confirmed"] + report["mismatched"]}
    return report


def unconfirmed_critical(report: dict) -> list[dict]:
    """The unconfirmed entries among CRITICAL settings (strict mode fails on these)."""
    return [entry for entry in report["unconfirmed"] if entry["key"] in CRITICAL]


def describe_entry(entry: dict) -> str:
    """One line for a message: 'ep_size: requested 2, running 1' / 'x: requested 3 (unconfirmed: why)'."""
    if "reason" in entry:
        return f"{entry['key']}: requested {entry['requested']!r} (unconfirmed: {entry['reason']})"
    shown = f"{entry['key']}: requested {entry['requested']!r}, running {entry['running']!r}"
    return shown + (f" (reported as {entry['reported_as']})" if entry.get("reported_as") else "")


def running_view(report: dict, info: dict) -> dict:
    """The running settings to return: the compared ones, the version and the speculative accept length."""
    running = dict(report["running"], version=info.get("version"))
    states = info.get("internal_states") or []
    if states and isinstance(states[0], dict) and "avg_spec_accept_length" in states[0]:
        running["avg_spec_accept_length"] = states[0]["avg_spec_accept_length"]
    return running


def strict_failure(report: dict, name: str) -> str | None:
    """The message settings_check strict fails with: a mismatch, or a critical setting not confirmed."""
    problems = report["mismatched"] + unconfirmed_critical(report)
    if not problems:
        return None
    lines = "; ".join(describe_entry(e) for e in problems)
    return (
        f"SGLang server {name} runs other settings than requested, or cannot show "
        f"that it runs them: {lines} (SGLang may have adjusted or ignored them; set the "
        "value SGLang uses, or settings_check: warn)"
    )


def settings_warnings(report: dict) -> list[str]:
    """Warnings for settings that differ or that the running server does not confirm."""
    warnings = []
    if report["mismatched"]:
        warnings.append(
            "running settings differ from the requested ones: "
            + "; ".join(describe_entry(e) for e in report["mismatched"])
        )
    if report["unconfirmed"]:
        warnings.append(
            "settings the running server does not confirm: "
            + "; ".join(describe_entry(e) for e in report["unconfirmed"])
        )
    return warnings


def settings_verdict(settings: dict, info: dict, sglang_version: str | None, name: str, strict: bool) -> dict:
    """What the sglang_server module reports about the running settings: the result fields, the failure
    message under settings_check strict (None when the server runs what was asked) and the warnings."""
    report = confirm_settings(settings, info, sglang_version)
    return {
        "result": {
            "running": running_view(report, info),
            "settings_mismatch": report["mismatched"],
            "settings_confirmation": {k: report[k] for k in ("confirmed", "mismatched", "unconfirmed")},
        },
        "failure": strict_failure(report, name) if strict else None,
        "warnings": settings_warnings(report),
    }


def follower_rank(settings: dict) -> int | None:
    """The node_rank of a server that is one rank >= 1 of a multi-node group (None otherwise)."""
    nnodes, rank = settings.get("nnodes") or 1, settings.get("node_rank") or 0
    return int(rank) if int(nnodes) > 1 and int(rank) >= 1 else None


def group_of(settings: dict) -> dict:
    """This server's place in its multi-node group ({} for a one-node server). Ready means joined: every
    rank answers /health only after the group met at dist_init_addr (rank 0 once all ranks came)."""
    nnodes = int(settings.get("nnodes") or 1)
    if nnodes <= 1:
        return {}
    return {
        "nnodes": nnodes,
        "node_rank": int(settings.get("node_rank") or 0),
        "dist_init_addr": settings.get("dist_init_addr", ""),
        "joined": True,
    }


def follower_verdict(settings: dict) -> dict:
    """A rank >= 1 of a multi-node group: SGLang 0.5.23 serves there only a health endpoint, started once its
    schedulers joined the group at dist_init_addr (sglang/srt/entrypoints/engine.py,
    launch_dummy_health_check_server), so /health answering 200 is the proof it joined; its settings are
    confirmed on rank 0, which runs the group's API."""
    rank = follower_rank(settings)
    reason = (
        f"node_rank {rank} of {settings.get('nnodes')} serves only a health endpoint (SGLang's "
        "launch_dummy_health_check_server): the group's settings are confirmed on node_rank 0"
    )
    return {
        "result": {
            "running": {},
            "settings_mismatch": [],
            "settings_confirmation": {
                "confirmed": [],
                "mismatched": [],
                "unconfirmed": [
                    {"key": key, "requested": settings[key], "reason": reason}
                    for key in sorted(settings)
                    if key in ("tp_size", "ep_size", "nnodes", "node_rank", "dist_init_addr")
                ],
            },
            "group": group_of(settings),
        },
        "failure": None,
        "warnings": [],
    }
