"""sglang_bench module end to end: SGLang's REAL bench_serving client (sglang 0.5.23, in a venv built once by
tests/fixtures/bench_serving/bench_env.py) against the SGLang stand-in server (tests/sglang_standin, a TEST
DOUBLE), with a local tokenizer; real processes, real HTTP, real files. Plus the failure paths (server down, a
client that hangs past the timeout, a client that writes a cut-off line) and the history they leave."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    check_validity,
    normalize_workload,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_bench.py"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

WORKLOAD = {"name": "smoke", "input_len": 64, "output_len": 16, "num_prompts": 8, "max_concurrency": 4}


def run_module(args: dict, tmp_path: Path, *, check: bool = False, timeout: float = 600) -> dict:
    return run_module_in(tmp_path, MODULE, args, check=check, timeout=timeout)


@pytest.fixture
def standin(bench_client, tmp_path):
    _, tok = bench_client
    proc, url = bench_env.start_standin(str(tok), log_path=tmp_path / "standin.log")
    yield url
    bench_env.stop(proc)


def base_args(bench_client, tmp_path, url):
    python, tok = bench_client
    return {
        "python": str(python),
        "base_url": url,
        "tokenizer": str(tok),
        "workload": WORKLOAD,
        "work_dir": str(tmp_path / "bench"),
        "log_path": str(tmp_path / "log" / "bench.log"),
        "fact_path": str(tmp_path / "facts" / "epforge_bench.fact"),
        "timeout": 300,
        "record": {
            "label": "tp1-standin",
            "server": {"model_path": str(tok), "tp_size": 1},
            "stack": {"name": "cu130"},
        },
    }


def test_real_client_against_standin_records_and_appends(bench_client, standin, tmp_path):
    args = base_args(bench_client, tmp_path, standin)
    first = run_module(args, tmp_path)
    assert first["_rc"] == 0, first.get("msg")
    assert first["changed"] is True
    # the figures are exactly what the client wrote to its result file
    raw = json.loads(Path(first["result_file"]).read_text().strip().splitlines()[-1])
    figures = first["figures"]
    assert figures["completed"] == 8 and figures["failed_requests"] == 0
    assert figures["output_throughput"] == raw["output_throughput"] > 0
    assert figures["tpot_median_ms"] == raw["median_tpot_ms"] > 0
    assert figures["e2e_p99_ms"] == raw["p99_e2e_latency_ms"]
    assert raw["total_output_tokens"] == 8 * 16 and raw["total_input_tokens"] == 8 * 64
    assert raw["random_range_ratio"] == 1.0 and raw["tag"] == "smoke"
    entry = first["ansible_facts"]["epforge_bench_result"]
    assert entry["status"] == "ok" and entry["label"] == "tp1-standin"
    assert entry["server"]["tp_size"] == 1 and entry["stack"]["name"] == "cu130"
    assert entry["server_version"] == "0.0.0+standin"

    second = run_module(args, tmp_path)
    assert second["_rc"] == 0 and second["history_length"] == 2
    fact = json.loads(Path(args["fact_path"]).read_text())
    assert [e["id"] for e in fact["history"]] == [
        entry["id"],
        second["ansible_facts"]["epforge_bench_result"]["id"],
    ]
    assert fact["last_ok"]["id"] == fact["last"]["id"] and fact["runs"] == 2

    # check mode runs nothing and writes nothing
    checked = run_module(args, tmp_path, check=True)
    assert checked["changed"] is True and "would run" in checked["msg"]
    assert json.loads(Path(args["fact_path"]).read_text())["runs"] == 2


def test_server_down_fails_classified_and_keeps_history(bench_client, tmp_path):
    args = base_args(bench_client, tmp_path, f"http://127.0.0.1:{bench_env.free_port()}")
    fact_path = Path(args["fact_path"])
    fact_path.parent.mkdir(parents=True)
    earlier = {
        "schema": 1,
        "runs": 1,
        "failures": 0,
        "history_max": 50,
        "last": {"id": "old", "status": "ok"},
        "last_ok": {"id": "old", "status": "ok"},
        "history": [{"id": "old", "status": "ok"}],
    }
    fact_path.write_text(json.dumps(earlier))
    result = run_module({**args, "ready_check_timeout": 2}, tmp_path)
    assert result["_rc"] != 0 and result["failed"] is True
    assert result["failure_class"] in ("server_not_ready", "connection_refused")
    assert result["log_tail"]  # the client's own words
    fact = json.loads(fact_path.read_text())
    assert next(e["id"] for e in fact["history"]) == "old" and len(fact["history"]) == 2
    assert fact["last"]["status"] == "failed" and fact["last_ok"]["id"] == "old"
    assert fact["last"]["error"]["class"] == result["failure_class"]


FAKE_CLIENT = """
import sys, time
args = sys.argv[1:]
out = args[args.index("--output-file") + 1]
mode = {mode!r}
if mode == "truncated":
    line = open({fixture!r}).read().strip()
    open(out, "w").write(line[: len(line) // 2])
    print("benchmark done (cut-off result line written)")
elif mode == "no-tokens":
    # a real result line (tests/fixtures/bench_serving) as a server that answered every request with
    # nothing would leave it
    import json
    record = json.loads(open({fixture!r}).read().strip().replace("Infinity", "1e999"))
    record.update(total_output_tokens=0, total_output_tokens_retokenized=0, output_throughput=0.0)
    open(out, "w").write(json.dumps(record) + chr(10))
    print("benchmark done (zero output tokens)")
elif mode == "hang":
    print("waiting forever", flush=True)
    time.sleep(3600)
"""


@pytest.mark.parametrize(("mode", "klass"), [("truncated", "incomplete_result"), ("hang", "timeout")])
def test_cut_off_result_and_hung_client_fail(mode, klass, tmp_path):
    """A client TEST DOUBLE (client_module) that writes half a real result line, or never ends."""
    args = {**fake_client_args(mode, tmp_path), "timeout": 3}
    started = time.monotonic()
    result = run_module(args, tmp_path)
    assert result["_rc"] != 0 and result["failure_class"] == klass
    assert time.monotonic() - started < 30
    assert "not complete JSON" in result["msg"] if mode == "truncated" else "timed out" in result["log_tail"]
    fact = json.loads((tmp_path / "epforge_bench.fact").read_text())
    assert fact["last"]["status"] == "failed" and fact["failures"] == 1


def fake_client_args(mode: str, tmp_path: Path) -> dict:
    pkg = tmp_path / "fakeclient"
    pkg.mkdir()
    fixture = ROOT / "tests" / "fixtures" / "bench_serving" / "plain-random-ids.jsonl"
    (pkg / "fakebench.py").write_text(FAKE_CLIENT.format(mode=mode, fixture=str(fixture)))
    return {
        "python": sys.executable,
        "base_url": "http://127.0.0.1:9",
        "workload": WORKLOAD,
        "client_module": "fakebench",
        "env": {"PYTHONPATH": str(pkg)},
        "timeout": 30,
        "work_dir": str(tmp_path / "bench"),
        "log_path": str(tmp_path / "bench.log"),
        "fact_path": str(tmp_path / "epforge_bench.fact"),
    }


def test_zero_generated_tokens_is_always_a_failure(tmp_path):
    """A client TEST DOUBLE writes a real result line with total_output_tokens 0 (all 8 'completed')."""
    result = run_module({**fake_client_args("no-tokens", tmp_path), "max_failed_requests": 8}, tmp_path)
    assert result["_rc"] != 0 and result["failure_class"] == "no_output_tokens"
    assert (
        "no output tokens were generated (total_output_tokens 0, 8 of 8 requests completed)" in result["msg"]
    )
    fact = json.loads((tmp_path / "epforge_bench.fact").read_text())
    assert fact["last"]["status"] == "failed" and fact.get("last_ok") is None and fact["failures"] == 1
    assert fact["last"]["figures"]["total_output_tokens"] == 0


def test_short_generations_are_recorded_invalid_with_the_figures(bench_client, tmp_path):
    """The real client against a stand-in that ends every generation after 4 of the 16 tokens asked: the
    client calls each request a success; with ignore_eos a stream short of its length ended without its
    final chunk, so each is a failed request (streams.py), and the run is invalid."""
    _, tok = bench_client
    proc, url = bench_env.start_standin(
        str(tok), log_path=tmp_path / "standin.log", env={"SGLANG_STANDIN_MAX_NEW_TOKENS": "4"}
    )
    try:
        result = run_module({**base_args(bench_client, tmp_path, url), "max_failed_requests": 8}, tmp_path)
    finally:
        bench_env.stop(proc)
    assert result["_rc"] == 0, result.get("msg")
    assert result["status"] == "invalid"
    assert result["invalid_reasons"] == [
        "completed 0 of 8 requests",
        "generated 32 output tokens, fewer than the 128 asked for (num_prompts 8 x output_len 16)",
        "8 stream(s) ended without their final chunk (counted as failed)",
    ]
    assert result["msg"].startswith("INVALID (completed 0 of 8 requests")
    entry = result["ansible_facts"]["epforge_bench_result"]
    assert entry["status"] == "invalid" and entry["figures"]["total_output_tokens"] == 32
    assert entry["figures"]["cut_streams"] == 8 and entry["figures"]["failed_requests"] == 8
    assert entry["expected"] == {"completed": 8, "min_output_tokens": 128, "ignores_eos": True}
    fact = json.loads(Path(base_args(bench_client, tmp_path, url)["fact_path"]).read_text())
    assert fact["last"]["status"] == "invalid" and fact.get("last_ok") is None and fact["failures"] == 1


@pytest.mark.parametrize(
    ("figures", "status", "reasons"),
    [
        ({"completed": 8, "total_output_tokens": 128}, "ok", []),
        (
            {"completed": 8, "total_output_tokens": 0},
            "failed",
            ["no output tokens were generated (total_output_tokens 0, 8 of 8 requests completed)"],
        ),
        (
            {"completed": 0, "total_output_tokens": None},
            "failed",
            ["no output tokens were generated (total_output_tokens None, 0 of 8 requests completed)"],
        ),
        (
            {"completed": 7, "total_output_tokens": 112},
            "invalid",
            [
                "completed 7 of 8 requests",
                "generated 112 output tokens, fewer than the 128 asked for (num_prompts 8 x output_len 16)",
            ],
        ),
    ],
)
def test_validity_rules(figures, status, reasons):
    workload = normalize_workload(WORKLOAD)
    assert check_validity(figures, workload) == (
        status,
        reasons,
        {"completed": 8, "min_output_tokens": 128, "ignores_eos": True},
    )


def test_validity_without_ignore_eos_or_with_a_length_range():
    workload = normalize_workload({**WORKLOAD, "range_ratio": 0.5})
    # lengths drawn from [8, 16]: at least 8 per request
    assert check_validity({"completed": 8, "total_output_tokens": 64}, workload)[0] == "ok"
    assert "x range_ratio 0.5" in check_validity({"completed": 8, "total_output_tokens": 63}, workload)[1][0]
    # with --disable-ignore-eos a request may end at EOS: one token each is the floor
    workload = normalize_workload(WORKLOAD)
    assert (
        check_validity({"completed": 8, "total_output_tokens": 8}, workload, ["--disable-ignore-eos"])[0]
        == "ok"
    )


def test_bad_input_is_refused_before_running(tmp_path):
    result = run_module(
        {
            "python": "python3",
            "base_url": "127.0.0.1:30000",
            "workload": {"dataset": "mmmu", "num_prompts": 0},
            "fact_path": str(tmp_path / "f.fact"),
        },
        tmp_path,
    )
    assert result["_rc"] != 0
    assert "absolute path" in result["msg"] and "http://" in result["msg"]
    assert "download" in result["msg"] and "num_prompts must be >= 1" in result["msg"]
    assert not (tmp_path / "f.fact").exists()
