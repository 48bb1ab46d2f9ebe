"""Processes: the one way an epforge module runs a command. argv lists only (never a shell string), every
run bounded by a timeout that ends the command's whole process group, and long work logged to a file users
can tail. Unit-tested in tests/unit/test_process.py.

- run_bounded(): a short command whose output the module reads (nvcc --version, git rev-parse, a probe).
- run_logged(): long work (pip, builds) with stdout+stderr appended to a log, for `tail -f`.
- start_detached(): a daemon (a server) in its own session, its output appended to a log; the caller
  bounds the wait for it (its readiness probe) and stops its process group.
Both return rc 124 when the timeout ended the command (coreutils' timeout convention); run_bounded returns
rc 127 with the reason in err when the command could not be started.

Interrupts end the whole process group too (a build's pip, ninja and c++ included), never only the module:
- a signal to the module (SIGINT, SIGTERM, SIGHUP) stops the group, notes it in the log and raises
  Interrupted, so no caller goes on to write a stamp or cache entry that claims success;
- while a command runs, the module watches the chain of processes from itself up to the controller's
  ansible-playbook (local runs: the controller's processes are this host's): when any of them is gone or
  was re-parented (ansible-playbook killed with SIGKILL, its worker ended), the group is stopped the same way.
  On ssh or podman hosts the controller's processes are not visible and this watch is off; there each
  running group is registered in REGISTRY (pid and start time), and the controller's watchdog for podman
  hosts (plugins/action/epforge_preflight_checks.py) ends the registered groups when ansible-playbook ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import NamedTuple

TIMED_OUT = 124
NOT_STARTED = 127
# The status of a controller-side worker that ended because its controller was gone (128 + SIGTERM).
TERMINATED = 143
KILL_GRACE_S = 10
# After an interrupt the group gets less time to end on SIGTERM: the user is waiting for the prompt.
INTERRUPT_GRACE_S = 3
# How often a running command's controller chain is looked at (by a thread: the wait itself never polls).
WATCH_INTERVAL_S = 0.5
# Signals that end a module; each ends the command's process group first.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# Where a running command's process group is registered while it runs (root only; a tmpfs on systemd hosts):
# what a reaper ends when the run that started it is gone
# (plugins/module_utils/epforge_preflight_checks/run_lock.py reap_script).
REGISTRY = "/run/epforge/groups"


def _register(proc: subprocess.Popen) -> str:
    """Register the command's group ('' when it cannot be: not root, no /run): a reaper's list."""
    if os.geteuid() != 0:
        return ""
    stat = _stat(proc.pid)
    path = os.path.join(REGISTRY, str(proc.pid))
    try:
        os.makedirs(REGISTRY, mode=0o700, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"{proc.pid} {stat[1] if stat else ''}\n")
    except OSError:
        return ""
    return path


def _unregister(path: str) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


class Interrupted(Exception):
    """The module was told to stop (a signal), or the controller's run that started it is gone."""


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


def _stop_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left after a grace period (also when the
    leader already exited and left children behind in its group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in ticks since boot) of a live process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    if not fields or fields[0] == "Z":
        return None
    return int(fields[1]), fields[19]


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class Member(NamedTuple):
    """A live process of a session: its pid, process group, start time (ticks since boot) and real uid."""

    pid: int
    pgid: int
    start: str
    uid: int


def boot_id() -> str:
    """This boot's id ('' where the kernel does not say): start times are counted from the boot."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name ([0] state, [1] ppid, [2] pgrp, [3] session, [19] start time),
    [] when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()
    except OSError:
        return []


def process_start(pid: int) -> str | None:
    """When pid started (ticks since boot), a zombie's too; None when there is no such process."""
    fields = _stat_fields(pid) if pid > 0 else []
    return fields[19] if len(fields) > 19 else None


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def session_members(sid: int) -> list[Member]:
    """The live (not zombie) processes of session sid, every process group of it, read from /proc (a daemon
    started by start_detached leads its own session: sid is its pid). Found by the session id alone: the
    kernel keeps a pid that is still some process's session or group id from being reused."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if len(fields) < 20 or fields[0] in ("Z", "X") or int(fields[3]) != sid:
            continue
        uid = _real_uid(int(entry))
        if uid is not None:
            found.append(Member(int(entry), int(fields[2]), fields[19], uid))
    return found


def _names_ansible(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"ansible" in handle.read()
    except OSError:
        return False


def controller_chain(max_hops: int = 32) -> list[tuple[int, int, str]]:
    """This process and its ancestors up to the topmost ansible process above it (the controller's
    ansible-playbook: its worker, then itself), as (pid, parent pid, start); [] when no ansible process is
    an ancestor (the module runs on another machine than the controller, or outside Ansible)."""
    chain: list[tuple[int, int, str]] = []
    pid, in_ansible = os.getpid(), False
    while pid > 1 and len(chain) < max_hops:
        stat = _stat(pid)
        names_ansible = _names_ansible(pid)
        if stat is None or (in_ansible and not names_ansible):
            break
        chain.append((pid, *stat))
        in_ansible = in_ansible or names_ansible
        pid = stat[0]
    return chain if in_ansible else []


def chain_intact(chain: list[tuple[int, int, str]]) -> bool:
    """Whether every process of the chain lives, and all but the topmost one under the same parent (the
    topmost is ansible-playbook itself: who started it does not matter)."""
    for index, (pid, parent, start) in enumerate(chain):
        stat = _stat(pid)
        if stat is None or stat[1] != start:
            return False
        if index < len(chain) - 1 and stat[0] != parent:
            return False
    return True


@contextlib.contextmanager
def _stop_group_on_interrupt(proc: subprocess.Popen, log=None):
    """While the block runs: SIGINT, SIGTERM or SIGHUP to this process, or an Interrupted raised in it, ends
    the command's process group (and notes it in the log) before the interrupt goes on."""

    def raise_interrupted(signum, _frame):
        raise Interrupted(f"stopped by signal {signal.Signals(signum).name}")

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, raise_interrupted)
    try:
        yield
    except (Interrupted, KeyboardInterrupt) as exc:
        _stop_group(proc, INTERRUPT_GRACE_S)
        if log is not None:
            log.write(
                f"\n=== interrupted ({exc or 'SIGINT'}): the command's process group was stopped\n".encode()
            )
            log.flush()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _watching(chain: list[tuple[int, int, str]], on_gone):
    """While the block runs, a thread looks at the controller chain every WATCH_INTERVAL_S; the first time it
    is broken, the thread calls on_gone() and stops looking. Yields the event set when it broke."""
    gone, done = threading.Event(), threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_INTERVAL_S):
            if not chain_intact(chain):
                gone.set()
                on_gone()
                return

    watcher = threading.Thread(target=watch, name="epforge-controller-watch", daemon=True)
    watcher.start()
    try:
        yield gone
    finally:
        done.set()
        watcher.join()


def _wait_watching(proc: subprocess.Popen, timeout: float | None, wait) -> object:
    """wait(timeout) as it is (no polling: a command that ends is seen at once), while a thread watches the
    controller chain: when it breaks, the thread stops the command's group and Interrupted is raised here."""
    chain = controller_chain()
    if not chain:
        return wait(timeout)
    with _watching(chain, lambda: _stop_group(proc, INTERRUPT_GRACE_S)) as gone:
        answer = wait(timeout)
    if gone.is_set():
        raise Interrupted("the controller's ansible-playbook run that started this is gone")
    return answer


# How long a process that ends with the controller gives the command it runs to stop (_stop_group with
# INTERRUPT_GRACE_S: SIGTERM, then SIGKILL) before it ends itself regardless.
ENDING_GRACE_S = 2 * INTERRUPT_GRACE_S + 1


@contextlib.contextmanager
def ending_with_controller():
    """For work done in the controller's own worker process (plugins/action/controller_side.py: a module's
    main() run there): while the block runs, the same watch as a running command's (controller_chain) ends
    this process when the controller's ansible-playbook is gone, SIGKILL included, so a long computation
    never runs on as an orphan. First SIGTERM to this process: a command it runs is stopped whole by
    _stop_group_on_interrupt, and Ansible's worker ends on it; then, after ENDING_GRACE_S (a main thread busy
    in C code sees no signal), os._exit. Outside Ansible (no ansible process above this one) nothing is
    watched."""
    chain = controller_chain()
    if not chain:
        yield
        return

    def end() -> None:
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ENDING_GRACE_S)
        os._exit(TERMINATED)

    with _watching(chain, end):
        yield


class Pending:
    """A bounded command started by start_bounded: result() waits for it (at most its timeout, counted from
    the start) in the thread that calls it, which must be the main thread (it installs signal handlers).
    The command is registered for the reaper from its start (an entry left by a module that failed before
    result() names a pid and start time that no longer match: the reaper ignores it)."""

    def __init__(self, proc: subprocess.Popen | None, timeout: float, started: float, input_text, early=None):
        self.proc, self.timeout, self.started, self.input_text, self.early = (
            proc,
            timeout,
            started,
            input_text,
            early,
        )
        self.registered = _register(proc) if proc is not None else ""

    def result(self) -> Completed:
        if self.early is not None:
            return self.early
        proc, timeout = self.proc, self.timeout
        left = max(0.0, timeout - (time.monotonic() - self.started))

        def communicate(seconds: float | None):
            return proc.communicate(self.input_text, timeout=seconds)

        try:
            with _stop_group_on_interrupt(proc):
                out, err = _wait_watching(proc, left, communicate)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            out, err = proc.communicate()
            err = f"{err or ''}\ntimed out after {timeout:g} s"
            rc = TIMED_OUT
        finally:
            _unregister(self.registered)
        return Completed(rc, out or "", err or "", time.monotonic() - self.started)


def start_bounded(
    argv,
    *,
    timeout: float,
    env: dict | None = None,
    env_update: dict | None = None,
    cwd: str | None = None,
    input_text: str | None = None,
) -> Pending:
    """Start argv (its own process group) with captured text output and return at once: the caller does other
    work while it runs, then Pending.result() waits; never longer than timeout seconds from the start."""
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
        early = Completed(NOT_STARTED, "", f"{argv[0]}: {exc}", time.monotonic() - started)
        return Pending(None, timeout, started, input_text, early)
    return Pending(proc, timeout, started, input_text)


def run_bounded(argv, *, timeout: float, **options) -> Completed:
    """Run argv (its own process group) with captured text output; never longer than timeout seconds.
    The other options are start_bounded's (env, env_update, cwd, input_text)."""
    return start_bounded(argv, timeout=timeout, **options).result()


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
    user: int | None = None,
    group: int | None = None,
    shown: list | None = None,
) -> tuple[int, float]:
    """Run argv with stdout+stderr appended to log_path; return (rc, seconds); as user/group when given
    (root only; no supplementary groups). shown: the argv the log's header line gives instead (a payload's
    source named, not printed).

    The log is appended to, with a header line, so one log can tell a whole build's story.
    """
    argv = _argv(argv)
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        log.write(f"\n=== {stamp} {header or ''}\n$ {' '.join(_argv(shown) if shown else argv)}\n".encode())
        log.flush()
        extra = {} if user is None else {"user": user, "group": group, "extra_groups": []}
        proc = _popen_to_log(argv, log, env=env, cwd=cwd, **extra)
        registered = _register(proc)
        try:
            with _stop_group_on_interrupt(proc, log):
                rc = _wait_watching(proc, timeout, lambda seconds: proc.wait(timeout=seconds))
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            proc.wait()
            log.write(f"\n=== timed out after {timeout} s\n".encode())
            rc = TIMED_OUT
        finally:
            _unregister(registered)
    return rc, time.monotonic() - started
