"""Workloads from prompt files (issue 39): the file kinds as both pinned releases' own loaders read them,
the check that refuses what those loaders would drop without a word, and a real run of SGLang's client
(0.5.23, tests/fixtures/bench_serving/bench_env.py) over a prompt file against the SGLang stand-in
(tests/sglang_standin, a TEST DOUBLE) through module sglang_bench. The tests write their own prompt files."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from moduletools import run_module_in
from test_sglang_bench_windows import RELEASES, WHEELS, flag_data

from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import (
    FILE_DATASETS,
    PromptFileError,
    check_prompt_file,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    bench_argv,
    expected_output,
    normalize_workload,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_bench.py"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

# words of the stand-in's tokenizer (bench_env.make_tokenizer_with), so every prompt is several tokens
PRIVATE_TEXT = "the private prompt text of user seven"


def conversation(prompt: str, reply: str = "a reply", key: str = "content") -> dict:
    return {"conversations": [{"role": "user", key: prompt}, {"role": "assistant", key: reply}]}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def module_args(bench_client, tmp_path: Path, **over) -> dict:
    """sglang_bench's arguments for the real client of bench_client, its files under tmp_path."""
    python, tok = bench_client
    return {
        "python": str(python),
        "tokenizer": str(tok),
        "work_dir": str(tmp_path / "bench"),
        "log_path": str(tmp_path / "bench.log"),
        "timeout": 300,
        **over,
    }


def run_against_standin(bench_client, tmp_path: Path, args: dict, *, env=None, extra_args=None) -> dict:
    """Module sglang_bench with args against a fresh SGLang stand-in (a TEST DOUBLE; its env knobs and launch
    arguments given), the stand-in stopped after; the module's result."""
    _, tok = bench_client
    proc, url = bench_env.start_standin(
        str(tok), log_path=tmp_path / "standin.log", env=env, extra_args=extra_args
    )
    try:
        return run_module_in(tmp_path, MODULE, {**args, "base_url": url}, timeout=600)
    finally:
        bench_env.stop(proc)


def prompts(n: int) -> list[dict]:
    return [conversation(f"{PRIVATE_TEXT} number {i} please answer the question") for i in range(n)]


def test_a_good_custom_file_is_counted_and_named_by_its_hash(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [*prompts(5), ""])  # a blank line is not a record
    identity = check_prompt_file(str(path), "custom", need=5)
    assert identity == {
        "dataset": "custom",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "bytes": path.stat().st_size,
        "prompts": 5,
    }


def test_every_bad_record_is_named_by_line_and_field_never_by_its_text(tmp_path):
    records = [
        *prompts(2),
        '{"conversations": [ broken',  # line 3: the client skips undecodable lines without a word
        {"conversations": [{"content": PRIVATE_TEXT}]},  # line 4: one turn, skipped by the client
        {"turns": [{"content": PRIVATE_TEXT}, {"content": "x"}]},  # line 5: no conversations
        {"conversations": [{"text": PRIVATE_TEXT}, {"content": "x"}]},  # line 6: no text key
        ["not", "an", "object"],  # line 7
        conversation("   "),  # line 8: an empty prompt
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(PromptFileError) as caught:
        check_prompt_file(str(path), "custom", need=1)
    msg = str(caught.value)
    assert "has 6 bad record(s)" in msg
    assert "line 3: not JSON" in msg
    assert "line 4: 'conversations' holds 1 turn(s), at least 2" in msg and "skip it silently" in msg
    assert "line 5: no list under 'conversations'" in msg
    assert "line 6: turn 1 has no text under 'content' or 'value'" in msg
    assert "line 7: not a JSON object" in msg
    assert "line 8: turn 1 (the prompt) is empty" in msg
    assert "private" not in msg and "user seven" not in msg


def test_sharegpt_is_a_json_array_whose_turns_hold_value(tmp_path):
    good = tmp_path / "sg.json"
    good.write_text(json.dumps([conversation(f"{PRIVATE_TEXT} {i}", key="value") for i in range(3)]))
    assert check_prompt_file(str(good), "sharegpt", need=3)["prompts"] == 3
    # 'content' is custom's key; the sharegpt loader indexes turn["value"] and would raise KeyError
    wrong = tmp_path / "sg-content.json"
    wrong.write_text(json.dumps([conversation(PRIVATE_TEXT)]))
    with pytest.raises(PromptFileError, match="entry 1: turn 1 has no text under 'value'"):
        check_prompt_file(str(wrong), "sharegpt")
    lines = tmp_path / "sg.jsonl"
    write_jsonl(lines, prompts(2))
    with pytest.raises(PromptFileError, match="the file: not JSON"):
        check_prompt_file(str(lines), "sharegpt")


def test_fewer_prompts_than_the_workload_sends_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", prompts(3))
    with pytest.raises(PromptFileError, match="holds 3 prompt\\(s\\), the workload sends 8"):
        check_prompt_file(str(path), "custom", need=8)
    with pytest.raises(PromptFileError, match="cannot read the prompt file"):
        check_prompt_file(str(tmp_path / "missing.jsonl"), "custom")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps(conversation("caf\u00e9"), ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(PromptFileError, match="is not UTF-8"):
        check_prompt_file(str(latin), "custom")


def test_a_file_kind_hands_the_client_its_path_and_a_fixed_reply_length():
    workload = normalize_workload(
        {
            "name": "mine",
            "dataset": "custom",
            "dataset_path": "/srv/p.jsonl",
            "output_len": 16,
            "num_prompts": 4,
        }
    )
    argv = bench_argv("/py", "http://127.0.0.1:1", workload, "/out.jsonl")
    assert argv[argv.index("--dataset-name") + 1] == "custom"
    assert argv[argv.index("--dataset-path") + 1] == "/srv/p.jsonl"
    assert argv[argv.index("--sharegpt-output-len") + 1] == "16"
    assert not [a for a in argv if a.startswith("--random-")]
    # every reply is cut at output_len with ignore_eos, whatever range_ratio says
    assert expected_output({**workload, "range_ratio": 0.5})["min_output_tokens"] == 4 * 16


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_reads_the_file_kinds_as_the_check_assumes(release):
    """The facts prompt_file.py is written against, in each pinned release's own files: the kinds are
    registered, the client's parser has the options bench_argv passes, the loaders read the keys the check
    requires and drop bad lines silently (which is why the check exists), and sharegpt without a path
    downloads."""
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        registry = archive.read("sglang/benchmark/datasets/__init__.py").decode()
        serving = archive.read("sglang/benchmark/serving.py").decode()
        custom = archive.read("sglang/benchmark/datasets/custom.py").decode()
        sharegpt = archive.read("sglang/benchmark/datasets/sharegpt.py").decode()
    for kind in FILE_DATASETS:
        assert f'"{kind}":' in registry
    for option in ('"--dataset-path"', '"--sharegpt-output-len"', '"--dataset-name"'):
        assert option in serving
    assert 'data.get("conversations", data.get("conversation", []))' in custom
    assert 'convs[0].get("content", convs[0].get("value", ""))' in custom
    assert "except json.JSONDecodeError:\n                    continue" in custom
    assert ')[0]["value"]' in sharegpt and 'dataset_path == ""' in sharegpt
    assert "download_and_cache_hf_file" in sharegpt


LOADER = """
import json, sys
from transformers import AutoTokenizer
from sglang.benchmark.datasets.custom import sample_custom_requests
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps([len(sample_custom_requests(p, 100, tok, fixed_output_len=8)) for p in sys.argv[2:]]))
"""


def test_the_release_s_own_loader_keeps_what_the_check_counts_and_drops_what_it_refuses(
    bench_client, tmp_path
):
    python, tok = bench_client
    good = write_jsonl(tmp_path / "good.jsonl", prompts(6))
    damaged = write_jsonl(tmp_path / "damaged.jsonl", [*prompts(6), '{"conversations": [ broken'])
    proc = subprocess.run(
        [str(python), "-c", LOADER, str(tok), str(good), str(damaged)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kept == [check_prompt_file(str(good), "custom")["prompts"], 6]
    # the release measured the damaged file as if nothing were wrong; the check refuses it by line
    with pytest.raises(PromptFileError, match="line 7: not JSON"):
        check_prompt_file(str(damaged), "custom")


def test_sglang_bench_sends_a_prompt_file_through_the_real_client_and_records_its_identity(
    bench_client, tmp_path
):
    path = write_jsonl(tmp_path / "prompts.jsonl", prompts(6))
    path.chmod(0o600)
    workload = {"name": "mine", "dataset": "custom", "dataset_path": str(path), "output_len": 8}
    args = module_args(
        bench_client,
        tmp_path,
        log_path=str(tmp_path / "log" / "bench.log"),
        windows=[
            {"name": "warm", "purpose": "warmup", "num_prompts": 2, "max_concurrency": 2},
            {"name": "steady", "purpose": "ranked", "num_prompts": 6, "max_concurrency": 3},
        ],
        workload=workload,
    )
    digests = tmp_path / "received.sha256"
    result = run_against_standin(
        bench_client, tmp_path, args, env={"SGLANG_STANDIN_PROMPT_DIGESTS": str(digests)}
    )
    assert result["_rc"] == 0, result.get("msg")
    # what the server received is the file's prompts byte for byte: the 6-prompt window sent each of them
    mine = {hashlib.sha256(r["conversations"][0]["content"].encode()).hexdigest() for r in prompts(6)}
    received = digests.read_text().split()
    assert set(received) == mine and len(received) >= 8
    assert [w["figures"]["completed"] for w in result["windows"]] == [2, 6]
    assert all(w["status"] == "ok" for w in result["windows"])
    assert result["windows"][1]["figures"]["total_output_tokens"] == 6 * 8
    entry = result["ansible_facts"]["epforge_bench_result"]
    assert entry["prompt_file"] == check_prompt_file(str(path), "custom", need=6)
    # the fact and the log hold the file's hash and counts, never its text
    assert PRIVATE_TEXT not in json.dumps(result)
    assert PRIVATE_TEXT not in (tmp_path / "log" / "bench.log").read_text()

    # a damaged file is refused before the client starts: nothing is logged, nothing is run
    write_jsonl(path, [*prompts(5), {"conversations": []}])
    refused = run_module_in(
        tmp_path, MODULE, {**args, "base_url": "http://127.0.0.1:9", "log_path": str(tmp_path / "l2.log")}
    )
    assert refused["_rc"] != 0 and refused["failed"]
    assert "line 6: 'conversations' holds 0 turn(s)" in refused["msg"]
    assert PRIVATE_TEXT not in refused["msg"] and not (tmp_path / "l2.log").exists()


def test_a_window_whose_prompts_the_server_counted_short_is_invalid(bench_client, tmp_path):
    """What was really sent (issue 39): the server's own prompt token counts (sglang 0.5.23's client records
    them) against input_len; a stand-in that counts 64 % of what it was sent makes the window invalid."""
    args = module_args(
        bench_client, tmp_path, workload={"name": "short", "input_len": 50, "output_len": 4, "num_prompts": 4}
    )
    result = run_against_standin(
        bench_client, tmp_path, args, env={"SGLANG_STANDIN_PROMPT_TOKEN_FACTOR": "0.64"}
    )
    assert result["_rc"] == 0, result.get("msg")
    assert result["status"] == "invalid", result["figures"]
    # the client's total is the dataset's count; its per-request details hold what the server counted
    assert result["figures"]["total_input_tokens"] == 4 * 50
    assert (result["figures"]["counted_input_tokens"], result["figures"]["counted_requests"]) == (4 * 32, 4)
    assert result["invalid_reasons"] == [
        "prompts were counted at 32 tokens per request (128 in 4), the workload asked input_len 50 (-36%): "
        "the window measured another context length"
    ]


@pytest.mark.parametrize(("release", "server_counts"), [("0.5.16", False), ("0.5.23", True)])
def test_which_release_s_details_hold_the_server_s_prompt_count(release, server_counts):
    """counted_input_tokens reads --output-details' input_lens: each request's prompt_len, which sglang
    0.5.23's client overwrites with the server's own prompt_tokens (_record_server_prompt_len) and 0.5.16's
    leaves at the dataset's count; total_input_tokens sums the dataset rows in both."""
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        serving = archive.read("sglang/benchmark/serving.py").decode()
    assert '"input_lens": [output.prompt_len for output in outputs]' in serving
    assert "total_input += input_requests[i].prompt_len" in serving
    assert ("def _record_server_prompt_len" in serving) is server_counts
    # figure cached_token_share: --cache-report sums the server's meta_info cached_tokens into the record
    assert '"--cache-report"' in serving and 'result["cache_report"] = {' in serving
    assert '"total_prompt_tokens": total_prompt_tokens' in serving
    assert '"total_cached_tokens": total_cached' in serving
    assert 'output.cached_tokens = _meta.get("cached_tokens", 0)' in serving
    # acceptance per request: the client reads each request's spec_accept_length from meta_info but writes
    # none to its --output-details (only the server's average, "accept_length"): a per-request
    # distribution is not in the file of either release (docs/workloads.md, "Not yet")
    details = serving[serving.index("result_details = {") :]
    details = details[: details.index("# Append results to a JSONL file")]
    assert "spec_accept_length" in serving and "accept" not in details
    # generated-shared-prefix (not offered yet): its prompts are pickled under ~/.cache/sglang/benchmark by a
    # key that holds the tokenizer's class name, not its path (docs/workloads.md, "Not yet")
    with zipfile.ZipFile(wheel) as archive:
        gsp = archive.read("sglang/benchmark/datasets/generated_shared_prefix.py").decode()
    assert 'Path.home() / ".cache" / "sglang" / "benchmark"' in gsp
    assert 'f"{tokenizer.__class__.__name__}.pkl"' in gsp


def test_prefix_reuse_is_seen_per_window(bench_client, tmp_path):
    """The server's cached prompt tokens per window (--cache-report, summed by the client from meta_info):
    random ids share nothing; prompts behind one long shared preamble are mostly served from the stand-in's
    prefix cache (a TEST DOUBLE's radix cache: the longest word prefix shared with an earlier prompt)."""
    preamble = " ".join(["the system prompt of the assistant says answer the question"] * 6)
    shared = write_jsonl(
        tmp_path / "shared.jsonl", [conversation(f"{preamble} question number {i}") for i in range(8)]
    )
    args = module_args(
        bench_client,
        tmp_path,
        workload={"name": "mix", "input_len": 64, "output_len": 4, "num_prompts": 8},
        windows=[
            {"name": "random", "purpose": "ranked", "max_concurrency": 1},
            {
                "name": "shared",
                "purpose": "ranked",
                "max_concurrency": 1,
                "dataset": "custom",
                "dataset_path": str(shared),
            },
        ],
    )
    result = run_against_standin(bench_client, tmp_path, args)
    assert result["_rc"] == 0, result.get("msg")
    share = {w["name"]: w["figures"]["cached_token_share"] for w in result["windows"]}
    # random ids share nothing: each window starts from an empty cache (flush_cache, after the client's
    # warm-up request - test_bench_flush_cache.py has the run without it)
    assert share["random"] == 0.0
    # 60 shared words of 63: all but the first of the 8 prompts hit the cache
    assert share["shared"] > 0.75
