"""Issue 35 item 5: a run that waited for the run lock failed with a false reason ("cannot run python3
(rc 124: timed out after 30 s)"): preflight's python probe was started, and its 30 s clock with it, before the
lock wait. Every bounded command of preflight's host call now starts after the lock is held. Real processes:
a real holder of the lock (another run's), the module run as Ansible runs it, an interpreter that notes when
it ran."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import yaml
from moduletools import run_module_proc

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import run_lock
from playbooks import ROOT

CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]


def test_the_python_probe_starts_after_the_run_lock_is_held(tmp_path):
    lock_path = str(tmp_path / "state" / "run.lock")
    started_at = tmp_path / "python-started"
    python = tmp_path / "python3"
    # answers payload python_layout (the preflight's version query) as a python 3.12.4 would, in part
    layout = '{"major": 3, "minor": 12, "micro": 4}'
    python.write_text(f"#!/bin/sh\ndate +%s.%N > {started_at}\necho '{layout}'\n")
    python.chmod(0o755)
    other, mine = subprocess.Popen(["sleep", "600"]), subprocess.Popen(["sleep", "600"])
    released = []

    def end_the_other_run() -> None:
        time.sleep(1.5)
        released.append(time.time())
        other.kill()  # its holder sees its controller gone and ends: the lock is free
        other.wait()

    try:
        run_lock.take_lock(
            lock_path,
            controller=run_lock.controller_identity(other.pid, "controller-a"),
            python=sys.executable,
            wait_s=0,
            lease_s=600,
            info={"user": "tester", "playbook": "other"},
        )
        ender = threading.Thread(target=end_the_other_run)
        ender.start()
        _, result = run_module_proc(
            "epforge_preflight_checks",
            {
                "stack": CU130,
                "python": str(python),
                "disk_path": str(tmp_path),
                "min_free_gib": 0.001,
                "run_lock": {
                    "path": lock_path,
                    "wait_s": 20,
                    "controller": run_lock.controller_identity(mine.pid, "controller-a"),
                    "playbook": "this",
                },
            },
            timeout=60,
        )
        ender.join()
        assert result.get("run_lock", {}).get("taken") == "new", result
        assert result["python_version"] == "3.12.4", result
        probe_started = float(started_at.read_text())
        assert probe_started >= released[0], (
            f"the python probe started {released[0] - probe_started:.2f} s before the run lock was free: "
            "its timeout counted the lock wait"
        )
    finally:
        for proc_ in (other, mine):
            proc_.kill()
            proc_.wait()
