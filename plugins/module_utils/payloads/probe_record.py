"""Payload: probe_cache's record on a host - read it (does it still stand?) or write it (with the watched
paths' states as they are now). The action plugin plugins/action/probe_cache.py sends it over the
connection as `python -I -S -c SOURCE read RECORD KEY` or `... write RECORD SOURCE`, before any module runs
(-I -S: no site packages, no user environment). Prints one JSON line. Standard library only (the collection
cannot be imported there).

A path is compared by its state (size, mtime, ctime, inode): a rewrite, a touch, a rename over it or its
removal shows.
"""

from __future__ import annotations

import base64
import json
import os
import sys

# Records kept per module: more than the argument sets one provision asks any probe with.
RECORDS_KEPT_PER_MODULE = 8


def state(path: str) -> list[int] | None:
    try:
        s = os.stat(path)
    except OSError:
        return None
    return [s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino]


def read_record(record_path: str, key: str) -> dict:
    """Whether the record stands (its key is this one and no watched path moved), with its result then."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or "result" not in record:
        return {"hit": False, "reason": "no record"}
    if record.get("key") != key:
        return {"hit": False, "reason": "inputs changed"}
    moved = sorted(p for p, was in record.get("watch", {}).items() if state(p) != was)
    return {
        "hit": not moved,
        "reason": ("changed: " + ", ".join(moved[:3])) if moved else "",
        "result": None if moved else record["result"],
        "seal": record.get("seal", ""),
        "watch": sorted(record.get("watch", {})),
    }


def record_text(source: str) -> str:
    """The record's base64 text: the argument itself, or (past the kernel's limit for one argument, 128 KiB: a
    watch list of thousands of paths) stdin ("-") or a file the controller put on the host ("@PATH", removed
    here)."""
    if source == "-":
        return sys.stdin.read()
    if source.startswith("@"):
        with open(source[1:], encoding="utf-8") as handle:
            text = handle.read()
        os.unlink(source[1:])
        return text
    return source


def newest_first(entry: os.DirEntry, record_path: str) -> tuple:
    try:
        return (entry.path != record_path, -entry.stat().st_mtime_ns)
    except OSError:  # removed meanwhile by another run
        return (True, 0)


def prune(record_path: str, keep: int) -> list[str]:
    """Records of keys no longer asked for (other arguments, an older module) would pile up: keep the newest
    `keep` of this module's records (a module asked with several argument sets keeps one each)."""
    folder, name = os.path.split(record_path)
    prefix = name.rsplit("-", 1)[0] + "-"
    mine = [e for e in os.scandir(folder) if e.name.startswith(prefix) and e.name.endswith(".json")]
    mine.sort(key=lambda entry: newest_first(entry, record_path))
    pruned = []
    for entry in mine[keep:]:
        try:
            os.unlink(entry.path)
            pruned.append(entry.path)
        except FileNotFoundError:
            pass
    return pruned


def write_record(record_path: str, source: str, keep: int = RECORDS_KEPT_PER_MODULE) -> dict:
    """The record with the watched paths' states as they are now, written atomically (0600); then prune."""
    data = json.loads(base64.b64decode(record_text(source)))
    os.makedirs(os.path.dirname(record_path), mode=0o700, exist_ok=True)
    data["watch"] = {p: state(p) for p in data["watch"]}
    tmp = f"{record_path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, record_path)
    return {"written": record_path, "pruned": prune(record_path, keep)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["read"]:
        answer = read_record(argv[1], argv[2])
    elif argv[:1] == ["write"]:
        answer = write_record(argv[1], argv[2])
    else:
        sys.stderr.write("usage: read RECORD KEY | write RECORD SOURCE\n")
        return 2
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
