"""The last launch of a server that came up and answered: what a failed relaunch falls back to.

A relaunch with new settings stops the running server before it starts the new one (one GPU set, one port).
When the new one then fails, the host would be left with no server although a healthy one ran a minute
before. The sglang_server module records each launch that became ready (argv, environment without the key,
where it answers, its settings digest) in a root-only file beside the pidfile, and relaunches exactly that
after a failed start. The key is never in the record: the module adds it from its own option, as for any
launch.
"""

from __future__ import annotations

import json
import os

from ansible_collections.epforge.ep.plugins.module_utils.files import write_atomic

SCHEMA = 1
FIELDS = ("argv", "env", "host", "port", "url", "settings_digest")


def record_path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, f"{name}.last-ready.json")


def read(state_dir: str, name: str) -> dict | None:
    """The recorded launch, or None (never recorded, unreadable, or not of this schema)."""
    try:
        with open(record_path(state_dir, name), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return None
    if not all(field in record for field in FIELDS) or not isinstance(record["argv"], list):
        return None
    return record


def write(state_dir: str, name: str, launch: dict) -> None:
    """Record a launch that became ready; an unchanged record is not rewritten (no-op reruns write none)."""
    record = {"schema": SCHEMA, **{field: launch[field] for field in FIELDS}}
    # The main pid of that launch (optional, older records lack it): a later run tells whether the process
    # that became ready still runs (one model across nodes: did a rank end since the group's launch?), and
    # where its output starts in the log (what ended it, classified from there).
    for field in ("pid", "ready_at", "log_offset"):
        if launch.get(field):
            record[field] = launch[field]
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    path = record_path(state_dir, name)
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return
    except OSError:
        pass
    os.makedirs(state_dir, exist_ok=True)
    write_atomic(path, text, 0o600)


def remove(state_dir: str, name: str) -> bool:
    """Forget the record (state absent); whether there was one."""
    try:
        os.unlink(record_path(state_dir, name))
    except FileNotFoundError:
        return False
    return True
