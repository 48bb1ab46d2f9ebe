"""The modules against what a REAL SGLang 0.5.16 server answered and logged on a lent H200
(tests/fixtures/sglang_h200/README.md says how and when each file was captured): failure classification,
the generation checks of sglang_verify, the settings comparison of sglang_server, the bench_serving parser,
and the SGLang stand-in (tests/sglang_standin, the test double) answering in the same shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import FIXTURES
from sglang_verify import accept_length, check_generate, check_openai
from test_sglang_server import STANDIN, free_port

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    check_record_matches,
    extract_figures,
    normalize_workload,
    parse_result_lines,
    sanitize,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.confirm import confirm_settings
from ansible_collections.epforge.ep.plugins.module_utils.signatures import (
    classify,
    explain_failure,
)

REAL = FIXTURES / "sglang_h200"
# The workload scripts/gpu/capture_sglang_by_hand.sh ran (bench_serving flags in the README).
WORKLOAD = {"input_len": 128, "output_len": 64, "num_prompts": 64, "max_concurrency": 16}


def real_json(name: str):
    return json.loads((REAL / name).read_text())


def real_log(name: str) -> str:
    return (REAL / name).read_text()


# ------------------------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("crash-tp2-server.log", "not_enough_gpus"),
        ("crash-deepep-normal-server.log", "deep_ep_missing"),
    ],
)
def test_real_crash_logs_are_classified(log, expected):
    found = classify(real_log(log))
    assert found, f"{log} was not classified"
    assert found[0]["id"] == expected
    assert found[0]["line"]  # the log line that matched is named


@pytest.mark.parametrize("log", ["tp1-nograph-server.log", "tp1-graph-server.log"])
def test_healthy_real_logs_classify_as_nothing(log):
    text = real_log(log)
    # the log does name a missing module, for an optional API SGLang turned off and went on without
    assert "No module named 'openai_harmony'" in text
    assert classify(text) == []


def test_a_real_crash_after_the_benign_warning_names_the_crash():
    healthy = real_log("tp1-graph-server.log")
    crash = real_log("crash-deepep-normal-server.log")
    assert explain_failure(healthy + crash)[0]["id"] == "deep_ep_missing"


# ------------------------------------------------------------------------------------ sglang_verify


@pytest.mark.parametrize("tag", ["tp1-nograph", "tp1-graph"])
def test_verify_accepts_the_real_answers(tag):
    facts, problem = check_generate(real_json(f"{tag}-generate.json"), min_tokens=16)
    assert problem == ""
    assert facts["completion_tokens"] == 16 and facts["finish_reason"] == "length"
    assert facts["prompt_tokens"] > 0 and facts["text"]
    for name, chat in (("chat", True), ("completions", False)):
        facts, problem = check_openai(real_json(f"{tag}-{name}.json"), chat=chat, min_tokens=16)
        assert problem == "", name
        assert facts["completion_tokens"] == 16
    assert accept_length(real_json(f"{tag}-get_server_info.json")) is None  # not speculative


def test_verify_refuses_the_real_error_answer():
    body = real_json("tp1-graph-generate_bad.json")
    assert body == {"error": {"message": "max_new_tokens must be at least 0, got -3."}}
    _, problem = check_generate(body, min_tokens=1)
    assert problem == "the answer has no text"


def test_greedy_output_is_identical_across_the_two_real_servers():
    a, b = real_json("tp1-nograph-generate.json"), real_json("tp1-graph-generate.json")
    assert a["output_ids"] == b["output_ids"]


# ------------------------------------------------------------------------------------ sglang_server


@pytest.mark.parametrize(("tag", "graph"), [("tp1-nograph", False), ("tp1-graph", True)])
def test_running_settings_compare_with_the_real_server_info(tag, graph):
    info = real_json(f"{tag}-get_server_info.json")
    settings = {
        "model_path": "/root/smoke",
        "tp_size": 1,
        "host": "127.0.0.1",
        "port": 30000,
        "disable_cuda_graph": not graph,
    }
    report = confirm_settings(settings, info, "0.5.16")
    assert report["mismatched"] == [] and report["unconfirmed"] == []
    assert report["running"] == {
        "model_path": "/root/smoke",
        "tp_size": 1,
        "host": "127.0.0.1",
        "port": 30000,
        "disable_cuda_graph": not graph,
    }
    report = confirm_settings({**settings, "tp_size": 2}, info, "0.5.16")
    assert report["mismatched"] == [{"key": "tp_size", "requested": 2, "running": 1}]
    assert info["version"] == "0.5.16"


# ------------------------------------------------------------------------------------ bench_serving


@pytest.mark.parametrize(
    "name", ["tp1-nograph-bench.jsonl", "tp1-nograph-2-bench.jsonl", "tp1-graph-bench.jsonl"]
)
def test_real_bench_lines_parse(name):
    text = (REAL / name).read_text()
    assert '"request_rate": Infinity' in text  # not strict JSON
    records = parse_result_lines(text)
    assert len(records) == 1
    figures = extract_figures(records[0])
    assert figures["completed"] == 64 and figures["total_output_tokens"] == 64 * 64
    assert figures["output_throughput"] > 0 and figures["ttft_median_ms"] > 0
    assert check_record_matches(records[0], normalize_workload(WORKLOAD)) == []
    json.dumps(sanitize(records[0]), allow_nan=False)  # strict JSON once sanitized


# ------------------------------------------------------------------------------------ the stand-in


@pytest.fixture
def standin(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_LOAD_SECONDS": "0"}
    log = open(tmp_path / "standin.log", "ab")  # the child keeps its own copy
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/root/smoke",
            "--port",
            str(port),
            "--disable-cuda-graph",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def call(url: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_standin_answers_in_the_real_servers_shape(standin):
    real_info = real_json("tp1-nograph-get_server_info.json")
    _, info = call(standin, "/get_server_info")
    read_by_epforge = (
        "model_path",
        "tp_size",
        "ep_size",
        "host",
        "port",
        "moe_a2a_backend",
        "deepep_mode",
        "disable_cuda_graph",
        "cuda_graph_max_bs_decode",
        "version",
        "internal_states",
    )
    for key in read_by_epforge:
        assert key in real_info and key in info, key
        assert type(info[key]) is type(real_info[key]) or real_info[key] is None, key
    settings = {"model_path": "/root/smoke", "tp_size": 1, "host": "127.0.0.1", "disable_cuda_graph": True}
    assert confirm_settings(settings, info, "0.5.16") == {
        **confirm_settings(settings, real_info, "0.5.16"),
        "version": info["version"],
    }

    real_gen = real_json("tp1-nograph-generate.json")
    _, gen = call(
        standin,
        "/generate",
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 16, "temperature": 0}},
    )
    assert set(real_gen) <= set(gen) | {"output_ids"} and "text" in gen
    for key in ("prompt_tokens", "completion_tokens", "finish_reason", "e2e_latency"):
        assert key in real_gen["meta_info"] and key in gen["meta_info"], key
    assert gen["meta_info"]["finish_reason"] == real_gen["meta_info"]["finish_reason"]

    status, bad = call(standin, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -3}})
    assert (status, bad) == (400, real_json("tp1-nograph-generate_bad.json"))

    real_chat = real_json("tp1-nograph-chat.json")
    _, chat = call(
        standin,
        "/v1/chat/completions",
        {
            "model": "default",
            "max_tokens": 16,
            "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert set(real_chat) >= {"id", "object", "model", "choices", "usage"} <= set(chat)
    assert chat["object"] == real_chat["object"] and chat["model"] == real_chat["model"]
