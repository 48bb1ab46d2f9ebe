"""Role smoke_model in a real play on localhost (ansible-playbook): writes the model and the local fact,
a rerun reports changed=0, check mode on a new path writes nothing, a missing path is refused; not
requested (`when:` on the role, as in playbooks/provision.yml), it costs one skipped include."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from playbooks import JSON_CALLBACK, changed_count, json_report, run_playbook, write_vars

PLAY = """---
- name: Write the smoke model
  hosts: localhost
  gather_facts: false
  roles:
    - role: smoke_model
"""
TINY = {
    "smoke_model_num_experts": 4,
    "smoke_model_num_experts_per_tok": 2,
    "smoke_model_vocab_size": 512,
    "smoke_model_moe_intermediate_size": 64,
    "smoke_model_num_hidden_layers": 1,
}


def play(tmp_path: Path, extra: dict, *check: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(PLAY)
    role_vars = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_log_dir": str(tmp_path / "log"),
        "epforge_state_dir": str(tmp_path / "state"),
        "smoke_model_python": sys.executable,
        **TINY,
        **extra,
    }
    return run_playbook(
        tmp_path / "play.yml", *check, vars_file=write_vars(tmp_path / "vars.json", role_vars), env=env
    )


def test_role_writes_once_then_changes_nothing(tmp_path):
    model = tmp_path / "models" / "smoke"
    first = play(tmp_path, {"smoke_model_path": str(model)})
    assert first.returncode == 0, first.stdout[-3000:]
    assert changed_count(first) == 1  # the model and its local fact, in one module call
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    fact = json.loads((tmp_path / "facts" / "epforge_smoke_model.fact").read_text())
    assert fact["path"] == str(model) and fact["deepep_low_latency_hidden"] is True
    assert fact["parameters"] > 0 and fact["bytes"] > 0

    again = play(tmp_path, {"smoke_model_path": str(model)}, env=JSON_CALLBACK)
    report = json_report(again)
    assert again.returncode == 0 and report["stats"]["localhost"]["changed"] == 0, again.stdout[-3000:]
    # One module call: the results of controller tasks (assert, include) carry no module invocation.
    calls = [
        task["task"]["name"]
        for play_ in report["plays"]
        for task in play_["tasks"]
        for result in task["hosts"].values()
        if task["task"]["name"].startswith("smoke_model : ") and "invocation" in result
    ]
    assert calls == [f"smoke_model : Write and record the smoke model in {model}"], calls

    other = tmp_path / "models" / "other"
    dry = play(tmp_path, {"smoke_model_path": str(other)}, "--check")
    assert dry.returncode == 0 and changed_count(dry) >= 1
    assert not other.exists()


def test_role_refuses_without_a_path(tmp_path):
    proc = play(tmp_path, {})
    assert proc.returncode != 0 and "smoke_model needs smoke_model_path" in proc.stdout
    assert not (tmp_path / "facts").exists()


def test_role_not_requested_costs_one_skipped_task(tmp_path):
    # As in playbooks/provision.yml: the role only where smoke_model_path is set.
    (tmp_path / "guarded.yml").write_text(
        PLAY.replace(
            "    - role: smoke_model\n",
            "    - role: smoke_model\n      when: (smoke_model_path | default('')) | length > 0\n",
        )
    )
    proc = run_playbook(
        tmp_path / "guarded.yml",
        vars_file=write_vars(tmp_path / "vars.json", {"epforge_facts_dir": str(tmp_path / "facts")}),
        env=JSON_CALLBACK,
    )
    report = json_report(proc)
    assert proc.returncode == 0, proc.stdout[-3000:]
    tasks = [
        (task["task"]["name"], result.get("skipped", False))
        for play in report["plays"]
        for task in play["tasks"]
        for result in task["hosts"].values()
        if task["task"]["name"].startswith("smoke_model") or "smoke_model" in task["task"].get("path", "")
    ]
    # The argument check of the role, then its one include: both skipped, nothing else.
    assert [skipped for _, skipped in tasks] == [True, True], tasks
