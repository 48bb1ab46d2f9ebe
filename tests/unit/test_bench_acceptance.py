"""A window's speculative acceptance as a distribution over its requests (issue 39). SGLang's client reads
each request's spec_accept_length from the server's meta_info and writes only the server's average to its
result file; the one-client driver keeps the per-request values (module_utils/sglang_bench/driver.py).
Checked: the percentiles' rule, and a real run of the client (0.5.23, tests/fixtures/bench_serving) against
the SGLang stand-in (a TEST DOUBLE whose NGRAM acceptance follows each prompt's own repetition,
SGLANG_STANDIN_SPEC_BY_PROMPT) through module sglang_bench's windows: random ids and a repetitive prompt
file (the client's warm-up request is not counted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_prompt_file import module_args, run_against_standin

from ansible_collections.epforge.ep.plugins.module_utils.bench_figures import accept_distribution

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_bench.py"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))


def test_the_percentiles_are_linear_between_ranks_and_empty_without_values():
    assert accept_distribution([]) == {} and accept_distribution([0.0, None]) == {}
    assert accept_distribution([2.0]) == {
        "accept_length_p10": 2.0,
        "accept_length_p50": 2.0,
        "accept_length_p90": 2.0,
        "accept_requests": 1,
    }
    spread = accept_distribution([1.0 + i / 10 for i in range(11)])  # 1.0 .. 2.0
    assert (spread["accept_length_p10"], spread["accept_length_p50"], spread["accept_length_p90"]) == (
        1.1,
        1.5,
        1.9,
    )


def test_each_window_keeps_its_requests_acceptance(bench_client, tmp_path):
    # words of the stand-in's tokenizer, repeated: NGRAM drafts from exactly such matches
    repeated = " ".join(["the private prompt text of user seven"] * 8)
    prompts = tmp_path / "repeated.jsonl"
    turn = {"conversations": [{"role": "user", "content": repeated}, {"role": "assistant", "content": "ok"}]}
    prompts.write_text("".join(json.dumps(turn) + "\n" for _ in range(8)))
    args = module_args(
        bench_client,
        tmp_path,
        workload={"name": "spec", "input_len": 48, "output_len": 8, "num_prompts": 8},
        windows=[
            {"name": "random", "purpose": "ranked", "max_concurrency": 2},
            {
                "name": "repeated",
                "purpose": "ranked",
                "max_concurrency": 2,
                "dataset": "custom",
                "dataset_path": str(prompts),
            },
        ],
    )
    result = run_against_standin(
        bench_client,
        tmp_path,
        args,
        env={"SGLANG_STANDIN_SPEC_BY_PROMPT": "1", "SGLANG_STANDIN_ACCEPT_LENGTH": "3.0"},
        extra_args=["--speculative-algorithm", "NGRAM"],
    )
    assert result["_rc"] == 0, result.get("msg")
    figures = {w["name"]: w["figures"] for w in result["windows"]}
    for name, f in figures.items():
        assert f["accept_requests"] == f["completed"] == 8, name
        assert f["accept_length_p10"] <= f["accept_length_p50"] <= f["accept_length_p90"], name
    # random ids repeat nothing (acceptance near 1); the repeated text is accepted near the stand-in's 3.0
    assert figures["random"]["accept_length_p90"] < 1.5
    assert figures["repeated"]["accept_length_p50"] > 2.5
