"""Run ansible-playbook in tests as a user does: the project's ansible.cfg and roles, extra vars from a
JSON file (-e @FILE), output captured; and read what the run reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The ansible-playbook of the test venv, also when the venv is not activated.
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
LOCAL_INVENTORY = ROOT / "inventory" / "local.yml"
# The run's result as one JSON document on stdout (ansible.posix.json), for tests that read task results.
JSON_CALLBACK = {
    "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
    "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    "ANSIBLE_DEPRECATION_WARNINGS": "0",
}


def write_vars(path: Path, extra_vars: dict) -> Path:
    """The extra vars as a JSON file for -e @FILE (JSON keeps types that key=value would turn to text)."""
    path.write_text(json.dumps(extra_vars))
    return path


def run_playbook(
    playbook: Path,
    *args: str,
    vars_file: Path | None = None,
    inventories: tuple[Path, ...] = (LOCAL_INVENTORY,),
    env: dict | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """ansible-playbook PLAYBOOK with the project's ansible.cfg and roles; args go last (e.g. --check)."""
    argv = [str(ANSIBLE_PLAYBOOK)]
    for inventory in inventories:
        argv += ["-i", str(inventory)]
    argv.append(str(playbook))
    if vars_file is not None:
        argv += ["-e", f"@{vars_file}"]
    argv += args
    run_env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        **(env or {}),
    )
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, env=run_env
    )


def changed_count(proc: subprocess.CompletedProcess, host: str = "localhost") -> int:
    """changed=N of the host in the play recap."""
    match = re.search(rf"{re.escape(host)}\s*:\s*ok=\d+\s+changed=(\d+)", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-3000:]
    return int(match.group(1))


def json_report(proc: subprocess.CompletedProcess) -> dict:
    """The ansible.posix.json document of a run (JSON_CALLBACK), failing with the run's output if absent."""
    try:
        return json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError as exc:
        raise AssertionError(
            f"no JSON report: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        ) from exc
