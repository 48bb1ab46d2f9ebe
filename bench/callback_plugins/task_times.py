"""bench/tune_cost.py's clock: every task's start and end (a benchmark task's client figures too), as JSON.

Loaded only by bench/tune_cost.py and bench/first_run.py (ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins,
ANSIBLE_CALLBACKS_ENABLED task_times); writes to the file named by EPFORGE_TASK_TIMES. Not part of the
collection.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: each task's start and end as JSON lines (bench/tune_cost.py)
description: Writes one JSON line per finished task to the file EPFORGE_TASK_TIMES names.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.path = os.environ.get("EPFORGE_TASK_TIMES", "")
        self.started: dict[str, float] = {}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.started[task._uuid] = time.time()

    def _write(self, result, status: str) -> None:
        if not self.path:
            return
        task = result._task
        res = result._result if isinstance(result._result, dict) else {}
        figures = res.get("figures") if isinstance(res.get("figures"), dict) else {}
        role = getattr(task, "_role", None)
        line = {
            "task": task.get_name(),
            "role": role.get_name() if role else None,
            "start": self.started.get(task._uuid, time.time()),
            "end": time.time(),
            "status": status,
            "client_s": res.get("seconds") if "figures" in res or "windows" in res else None,
            "traffic_s": figures.get("duration_s"),
        }
        if isinstance(res.get("windows"), list):
            # module sglang_bench with windows: one client for several windows, each with its own times
            line["client"] = res.get("client") or {}
            line["windows"] = [
                {
                    "name": w.get("name"),
                    "purpose": w.get("purpose"),
                    "started": w.get("started"),
                    "finished": w.get("finished"),
                    "seconds": w.get("seconds"),
                    "traffic_s": (w.get("figures") or {}).get("duration_s"),
                }
                for w in res["windows"]
            ]
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")
