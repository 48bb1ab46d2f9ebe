"""Streams that ended without their final chunk, read from bench_serving's per-request details.

SGLang's client (sglang/benchmark/serving.py, async_request_sglang_generate, 0.5.16 and 0.5.23) marks a
request successful whenever its HTTP stream ends without an exception: a gateway that ends the stream of a
worker that died mid-request gives success=True with the tokens seen so far, and when no text chunk came at
all the request keeps the asked output_len (its initial value) and ttft 0.0. Those requests are failures,
not completions; this finds them in the details --output-details writes ("output_lens" of the successful
requests in order, "ttfts" and "errors" of every request, errors "" for a success).
"""

from __future__ import annotations


def cut_streams(record: dict, workload: dict, ignores_eos: bool = True) -> dict:
    """{count, phantom_tokens, checked}: how many successful requests ended without their final chunk (no
    token at all, or fewer than the workload's least output length while the client ignores EOS), and the
    output tokens the client counted for them. checked is False when the record has no aligned details."""
    errors, ttfts, lens = record.get("errors"), record.get("ttfts"), record.get("output_lens")
    if not (isinstance(errors, list) and isinstance(ttfts, list) and isinstance(lens, list)):
        return {"count": 0, "phantom_tokens": 0, "checked": False}
    succeeded = [i for i, error in enumerate(errors) if not error]
    if len(succeeded) != len(lens) or len(ttfts) != len(errors):
        return {"count": 0, "phantom_tokens": 0, "checked": False}
    least = (
        max(1, int(int(workload["output_len"]) * float(workload.get("range_ratio", 1.0))))
        if ignores_eos
        else 1
    )
    count = phantom = 0
    for index, length in zip(succeeded, lens, strict=True):
        if not ttfts[index]:  # no token came: the asked length was counted, none generated
            count, phantom = count + 1, phantom + int(length)
        elif int(length) < least:
            count += 1
    return {"count": count, "phantom_tokens": phantom, "checked": True}
