"""Prefix-heavy traffic (issue 39): dataset generated-shared-prefix, prompts SGLang's client makes itself
from the tokenizer's vocabulary - groups of requests behind one shared system prompt each. Checked: both
pinned releases' client options and their pickle cache (read in the wheels), the argv and the workload's
refusals, and a real run of the client (0.5.23, tests/fixtures/bench_serving) against the SGLang stand-in (a
TEST DOUBLE with a prefix cache) through module sglang_bench: the server's cache holds the shared prefixes,
each prompt is counted at input_len, and the client's generated prompts stay in the run's own HOME."""

from __future__ import annotations

import itertools
import re
import sys
import zipfile
from pathlib import Path

import pytest
from test_prompt_file import module_args, run_against_standin
from test_sglang_bench_windows import RELEASES, WHEELS, flag_data

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    BenchError,
    bench_argv,
    input_length_notes,
    input_length_problems,
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


def release_files(release: str, *names: str) -> list[str]:
    """The text of each named file in the release's wheel (downloaded once into the wheel cache)."""
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        return [archive.read(f"sglang/{name}").decode() for name in names]


@pytest.mark.parametrize("release", RELEASES)
def test_both_releases_take_the_options_and_pickle_by_tokenizer_class(release):
    serving, gsp, datasets = release_files(
        release,
        "benchmark/serving.py",
        "benchmark/datasets/generated_shared_prefix.py",
        "benchmark/datasets/__init__.py",
    )
    flags = [a for a in argv_of(GSP) if a.startswith("--gsp-")]
    assert flags and all(f'"{flag}"' in serving for flag in flags)
    assert '"generated-shared-prefix"' in datasets
    # the reason for the run's own HOME (library/sglang_bench.py client_env)
    assert 'Path.home() / ".cache" / "sglang" / "benchmark"' in gsp
    assert 'f"{tokenizer.__class__.__name__}.pkl"' in gsp


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


# The lent H200's run (2026-12-04, tests/fixtures/sglang_h200/README.md): 384 + 128 asked, 573 counted.
H200_STDOUT = ROOT / "tests" / "fixtures" / "sglang_h200" / "gsp-shared-prefix-bench-stdout.txt"
H200_WORKLOAD = {
    "name": "shared-prefix",
    "dataset": "generated-shared-prefix",
    "input_len": 512,
    "output_len": 64,
    "shared_prefix_len": 384,
    "shared_prefix_groups": 4,
    "num_prompts": 64,
    "max_concurrency": 16,
}


@pytest.mark.parametrize("release", RELEASES)
def test_both_releases_make_the_text_from_decoded_random_ids(release):
    # why a shared-prefix window is not held to input_len from above: the text is decoded and encoded again
    common, gsp = release_files(
        release, "benchmark/datasets/common.py", "benchmark/datasets/generated_shared_prefix.py"
    )
    # 0.5.16 draws the ids in gen_prompt itself, 0.5.23 in gen_prompt_ids; both return the decoded text
    body = common.split("def gen_prompt(", 1)[1].split("\ndef ", 1)[0]
    assert "return tokenizer.decode(" in body and "random.choices(all_available_tokens" in common
    # the text, not the ids, unless 0.5.23's --tokenize-prompt (not used: 0.5.16 has no such path here)
    assert re.search(r"gen_prompt\(tokenizer, (int\()?system_prompt_lens\[i\]", gsp) or (
        "generate_prompt = gen_prompt_ids if input_ids else gen_prompt" in gsp
    )
    assert "len(tokenizer.encode(turn_prompts[0]))" in gsp


def h200_figures() -> dict:
    text = H200_STDOUT.read_text()
    total = int(re.search(r"^Total input tokens:\s+(\d+)\s*$", text, re.M).group(1))
    completed = int(re.search(r"^Successful requests:\s+(\d+)", text, re.M).group(1))
    return {"counted_input_tokens": total, "counted_requests": completed}


def test_the_h200_run_is_valid_and_its_note_names_the_length_it_measured():
    workload = normalize_workload(H200_WORKLOAD)
    figures = h200_figures()
    assert figures == {"counted_input_tokens": 36699, "counted_requests": 64}
    assert input_length_problems(figures, workload) == []
    (note,) = input_length_notes(figures, workload)
    assert "573 tokens per request, +12 % over input_len 512".replace(" %", "%") in note


@pytest.mark.parametrize(
    ("per_request", "problem", "noted"),
    [(420, True, False), (470, False, False), (563, False, False), (564, False, True)],
)
def test_only_a_shortfall_is_a_problem_for_shared_prefix(per_request, problem, noted):
    workload = normalize_workload(H200_WORKLOAD)
    figures = {"counted_input_tokens": per_request * 64, "counted_requests": 64}
    assert bool(input_length_problems(figures, workload)) is problem
    assert bool(input_length_notes(figures, workload)) is noted
    # random-ids keeps both sides: a longer context is another context too
    ids = normalize_workload({"name": "ids", "input_len": 512, "output_len": 64})
    assert bool(input_length_problems(figures, ids)) is (per_request < 461 or per_request > 563)


@pytest.mark.parametrize(("factor", "status"), [("1.2", "ok"), ("0.7", "invalid")])
def test_a_run_counted_longer_is_noted_and_one_counted_shorter_is_invalid(
    bench_client, tmp_path, factor, status
):
    # the stand-in (TEST DOUBLE) counts each prompt factor x its words, as the H200's BPE counted the
    # client's decoded text longer (1.2) or a server that cut the context would count it shorter (0.7)
    args = module_args(bench_client, tmp_path, workload={**GSP, "max_concurrency": 4})
    result = run_against_standin(
        bench_client, tmp_path, args, env={"SGLANG_STANDIN_PROMPT_TOKEN_FACTOR": factor}
    )
    assert result["_rc"] == 0, result.get("msg")
    assert result["status"] == status, result
    if status == "ok":
        (note,) = result["notes"]
        assert "+20% over input_len 64" in note and note in str(result.get("warnings"))
        assert result["ansible_facts"]["epforge_bench_result"]["notes"] == [note]
    else:
        assert result["notes"] == [] and "measured another context length" in result["invalid_reasons"][0]
