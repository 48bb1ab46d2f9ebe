"""Processes: the one way an epforge module runs a command. argv lists only (never a shell string), every
run bounded by a timeout that ends the command's whole process group, and long work logged to a file users
can tail. Unit-tested in tests/unit/test_process.py.

- run_bounded(): a short command whose output the module reads (nvcc --version, git rev-parse, a probe).
- run_logged(): long work (pip, builds) with stdout+stderr appended to a log, for `tail -f`.
- start_detached(): a daemon (a server) in its own session, its output appended to a log; the caller
  bounds the wait for it (its readiness probe) and stops its process group.
Both return rc 124 when the timeout ended the command (coreutils' timeout convention); run_bounded returns
rc 127 with the reason in err when the command could not be started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import NamedTuple

TIMED_OUT = 124
NOT_STARTED = 127
KILL_GRACE_S = 10


class Completed(NamedTuple):
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def output(self) -> str:
        return self.out + self.err

    @property
    def timed_out(self) -> bool:
        return self.rc == TIMED_OUT


def _argv(argv) -> list[str]:
    if isinstance(argv, str | bytes) or not argv:
        raise TypeError(f"a command is a non-empty argv list, not {argv!r}")
    return [str(a) for a in argv]


def option_argv(options) -> list[str]:
    """argv words of (flag, value) pairs: [("--seed", 1), ("--out", "x")] -> ["--seed", "1", "--out", "x"]."""
    return [word for flag, value in options for word in (flag, str(value))]


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_bounded(
    argv,
    *,
    timeout: float,
    env: dict | None = None,
    env_update: dict | None = None,
    cwd: str | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run argv (its own process group) with captured text output; never longer than timeout seconds."""
    argv = _argv(argv)
    if env_update:
        env = {**(os.environ if env is None else env), **env_update}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return Completed(NOT_STARTED, "", f"{argv[0]}: {exc}", time.monotonic() - started)
    try:
        out, err = proc.communicate(input_text, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        out, err = proc.communicate()
        err = f"{err or ''}\ntimed out after {timeout:g} s"
        rc = TIMED_OUT
    return Completed(rc, out or "", err or "", time.monotonic() - started)


def _popen_to_log(argv: list[str], log, *, env: dict | None, cwd: str | None, **extra) -> subprocess.Popen:
    """Start argv in its own process group with stdout+stderr going to the open binary file log."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        **extra,
    )


def start_detached(
    argv,
    log_path: str | None,
    *,
    env: dict | None = None,
    cwd: str | None = None,
    user: int | None = None,
    group: int | None = None,
) -> subprocess.Popen:
    """Start argv as a daemon (its own session; output appended to log_path, or discarded when None),
    as user/group when given (root only; no supplementary groups). Raises OSError when it cannot start."""
    extra = {} if user is None else {"user": user, "group": group, "extra_groups": []}
    with open(log_path or os.devnull, "ab") as log:  # the child keeps its own copy of the descriptor
        return _popen_to_log(_argv(argv), log, env=env, cwd=cwd, close_fds=True, **extra)


def run_logged(
    argv,
    log_path: str,
    *,
    env: dict | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    header: str | None = None,
) -> tuple[int, float]:
    """Run argv with stdout+stderr appended to log_path; return (rc, seconds).

    The log is appended to, with a header line, so one log can tell a whole build's story.
    """
    argv = _argv(argv)
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        log.write(f"\n=== {stamp} {header or ''}\n$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = _popen_to_log(argv, log, env=env, cwd=cwd)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            proc.wait()
            log.write(f"\n=== timed out after {timeout} s\n".encode())
            rc = TIMED_OUT
    return rc, time.monotonic() - started
