"""Every project module's DOCUMENTATION / EXAMPLES / RETURN renders with ansible-doc, as users read them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"


def test_there_are_modules_to_check():
    assert "nvidia_gpu_facts" in MODULES and len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_DOC), f"epforge.ep.{name}"],  # by FQCN, through the checkout's collections path
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert f"epforge.ep.{name}" in text.splitlines()[0]
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert section in text, f"{name}: ansible-doc shows no {section}"
    assert "[WARNING]" not in proc.stderr, proc.stderr[-2000:]


def example_tasks(tasks) -> list[dict]:
    """Every task of an EXAMPLES document, the ones inside block/rescue/always included."""
    found = []
    for task in tasks or []:
        if isinstance(task, dict):
            found.append(task)
            for key in ("block", "rescue", "always"):
                found += example_tasks(task.get(key))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_examples_call_the_collection_s_modules_by_fqcn(name):
    """Issue 40: users copy EXAMPLES into their playbooks, where a short name only resolves by luck."""
    import yaml  # noqa: PLC0415

    source = (ROOT / "library" / f"{name}.py").read_text()
    start = source.index("EXAMPLES = ")
    examples = source[source.index('"""', start) + 3 : source.index('"""', source.index('"""', start) + 3)]
    short = [
        key
        for task in example_tasks(yaml.safe_load(examples))
        for key in task
        if key in MODULES and not key.startswith("epforge.ep.")
    ]
    assert short == [], f"{name}: EXAMPLES call {short} by short name (write epforge.ep.NAME)"
