"""Interpreter discovery never picks a Python that does not exist (issue 41). On a machine with pyenv shims,
`command -v python3.13` finds a shim that answers for a version that is not installed (pyenv: python3.13:
command not found), and ansible-core's discovery, which probes python3.13, python3.12, ... by name, runs every
module with it. Here a fake shim of that kind (a script that prints pyenv's words and exits 127) stands first
on PATH: a play on `-i localhost, -c local` fails on it, the same play on inventory/controller.yml runs with
ansible-playbook's own Python. And every host of the project's inventories that runs on the controller
(ansible_connection local) names that Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAY = """---
- name: Report the Python modules run with
  hosts: all
  gather_facts: false
  tasks:
    - name: Run a module
      ansible.builtin.command: {argv: ["python3", "-c", "print(1)"]}
      changed_when: false
"""


def broken_shims(folder: Path) -> Path:
    folder.mkdir()
    for name in ("python3.13", "python3.12", "python3.11"):
        shim = folder / name
        shim.write_text(f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\nexit 127\n")
        shim.chmod(0o755)
    return folder


def run_play(tmp_path: Path, *inventory: str) -> subprocess.CompletedProcess:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    shims = broken_shims(tmp_path / "shims")
    env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), *inventory, str(play)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_discovery_picks_a_dead_shim_and_the_controller_inventory_does_not(tmp_path):
    discovered = run_play(tmp_path, "-i", "localhost,", "-c", "local")
    assert discovered.returncode != 0 and "command not found" in discovered.stdout, discovered.stdout[-2000:]
    (tmp_path / "shims").rename(tmp_path / "shims-1")
    named = run_play(tmp_path, "-i", str(ROOT / "inventory" / "controller.yml"))
    assert named.returncode == 0, named.stdout[-3000:]


def local_hosts(tree, inherited=None):
    """(host, its vars) of each host in an inventory tree, group vars laid under host vars."""
    inherited = dict(inherited or {})
    if not isinstance(tree, dict):
        return
    inherited.update(tree.get("vars") or {})
    for host, host_vars in (tree.get("hosts") or {}).items():
        yield host, {**inherited, **(host_vars or {})}
    for child in (tree.get("children") or {}).values():
        yield from local_hosts(child, inherited)


def test_every_controller_host_of_the_inventories_names_ansible_playbook_s_python():
    inventories = [*(ROOT / "inventory").rglob("*.yml"), ROOT / "scripts" / "gpu" / "h200-inventory.yml"]
    checked = 0
    for path in inventories:
        for host, host_vars in local_hosts(yaml.safe_load(path.read_text()).get("all")):
            if host_vars.get("ansible_connection") == "local":
                checked += 1
                interpreter = host_vars.get("ansible_python_interpreter", "")
                assert interpreter and "auto" not in interpreter, f"{path.name}: {host}"
    assert checked >= 3  # local.yml, controller.yml, the fleet example's gateway (and the H200's)
