"""A stream that ended without its final chunk is a failed request (module_utils/sglang_bench/streams.py),
though SGLang's client records it as a success: the rule on records in the shape the client writes, and the
client's behaviour it rests on read from each pinned release's own sglang/benchmark/serving.py."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest
from test_release_claims import wheel_file

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.streams import cut_streams

WORKLOAD = {"output_len": 16, "range_ratio": 1.0}


def record(outcomes: list[tuple[str, float, int]]) -> dict:
    """bench_serving's --output-details for (error, ttft, output_len) per request: output_lens holds the
    successful requests' lengths only (calculate_metrics appends on success), ttfts and errors every one."""
    return {
        "errors": [error for error, _, _ in outcomes],
        "ttfts": [ttft for _, ttft, _ in outcomes],
        "output_lens": [length for error, _, length in outcomes if not error],
    }


def test_a_stream_with_no_token_or_short_of_its_length_is_cut():
    outcomes = [
        ("", 0.02, 16),  # complete
        ("", 0.0, 16),  # no token came: the client kept the asked length
        ("", 0.03, 5),  # ended after 5 of 16 tokens
        ("ClientPayloadError: ...", 0.01, 0),  # failed already (the client saw the error)
    ]
    assert cut_streams(record(outcomes), WORKLOAD) == {"count": 2, "phantom_tokens": 16, "checked": True}
    # without ignore_eos a short generation may be the model's own end: only the empty stream is cut
    assert cut_streams(record(outcomes), WORKLOAD, ignores_eos=False)["count"] == 1
    # a length range lets a request end at output_len x range_ratio
    ranged = {"output_len": 16, "range_ratio": 0.5}
    assert cut_streams(record([*outcomes[:1], ("", 0.03, 8)]), ranged)["count"] == 0


def test_a_record_without_aligned_details_is_not_judged():
    assert cut_streams({"completed": 3}, WORKLOAD)["checked"] is False
    misaligned = {"errors": ["", ""], "ttfts": [0.1, 0.1], "output_lens": [16]}
    assert cut_streams(misaligned, WORKLOAD) == {"count": 0, "phantom_tokens": 0, "checked": False}


def _function(tree: ast.Module, name: str) -> str:
    kinds = ast.FunctionDef | ast.AsyncFunctionDef
    return ast.unparse(next(n for n in ast.walk(tree) if isinstance(n, kinds) and n.name == name))


@pytest.mark.parametrize("release", ["0.5.16", "0.5.23"])
def test_the_client_marks_a_stream_that_ended_early_a_success(release):
    """The facts streams.py rests on, in the release's sglang/benchmark/serving.py: the sglang backend's
    request sets success=True after the stream loop whatever its last chunk was, from output_len = the
    asked length and ttft 0.0; the details hold ttfts and errors per request; --output-details exists."""
    with zipfile.ZipFile(wheel_file("sglang", release)) as wheel:
        tree = ast.parse(wheel.read("sglang/benchmark/serving.py").decode())
    request = _function(tree, "async_request_sglang_generate")
    assert "output_len = request_func_input.output_len" in request and "ttft = 0.0" in request
    loop = request.index("async for chunk_bytes in response.content")
    assert request.index("output.success = True", loop) > loop
    assert "finish_reason" not in request  # the final chunk is never checked
    whole = ast.unparse(tree)
    assert "'ttfts': [output.ttft for output in outputs]" in whole
    assert "'errors': [output.error for output in outputs]" in whole
    assert "'--output-details'" in whole
    success_only = r"if outputs\[i\]\.success:\s+output_len = outputs\[i\]\.output_len\s+output_lens\.append"
    assert re.search(success_only, _function(tree, "calculate_metrics"))
