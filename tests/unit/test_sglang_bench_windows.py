"""sglang_bench with windows (issue 38, one client per candidate): several windows in order in ONE process
of SGLang's REAL bench_serving client (sglang 0.5.23, tests/fixtures/bench_serving/bench_env.py) against the
SGLang stand-in (tests/sglang_standin, a TEST DOUBLE); the driver's sequencing and seeds with a recording
client; the window rules (plugins/module_utils/sglang_bench/windows.py)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench import driver
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.windows import (
    read_timeline,
    window_workloads,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import BenchError

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_bench.py"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

WHEELS = ROOT / ".cache" / "sglang-wheels"
# The releases the project pins (stacks/*.yml) whose client has the entry the driver calls
RELEASES = ("0.5.16", "0.5.23")

WORKLOAD = {"name": "tune", "input_len": 32, "output_len": 8, "num_prompts": 4, "seed": 42}
WINDOWS = [
    {"name": "cold", "purpose": "cold", "num_prompts": 2, "max_concurrency": 1},
    {"name": "warmup-c4", "purpose": "warmup", "num_prompts": 4, "max_concurrency": 4},
    {"name": "steady-c4", "purpose": "ranked", "max_concurrency": 4, "num_prompts": 8},
]


def args_for(bench_client, tmp_path: Path, url: str, **over) -> dict:
    python, tok = bench_client
    return {
        "python": str(python),
        "base_url": url,
        "tokenizer": str(tok),
        "workload": WORKLOAD,
        "windows": WINDOWS,
        "work_dir": str(tmp_path / "bench"),
        "log_path": str(tmp_path / "log" / "bench.log"),
        "timeout": 300,
        **over,
    }


def test_windows_run_in_one_real_client_in_order_with_their_own_seeds(bench_client, tmp_path):
    _, tok = bench_client
    proc, url = bench_env.start_standin(str(tok), log_path=tmp_path / "standin.log")
    try:
        result = run_module_in(tmp_path, MODULE, args_for(bench_client, tmp_path, url), timeout=600)
    finally:
        bench_env.stop(proc)
    assert result["_rc"] == 0, result.get("msg")
    windows = result["windows"]
    assert [w["name"] for w in windows] == ["cold", "warmup-c4", "steady-c4"]
    assert [w["purpose"] for w in windows] == ["cold", "warmup", "ranked"]
    # one window of bench_serving each, with its own workload: the client's own records say so
    assert [w["figures"]["completed"] for w in windows] == [2, 4, 8]
    assert [w["workload"]["max_concurrency"] for w in windows] == [1, 4, 4]
    assert [w["workload"]["seed"] for w in windows] == [42, 43, 44]
    assert all(w["status"] == "ok" for w in windows)
    # one process: the client module was imported once and the tokenizer loaded once (the timeline holds
    # one start, one import and one call of each of the release's tokenizer loads for three windows)
    events = [
        json.loads(line)
        for line in (tmp_path / "bench" / "epforge_bench_windows.timeline.jsonl").read_text().splitlines()
    ]
    kinds = [e["event"] for e in events]
    assert kinds.count("start") == 1 and kinds.count("imported") == 1
    assert sorted(e["call"] for e in events if e["event"] == "tokenizer") == sorted(driver.MEMOIZED)
    assert kinds.count("window_start") == 3
    # the windows ran back to back: started in order, each after the previous one finished
    for before, after in itertools.pairwise(windows):
        assert before["finished"] <= after["started"]
    client = result["client"]
    assert len(client["gaps_s"]) == 2 and all(0 <= gap < 2 for gap in client["gaps_s"])
    assert client["startup_s"] > 0 and client["tokenizer_s"] > 0
    # every window's seed reached the client: bench_serving prints its parsed arguments per window
    log = (tmp_path / "log" / "bench.log").read_text()
    assert [f"seed={s}," in log for s in (42, 43, 44)] == [True, True, True]


def test_a_failed_window_ends_the_sequence_and_returns_the_windows_before(bench_client, tmp_path):
    """A server gone: the first window fails classified, the later ones never run."""
    url = f"http://127.0.0.1:{bench_env.free_port()}"
    args = args_for(bench_client, tmp_path, url, ready_check_timeout=1)
    result = run_module_in(tmp_path, MODULE, args, timeout=600)
    assert result["_rc"] != 0 and result["failed"]
    assert result["failure_class"] == "server_not_ready", result["msg"]
    assert result["msg"].startswith("window cold: ")
    assert result["windows"] == []
    timeline = read_timeline((tmp_path / "bench" / "epforge_bench_windows.timeline.jsonl").read_text())
    assert timeline["order"] == ["cold"]


# ------------------------------------------------------------------------- the driver with a recording client

RECORDING_CLIENT = """
import json, sys
args = None
def get_tokenizer(name):
    with open({calls!r}, "a") as h:
        h.write(json.dumps({{"tokenizer": name}}) + "\\n")
    return name
def run_benchmark(parsed):
    get_tokenizer("tok")
def cli_main():
    argv = sys.argv[1:]
    with open({calls!r}, "a") as h:
        h.write(json.dumps({{"argv": argv}}) + "\\n")
    run_benchmark(argv)
    if "--fail" in argv:
        raise SystemExit(1)
"""


@pytest.fixture
def recording_client(tmp_path, monkeypatch):
    """A module with the release's entry shape (cli_main reading sys.argv, run_benchmark looking up
    get_tokenizer in its globals) that records what it was called with."""
    calls = tmp_path / "calls.jsonl"
    (tmp_path / "recordingbench.py").write_text(RECORDING_CLIENT.format(calls=str(calls)))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("recordingbench", None)
    yield calls
    sys.modules.pop("recordingbench", None)


def spec_of(tmp_path: Path, argvs: dict) -> dict:
    return {
        "client_module": "recordingbench",
        "timeline": str(tmp_path / "timeline.jsonl"),
        "windows": [{"name": name, "argv": argv} for name, argv in argvs.items()],
    }


def test_driver_runs_each_window_in_order_and_loads_the_tokenizer_once(recording_client, tmp_path):
    spec = spec_of(tmp_path, {"a": ["--seed", "1"], "b": ["--seed", "2"], "c": ["--seed", "3"]})
    assert driver.run(spec) == 0
    calls = [json.loads(line) for line in recording_client.read_text().splitlines()]
    assert [c["argv"] for c in calls if "argv" in c] == [["--seed", "1"], ["--seed", "2"], ["--seed", "3"]]
    assert [c for c in calls if "tokenizer" in c] == [{"tokenizer": "tok"}]
    timeline = read_timeline((tmp_path / "timeline.jsonl").read_text())
    assert timeline["order"] == ["a", "b", "c"]
    assert all(w["error"] is None for w in timeline["windows"].values())
    assert len(timeline["gaps_s"]) == 2


def test_driver_stops_at_the_first_failed_window(recording_client, tmp_path):
    spec = spec_of(tmp_path, {"a": ["--seed", "1"], "b": ["--fail"], "c": ["--seed", "3"]})
    assert driver.run(spec) == 1
    calls = [json.loads(line) for line in recording_client.read_text().splitlines() if "argv" in line]
    assert [c["argv"] for c in calls] == [["--seed", "1"], ["--fail"]]
    timeline = read_timeline((tmp_path / "timeline.jsonl").read_text())
    assert timeline["order"] == ["a", "b"]
    assert timeline["windows"]["b"]["error"] == "bench_serving exited with 1"
    assert timeline["windows"]["a"]["error"] is None


# ------------------------------------------------------------------------------------------ the window rules


def test_a_window_without_a_seed_gets_the_shared_seed_plus_its_position():
    windows = [{"name": "a"}, {"name": "b", "seed": 7}, {"name": "c", "max_concurrency": 2}]
    got = window_workloads({"seed": 100, "num_prompts": 8}, windows)
    assert [w["seed"] for w in got] == [100, 7, 102]
    assert [w["max_concurrency"] for w in got] == [16, 16, 2]
    assert {w["num_prompts"] for w in got} == {8}


@pytest.mark.parametrize(
    ("windows", "problem"),
    [
        ([], "non-empty list"),
        ([{"name": "a"}, {"name": "a"}], "window name 'a' is used twice"),
        ([{"name": "a", "max_concurrency": 0}], "windows[0] (a): bad benchmark workload: workload max_conc"),
        (["a"], "windows[0] must be a mapping"),
    ],
)
def test_bad_windows_are_refused_naming_the_problem(windows, problem):
    with pytest.raises(BenchError, match=problem.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        window_workloads({}, windows)


def test_the_timeline_of_a_killed_driver_keeps_the_windows_it_finished():
    lines = [
        {"event": "start", "time": 10.0},
        {"event": "imported", "time": 14.0},
        {"event": "window_start", "name": "a", "time": 14.5},
        {"event": "tokenizer", "time": 15.5, "seconds": 1.0},
        {"event": "window_end", "name": "a", "time": 20.0, "error": None},
        {"event": "window_start", "name": "b", "time": 20.25},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"event": "window_e'
    timeline = read_timeline(text)
    assert timeline["startup_s"] == 4.0 and timeline["tokenizer_s"] == 1.0
    assert timeline["windows"]["a"]["seconds"] == 5.5
    assert timeline["windows"]["b"]["finished"] is None
    assert timeline["gaps_s"] == [0.25]


# ------------------------------------------------------------------ the release's entry, read in each wheel


def flag_data():
    spec = importlib.util.spec_from_file_location(
        "sglang_flag_data", ROOT / "scripts" / "sglang_flag_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def functions(tree: ast.Module) -> dict:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def called_names(function: ast.FunctionDef) -> set[str]:
    return {
        node.func.id
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_s_client_has_the_entry_the_driver_calls(release):
    """cli_main parses sys.argv (parse_args() without arguments) and calls run_benchmark, which loads the
    tokenizer through the module-level name the driver memoizes; sglang.bench_serving re-exports cli_main."""
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        serving = ast.parse(archive.read("sglang/benchmark/serving.py"))
        shim = archive.read("sglang/bench_serving.py").decode()
    defined = functions(serving)
    entry = defined[driver.ENTRY]
    parse_calls = [
        node
        for node in ast.walk(entry)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "parse_args"
    ]
    assert parse_calls and all(not call.args for call in parse_calls)
    assert "run_benchmark" in called_names(entry)
    imports = [node for node in serving.body if isinstance(node, ast.ImportFrom)]
    imported = {alias.name for node in imports for alias in node.names}
    for name in driver.MEMOIZED:
        assert name in called_names(defined["run_benchmark"])
        assert name in imported or name in defined  # a module global, not a local of run_benchmark
    assert f"from sglang.benchmark.serving import {driver.ENTRY}" in shim


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_s_request_functions_carry_the_acceptance_the_driver_keeps(release):
    """The driver wraps ASYNC_REQUEST_FUNCS (a module-level dict the benchmark looks its request function up
    in) and keeps each output's spec_accept_length, which the release reads from the server's meta_info but
    never writes to its result file."""
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("sglang/benchmark/serving.py").decode()
    serving = ast.parse(text)
    assigned = {
        target.id
        for node in serving.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert driver.REQUEST_FUNCS in assigned
    assert f"request_func = {driver.REQUEST_FUNCS}[backend]" in text
    assert f"    {driver.ACCEPT_FIELD}: float = 0.0" in text  # a field of RequestFuncOutput
    assert re.search(rf'output\.{driver.ACCEPT_FIELD} = \(\s+_meta_info\.get\("{driver.ACCEPT_FIELD}"', text)
