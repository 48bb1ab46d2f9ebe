"""The skip rule of tests/conftest.py, run by pytest itself on a small test file: a skip whose reason is
not a GPU's or GitHub's fails the run; those two stay skips (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_only_gpu_and_github_skips_are_allowed(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        test_sample="""
import pytest

def test_skip_for_another_reason():
    pytest.skip("the venv is built by another test file")

def test_gpu_skip():
    pytest.skip("GPU: no NVIDIA device here")

@pytest.mark.skipif(True, reason="GitHub: unreachable from this machine")
def test_github_skip():
    pass

@pytest.fixture
def missing():
    pytest.skip("nothing provides it")

def test_skip_from_a_fixture(missing):
    pass

def test_plain():
    assert True
"""
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*neither a GPU's nor GitHub's: 'the venv is built by another test file'*"])
    assert result.ret != 0
