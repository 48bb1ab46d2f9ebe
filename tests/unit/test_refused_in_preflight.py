"""Issue 35 item 10: every refusal that can happen in preflight happens there. A relative or `../`
model_path was accepted and recorded by preflight and refused only in role model; the rule is now
plugins/module_utils/model_paths.py's (the owner of "repo ID or local directory"), called by preflight's
first task. Real ansible-playbook runs of playbooks/serve.yml: each fails at that task and leaves no fact."""

from __future__ import annotations

import pytest

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
