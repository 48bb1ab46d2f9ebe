"""Issue 35 item 8: `serve.yml --check --diff` for a server not yet running failed after the diff ("object of
type 'dict' has no attribute 'ready_s'"): the role's step record read the readiness wait of a launch that
check mode never made. A real ansible-playbook run of playbooks/serve.yml in check mode (process manager, no
GPU needed): it passes, shows the fact it would write, records the step as skipped saying what would
happen, and creates nothing (no account, no state, no home)."""

from __future__ import annotations

import subprocess

from playbooks import JSON_CALLBACK, ROOT, json_report, run_playbook, write_vars

USER = "epforge-check35"


def test_serve_check_diff_for_a_server_not_yet_running_says_what_would_start(tmp_path):
    extra = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "preflight_min_free_gib": 0.01,
        "sglang_server_user": USER,
        "sglang_server_group": USER,
        "sglang_server_home": str(tmp_path / "home"),
        "sglang_server_launcher_dir": str(tmp_path / "lib"),
        "sglang_server_env_file": str(tmp_path / "etc" / "sglang-server.env"),
        "sglang_server_manager": "process",
        "sglang_server_require_gpu": False,
        "sglang_server_require_verdict": False,
        "sglang_server_python": "/usr/bin/python3",
        "epforge_server": {"model_path": "/models/standin", "port": 30999},
    }
    proc = run_playbook(
        ROOT / "playbooks" / "serve.yml",
        "--check",
        "--diff",
        vars_file=write_vars(tmp_path / "vars.json", extra),
        env=JSON_CALLBACK,
        timeout=300,
    )
    try:
        report = json_report(proc)
        failures = [
            (task["task"]["name"], host.get("msg"))
            for play in report["plays"]
            for task in play["tasks"]
            for host in task["hosts"].values()
            if host.get("failed")
        ]
        assert proc.returncode == 0 and not failures, failures or proc.stdout[-3000:]
        steps = [
            host["ansible_facts"]["epforge_steps"]
            for play in report["plays"]
            for task in play["tasks"]
            for host in task["hosts"].values()
            if "epforge_steps" in host.get("ansible_facts", {})
        ][-1]
        step = next(s for s in steps if s["step"] == "sglang_server")
        assert step["status"] == "skipped", step
        assert "check mode, nothing launched" in step["detail"], step
        assert "would be started at http://127.0.0.1:30999" in step["detail"], step
        assert subprocess.run(["getent", "passwd", USER], capture_output=True, check=False).returncode != 0
        assert not any((tmp_path / name).exists() for name in ("state", "home", "facts", "lib", "etc"))
    finally:
        subprocess.run(["userdel", USER], capture_output=True, check=False)
        subprocess.run(["groupdel", USER], capture_output=True, check=False)
