"""Payload: the run lock's processes (plugins/module_utils/epforge_preflight_checks/run_lock.py), each
`python -c SOURCE JOB ARGS...`, standard library only (the collection cannot be imported there):

- `hold MARK FD LEASE_S WATCH_PID WATCH_START` (on the host, started by module epforge_preflight_checks): the
  lock's holder. FD is the lock file, already locked by the module and inherited: the lock lives while this
  process does. It ends when the controller's ansible-playbook (WATCH_PID with that start time; "0": none to
  watch) is gone, when the lease ends, or on SIGTERM. MARK is in its command line so that the holder is told
  apart from any other process.
- `reap REGISTRY LOCK_PATH MARK` (on the host, `python -I -S`): when the controller's run is gone and the host
  cannot see that itself (a podman host, reached through `podman exec`): end every registered command group
  (plugins/module_utils/process.py REGISTRY) that is still the process it was, then the lock's holder.
  Prints one JSON line {groups, holder}.
- `watch PID START LEASE_S REAPER...` (on the controller, started detached by the action plugin
  epforge_preflight_checks): wait until ansible-playbook (PID with START) is gone or the lease ends, then run
  the reaper command once (bounded).

A process is named by its pid and its start time (clock ticks since boot, /proc/PID/stat field 22), not a
later one reusing the pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

REAPER_TIMEOUT_S = 120
# Seconds the reaper gives command groups between SIGTERM and SIGKILL.
GRACE_S = 3


def started(pid) -> str | None:
    """The start time of process pid, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def hold(lease_s: str, watch_pid: str, watch_start: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    end = time.monotonic() + float(lease_s)
    while time.monotonic() < end:
        if watch_pid != "0" and started(watch_pid) != watch_start:
            break
        time.sleep(0.5)
    return 0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


def end_groups(registry: str) -> list[int]:
    """SIGTERM every registered group that is still the process it was, drop its entry, SIGKILL what is left
    after GRACE_S."""
    groups = []
    for name in sorted(os.listdir(registry)) if os.path.isdir(registry) else []:
        path = os.path.join(registry, name)
        try:
            with open(path, encoding="utf-8") as handle:
                pid, start = handle.read().split()
        except (OSError, ValueError):
            continue
        if started(pid) == start:
            try:
                os.killpg(int(pid), signal.SIGTERM)
                groups.append(int(pid))
            except OSError:
                pass
        try:
            os.unlink(path)
        except OSError:
            pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(group_alive(g) for g in groups):
        time.sleep(0.1)
    for pgid in groups:
        if group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
    return groups


def end_holder(lock_path: str, mark: str) -> int:
    """SIGTERM the holder the lock file names, when its command line carries the mark (0: none ended)."""
    try:
        # never through a link (run_lock.open_lock_file): a run.lock that is a symlink names no holder
        with os.fdopen(os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)) as handle:
            holder = int(json.loads(handle.read() or "{}").get("holder_pid") or 0)
        with open(f"/proc/{holder}/cmdline", "rb") as handle:
            if mark.encode() not in handle.read():
                return 0
        os.kill(holder, signal.SIGTERM)
        return holder
    except (OSError, ValueError):
        return 0


def reap(registry: str, lock_path: str, mark: str) -> dict:
    return {"groups": end_groups(registry), "holder": end_holder(lock_path, mark)}


def watch(pid: str, start: str, lease_s: str, reaper: list[str]) -> int:
    end = time.monotonic() + float(lease_s)
    while time.monotonic() < end and started(pid) == start:
        time.sleep(0.5)
    subprocess.run(
        reaper,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=REAPER_TIMEOUT_S,
        check=False,
    )
    return 0


def main(argv: list[str]) -> int:
    job, args = (argv[0], argv[1:]) if argv else ("", [])
    if job == "hold":
        return hold(*args[2:5])  # args[0] is the mark (for the command line), args[1] the inherited fd
    if job == "reap":
        print(json.dumps(reap(*args[:3])))
        return 0
    if job == "watch":
        return watch(args[0], args[1], args[2], args[3:])
    sys.stderr.write(
        "usage: hold MARK FD LEASE_S PID START | reap REGISTRY LOCK MARK | watch PID START LEASE_S CMD...\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
