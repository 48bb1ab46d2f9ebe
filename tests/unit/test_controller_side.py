"""Modules that only judge their arguments run in the controller's worker.

plugins/action/controller_side.py runs them there.

Each test runs a real playbook through the project's ansible.cfg. The host's interpreter is set to a path
that does not exist: a module shipped to the host could not start there, so a task that succeeds proves it
ran on the controller; ansible.builtin.ping, which is shipped, fails on the same host (the control case).
The results are compared with the same module run as a process on the host (tests/moduletools.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from gpu_fact_samples import gpu_facts
from moduletools import run_module

from playbooks import ANSIBLE_PLAYBOOK, JSON_CALLBACK, LOCAL_INVENTORY, json_report, run_playbook

NO_INTERPRETER = "/nonexistent/python3"
HOST_PYTHON = sys.executable
# The modules meta/runtime.yml routes to the controller-side action plugin.
OPTED_IN = sorted(
    name
    for name, routing in yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["plugin_routing"][
        "modules"
    ].items()
    if routing.get("action_plugin") == "epforge.ep.controller_side"
)
CHECK = "epforge.ep.epforge_stack_check"
STACK = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
# DeepEP on 2 sm_120 GPUs over PCIe: rows of data/known_issues.yml warn about it (and adjust nothing fatal).
SM120_DEEPEP = {
    "table": yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text()),
    "gpu_facts": gpu_facts("12.0", 2, "pcie"),
    "stack": STACK,
    "server": {
        "model_path": "/m",
        "tp_size": 2,
        "ep_size": 2,
        "moe_a2a_backend": "deepep",
        "api_key": "sk-9",
    },
}


def write_play(tmp_path, tasks: list[dict], interpreter: str) -> Path:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Controller-side modules",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": interpreter},
                    "tasks": tasks,
                }
            ],
            sort_keys=False,
        )
    )
    return playbook


def play(tmp_path, tasks: list[dict], *args: str, interpreter: str = NO_INTERPRETER, env: dict | None = None):
    """The per-task results for localhost of a play of `tasks` (ansible.posix.json)."""
    proc = run_playbook(write_play(tmp_path, tasks, interpreter), *args, env={**JSON_CALLBACK, **(env or {})})
    report = json_report(proc)
    return [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]


def play_output(
    tmp_path, tasks: list[dict], *, interpreter: str = NO_INTERPRETER, env: dict | None = None
) -> str:
    """What a user sees of the play (default callback), stdout and stderr together."""
    proc = run_playbook(write_play(tmp_path, tasks, interpreter), env=env)
    return proc.stdout + proc.stderr


def test_every_opted_in_module_has_its_library_file():
    assert {"epforge_stack_check", "epforge_server_settings", "epforge_known_issues"} <= set(OPTED_IN)
    for name in OPTED_IN:
        assert (ROOT / "library" / f"{name}.py").is_file(), name


def test_the_host_interpreter_is_really_unusable(tmp_path):
    (result,) = play(tmp_path, [{"name": "Shipped to the host", "ansible.builtin.ping": {}}])
    assert result.get("failed") or result.get("unreachable"), result


def test_a_coherent_stack_passes_without_the_host(tmp_path):
    (result,) = play(tmp_path, [{"name": "Check", CHECK: {"spec": STACK, "name": "cu130"}}])
    assert not result.get("failed"), result
    _, on_host = run_module("epforge_stack_check", {"spec": STACK, "name": "cu130"})
    assert result["stack"] == on_host["stack"] and result["problems"] == [] and result["changed"] is False


def test_an_incoherent_stack_fails_with_the_modules_message(tmp_path):
    spec = json.loads(json.dumps(STACK))
    spec["sglang"]["requires_torch"] = "2.13.0"
    (result,) = play(tmp_path, [{"name": "Check", CHECK: {"spec": spec, "name": "cu130"}}])
    rc, on_host = run_module("epforge_stack_check", {"spec": spec, "name": "cu130"})
    assert result["failed"] is True and on_host["failed"] is True and rc == 1
    assert result["msg"] == on_host["msg"] and "pins torch==2.13.0" in result["msg"]


def test_argument_spec_errors_are_the_modules(tmp_path):
    (result,) = play(tmp_path, [{"name": "Check", CHECK: {"name": "cu130"}}])
    assert result["failed"] is True and "one of the following is required: spec, path" in result["msg"]


# The same module file run the classic way: a library/ module by its legacy name has no routing, so the
# task ships the module to the host (the interpreter given), with its module_utils from the collection.
HOST_ENV = {"ANSIBLE_LIBRARY": str(ROOT / "library")}


def shipped_to_host(tasks: list[dict]) -> list[dict]:
    return [{k.replace("epforge.ep.", "ansible.legacy."): v for k, v in task.items()} for task in tasks]


def without_timing(report: dict) -> dict:
    """A run's report less what differs between two runs of the same tasks (times, ids, the name used)."""
    text = json.dumps(report, sort_keys=True)
    text = re.sub(r'"(start|end)": "[^"]*"', '"t": ""', text)
    # the two names of one module file
    text = re.sub(r'"action": "(epforge\.ep|ansible\.legacy)\.', '"action": "', text)
    return json.loads(re.sub(r'"id": "[^"]*"', '"id": ""', text))


def test_results_equal_a_host_run_in_check_mode_and_loops(tmp_path):
    """The same tasks shipped to the host (real interpreter, no action plugins) report the same results."""
    tasks = [
        {"name": "Judge twice", "epforge.ep.epforge_known_issues": SM120_DEEPEP, "loop": [1, 2]},
        {"name": "Check", CHECK: {"spec": STACK, "name": "cu130"}},
    ]
    on_controller = play(tmp_path, tasks, "--check")
    on_host = play(tmp_path, shipped_to_host(tasks), "--check", interpreter=HOST_PYTHON, env=HOST_ENV)
    assert without_timing(on_controller) == without_timing(on_host)
    assert on_controller[0]["results"][1]["findings"]["warnings"], "the case must produce warnings"
    assert "sk-9" not in json.dumps(on_controller)  # the module's no_log values hold in the controller too


def test_module_warnings_are_shown_once_per_item_as_from_a_host(tmp_path):
    task = {"name": "Judge twice", "epforge.ep.epforge_known_issues": SM120_DEEPEP, "loop": [1, 2]}
    shown = play_output(tmp_path, [task])
    from_host = play_output(tmp_path, shipped_to_host([task]), interpreter=HOST_PYTHON, env=HOST_ENV)
    marker = "[WARNING]: [deepep_deepgemm_disabled_sm120]"
    assert shown.count(marker) == from_host.count(marker) >= 1


@pytest.mark.parametrize("name", OPTED_IN)
def test_each_opted_in_action_loads(name, tmp_path):
    """A bad call still reaches the module's own argument checking on the controller, not the host."""
    (result,) = play(tmp_path, [{"name": "Bad call", f"epforge.ep.{name}": {"no_such_option": 1}}])
    assert result["failed"] is True
    assert "Unsupported parameters" in result["msg"] or "missing required arguments" in result["msg"], result


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def wait_until(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_a_killed_play_ends_its_controller_side_worker(tmp_path):
    """Issue 35 (2): a controller-side module runs in Ansible's forked worker; ansible-playbook killed with
    SIGKILL left that worker running on as an orphan (a tuner plan over a large space: minutes of CPU and
    memory). The worker watches its controller chain while the module runs and ends with the play."""
    grid = {"max_running_requests": list(range(1, 201)), "chunked_prefill_size": list(range(1, 201))}
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({"grid": grid, "stack": STACK, "table": SM120_DEEPEP["table"]}))
    task = {
        "name": "Plan 40,000 candidates (minutes of work)",
        "epforge.ep.tune_plan": {
            "server": {"model_path": "/m"},
            "gpu_facts": gpu_facts("9.0", 1, "none"),
            "stack": "{{ stack }}",
            "table": "{{ table }}",
            "sglang_version": "{{ stack.sglang.version }}",
            "space": {"grid": "{{ grid }}"},
            "max_candidates": 1000000,
        },
    }
    book = write_play(tmp_path, [task], NO_INTERPRETER)
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(LOCAL_INVENTORY), str(book)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    playbook = subprocess.Popen(
        [*argv, "-e", f"@{vars_file}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    workers: list[int] = []
    try:
        assert wait_until(lambda: bool(children(playbook.pid)), 60), "no worker started"
        time.sleep(4)  # the worker templated its arguments and is planning
        workers = children(playbook.pid)
        assert workers and all(alive(pid) for pid in workers) and playbook.poll() is None
        os.kill(playbook.pid, signal.SIGKILL)
        playbook.wait()
        assert wait_until(lambda: not any(alive(pid) for pid in workers), 10), (
            f"the worker outlived the play: {[pid for pid in workers if alive(pid)]}"
        )
    finally:
        for pid in [*workers, playbook.pid]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        playbook.wait()
