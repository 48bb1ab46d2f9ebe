"""The tested range of ansible-core (issue 41) has one owner, the controller suites of
tests/test_controller_pythons.py; pyproject.toml's dependency markers, meta/runtime.yml and the README say
the same, so a suite moved to a new ansible-core cannot leave the install cap or the docs behind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def suites() -> dict:
    """SUITES of tests/test_controller_pythons.py, read as data (that module runs containers on import of
    its fixtures, not here)."""
    tree = ast.parse((ROOT / "tests" / "test_controller_pythons.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["SUITES"]:
            return ast.literal_eval(node.value)
    raise AssertionError("tests/test_controller_pythons.py has no SUITES")


SUITES = suites()


def core_requirements() -> list[Requirement]:
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    found = [Requirement(line) for line in re.findall(r'^\s*"(ansible-core[^"]*)"', block, re.M)]
    assert found, "pyproject.toml names no ansible-core dependency"
    return found


def allowed(python: str) -> list[Requirement]:
    return [
        r for r in core_requirements() if r.marker is None or r.marker.evaluate({"python_version": python})
    ]


def test_each_suite_installs_the_core_it_tests_and_nothing_newer():
    for suite, (python, core) in SUITES.items():
        (requirement,) = allowed(python)
        major, minor = (int(n) for n in core.split("."))
        assert requirement.specifier.contains(Version(f"{core}.99")), (suite, str(requirement))
        assert not requirement.specifier.contains(Version(f"{major}.{minor + 1}.0")), (
            suite,
            str(requirement),
        )


def test_runtime_and_readme_state_the_range():
    cores = sorted({core for _, core in SUITES.values()}, key=Version)
    runtime_text = (ROOT / "meta" / "runtime.yml").read_text()
    runtime = yaml.safe_load(runtime_text)
    assert runtime["requires_ansible"] == f">={cores[0]}.0"
    assert f"Tested range: ansible-core {cores[0]} " in runtime_text and f" to {cores[-1]} " in runtime_text
    readme = (ROOT / "README.md").read_text()
    for python, core in SUITES.values():
        if python == "3.11":
            assert f"ansible-core {core} on 3.11" in readme
        else:
            assert f"{core} on 3.12+" in readme
