"""module_utils/pip_argv.py: the one builder of pip's argv (issue 40), and no plugin writing one by hand."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import (
    NO_VERSION_CHECK,
    pip_argv,
    pip_command,
)


def test_an_interpreter_runs_its_own_pip_without_the_version_check():
    assert pip_argv("/env/bin/python", "install", "--no-deps", "x==1") == [
        "/env/bin/python",
        "-m",
        "pip",
        "install",
        NO_VERSION_CHECK,
        "--no-deps",
        "x==1",
    ]


def test_a_given_pip_command_and_a_target_environment():
    argv = pip_argv(["/usr/bin/pip3"], "install", "--dry-run", target_python="/empty/bin/python")
    assert argv == [
        "/usr/bin/pip3",
        "--python",
        "/empty/bin/python",
        "install",
        NO_VERSION_CHECK,
        "--dry-run",
    ]
    assert pip_command("/py") == ["/py", "-m", "pip"]


@pytest.mark.parametrize(("pip", "verb"), [("/py", ""), ("/py", "--version"), ([], "install")])
def test_a_missing_verb_or_pip_is_refused(pip, verb):
    with pytest.raises(ValueError, match="pip_argv needs"):
        pip_argv(pip, verb)


def test_the_argv_runs_a_real_pip():
    """The builder's argv is one this machine's pip accepts (a verb that needs no network)."""
    import subprocess  # noqa: PLC0415 - only this test runs a process
    import sys  # noqa: PLC0415

    proc = subprocess.run(
        pip_argv(sys.executable, "list", "--format=json"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("["), proc.stderr[-2000:]


def test_no_plugin_writes_pip_s_argv_by_hand():
    """`-m pip` and pip's version-check flag appear only in the owner: every module and module_util builds its
    pip runs through pip_argv (the seven that wrote them by hand, issue 40)."""
    owner = ROOT / "plugins" / "module_utils" / "pip_argv.py"
    by_hand = re.compile(r'"-m",\s*"pip"|--disable-pip-version-check')
    found = [
        str(path.relative_to(ROOT))
        for folder in ("library", "plugins")
        for path in (ROOT / folder).rglob("*.py")
        if path != owner and by_hand.search(path.read_text())
    ]
    assert found == []
