"""How much of each random-ids window a prefix cache would hold, for one tokenizer, if nothing flushed it.

SGLang's random-ids dataset sends, per prompt, consecutive token ids from a random start, decoded to text;
the server re-tokenizes that text and its radix cache matches token prefixes against every earlier prompt.
With a small vocabulary (the smoke model's tokenizer has 428 base tokens) prompts repeat and share prefixes,
so back-to-back windows of one launch find more and more of their prompts cached: on one H200 (2026-12-04,
docs/gpu-runs.md) the tuner's windows found 73, 12, 47, 68 and 98 % (cold 4, warm-up 16, three steady 128).
This replays the client's own sampler (sglang.benchmark.datasets.random, the release installed beside the
python that runs this) over the windows in order, the client's warm-up request (each window's first prompt)
included, and prints each window's share of prompt tokens a token-level prefix cache would hold. It counts no
server-side extras (the launch's verify requests, outputs kept in the cache), so a real server shows more.

    PY=~/.cache/epforge/bench-client-venv/bin/python
    $PY bench/random_ids_reuse.py --tokenizer /opt/epforge/models/smoke-qwen3-moe
    $PY bench/random_ids_reuse.py --tokenizer DIR --input-len 1024 --windows cold:42:4,steady:44:128

Run by the python of an environment with SGLang's client (transformers, numpy). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys

# The tuner's windows on the H200 (scripts/gpu/h200-tune.yml): name, seed, prompts.
TUNER_WINDOWS = "cold:42:4,warmup:43:16,steady:44:128,steady-r2:45:128,steady-r3:46:128"


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def replay(tokenizer, sample, windows: list[tuple[str, int, int]], input_len: int, output_len: int) -> list:
    """[(window, share of its prompt tokens cached)] over the windows in order, one cache for all."""
    import numpy as np  # noqa: PLC0415 - the client's environment has it

    seen: list[list[int]] = []
    shares = []
    for name, seed, count in windows:
        random.seed(seed)
        np.random.seed(seed)
        with contextlib.redirect_stdout(sys.stderr):  # the sampler prints its token counts
            rows = sample(input_len, output_len, count, 1.0, tokenizer, "", random_sample=False)
        prompts = [tokenizer.encode(row.prompt) for row in rows]
        seen.append(prompts[0])  # the client's warm-up request
        cached = total = 0
        for ids in prompts:
            # a radix cache leaves at least the last prompt token to compute
            cached += min(max((common_prefix(ids, s) for s in seen), default=0), len(ids) - 1)
            total += len(ids)
            seen.append(ids)
        shares.append((name, round(cached / total, 4)))
    return shares


def parse_windows(text: str) -> list[tuple[str, int, int]]:
    windows = []
    for item in text.split(","):
        name, seed, count = item.split(":")
        windows.append((name, int(seed), int(count)))
    return windows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tokenizer", required=True, help="directory of the model's tokenizer")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--windows", default=TUNER_WINDOWS, help="name:seed:prompts,... in order")
    args = parser.parse_args()

    from sglang.benchmark.datasets.random import sample_random_requests  # noqa: PLC0415
    from transformers import AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    shares = replay(
        tokenizer, sample_random_requests, parse_windows(args.windows), args.input_len, args.output_len
    )
    print(
        json.dumps(
            {"tokenizer": args.tokenizer, "vocab_size": tokenizer.vocab_size, "cached_share": dict(shares)},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
