"""The one task that records a step (roles/epforge/tasks/record_step.yml) and its argument check.

Real playbooks through the project's ansible.cfg: the steps a run records, and the clear failure of a bad
status, a missing name or a detail that is not text — in the recording task itself (no validation task)."""

from __future__ import annotations

import sys

import pytest
import yaml

from playbooks import JSON_CALLBACK, json_report, run_playbook


def record(name, status, detail) -> dict:
    return {
        "name": f"Record {name}",
        "ansible.builtin.import_role": {"name": "epforge", "tasks_from": "record_step"},
        "vars": {
            "epforge_step_name": name,
            "epforge_step_status": status,
            "epforge_step_detail": detail,
        },
    }


def run(tmp_path, tasks: list[dict]):
    playbook = tmp_path / "steps.yml"
    tasks = [*tasks, {"name": "Show", "ansible.builtin.debug": {"var": "epforge_steps"}}]
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Steps",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": sys.executable},
                    "tasks": tasks,
                }
            ],
            sort_keys=False,
        )
    )
    proc = run_playbook(playbook, env=JSON_CALLBACK, timeout=120)
    return proc, json_report(proc)["plays"][0]["tasks"]


def test_steps_are_appended_in_one_task_each(tmp_path):
    proc, tasks = run(
        tmp_path,
        [
            record("cuda_toolkit", "done", "CUDA 13.0\n   at /opt/x  "),
            record("deepep", "skipped", "no GitHub"),
        ],
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    # one task per step: no argument-validation task in between
    assert [t["task"]["name"] for t in tasks] == [
        "epforge : Record the run-summary step cuda_toolkit",
        "epforge : Record the run-summary step deepep",
        "Show",
    ]
    assert tasks[-1]["hosts"]["localhost"]["epforge_steps"] == [
        {"step": "cuda_toolkit", "status": "done", "detail": "CUDA 13.0 at /opt/x"},
        {"step": "deepep", "status": "skipped", "detail": "no GitHub"},
    ]


@pytest.mark.parametrize(
    ("step", "expect"),
    [
        (
            ("ml_env", "ok", "x"),
            "epforge_step_status of step ml_env must be one of done, skipped, failed, got 'ok'",
        ),
        (("", "done", "x"), "epforge_step_name must be a non-empty string"),
        (("ml_env", "done", ["a"]), "epforge_step_detail of step ml_env must be a string"),
    ],
)
def test_bad_arguments_stop_the_run_with_the_step_named(tmp_path, step, expect):
    proc, tasks = run(tmp_path, [record("first", "done", "fine"), record(*step)])
    assert proc.returncode != 0
    failed = tasks[1]["hosts"]["localhost"]
    assert failed["failed"] is True and expect in failed["msg"], failed["msg"]


def test_a_run_without_steps_says_so_in_its_summary(tmp_path):
    """playbooks/summary.yml on a host where no step recorded an outcome prints one line saying so and writes
    no steps fact."""
    from playbooks import ROOT, write_vars  # noqa: PLC0415

    facts = tmp_path / "facts"
    proc = run_playbook(
        ROOT / "playbooks" / "summary.yml",
        vars_file=write_vars(tmp_path / "vars.json", {"epforge_facts_dir": str(facts)}),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "no epforge step recorded an outcome on this host" in proc.stdout
    assert proc.stdout.count("ok: [localhost] => (item=none)") == 1 and not facts.exists()
