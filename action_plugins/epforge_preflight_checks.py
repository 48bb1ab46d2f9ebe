"""epforge_preflight_checks runs on the host; this names the controller's run for the host's run lock.

The module (library/epforge_preflight_checks.py, option run_lock) takes the lock through a holder process that
watches the controller's ansible-playbook process where the host can see it. Only the controller knows which
process that is (this worker's parent) and whether the run named by a lock file is still alive. So:
- run_lock.controller is filled in here (host name, boot id, pid and start time of ansible-playbook);
- a lock that is busy is first asked for without waiting: when its holder is a run of this very controller
  whose ansible-playbook process is gone (killed with SIGKILL, say, on a host that cannot watch it), the
  module is called again to end that stale holder and take the lock; otherwise it waits run_lock.wait_s
  (a holder that watches its controller ends by itself within a second of it).
"""

from __future__ import annotations

import os
import socket
import sys

from ansible.plugins.action import ActionBase
from ansible.plugins.loader import action_loader

MODULE = "epforge_preflight_checks"


def project_module_utils():
    """module_utils/epforge_run_lock.py, importable the way epforge_controller_side.py makes it."""
    controller_side = action_loader.get("epforge_controller_side", class_only=True)
    sys.modules[controller_side.__module__].expose_project_module_utils()
    from ansible.module_utils import epforge_run_lock  # noqa: PLC0415 - importable only after the line above

    return epforge_run_lock


def playbook_process() -> int:
    """The ansible-playbook process: this worker's parent (the first ancestor naming ansible, to be sure)."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"ansible" in handle.read():
                    return pid
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                pid = int(handle.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return os.getppid()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        lock = args.get("run_lock")
        if not lock:
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
            return result
        run_lock = project_module_utils()
        lock = dict(lock, controller=run_lock.controller_identity(playbook_process(), socket.gethostname()))
        waited = dict(lock)
        first = self.call(args, dict(lock, wait_s=0), task_vars)
        holder = (first.get("run_lock") or {}).get("holder") or {}
        if (first.get("run_lock") or {}).get("taken") != "refused":
            return dict(result, **first)
        # A holder that watches its controller ends by itself within a second: waiting is enough.
        if not holder.get("watching") and self.stale(holder, lock["controller"], run_lock):
            waited["break_stale"] = holder["token"]
            self._display.warning(
                f"{task_vars.get('inventory_hostname')}: the run lock was held by "
                f"{run_lock.describe_holder(holder)}, whose ansible-playbook process is gone: that stale "
                "lock is ended"
            )
        return dict(result, **self.call(args, waited, task_vars))

    def call(self, args: dict, lock: dict, task_vars) -> dict:
        return self._execute_module(
            module_name=MODULE, module_args=dict(args, run_lock=lock), task_vars=task_vars
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
