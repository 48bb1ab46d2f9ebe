"""Prefix-heavy traffic (issue 39): dataset generated-shared-prefix, prompts SGLang's client makes itself
from the tokenizer's vocabulary - groups of requests behind one shared system prompt each. Checked: both
pinned releases' client options and their pickle cache (read in the wheels), the argv and the workload's
refusals, and a real run of the client (0.5.23, tests/fixtures/bench_serving) against the SGLang stand-in (a
TEST DOUBLE with a prefix cache) through module sglang_bench: the server's cache holds the shared prefixes,
each prompt is counted at input_len, and the client's generated prompts stay in the run's own HOME."""

from __future__ import annotations

import itertools
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
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))

GSP = {
    "name": "prefix-heavy",
    "dataset": "generated-shared-prefix",
    "input_len": 64,
    "shared_prefix_len": 48,
    "shared_prefix_groups": 2,
    "output_len": 4,
    "num_prompts": 8,
}


def argv_of(workload: dict) -> list[str]:
    return bench_argv("/py", "http://127.0.0.1:1", normalize_workload(workload), "/tmp/out.jsonl")


@pytest.mark.parametrize("release", RELEASES)
def test_both_releases_take_the_options_and_pickle_by_tokenizer_class(release):
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        serving = archive.read("sglang/benchmark/serving.py").decode()
        gsp = archive.read("sglang/benchmark/datasets/generated_shared_prefix.py").decode()
    flags = [a for a in argv_of(GSP) if a.startswith("--gsp-")]
    assert flags and all(f'"{flag}"' in serving for flag in flags)
    assert '"generated-shared-prefix"' in archive_datasets(wheel)
    # the reason for the run's own HOME (library/sglang_bench.py client_env)
    assert 'Path.home() / ".cache" / "sglang" / "benchmark"' in gsp
    assert 'f"{tokenizer.__class__.__name__}.pkl"' in gsp


def archive_datasets(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("sglang/benchmark/datasets/__init__.py").decode()


def test_the_argv_splits_the_prompt_into_the_shared_prefix_and_a_question():
    argv = argv_of(GSP)
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--dataset-name"] == "generated-shared-prefix"
    assert pairs["--gsp-num-groups"] == "2" and pairs["--gsp-prompts-per-group"] == "4"
    assert pairs["--gsp-system-prompt-len"] == "48" and pairs["--gsp-question-len"] == "16"
    assert pairs["--gsp-output-len"] == "4" and "--random-input-len" not in argv


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shared_prefix_groups": 0}, "needs shared_prefix_groups >= 1"),
        ({"shared_prefix_len": 64}, "must be below input_len (64)"),
        ({"num_prompts": 9}, "must be a multiple of shared_prefix_groups (2)"),
        ({"dataset": "random-ids"}, "are for dataset generated-shared-prefix only"),
        ({"shared_prefix_len": "many"}, "shared_prefix_len must be an integer"),
    ],
)
def test_a_bad_shared_prefix_workload_is_refused_naming_the_key(change, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        normalize_workload({**GSP, **change})


def test_a_run_fills_the_cache_with_the_shared_prefixes_and_keeps_its_pickle_at_home(bench_client, tmp_path):
    args = module_args(bench_client, tmp_path, workload={**GSP, "max_concurrency": 1})
    result = run_against_standin(bench_client, tmp_path, args)
    assert result["_rc"] == 0, result.get("msg")
    figures = result["figures"]
    assert figures["completed"] == 8 and result["status"] == "ok"
    # each prompt counted at input_len (the gate's bound is 10 %), the server's cache holding the shared
    # prefixes: all but each group's first prompt find 48 of their 64 tokens (6 of 8 x 0.75 = 0.56)
    assert abs(figures["counted_input_tokens"] / figures["counted_requests"] - 64) <= 6.4
    assert 0.45 < figures["cached_token_share"] < 0.7
    pickles = list((tmp_path / "bench" / "client-home").rglob("gen_shared_prefix_*.pkl"))
    assert len(pickles) == 1, pickles
