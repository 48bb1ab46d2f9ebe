"""Helpers every epforge module shares: bounded commands with a log users can tail, and failures that
carry the command, its exit code and the last lines of its log."""

from __future__ import annotations

import os
import subprocess
import time

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


def run_logged(argv: list[str], log_path: str, *, env: dict | None = None, cwd: str | None = None,
               timeout: float | None = None, header: str | None = None) -> tuple[int, float]:
    """Run argv with stdout+stderr appended to log_path; return (rc, seconds).

    rc is 124 when the timeout ends the command (the convention of coreutils' timeout).
    The log is appended to, with a header line, so one log can tell a whole build's story.
    """
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        log.write(f"\n=== {stamp} {header or ''}\n$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.write(f"\n=== timed out after {timeout} s\n".encode())
            rc = 124
    return rc, time.monotonic() - started


def fail_cmd(module, msg: str, argv: list[str], rc: int, *, output: str | bytes | None = None,
             log_path: str | None = None, **extra) -> None:
    """fail_json with the command, rc and a log tail (from output, else from the log file)."""
    log_tail = tail(output) if output else (tail_file(log_path) if log_path else "")
    module.fail_json(msg=msg, cmd=argv, rc=rc, log_tail=log_tail, log_path=log_path, **extra)
