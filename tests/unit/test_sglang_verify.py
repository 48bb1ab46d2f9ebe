"""sglang_verify against the SGLang stand-in (tests/sglang_standin, a TEST DOUBLE) run as a real process,
plus its answer checks on malformed answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from sglang_verify import accept_length, check_generate, check_openai
from test_sglang_server import LAUNCHER, ROOT, STANDIN, free_port, run_module

MODULE = ROOT / "library" / "sglang_verify.py"
KEY = "sk-verify-0b7e-never-print-me"


def start_standin(tmp_path, *flags, env=None):
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(STANDIN),
        "SGLANG_STANDIN_LOAD_SECONDS": "0",
        "EPFORGE_SGLANG_API_KEY": KEY,
        **(env or {}),
    }
    log = open(tmp_path / "standin.log", "ab")  # the child keeps its own copy
    proc = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "--model-path", "/models/standin", "--port", str(port), *flags],
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture
def standin(tmp_path):
    procs = []

    def start(*flags, env=None):
        proc, url = start_standin(tmp_path, *flags, env=env)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=10)


def test_verify_plain_server(standin, tmp_path):
    url = standin()
    result = run_module(MODULE, {"url": url, "api_key": KEY, "max_new_tokens": 8}, tmp_path)
    assert result["_rc"] == 0 and result["changed"] is False
    facts = result["ansible_facts"]["epforge_sglang_verify"]
    assert facts["generate"]["ok"] and facts["generate"]["completion_tokens"] == 8
    assert facts["openai"]["ok"] and facts["openai"]["endpoint"] == "/v1/chat/completions"
    assert facts["model"] == "/models/standin"
    assert facts["speculative"] is False and facts["accept_length"] is None
    assert facts["generate"]["latency_s"] > 0
    assert KEY not in result["_stdout"]


def test_verify_speculative_reports_accept_length(standin, tmp_path):
    url = standin(
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "3",
        env={"SGLANG_STANDIN_ACCEPT_LENGTH": "2.75"},
    )
    result = run_module(
        MODULE, {"url": url, "api_key": KEY, "openai_api": "completions"}, tmp_path, check=True
    )
    facts = result["ansible_facts"]["epforge_sglang_verify"]
    assert facts["speculative"] is True and facts["accept_length"] == 2.75
    assert facts["openai"]["endpoint"] == "/v1/completions" and facts["openai"]["ok"]


def test_verify_wrong_key_and_no_server_fail(standin, tmp_path):
    url = standin()
    result = run_module(MODULE, {"url": url, "api_key": "wrong"}, tmp_path)
    assert result["failed"] is True and "HTTP 401" in result["msg"]
    result = run_module(MODULE, {"url": f"http://127.0.0.1:{free_port()}", "timeout": 2}, tmp_path)
    assert result["failed"] is True and "HTTP nothing" in result["msg"]


def test_answer_checks_refuse_malformed_answers():
    no_text = check_generate({"text": "", "meta_info": {"completion_tokens": 3}}, 1)
    assert no_text[1] == "the answer has no text"
    assert "completion_tokens" in check_generate({"text": "x", "meta_info": {}}, 1)[1]
    assert check_generate(["x"], 1)[1]
    assert check_generate({"text": "Paris", "meta_info": {"completion_tokens": 2}}, 1)[1] == ""
    assert check_openai({"choices": []}, True, 1)[1] == "the answer has no choices"
    assert (
        check_openai(
            {"choices": [{"message": {"content": " "}}], "usage": {"completion_tokens": 1}}, True, 1
        )[1]
        == "the first choice has no text"
    )
    assert check_openai({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}}, False, 1)[1] == ""
    assert (
        accept_length({"internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 3.0}]})
        == 2.5
    )
    assert accept_length({"internal_states": [{}]}) is None
