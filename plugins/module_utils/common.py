"""Helpers every epforge module shares: failures that carry the command, its exit code and the last lines
of its log, and log tails. Running commands: plugins/module_utils/process.py."""

from __future__ import annotations

import os

LOG_TAIL_LINES = 40


def tail(text: str | bytes | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a text (bytes are decoded leniently)."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def tail_file(path: str, lines: int = LOG_TAIL_LINES, max_bytes: int = 256 * 1024) -> str:
    """The last lines of a log file, reading at most max_bytes from its end."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return tail(handle.read(), lines)
    except OSError:
        return ""


def fail_cmd(
    module,
    msg: str,
    argv: list[str],
    rc: int,
    *,
    output: str | bytes | None = None,
    log_path: str | None = None,
    **extra,
) -> None:
    """fail_json with the command, rc and a log tail (from output, else from the log file)."""
    log_tail = tail(output) if output else (tail_file(log_path) if log_path else "")
    module.fail_json(msg=msg, cmd=argv, rc=rc, log_tail=log_tail, log_path=log_path, **extra)
