"""epforge_preflight_checks runs on the host; this names the controller's run for the host's run lock.

The module (library/epforge_preflight_checks.py, option run_lock) takes the lock through a holder process that
watches the controller's ansible-playbook process where the host can see it. Only the controller knows which
process that is (this worker's parent) and whether the run named by a lock file is still alive. So:
- run_lock.controller is filled in here (host name, boot id, pid and start time of ansible-playbook);
- a lock that is busy is first asked for without waiting: when its holder is a run of this very controller
  whose ansible-playbook process is gone (killed with SIGKILL, say, on a host that cannot watch it), the
  module is called again to end that stale holder and take the lock; otherwise it waits run_lock.wait_s
  (a holder that watches its controller ends by itself within a second of it);
- on a podman host (which cannot see the controller's processes, and `podman exec` forwards no signal), a
  watchdog process on the controller follows ansible-playbook: when it ends, however it ends (SIGKILL
  included), the watchdog runs the reaper on the host through `podman exec`: every command group a module
  registered is ended, then the run lock's holder (payload run_lock_host, job reap).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import run_lock
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import load_flag_table

# libyaml when PyYAML has it (about 8x faster on the known-issues table)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PODMAN_TRANSPORTS = ("containers.podman.podman", "podman")


def playbook_process() -> int:
    """The ansible-playbook process: this worker's parent (the first ancestor naming ansible, to be sure)."""
    pid = os.getppid()
    for _unused in range(8):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"ansible" in handle.read():
                    return pid
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                pid = int(handle.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return os.getppid()


def tables_read_here(args: dict) -> dict:
    """The args with the tables given by file (known_issues_path, flag_table_path) read on the controller,
    where they are, and passed as JSON text: the host needs no copy, no template finalizes them, and the
    module's argument check, its invocation record and the result's way back handle one string each instead
    of thousands of nodes (a no-op rerun pays less)."""
    try:
        if args.get("flag_table_path"):
            # checked here (a JSON object, or {} for a release without a file), passed as the file's text
            path = args.pop("flag_table_path")
            table = load_flag_table(path)
            args["flag_table"] = _file_text(path) if table else "{}"
        if args.get("known_issues_path"):
            path = args.pop("known_issues_path")
            with open(path, encoding="utf-8") as handle:
                args["known_issues_table"] = json.dumps(yaml.load(handle, Loader=SAFE_LOADER))  # noqa: S506 - a safe loader (C or Python)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(f"cannot read a table preflight needs: {exc}") from exc
    return args


def _file_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = tables_read_here(dict(self._task.args))
        lock = args.get("run_lock")
        if not lock:
            result.update(
                self._execute_module(module_name=self._task.action, module_args=args, task_vars=task_vars)
            )
            return result
        lock = dict(lock, controller=run_lock.controller_identity(playbook_process(), socket.gethostname()))
        waited = dict(lock)
        first = self.call(args, dict(lock, wait_s=0), task_vars)
        holder = (first.get("run_lock") or {}).get("holder") or {}
        if (first.get("run_lock") or {}).get("taken") != "refused":
            self.watch_from_controller(first, lock, run_lock)
            return dict(result, **first)
        # A holder that watches its controller ends by itself within a second: waiting is enough.
        if not holder.get("watching") and self.stale(holder, lock["controller"], run_lock):
            waited["break_stale"] = holder["token"]
            self._display.warning(
                f"{task_vars.get('inventory_hostname')}: the run lock was held by "
                f"{run_lock.describe_holder(holder)}, whose ansible-playbook process is gone: that stale "
                "lock is ended"
            )
        second = self.call(args, waited, task_vars)
        self.watch_from_controller(second, lock, run_lock)
        return dict(result, **second)

    def watch_from_controller(self, answer: dict, lock: dict, run_lock) -> None:
        """A lock newly taken on a podman host: start the controller's watchdog for this run there."""
        taken = answer.get("run_lock") or {}
        transport = getattr(self._connection, "transport", "")
        if taken.get("taken") != "new" or taken.get("watching") or transport not in PODMAN_TRANSPORTS:
            return
        podman = self._connection.get_option("podman_executable") or "podman"
        reaper = [
            podman,
            "exec",
            self._play_context.remote_addr,
            taken.get("python") or "python3",
            "-I",
            "-S",
            "-c",
            run_lock.HOST_SCRIPT,
            "reap",
            "/run/epforge/groups",
            lock["path"],
            run_lock.HOLDER_MARK,
        ]
        controller = lock["controller"]
        # the watchdog (payload run_lock_host, job watch): wait until ansible-playbook (pid, start time) is
        # gone or the lease ends, then run the reaper command once (bounded)
        argv = [
            sys.executable,
            "-c",
            run_lock.HOST_SCRIPT,
            "watch",
            str(controller["pid"]),
            controller["start"],
            str(lock.get("lease_s") or 21600),
        ]
        # detached on purpose: it outlives this worker and follows the whole run
        subprocess.Popen(
            [*argv, *reaper],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )

    def call(self, args: dict, lock: dict, task_vars) -> dict:
        return self._execute_module(
            module_name=self._task.action, module_args=dict(args, run_lock=lock), task_vars=task_vars
        )

    @staticmethod
    def stale(holder: dict, controller: dict, run_lock) -> bool:
        """A holder of this controller (same host and boot) whose ansible-playbook process is gone."""
        theirs = holder.get("controller") or {}
        if not holder.get("token") or (theirs.get("host"), theirs.get("boot_id")) != (
            controller["host"],
            controller["boot_id"],
        ):
            return False
        return run_lock.process_start(theirs.get("pid") or 0) != theirs.get("start")
