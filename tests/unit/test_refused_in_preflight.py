"""Issue 35 item 10: every refusal that can happen in preflight happens there, and what is accepted but
risky is warned about. A relative or `../` model_path was accepted and recorded by preflight and refused only
in role model; the rule is now plugins/module_utils/model_paths.py's (the owner of "repo ID or local
directory"), called by preflight's first task (real ansible-playbook runs of playbooks/serve.yml: each fails
at that task and leaves no fact). PATH or LD_PRELOAD in epforge_server.env or in a tuner candidate's env was
accepted without a word (modules run as Ansible runs them, with the real stack, table and flag table)."""

from __future__ import annotations

import json

import pytest
import yaml
from gpu_fact_samples import gpu_facts
from moduletools import run_module

from playbooks import JSON_CALLBACK, ROOT, json_report, run_playbook, write_vars

SETTINGS_TASK = (
    "preflight : Refuse malformed server settings (shape, keys, types, ranges) before anything changes"
)


def failures(report: dict) -> list[tuple[str, str]]:
    return [
        (task["task"]["name"], host.get("msg", ""))
        for play in report["plays"]
        for task in play["tasks"]
        for host in task["hosts"].values()
        if host.get("failed")
    ]


@pytest.mark.parametrize(
    ("server", "named"),
    [
        ({"model_path": "../models/m"}, "model_path '../models/m' is a relative path going up (..)"),
        (
            {
                "model_path": "/models/m",
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": "d",
            },
            "speculative_draft_model_path 'd' is a relative path",
        ),
    ],
)
def test_a_relative_model_path_is_refused_by_preflight_before_anything_is_recorded(tmp_path, server, named):
    extra = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "epforge_server": server,
    }
    proc = run_playbook(
        ROOT / "playbooks" / "serve.yml",
        vars_file=write_vars(tmp_path / "vars.json", extra),
        env=JSON_CALLBACK,
        timeout=300,
    )
    failed = failures(json_report(proc))
    facts = sorted(p.name for p in (tmp_path / "facts").glob("*")) if (tmp_path / "facts").exists() else []
    assert proc.returncode != 0 and [task for task, _ in failed] == [SETTINGS_TASK], (
        f"rc {proc.returncode}, failed tasks {failed}, facts written {facts}"
    )
    msg = failed[0][1]
    assert named in msg and "absolute directory on the host" in msg and "repo ID" in msg, msg
    assert not (tmp_path / "facts").exists(), "preflight recorded a request it must refuse"


STACK = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
FLAGS = json.loads((ROOT / "data" / "sglang_flags" / f"{STACK['sglang']['version']}.json").read_text())


def warnings_of(result: dict) -> list[str]:
    """The module's warnings as text (ansible-core returns them as structured summaries)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


RISKY_ENV = {"PATH": "/opt/tools/bin", "LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "NCCL_ALGO": "Tree"}


def test_path_or_ld_preload_in_the_request_env_is_warned_about_in_preflight():
    rc, result = run_module(
        "epforge_server_settings", {"settings": {"model_path": "/models/m", "env": RISKY_ENV}}
    )
    assert rc == 0 and result["problems"] == [], result  # accepted: a user may mean it
    warnings = " ".join(warnings_of(result))
    assert "epforge_server.env sets PATH='/opt/tools/bin': it replaces the PATH epforge gives" in warnings, (
        warnings_of(result)
    )
    assert "the env's bin/ first, for ninja" in warnings
    assert "epforge_server.env sets LD_PRELOAD='/usr/lib/libjemalloc.so.2'" in warnings
    assert "NCCL_ALGO" not in warnings


def test_path_or_ld_preload_in_a_tuner_candidate_is_warned_about_in_the_plan():
    rc, result = run_module(
        "tune_plan",
        {
            "server": {"model_path": "/models/m"},
            "gpu_facts": gpu_facts("9.0", 1, "none"),
            "stack": STACK,
            "table": yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text()),
            "flag_table": FLAGS,
            "sglang_version": STACK["sglang"]["version"],
            "concurrencies": [1],
            "space": {
                "list": [
                    {"name": "plain", "server": {"tp_size": 1}},
                    {"name": "preloaded", "server": {"tp_size": 1}, "env": {"LD_PRELOAD": "/opt/x.so"}},
                ]
            },
        },
    )
    assert rc == 0, result.get("msg")
    warnings = warnings_of(result)
    assert len(warnings) == 1, warnings
    assert "tuner candidate preloaded: env sets LD_PRELOAD='/opt/x.so': every process" in warnings[0], (
        warnings
    )
