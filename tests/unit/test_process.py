"""The one way modules run commands (module_utils/epforge_process.py), on real processes: argv only, the
timeout ends the whole process group (a grandchild too), rc 124 / 127 conventions, input and environment,
and run_logged's log that users tail."""

from __future__ import annotations

import os
import sys
import time

import pytest
from ansible.module_utils.epforge_process import (
    NOT_STARTED,
    TIMED_OUT,
    option_argv,
    run_bounded,
    run_logged,
    start_detached,
)


def test_output_rc_input_and_environment():
    code = "import os, sys; print(sys.stdin.read().upper(), os.environ['X']); sys.exit(3)"
    res = run_bounded([sys.executable, "-c", code], timeout=30, input_text="abc", env_update={"X": "y"})
    assert res.rc == 3 and res.out == "ABC y\n" and res.err == "" and not res.timed_out


def test_a_shell_string_is_refused():
    with pytest.raises(TypeError, match="argv list"):
        run_bounded("echo hi; rm -rf /", timeout=5)
    with pytest.raises(TypeError):
        run_logged([], "/tmp/never.log")


def test_missing_command_is_127_with_the_reason():
    res = run_bounded(["/nonexistent/tool", "--version"], timeout=5)
    assert res.rc == NOT_STARTED and "/nonexistent/tool" in res.err


def alive(pid: int) -> bool:
    """Running (a killed process whose parent died may linger as a zombie until PID 1 reaps it)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            state = next(line for line in handle if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


def test_timeout_kills_the_process_group_and_keeps_partial_output(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = (
        f"import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    res = run_bounded([sys.executable, "-c", script], timeout=2)
    assert res.rc == TIMED_OUT and res.timed_out and time.monotonic() - started < 20
    assert res.out == "started\n" and "timed out after 2 s" in res.err
    grandchild = int(pid_file.read_text())
    time.sleep(0.2)
    assert not alive(grandchild)  # the sleep the command started is gone too


def test_run_logged_appends_with_headers_and_bounds(tmp_path):
    log = tmp_path / "log" / "build.log"
    rc, _ = run_logged([sys.executable, "-c", "print('one')"], str(log), header="step 1")
    assert rc == 0
    rc, seconds = run_logged(
        [sys.executable, "-c", "import time; print('two', flush=True); time.sleep(60)"],
        str(log),
        timeout=1,
        header="step 2",
    )
    text = log.read_text()
    assert rc == TIMED_OUT and seconds < 20
    assert "step 1" in text and "one" in text and "step 2" in text and "two" in text
    assert "timed out after 1 s" in text


def test_option_argv_pairs_flags_with_their_values_as_strings():
    assert option_argv([("--seed", 1), ("--ratio", 0.5), ("--out", "x y")]) == [
        "--seed",
        "1",
        "--ratio",
        "0.5",
        "--out",
        "x y",
    ]


def test_start_detached_runs_in_its_own_session_and_appends_to_the_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("before\n")
    code = "import os, sys; print(os.getsid(0) == os.getpid(), os.environ['X'], os.getcwd()); sys.exit(4)"
    proc = start_detached(
        [sys.executable, "-c", code], str(log), env={**os.environ, "X": "y"}, cwd=str(tmp_path)
    )
    assert proc.wait(timeout=30) == 4
    assert log.read_text() == f"before\nTrue y {tmp_path}\n"
    with pytest.raises(OSError):
        start_detached(["/nonexistent/server"], None)
