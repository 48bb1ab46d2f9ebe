"""The callback epforge.ep.preload (plugins/callback/preload.py, enabled in the project's ansible.cfg): the
plugins every task's worker would import again are loaded once, in ansible-playbook itself, and the run's
result is the same with and without it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
TASKS = 3


def play(tmp_path: Path, preload: bool) -> subprocess.CompletedProcess:
    tasks = [
        {
            "name": f"Template with a core filter and the collection's filter {i}",
            "ansible.builtin.set_fact": {
                f"out{i}": "{{ [] | epforge.ep.step_appended('s', 'done', 'd  x') | to_json }}",
            },
        }
        for i in range(TASKS)
    ]
    tasks.append({"name": "Show", "ansible.builtin.debug": {"msg": "{{ out0 }}"}})
    book = tmp_path / "preload.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_DEBUG="1", ANSIBLE_NOCOLOR="1")
    if not preload:
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.timer"  # any other one: the list replaces the cfg's
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(book)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def fresh_loads(output: str, kind: str, name: str) -> int:
    """How many times a plugin was imported (not taken from a cache) in the run, all processes together."""
    pattern = re.compile(rf"Loading {kind} '{re.escape(name)}' from (?!.*found_in_cache=True)")
    return len(pattern.findall(output))


def test_preloaded_plugins_are_imported_once_and_the_result_is_the_same(tmp_path):
    with_preload, without = play(tmp_path, True), play(tmp_path, False)
    assert with_preload.returncode == 0 and without.returncode == 0, with_preload.stdout[-3000:]
    for proc in (with_preload, without):
        assert '"step": "s", "status": "done", "detail": "d x"' in proc.stdout
    # without it each task's worker imports the filters again; with it, ansible-playbook did once for all
    name = "ansible_collections.epforge.ep.plugins.filter.step_appended"
    assert fresh_loads(without.stdout, "FilterModule", name) == TASKS
    assert fresh_loads(with_preload.stdout, "FilterModule", name) == 1
    assert fresh_loads(without.stdout, "FilterModule", "core") >= TASKS
    assert fresh_loads(with_preload.stdout, "FilterModule", "core") == 1
