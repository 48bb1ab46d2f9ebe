"""Modules in the anchors' shape (issue 40; community.general's modprobe.py): a short main() that builds the
AnsibleModule and hands over to the job's class or functions."""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT

MODULES = sorted((ROOT / "library").glob("*.py"))
MAIN_MAX_LINES = 50


def main_of(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_main_is_short(path):
    main = main_of(path)
    assert main is not None, f"{path.name} has no main()"
    lines = main.end_lineno - main.lineno + 1
    assert lines <= MAIN_MAX_LINES, f"{path.name}: main() is {lines} lines (at most {MAIN_MAX_LINES})"
