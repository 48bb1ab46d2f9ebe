"""The one way modules run commands (plugins/module_utils/process.py), on real processes: argv only, the
timeout ends the whole process group (a grandchild too), rc 124 / 127 conventions, input and environment,
and run_logged's log that users tail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.process import (
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


# ------------------------------------------------------------------ interrupts end the whole process group
# Issue 'nothing let in' (7): a build's pip/ninja/c++ must not go on after the run that started it ended.

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A module-like process: runs a command that leaves two grandchildren in its group (like pip -> ninja -> c++).
RUNNER = """
import sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {root!r} + "/collections")
from ansible_collections.epforge.ep.plugins.module_utils.process import {func}
marks = sys.argv[1]
argv = ["sh", "-c", f"sleep 3{{marks}}1 & sleep 3{{marks}}2 & wait"]
if "{func}" == "run_logged":
    rc = run_logged(argv, sys.argv[2], timeout=600)
else:
    rc = run_bounded(argv, timeout=600)
open(sys.argv[2] + ".done", "w").write(str(rc))
"""


def group_pids(marks: str) -> list[int]:
    """Live processes of the command (the sleeps it left behind)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmd = handle.read()
            except OSError:
                continue
            if cmd.startswith(b"sleep\x003" + marks.encode()):
                found.append(int(entry))
    return found


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def start_runner(tmp_path, func: str, marks: str, launcher: list[str] | None = None) -> subprocess.Popen:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER.format(root=ROOT, func=func))
    log = tmp_path / "build.log"
    argv = [*(launcher or []), sys.executable, str(script), marks, str(log)]
    proc = subprocess.Popen(argv, start_new_session=True)
    assert wait_until(lambda: len(group_pids(marks)) == 2, 20), "the command did not start"
    return proc


@pytest.mark.parametrize(
    ("func", "signum", "marks"),
    [
        ("run_logged", signal.SIGINT, "11"),
        ("run_logged", signal.SIGTERM, "12"),
        ("run_bounded", signal.SIGTERM, "13"),
        ("run_bounded", signal.SIGHUP, "14"),
    ],
)
def test_a_signal_to_the_module_ends_the_whole_group(tmp_path, func, signum, marks):
    runner = start_runner(tmp_path, func, marks)
    runner.send_signal(signum)
    assert wait_until(lambda: not group_pids(marks), 10), f"left running: {group_pids(marks)}"
    assert runner.wait(timeout=10) != 0
    assert not (tmp_path / "build.log.done").exists(), "the caller went on as if the command had finished"
    if func == "run_logged":
        log = tmp_path / "build.log"
        assert wait_until(lambda: "=== interrupted (stopped by signal" in log.read_text(), 10)


FAKE_PLAYBOOK = """
import os, subprocess, sys, time
# Like ansible-playbook: a main process and a forked worker (same command line) that runs the module.
if os.fork() == 0:
    subprocess.run(sys.argv[1:])
    os._exit(0)
time.sleep(600)
"""


def test_sigkill_of_the_controller_ends_the_module_command_group(tmp_path):
    """The controller's ansible-playbook (here a stand-in process named like it, with a forked worker) is
    killed with SIGKILL: the module sees its worker re-parented and stops the command's whole group."""
    fake = tmp_path / "fake-ansible-playbook"
    fake.write_text(FAKE_PLAYBOOK)
    marks = "21"
    main = start_runner(tmp_path, "run_logged", marks, launcher=[sys.executable, str(fake)])
    os.kill(main.pid, signal.SIGKILL)
    main.wait()
    assert wait_until(lambda: not group_pids(marks), 10), f"left running: {group_pids(marks)}"
    log = tmp_path / "build.log"
    assert wait_until(lambda: "ansible-playbook run that started this is gone" in log.read_text(), 10)
    assert not (tmp_path / "build.log.done").exists()


SLOW_IMPORT_PLAY = """
- name: A long module command (an import that starts a helper and waits, like a JIT build)
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Import the slow package
      epforge.ep.python_import_check:
        python: "{{ ansible_playbook_python }}"
        name: slowpkg
        environment: {PYTHONPATH: "{{ pkg_dir }}"}
        timeout: 600
"""


@pytest.mark.parametrize(("signum", "marks"), [(signal.SIGINT, "31"), (signal.SIGKILL, "32")])
def test_interrupting_ansible_playbook_ends_the_module_command(tmp_path, signum, marks):
    """Real ansible-playbook on localhost, a real module (python_import_check) whose command leaves a
    grandchild: SIGINT or SIGKILL to ansible-playbook ends the whole group within 10 s."""
    pkg = tmp_path / "pkg" / "slowpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"import subprocess, time\nsubprocess.Popen(['sleep', '3{marks}1'])\ntime.sleep(3{marks}2)\n"
    )
    book = tmp_path / "slow.yml"
    book.write_text(SLOW_IMPORT_PLAY)
    argv = [
        os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
        "-i",
        os.path.join(ROOT, "inventory", "local.yml"),
        str(book),
        "-e",
        f"pkg_dir={tmp_path / 'pkg'}",
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    playbook = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert wait_until(lambda: len(group_pids(marks)) == 1 and slow_imports(), 90), "no import started"
        playbook.send_signal(signum)
        assert wait_until(lambda: not group_pids(marks) and not slow_imports(), 10), (
            f"left running: {group_pids(marks)} {slow_imports()}"
        )
    finally:
        if playbook.poll() is None:
            playbook.kill()
        playbook.wait()


def python_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def slow_imports() -> list[int]:
    """The module's own command (python -c 'import slowpkg ...') still alive."""
    found = []
    for pid in python_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"\x00-c\x00" in cmd and b"\x00slowpkg\x00" in cmd:
            found.append(pid)
    return found
