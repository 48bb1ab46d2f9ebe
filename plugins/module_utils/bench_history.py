"""The append-only benchmark history kept as a local fact (atomic writes under a lock, bounded length):
written by module sglang_bench (each run) and module fleet_bench_record (a fleet window with its split).
Touches only the paths it is given."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import math
import os

from ansible_collections.epforge.ep.plugins.module_utils.files import (
    json_text,
    remove_stale_temps,
    write_atomic,
)

HISTORY_SCHEMA = 1


class BenchError(Exception):
    """A benchmark input, output or history problem, with a message that names the remedy."""


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else None)
    return value


def sanitize(value):
    """A JSON-safe deep copy: non-finite floats become strings, unknown objects their str()."""
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


# ---------------------------------------------------------------------------------------------- history


def empty_fact(history_max: int) -> dict:
    return {
        "schema": HISTORY_SCHEMA,
        "runs": 0,
        "failures": 0,
        "history_max": history_max,
        "last": None,
        "last_ok": None,
        "history": [],
    }


def load_fact(path: str, history_max: int) -> dict:
    """The benchmark fact at path, or an empty one when the file does not exist.

    Raises BenchError (and leaves the file alone) when it exists but is not an epforge_bench fact:
    overwriting it would lose the history it may hold.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return empty_fact(history_max)
    except OSError as exc:
        raise BenchError(f"cannot read the benchmark fact {path}: {exc}") from exc
    try:
        fact = json.loads(text) if text.strip() else None
    except ValueError as exc:
        raise BenchError(
            f"{path} is not valid JSON ({exc.msg}); it was left untouched: move it aside to "
            "start a new history, or repair it"
        ) from exc
    if not isinstance(fact, dict) or not isinstance(fact.get("history"), list):
        raise BenchError(
            f"{path} is not an epforge benchmark fact (no 'history' list); it was left "
            "untouched: move it aside to start a new history"
        )
    return fact


def append_entry(fact: dict, entry: dict, history_max: int) -> dict:
    """A new fact: entry appended to the history (oldest entries beyond history_max dropped), as `last`,
    and as `last_ok` when it succeeded. Earlier entries are never changed."""
    if history_max < 1:
        raise BenchError(f"history_max must be >= 1, got {history_max}")
    new = copy.deepcopy(fact)
    entry = sanitize(entry)
    new["schema"] = HISTORY_SCHEMA
    new["runs"] = int(new.get("runs") or len(new["history"])) + 1
    new["failures"] = int(new.get("failures") or 0) + (0 if entry.get("status") == "ok" else 1)
    new["history_max"] = history_max
    new["history"] = ([*new["history"], entry])[-history_max:]
    new["last"] = entry
    if entry.get("status") == "ok":
        new["last_ok"] = entry
    return new


@contextlib.contextmanager
def locked(path: str):
    """An exclusive lock beside path, so two runs on one host append one after the other."""
    lock_path = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.lock")
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def record_run(path: str, entry: dict, history_max: int) -> dict:
    """Append entry to the history fact at path (locked, atomic); return the new fact."""
    with locked(path):
        remove_stale_temps(path)
        fact = load_fact(path, history_max)
        new = append_entry(fact, entry, history_max)
        write_atomic(path, json_text(new, indent=1))
    return new
