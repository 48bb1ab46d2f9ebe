"""Each bench run starts from an empty prefix cache (workload key flush_cache, true by default).

On one H200 (2026-12-04, docs/gpu-runs.md) the tuner's three steady random-ids windows of one launch found
47 %, 68 %, then 98 % of their prompt tokens in the real server's cache
(tests/fixtures/gpu_h200_tune/cache-report-20261204b.txt): each window measured another load, and graphs-off's
throughput rose with the cache (2670, 2979, 3253 tok/s). With --flush-cache the client empties the cache after
its warm-up request, before it measures. Checked here: both pinned releases' clients do that in that order,
the argv, a value that is not a boolean refused, and the real client (0.5.23, tests/fixtures/bench_serving)
against the SGLang stand-in (tests/sglang_standin, a TEST DOUBLE whose prefix cache /flush_cache empties).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_prompt_file import module_args, run_against_standin
from test_sglang_bench_windows import RELEASES, WHEELS, flag_data

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    BenchError,
    bench_argv,
    normalize_workload,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_bench.py"
FIXTURE = ROOT / "tests" / "fixtures" / "gpu_h200_tune" / "cache-report-20261204b.txt"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))


def test_the_real_server_s_cache_grew_across_the_windows_of_one_launch():
    """The capture this key answers: per launch, the steady windows' cache hit rates as the client printed
    them (--cache-report), each higher than the one before."""
    rates: dict[str, list[float]] = {}
    window = ""
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("=== window"):
            window = line.split(": ", 1)[1]
        elif line.startswith("Cache hit rate:"):
            rates.setdefault(window, []).append(float(line.split()[-1].rstrip("%")))
    steady = list(zip(rates["steady-c16"], rates["steady-c16-r2"], rates["steady-c16-r3"], strict=False))
    assert len(steady) >= 2  # graphs-off and graph-bs16 (2026-12-04, second lease)
    for first, second, third in steady:
        assert first < second < third and third > 90


@pytest.mark.parametrize("release", RELEASES)
def test_both_releases_flush_after_the_warm_up_and_before_they_measure(release):
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        serving = archive.read("sglang/benchmark/serving.py").decode()
    assert '"--flush-cache"' in serving
    # 0.5.16 posts inline and ignores the answer; 0.5.23 calls flush_server_cache, which posts with
    # ?timeout= (the server waits for running requests) and raises on an error status (the window fails)
    calls = {"0.5.16": 'requests.post(base_url + "/flush_cache"', "0.5.23": "flush_server_cache(base_url"}
    call = calls[release]
    warmed = serving.index("Starting main benchmark run")
    flushed = serving.index(call, warmed)
    measured = serving.index("benchmark_start_time = time.perf_counter()")
    assert warmed < flushed < measured
    assert ("response.raise_for_status()" in serving) is (release == "0.5.23")


def test_the_argv_flushes_unless_told_not_to():
    def argv(**over):
        return bench_argv("/py", "http://127.0.0.1:1", normalize_workload(over), "/tmp/out.jsonl")

    assert "--flush-cache" in argv()
    assert "--flush-cache" not in argv(flush_cache=False)


@pytest.mark.parametrize("value", ["false", 0, "yes"])
def test_a_flush_cache_that_is_not_a_boolean_is_refused(value):
    with pytest.raises(BenchError, match="flush_cache must be true or false"):
        normalize_workload({"flush_cache": value})


@pytest.mark.parametrize("flush", [True, False])
def test_a_window_of_the_same_prompts_finds_the_cache_as_the_first_did(bench_client, tmp_path, flush):
    """Two windows of the same 8 random-ids prompts (one seed) against one server. With flush_cache both find
    an empty cache (the flush comes after the client's warm-up request, so even that repeat of the first
    prompt is gone); without it the first finds its warm-up's prompt (1 of 8) and the second all of its
    prompts cached - and its prefill spared."""
    windows = [{"name": n, "purpose": "ranked", "max_concurrency": 1, "seed": 7} for n in ("first", "second")]
    workload = {"name": "same", "input_len": 64, "output_len": 4, "num_prompts": 8, "flush_cache": flush}
    args = module_args(bench_client, tmp_path, workload=workload, windows=windows)
    result = run_against_standin(
        bench_client, tmp_path, args, env={"SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS": "40"}
    )
    assert result["_rc"] == 0, result.get("msg")
    figures = {w["name"]: w["figures"] for w in result["windows"]}
    share = {name: f["cached_token_share"] for name, f in figures.items()}
    ttft = figures["second"]["ttft_median_ms"] / figures["first"]["ttft_median_ms"]
    if flush:
        assert share == {"first": 0.0, "second": 0.0}
        assert ttft > 0.7
    else:
        assert 0.08 < share["first"] < 0.18 and share["second"] > 0.9
        assert ttft < 0.5  # the 40 ms prefill spared for all but the last word of each prompt


def test_the_smoke_tokenizer_s_random_ids_windows_fill_a_cache_nothing_flushes(bench_client, tmp_path):
    """bench/random_ids_reuse.py replays the real client's random-ids sampler (0.5.23) over the tuner's
    windows with the smoke model's own tokenizer: the steady windows' shares grow as on the H200 (lower: it
    counts no server-side extras)."""
    python, _ = bench_client
    tok = tmp_path / "smoke-tokenizer"
    writer = (
        f"import sys; sys.path[:0] = [{str(ROOT / 'collections')!r}]; "
        "from ansible_collections.epforge.ep.plugins.module_utils.smoke_model.model import "
        f"DEFAULTS, write_tokenizer; write_tokenizer({str(tok)!r}, dict(DEFAULTS))"
    )
    tok.mkdir()
    subprocess.run([str(python), "-c", writer], check=True, timeout=120)
    done = subprocess.run(
        [str(python), str(ROOT / "bench" / "random_ids_reuse.py"), "--tokenizer", str(tok)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(done.stdout)
    share = report["cached_share"]
    assert report["vocab_size"] < 1000  # what makes random-ids prompts repeat
    assert 0.1 < share["steady"] < share["steady-r2"] < share["steady-r3"]
    assert share["steady-r3"] > 2 * share["steady"] - 0.05
