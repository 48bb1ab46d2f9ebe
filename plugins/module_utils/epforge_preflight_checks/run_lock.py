"""One epforge run per host at a time: a lock the kernel releases, held by a small process on the host.

Two runs at once on one host build the same cache key twice and the last writer wins the records. Preflight's
host call takes this lock before anything changes. A lock must outlive the module call that takes it (the
run goes on for many tasks), so a detached holder process owns it: an flock(2) on a file in the state dir,
which the kernel drops whenever the holder ends, however it ends. The holder ends when:
- the controller's ansible-playbook process it watches is gone (local runs: the controller's process is
  visible from the host - same boot id and the same process start time), SIGKILL included;
- its lease runs out (hosts that cannot see the controller: ssh, podman), or it is told to end
  (state released at the end of a run, or a stale holder broken by a later run of the same controller that
  saw the previous controller process gone: plugins/action/epforge_preflight_checks.py).
A run already holding the lock (same controller process) takes it again at once (re-entrant). The lock file
names its holder (controller host and pid, user, since), which a refused run quotes.
"""

from __future__ import annotations

import errno
import fcntl
import inspect
import json
import os
import signal
import stat
import subprocess
import time

from ansible_collections.epforge.ep.plugins.module_utils.payloads import run_lock_host

# The holder's, the reaper's and the controller watchdog's program (payload run_lock_host: hold, reap, watch).
HOST_SCRIPT = inspect.getsource(run_lock_host)
# In the holder's command line: tells it apart from any other process.
HOLDER_MARK = "epforge-run-lock-holder"


class LockBusy(Exception):
    """Another run holds the lock; args[0] is the holder's record (or {})."""


class LockRefused(OSError):
    """The lock path is a symbolic link or not a regular file: nothing is opened, created or truncated."""


def open_lock_file(path: str, flags: int) -> int:
    """A descriptor of the lock file itself, never of what a link at path points to (O_NOFOLLOW): a run.lock
    that is a symlink - dangling or not - is refused (LockRefused), as is anything but a regular file, so the
    lock never creates, truncates or writes a file elsewhere. O_NONBLOCK: a FIFO at path cannot hang it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            raise LockRefused(
                errno.ELOOP,
                f"the run lock {path} is a symbolic link (to {target}): refused, a lock is never opened "
                f"through a link (that would create or overwrite {target}). Remove the link (rm {path}) and "
                "run again",
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockRefused(
            errno.EINVAL,
            f"the run lock {path} is not a regular file: refused. Remove it and run again",
        )
    return fd


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (/proc/PID/stat field 22), None when it is gone."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8") as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def controller_identity(pid: int, host: str) -> dict:
    """Who runs: the controller's ansible-playbook process (pid, start time), its host and boot id."""
    return {"host": host, "boot_id": boot_id(), "pid": int(pid), "start": process_start(pid) or ""}


def token_of(controller: dict) -> str:
    """One token per controller run: the same ansible-playbook process always gets the same one."""
    return "/".join(str(controller.get(key)) for key in ("host", "boot_id", "pid", "start"))


def visible_here(controller: dict) -> bool:
    """Whether this host can watch the controller's process: the same kernel and the very same process."""
    start = controller.get("start")
    return (
        bool(start) and controller.get("boot_id") == boot_id() and process_start(controller["pid"]) == start
    )


def read_holder(path: str) -> dict:
    """The record of whoever holds (or last held) the lock; {} when there is none or it cannot be read (a
    symlink at path is not followed: open_lock_file)."""
    try:
        with os.fdopen(open_lock_file(path, os.O_RDONLY), encoding="utf-8") as handle:
            record = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def is_held(path: str) -> bool:
    """Whether some process holds the lock now (a test lock taken and dropped at once)."""
    try:
        fd = open_lock_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def holder_alive(record: dict) -> bool:
    """Whether the record's holder process still runs (and is a holder, not a reused pid)."""
    pid = int(record.get("holder_pid") or 0)
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return HOLDER_MARK.encode() in handle.read()
    except OSError:
        return False


# How long a holder spawned an instant ago may take to show its mark: while it execs, /proc/PID/cmdline reads
# empty or its parent's (seen under load in CI: this run's own lock then looked held by another).
HOLDER_EXEC_S = 3.0


def holder_alive_within(record: dict, seconds: float) -> bool:
    """holder_alive, asked again for up to seconds while the holder's pid exists (it may be exec'ing)."""
    deadline = time.monotonic() + seconds
    while not holder_alive(record):
        pid = int(record.get("holder_pid") or 0)
        if pid <= 0 or not os.path.exists(f"/proc/{pid}") or time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def end_holder(record: dict, timeout: float = 10) -> None:
    """Stop the holder the record names (SIGTERM) and wait until the kernel has dropped its lock."""
    if not holder_alive(record):
        return
    pid = int(record["holder_pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while holder_alive(record) and time.monotonic() < deadline:
        time.sleep(0.05)


def end_stale_holder(path: str, record: dict, token: str, timeout: float = 10) -> None:
    """End the holder of a stale run (its token) until the lock is free, bounded.

    A holder spawned an instant ago may not have exec'd yet: its /proc cmdline is still its parent's, so
    holder_alive cannot tell it from a reused pid and end_holder leaves it; a moment later it is the holder
    and keeps the lock for its lease. So: end it, look at the lock, and again while the same run holds it."""
    deadline = time.monotonic() + timeout
    while True:
        end_holder(record)
        if not is_held(path) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)
        record = read_holder(path)
        if record.get("token") != token:
            return  # another run holds it now: not ours to break


def describe_holder(record: dict) -> str:
    """The holder in words, for a refused run."""
    if not record:
        return "an unknown process (the lock file names no holder)"
    controller = record.get("controller") or {}
    since = record.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    return (
        f"the run of ansible-playbook pid {controller.get('pid')} on controller {controller.get('host')} "
        f"(user {record.get('user')}, playbook {record.get('playbook') or '?'}; holder pid "
        f"{record.get('holder_pid')}) since {when}"
    )


def take_lock(
    path: str,
    *,
    controller: dict,
    python: str,
    wait_s: float,
    lease_s: float,
    info: dict,
    break_stale: str = "",
) -> dict:
    """Hold the lock for this run; returns {'taken': 'new'|'already', 'watching': bool, 'holder': record}.
    Raises LockBusy(record) when another run holds it past wait_s, LockRefused when path is a symlink or not
    a regular file (nothing is created or written then)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    os.close(open_lock_file(path, os.O_RDWR | os.O_CREAT))  # refused here, before any holder is looked at
    token = token_of(controller)
    current = read_holder(path)
    if is_held(path):
        if current.get("token") == token and holder_alive_within(current, HOLDER_EXEC_S):
            return {"taken": "already", "watching": bool(current.get("watching")), "holder": current}
        if break_stale and current.get("token") == break_stale:
            end_stale_holder(path, current, break_stale)
    watching = visible_here(controller)
    fd = _lock_within(path, wait_s)
    try:
        # The holder inherits the locked descriptor: the lock is held from here on, without waiting for the
        # holder's Python to start; the kernel drops it when the holder (the last one holding it) ends.
        proc = subprocess.Popen(
            [
                python,
                "-c",
                HOST_SCRIPT,
                "hold",
                HOLDER_MARK,
                str(fd),
                str(lease_s),
                str(controller["pid"]) if watching else "0",
                str(controller.get("start") or ""),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            start_new_session=True,
        )
        record = dict(info, token=token, controller=controller, watching=watching, holder_pid=proc.pid)
        record["since"] = time.time()
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record, sort_keys=True) + "\n").encode(), 0)
    finally:
        os.close(fd)
    return {"taken": "new", "watching": watching, "holder": record, "python": python}


def _lock_within(path: str, wait_s: float) -> int:
    """An open descriptor of the lock file, locked (flock, exclusive) within wait_s; LockBusy otherwise."""
    fd = open_lock_file(path, os.O_RDWR | os.O_CREAT)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LockBusy(read_holder(path)) from None
            time.sleep(0.2)


def release(path: str, controller: dict) -> bool:
    """End this run's holder (state released); whether there was one to end."""
    current = read_holder(path)
    if current.get("token") != token_of(controller) or not holder_alive(current):
        return False
    end_holder(current)
    return True
