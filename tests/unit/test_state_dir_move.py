"""Issue 35 item 10: changing epforge_state_dir under a running server failed with a raw "usermod: user ...
is currently used by process N" (the account's home follows epforge_state_dir, and usermod cannot move the
home of an account in use). Now role sglang_server refuses before usermod, naming both homes, the running
processes and the way out. A real account, a real process running as it, a real ansible-playbook run of the
role's account tasks (tasks_from user: what launch.yml and provision's prepare.yml both import)."""

from __future__ import annotations

import pwd
import subprocess

from playbooks import JSON_CALLBACK, json_report, run_playbook, write_vars

USER = "epforge-move35"
PLAY = """
- name: The server's account, with a state dir other than the one its server was started with
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Create or update the server's account
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: user
"""


def test_a_state_dir_change_under_a_running_server_is_refused_before_usermod(tmp_path):
    old_home, new_state = tmp_path / "old" / "sglang", tmp_path / "new"
    subprocess.run(["groupadd", "-r", USER], capture_output=True, check=False)
    subprocess.run(
        ["useradd", "-r", "-g", USER, "-d", str(old_home), "-M", "-s", "/usr/sbin/nologin", USER],
        capture_output=True,
        check=True,
    )
    account = pwd.getpwnam(USER)
    server = subprocess.Popen(["sleep", "120"], user=account.pw_uid, group=account.pw_gid)
    try:
        book = tmp_path / "account.yml"
        book.write_text(PLAY)
        extra = {
            "epforge_state_dir": str(new_state),
            "epforge_facts_dir": str(tmp_path / "facts"),
            "epforge_log_dir": str(tmp_path / "log"),
            "sglang_server_user": USER,
            "sglang_server_group": USER,
            "sglang_server_home": str(new_state / "sglang"),
            "sglang_server_python": "/usr/bin/python3",
            "sglang_server_require_gpu": False,
        }
        proc = run_playbook(
            book, vars_file=write_vars(tmp_path / "vars.json", extra), env=JSON_CALLBACK, timeout=300
        )
        failed = [
            host.get("msg", "")
            for play in json_report(proc)["plays"]
            for task in play["tasks"]
            for host in task["hosts"].values()
            if host.get("failed")
        ]
        assert proc.returncode != 0 and len(failed) == 1, failed or proc.stdout[-3000:]
        msg = " ".join(failed[0].split())
        assert f"has the home {old_home} and would get {new_state / 'sglang'}" in msg, msg
        assert f"processes run as it (pid {server.pid}" in msg and "usermod cannot move the home" in msg, msg
        assert "sglang_server_home follows epforge_state_dir" in msg and "sglang_server_state=stopped" in msg
        assert pwd.getpwnam(USER).pw_dir == str(old_home), "the account was changed"
        assert server.poll() is None, "the running server was touched"
    finally:
        server.kill()
        server.wait()
        subprocess.run(["userdel", USER], capture_output=True, check=False)
        subprocess.run(["groupdel", USER], capture_output=True, check=False)
