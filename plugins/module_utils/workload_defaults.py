"""A benchmark workload's keys and their defaults: module sglang_bench normalizes and checks a workload by
them (sglang_bench/workload.py), and filter prompt_file reads the prompts a workload sends before any server
starts.

A workload is a named, reproducible load: a dataset that needs no download (random-ids draws token ids from
the tokenizer's vocabulary; custom and sharegpt read the prompt file at dataset_path on the host,
prompt_file.py), fixed lengths, a seed, and (flush_cache) an empty prefix cache at the start of each run, so
that repeats measure the same load: on 2026-12-04 a real server's cache held 47 %, then 68 %, then 98 % of the
prompt tokens of three back-to-back random-ids windows of one launch (docs/gpu-runs.md).
"""

from __future__ import annotations

WORKLOAD_DEFAULTS = {
    "name": "decode-heavy",
    "dataset": "random-ids",
    "dataset_path": "",
    "input_len": 1024,
    "output_len": 256,
    "range_ratio": 1.0,
    "num_prompts": 64,
    "max_concurrency": 16,
    "request_rate": "inf",
    "seed": 42,
    "warmup_requests": 1,
    "flush_cache": True,
    # dataset generated-shared-prefix: the client writes shared_prefix_groups system prompts of
    # shared_prefix_len tokens, each followed by its own questions (input_len in all per request)
    "shared_prefix_len": 0,
    "shared_prefix_groups": 0,
}
