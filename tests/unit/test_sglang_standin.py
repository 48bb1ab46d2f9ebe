"""The stand-in server's (a TEST DOUBLE of SGLang's launch_server) latency knobs behave as documented, so
tests that rank configurations by their latencies (the tuner's) know the right answer in advance.

Each case starts the stand-in on a free loopback port and times streaming generations as bench_serving
reads them: time to the first `data:` chunk (TTFT) and to the end of the stream."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request

import bench_env
import pytest
from conftest import ROOT

# Each request a prompt of its own: the stand-in's prefix cache (as a radix cache) would spare a repeated
# prompt's prefill, and these tests time the prefill.
PROMPT_NUMBERS = itertools.count()


def generate(url: str, tokens: int, *, stream: bool) -> urllib.request.Request:
    text = f"w{next(PROMPT_NUMBERS)} w2"
    body = {"text": text, "sampling_params": {"max_new_tokens": tokens}, "stream": stream}
    return urllib.request.Request(
        url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )


def stream_times(url: str, tokens: int) -> tuple[float, float]:
    """(seconds to the first data chunk, seconds to [DONE]) of one streaming /generate."""
    request = generate(url, tokens, stream=True)
    started = time.monotonic()
    first = None
    with urllib.request.urlopen(request, timeout=30) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            if first is None:
                first = time.monotonic() - started
            if line == "data: [DONE]":
                break
    assert first is not None, "no data chunk came back"
    return first, time.monotonic() - started


@pytest.fixture
def standin(tmp_path):
    servers = []

    def start(**env):
        proc, url = bench_env.start_standin(
            "/models/none", env={k: str(v) for k, v in env.items()}, log_path=tmp_path / "standin.log"
        )
        servers.append(proc)
        return url

    yield start
    for proc in servers:
        bench_env.stop(proc)


def test_the_first_token_waits_for_the_prefill_delay(standin):
    url = standin(SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS=1000, SGLANG_STANDIN_TOKEN_DELAY_MS=5)
    ttft, total = stream_times(url, 8)
    assert ttft >= 1.0 and total >= 1.0 + 8 * 0.005, (ttft, total)


def test_without_the_knob_the_first_token_is_one_token_delay_away(standin):
    url = standin(SGLANG_STANDIN_TOKEN_DELAY_MS=5)
    ttft, _total = stream_times(url, 4)
    assert ttft < 0.5, ttft  # (far below the 1 s prefill of the test above, with room for a loaded machine)


def test_the_cold_generations_are_slower_and_the_steady_ones_are_not(standin):
    """The first two generations after ready are 4x slower (JIT, graph capture); the third is steady."""
    url = standin(
        SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS=250,
        SGLANG_STANDIN_TOKEN_DELAY_MS=10,
        SGLANG_STANDIN_COLD_REQUESTS=2,
        SGLANG_STANDIN_COLD_FACTOR=4,
    )
    cold = [stream_times(url, 10) for _ in range(2)]
    steady = [stream_times(url, 10) for _ in range(2)]
    for ttft, total in cold:
        assert ttft >= 1.0 and total >= 1.0 + 10 * 0.04, (ttft, total)
    for ttft, total in steady:
        # steady: the plain delays, 0.25 s prefill and 0.1 s of tokens (room for a loaded machine)
        assert 0.25 <= ttft < 0.9 and total < 1.0 + 10 * 0.04, (ttft, total)


def test_a_non_streaming_generation_pays_the_same_delays(standin):
    url = standin(SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS=200, SGLANG_STANDIN_TOKEN_DELAY_MS=10)
    # 0.2 s prefill + 10 tokens of 10 ms
    request = generate(url, 10, stream=False)
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert time.monotonic() - started >= 0.3
    assert answer["meta_info"]["completion_tokens"] == 10


def factor_of(log_path) -> tuple[int, float]:
    """(launch, speed factor) the stand-in logged for its noise."""
    line = next(line for line in log_path.read_text().splitlines() if "TEST DOUBLE noise" in line)
    launch = int(line.split("launch ")[1].split(",")[0])
    return launch, float(line.rsplit(" ", 1)[1])


def test_the_launch_noise_draws_anew_per_launch_and_the_same_per_seed(tmp_path):
    """Issue 38: the speed moves between launches of the same settings; seeded, so a run repeats."""
    counter = tmp_path / "launches"
    env = {
        "SGLANG_STANDIN_NOISE_SEED": "7",
        "SGLANG_STANDIN_LAUNCH_NOISE": "0.5",
        "SGLANG_STANDIN_NOISE_COUNTER": str(counter),
        "SGLANG_STANDIN_TOKEN_DELAY_MS": "20",
    }
    seen = []
    for index in range(3):
        if index == 2:
            counter.unlink()  # the same seed from the first launch again
        log_path = tmp_path / f"standin-{index}.log"
        proc, url = bench_env.start_standin("/models/none", env=env, log_path=log_path)
        try:
            _ttft, total = stream_times(url, 20)
        finally:
            bench_env.stop(proc)
        launch, factor = factor_of(log_path)
        # 20 tokens of 20 ms, slowed or sped by the launch's factor
        assert total >= 0.9 * 20 * 0.020 / factor, (total, factor)
        seen.append((launch, factor))
    assert [launch for launch, _f in seen] == [1, 2, 1]
    assert seen[0][1] != seen[1][1] and seen[0] == seen[2]


def test_a_batch_size_compiles_once_before_its_first_token(standin):
    url = standin(SGLANG_STANDIN_COMPILE_MS="4:800", SGLANG_STANDIN_TOKEN_DELAY_MS=5)
    first, _total = stream_times(url, 4)
    again, _total = stream_times(url, 4)
    assert first >= 0.8 and again < 0.5, (first, again)


def ready_seconds(tmp_path, name: str, env: dict, extra_args=()) -> float:
    """Seconds from the stand-in's start to its ready file (its own clock), HOME as given in env."""
    ready_file = tmp_path / f"{name}.ready"
    started = time.time()
    proc, _url = bench_env.start_standin(
        "/models/none",
        env={**env, "SGLANG_STANDIN_READY_FILE": str(ready_file)},
        extra_args=list(extra_args),
        log_path=tmp_path / f"{name}.log",
    )
    bench_env.stop(proc)
    return float(ready_file.read_text()) - started


def test_graph_capture_is_whole_on_an_account_s_first_launch_and_a_tenth_after(tmp_path):
    """Real SGLang 0.5.16 on one H200 captured its prefill graphs in 60.1 s on the first launch with graphs
    and 6.5 s on the next (tests/fixtures/sglang_h200/graph-capture-*.log): the order of launches decides a
    ready-time comparison. Graphs off capture nothing; another account (HOME) starts cold again."""
    for log in ("hand-first-cold", "module-first-warm"):
        text = (ROOT / "tests" / "fixtures" / "sglang_h200" / f"graph-capture-{log}.log").read_text()
        assert "Capture target prefill CUDA graph end. elapsed=" in text
    home = tmp_path / "home"
    env = {"SGLANG_STANDIN_CAPTURE_SECONDS": "2.0", "SGLANG_STANDIN_LOAD_SECONDS": "0.1", "HOME": str(home)}
    graphs = ["--cuda-graph-max-bs-decode", "64"]
    cold = ready_seconds(tmp_path, "cold", env, graphs)
    warm = ready_seconds(tmp_path, "warm", env, graphs)
    off = ready_seconds(tmp_path, "off", env, [*graphs, "--disable-cuda-graph"])
    other = ready_seconds(tmp_path, "other", {**env, "HOME": str(tmp_path / "other")}, graphs)
    assert cold >= 2.0 and other >= 2.0, (cold, other)
    assert warm < 1.5 and off < 1.5, (warm, off)
    assert "(cold compile caches)" in (tmp_path / "cold.log").read_text()
    assert "(warm compile caches)" in (tmp_path / "warm.log").read_text()
