"""epforge_bench: parser of bench_serving's real result lines, workload validation, and the append-only
history fact (atomic writes that survive a writer killed mid-write)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    BenchError,
    append_entry,
    bench_argv,
    check_record_matches,
    classify_failure,
    empty_fact,
    extract_figures,
    load_fact,
    normalize_workload,
    parse_result_lines,
    record_run,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "bench_serving"


# ---------------------------------------------------------------------------------------------- parser


def test_parses_real_plain_line():
    records = parse_result_lines((FIX / "plain-random-ids.jsonl").read_text())
    assert len(records) == 1
    figures = extract_figures(records[0])
    raw = records[0]
    assert figures["output_throughput"] == raw["output_throughput"] > 0
    assert figures["total_throughput"] == raw["total_throughput"]
    assert figures["ttft_median_ms"] == raw["median_ttft_ms"]
    assert figures["tpot_p99_ms"] == raw["p99_tpot_ms"]
    assert figures["itl_p99_ms"] == raw["p99_itl_ms"]
    assert figures["e2e_median_ms"] == raw["median_e2e_latency_ms"]
    assert figures["completed"] == 8
    assert figures["accept_length"] is None  # not speculative
    # the client writes request_rate as a bare Infinity; the workload view turns it into a string
    assert raw["request_rate"] == float("inf")
    assert (
        check_record_matches(
            raw,
            normalize_workload(
                {"name": "smoke", "input_len": 64, "output_len": 16, "num_prompts": 8, "max_concurrency": 4}
            ),
        )
        == []
    )


def test_parses_two_appended_speculative_lines():
    records = parse_result_lines((FIX / "speculative-eagle3.jsonl").read_text())
    assert [r["tag"] for r in records] == ["spec-c4", "spec-c8"]
    figures = [extract_figures(r) for r in records]
    assert [f["accept_length"] for f in figures] == [2.7, 2.7]
    assert figures[1]["output_throughput"] == records[1]["output_throughput"]


@pytest.mark.parametrize("cut", [1, 100, 0.5, -2])
def test_truncated_line_is_refused(cut):
    line = (FIX / "plain-random-ids.jsonl").read_text().strip()
    end = int(len(line) * cut) if isinstance(cut, float) else (cut if cut > 0 else len(line) + cut)
    with pytest.raises(BenchError, match="not complete JSON"):
        parse_result_lines(line[:end])
    # a complete first line followed by a cut-off second one is refused too (the run's file is suspect)
    with pytest.raises(BenchError, match="line 2 of 2"):
        parse_result_lines(line + "\n" + line[:end] + "\n")


def test_empty_file_and_missing_figures_are_refused():
    with pytest.raises(BenchError, match="no result line"):
        parse_result_lines("\n\n")
    record = json.loads((FIX / "plain-random-ids.jsonl").read_text())
    del record["p99_ttft_ms"]
    record["median_tpot_ms"] = None
    with pytest.raises(BenchError, match=r"ttft_p99_ms \(p99_ttft_ms\).*|tpot_median_ms"):
        extract_figures(record)


def test_workload_mismatch_is_reported():
    record = json.loads((FIX / "plain-random-ids.jsonl").read_text())
    asked = normalize_workload({"name": "smoke", "input_len": 128, "output_len": 16, "max_concurrency": 4})
    assert check_record_matches(record, asked) == ["input_len: asked 128, client ran 64"]


# -------------------------------------------------------------------------------------------- workload


def test_workload_defaults_and_argv():
    w = normalize_workload({"name": "c32", "max_concurrency": 32, "request_rate": 8})
    assert w["dataset"] == "random-ids" and w["range_ratio"] == 1.0 and w["seed"] == 42
    argv = bench_argv("/venv/bin/python", "http://127.0.0.1:30000", w, "/tmp/out.jsonl", tokenizer="/tok")
    assert argv[:3] == ["/venv/bin/python", "-m", "sglang.bench_serving"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--dataset-name"] == "random-ids"
    assert pairs["--random-range-ratio"] == "1"
    assert pairs["--max-concurrency"] == "32"
    assert pairs["--request-rate"] == "8"
    assert pairs["--output-file"] == "/tmp/out.jsonl"
    assert argv[-2:] == ["--tokenizer", "/tok"]
    assert normalize_workload({"request_rate": "inf"})["request_rate"] == "inf"
    assert normalize_workload({"request_rate": 2.5})["request_rate"] == 2.5


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"dataset": "mmmu"}, "download"),
        # sharegpt with no file downloads ShareGPT from the Hub in the client: a path is required
        ({"dataset": "sharegpt"}, "reads a prompt file: dataset_path must be an absolute path"),
        ({"dataset": "custom", "dataset_path": "prompts.jsonl"}, "must be an absolute path on the host"),
        ({"dataset_path": "/srv/prompts.jsonl"}, "'random-ids' reads no file"),
        ({"input_len": 0}, "input_len must be >= 1"),
        ({"num_prompts": "many"}, "num_prompts must be an integer"),
        ({"range_ratio": 1.5}, "range_ratio must be within 0..1"),
        ({"request_rate": 0}, "request_rate must be > 0"),
        ({"request_rate": "fast"}, "request_rate must be a number"),
        ({"name": "has space"}, "workload name"),
        ({"concurrency": 4}, "unknown workload key 'concurrency'"),
        ({"max_concurrency": True}, "max_concurrency must be an integer"),
    ],
)
def test_bad_workload_names_the_problem(workload, message):
    with pytest.raises(BenchError, match=message):
        normalize_workload(workload)


def test_failure_classes():
    assert classify_failure("", 124)[0] == "timeout"
    assert (
        classify_failure("aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host", 1)[0]
        == "connection_refused"
    )
    assert classify_failure("ModuleNotFoundError: No module named 'aiohttp'", 1)[0] == "client_not_installed"
    assert classify_failure("OSError: Can't load tokenizer for '/x'", 1)[0] == "tokenizer_missing"
    assert (
        classify_failure("Server at http://127.0.0.1:1/v1/models is not ready. Exiting.", 1)[0]
        == "server_not_ready"
    )
    assert classify_failure("something else", 1)[0] == "client_failed"


# --------------------------------------------------------------------------------------------- history


def entry(i: int, status: str = "ok") -> dict:
    return {"id": f"e{i}", "status": status, "label": "tp8", "figures": {"output_throughput": float(i)}}


def test_history_appends_bounds_and_keeps_last_ok(tmp_path):
    path = str(tmp_path / "facts" / "epforge_bench.fact")
    for i in range(5):
        record_run(path, entry(i), history_max=3)
    fact = load_fact(path, 3)
    assert [e["id"] for e in fact["history"]] == ["e2", "e3", "e4"]
    assert fact["runs"] == 5 and fact["failures"] == 0
    failed = record_run(path, entry(5, "failed"), history_max=3)
    assert [e["id"] for e in failed["history"]] == ["e3", "e4", "e5"]
    assert failed["last"]["status"] == "failed"
    assert failed["last_ok"]["id"] == "e4"  # a failure does not hide the last good result
    assert failed["failures"] == 1
    # the file is strict JSON (what setup's local facts reader needs) and world-readable
    json.loads(Path(path).read_text())
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_failed_run_never_shrinks_history(tmp_path):
    path = str(tmp_path / "epforge_bench.fact")
    for i in range(4):
        record_run(path, entry(i), history_max=10)
    before = load_fact(path, 10)["history"]
    after = record_run(path, entry(99, "failed"), history_max=10)["history"]
    assert after[:-1] == before and after[-1]["id"] == "e99"


def test_corrupt_fact_is_left_alone(tmp_path):
    path = tmp_path / "epforge_bench.fact"
    path.write_text('{"history": [ {"id": "e0"')
    with pytest.raises(BenchError, match="left untouched"):
        record_run(str(path), entry(1), history_max=5)
    assert path.read_text() == '{"history": [ {"id": "e0"'
    path.write_text('["not", "a", "fact"]')
    with pytest.raises(BenchError, match="not an epforge benchmark fact"):
        load_fact(str(path), 5)


def test_append_entry_sanitizes_non_finite_numbers():
    fact = append_entry(empty_fact(5), {"status": "ok", "figures": {"request_rate": float("inf")}}, 5)
    assert fact["last"]["figures"]["request_rate"] == "inf"
    json.dumps(fact, allow_nan=False)


WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import record_run
path = sys.argv[2]
blob = "x" * 400_000  # large entries make each write take long enough to be interrupted
i = 0
print("ready", flush=True)
while True:
    record_run(path, {"id": f"w{i}", "status": "ok", "blob": blob, "figures": {"n": i}}, history_max=20)
    i += 1
"""


def test_history_survives_writers_killed_mid_write(tmp_path):
    """SIGKILL a writer at many points of its loop: the fact always parses and the history only grows."""
    path = tmp_path / "epforge_bench.fact"
    record_run(str(path), entry(0), history_max=20)
    seen_runs = 1
    kills = 0
    for round_no in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(ROOT / "collections"), str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.037 * round_no)  # a different phase of the write loop each round
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        fact = json.loads(path.read_text())  # never a partial file
        assert fact["runs"] >= seen_runs
        assert fact["history"][-1]["id"] == fact["last"]["id"]
        assert len(fact["history"]) == min(20, fact["runs"])
        seen_runs = fact["runs"]
    assert kills == 12 and seen_runs > 1
    # leftovers of interrupted writes are temp files beside the fact, never the fact itself; an old one is
    # cleaned by the next write
    temps = list(tmp_path.glob(".epforge_bench.fact.tmp-*"))
    for t in temps:
        os.utime(t, (time.time() - 3600, time.time() - 3600))
    record_run(str(path), entry(1000), history_max=20)
    assert list(tmp_path.glob(".epforge_bench.fact.tmp-*")) == []
    assert load_fact(str(path), 20)["last"]["id"] == "e1000"
