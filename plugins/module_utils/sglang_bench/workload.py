"""Benchmark helpers shared by the sglang_bench module, the benchmark role's tests and the report:
the argv of SGLang's own `bench_serving` client, the parser of its --output-file JSON lines, and the
append-only benchmark history kept as a local fact (bench_history.py, shared with module fleet_bench_record).

Pure functions except the history file functions, which touch only the paths they are given.
"""

from __future__ import annotations

import json
import math
import re

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import flag_names
from ansible_collections.epforge.ep.plugins.module_utils.bench_figures import FIGURE_KEYS

# The history file moved up to bench_history.py (module fleet_bench_record writes it too); its names stay
# importable from here for module sglang_bench and the tests.
from ansible_collections.epforge.ep.plugins.module_utils.bench_history import (
    HISTORY_SCHEMA,
    BenchError,
    _finite,
    append_entry,
    empty_fact,
    load_fact,
    locked,
    record_run,
    sanitize,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import option_argv
from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import FILE_DATASETS
from ansible_collections.epforge.ep.plugins.module_utils.workload_defaults import WORKLOAD_DEFAULTS

# the history's names module sglang_bench and the tests import from here
_HISTORY_NAMES = (HISTORY_SCHEMA, append_entry, empty_fact, load_fact, locked, record_run, sanitize)

# A result line without these is incomplete: the report would have holes where the figures people
# compare should be. (accept_length is None without speculative decoding; max_output_tokens_per_s is
# missing in older releases.)
REQUIRED_FIGURES = (
    "completed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_throughput",
    "ttft_median_ms",
    "ttft_p99_ms",
    "tpot_median_ms",
    "tpot_p99_ms",
    "itl_median_ms",
    "itl_p99_ms",
    "e2e_median_ms",
    "e2e_p99_ms",
)

# Workload keys and their defaults: workload_defaults.py (filter prompt_file reads them too); their types and
# bounds are checked here.
# generated-shared-prefix: prompts the client makes itself from the tokenizer's vocabulary, groups of requests
# behind one shared system prompt each (prefix-heavy traffic; no download)
SHARED_PREFIX = "generated-shared-prefix"
DATASETS_WITHOUT_DOWNLOAD = ("random-ids", SHARED_PREFIX, *FILE_DATASETS)
# the kinds whose prompt lengths the workload sets (input_len per request), so the counted-length gate applies
GENERATED_DATASETS = ("random-ids", SHARED_PREFIX)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


# --------------------------------------------------------------------------------------------- workload


def _integer_problems(merged: dict) -> list[str]:
    """Turn the integer keys into ints (in place); the problems of those that are not, or too small."""
    problems = []
    for key in (
        "input_len",
        "output_len",
        "num_prompts",
        "max_concurrency",
        "seed",
        "warmup_requests",
        "shared_prefix_len",
        "shared_prefix_groups",
    ):
        value = merged[key]
        try:
            merged[key] = int(value)
            if isinstance(value, bool) or float(value) != merged[key]:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"workload {key} must be an integer, got {value!r}")
            continue
        low = 0 if key in ("seed", "warmup_requests", "shared_prefix_len", "shared_prefix_groups") else 1
        if merged[key] < low:
            problems.append(f"workload {key} must be >= {low}, got {merged[key]}")
    return problems


def _range_ratio_problems(merged: dict) -> list[str]:
    try:
        merged["range_ratio"] = float(merged["range_ratio"])
    except (TypeError, ValueError):
        return [f"workload range_ratio must be a number, got {merged['range_ratio']!r}"]
    if not 0.0 <= merged["range_ratio"] <= 1.0:
        return [
            f"workload range_ratio must be within 0..1, got {merged['range_ratio']} "
            "(1.0 gives every request exactly input_len/output_len tokens)"
        ]
    return []


def _shared_prefix_problems(merged: dict) -> list[str]:
    """generated-shared-prefix needs its groups and prefix length (the prefix shorter than input_len, the
    prompts split evenly over the groups); other datasets leave both at 0."""
    prefix, groups = merged["shared_prefix_len"], merged["shared_prefix_groups"]
    if not (isinstance(prefix, int) and isinstance(groups, int)):
        return []  # named by _integer_problems
    problems = []
    if merged["dataset"] != SHARED_PREFIX:
        if prefix or groups:
            return [f"shared_prefix_len and shared_prefix_groups are for dataset {SHARED_PREFIX} only"]
        return []
    if groups < 1 or prefix < 1:
        return [f"dataset {SHARED_PREFIX} needs shared_prefix_groups >= 1 and shared_prefix_len >= 1"]
    if isinstance(merged["input_len"], int) and prefix >= merged["input_len"]:
        problems.append(
            f"shared_prefix_len ({prefix}) must be below input_len ({merged['input_len']}): each request's "
            "prompt is the shared prefix and a question of its own"
        )
    if isinstance(merged["num_prompts"], int) and merged["num_prompts"] % groups:
        problems.append(
            f"num_prompts ({merged['num_prompts']}) must be a multiple of shared_prefix_groups ({groups}): "
            "the client sends the same number of prompts behind each prefix"
        )
    return problems


def _flush_cache_problems(merged: dict) -> list[str]:
    """flush_cache as a real boolean (a string such as 'false' would read as true)."""
    if not isinstance(merged["flush_cache"], bool):
        return [f"workload flush_cache must be true or false, got {merged['flush_cache']!r}"]
    return []


def _request_rate_problems(merged: dict) -> list[str]:
    """request_rate as a positive float, or 'inf' (all at once)."""
    rate = merged["request_rate"]
    try:
        value = float(rate)
        if isinstance(rate, bool) or math.isnan(value):
            raise ValueError
    except (TypeError, ValueError):
        return [f"workload request_rate must be a number of requests/s or 'inf', got {rate!r}"]
    if math.isinf(value) and value > 0:
        merged["request_rate"] = "inf"
    elif value <= 0:
        return [
            "workload request_rate must be > 0 requests/s or 'inf' (all at once, bounded by max_concurrency)"
        ]
    else:
        merged["request_rate"] = value
    return []


def _dataset_path_problems(merged: dict) -> list[str]:
    """A file kind reads an absolute path on the host (never empty: sharegpt would download); random-ids
    reads none."""
    path = merged["dataset_path"]
    if not isinstance(path, str):
        return [f"workload dataset_path must be a path, got {path!r}"]
    if merged["dataset"] in FILE_DATASETS and not path.startswith("/"):
        return [
            f"dataset {merged['dataset']!r} reads a prompt file: dataset_path must be an absolute path "
            f"on the host, got {path!r}"
        ]
    if merged["dataset"] not in FILE_DATASETS and path:
        return [f"dataset {merged['dataset']!r} reads no file: leave dataset_path empty (got {path!r})"]
    return []


def normalize_workload(workload: dict | None) -> dict:
    """Defaults merged under `workload`, validated; raises BenchError naming every problem."""
    merged = dict(WORKLOAD_DEFAULTS)
    unknown = sorted(set(workload or {}) - set(WORKLOAD_DEFAULTS))
    merged.update({k: v for k, v in (workload or {}).items() if v is not None})
    problems = [
        f"unknown workload key '{k}' (known: {', '.join(sorted(WORKLOAD_DEFAULTS))})" for k in unknown
    ]
    if not isinstance(merged["name"], str) or not _NAME_RE.match(merged["name"]):
        problems.append(f"workload name {merged['name']!r} must be 1-64 letters, digits, '.', '_' or '-'")
    if merged["dataset"] not in DATASETS_WITHOUT_DOWNLOAD:
        problems.append(
            f"dataset {merged['dataset']!r} is not supported: use one of "
            f"{', '.join(DATASETS_WITHOUT_DOWNLOAD)} (other bench_serving datasets download data)"
        )
    problems += _dataset_path_problems(merged)
    problems += _integer_problems(merged)
    problems += _range_ratio_problems(merged)
    problems += _request_rate_problems(merged)
    problems += _flush_cache_problems(merged)
    problems += _shared_prefix_problems(merged)
    if problems:
        raise BenchError("bad benchmark workload: " + "; ".join(problems))
    return merged


def bench_argv(
    python: str,
    base_url: str,
    workload: dict,
    output_file: str,
    *,
    tokenizer: str = "",
    model: str = "",
    backend: str = "sglang",
    module: str = "sglang.bench_serving",
    ready_check_timeout: int = 60,
    extra_args: list[str] | None = None,
) -> list[str]:
    """argv of `python -m sglang.bench_serving` for a normalized workload (never a shell string)."""
    w = workload
    if w["dataset"] in FILE_DATASETS:
        # the file's prompts as they are, each reply cut at output_len (the client sends ignore_eos, so every
        # request returns exactly output_len tokens and the validity gate counts them as for random-ids)
        lengths = [("--dataset-path", w["dataset_path"]), ("--sharegpt-output-len", w["output_len"])]
    elif w["dataset"] == SHARED_PREFIX:
        # the client makes groups x prompts-per-group requests (it ignores --num-prompts here), each the
        # group's system prompt and a question of its own: input_len in all
        lengths = [
            ("--gsp-num-groups", w["shared_prefix_groups"]),
            ("--gsp-prompts-per-group", w["num_prompts"] // w["shared_prefix_groups"]),
            ("--gsp-system-prompt-len", w["shared_prefix_len"]),
            ("--gsp-question-len", w["input_len"] - w["shared_prefix_len"]),
            ("--gsp-output-len", w["output_len"]),
            ("--gsp-range-ratio", _num(w["range_ratio"])),
        ]
    else:
        lengths = [
            ("--random-input-len", w["input_len"]),
            ("--random-output-len", w["output_len"]),
            ("--random-range-ratio", _num(w["range_ratio"])),
        ]
    options = [
        ("--backend", backend),
        ("--base-url", base_url),
        ("--dataset-name", w["dataset"]),
        *lengths,
        ("--num-prompts", w["num_prompts"]),
        ("--max-concurrency", w["max_concurrency"]),
        ("--request-rate", _num(w["request_rate"])),
        ("--seed", w["seed"]),
        ("--warmup-requests", w["warmup_requests"]),
        ("--ready-check-timeout-sec", int(ready_check_timeout)),
        ("--output-file", output_file),
        ("--tag", w["name"]),
    ]
    # --output-details: the per-request outcomes, so a stream cut before its final chunk is seen (streams.py);
    # --cache-report: the server's cached prompt tokens summed (prefix reuse; with the native backend it only
    # reads meta_info, the request is unchanged)
    argv = [
        python,
        "-m",
        module,
        *option_argv(options),
        "--disable-tqdm",
        "--output-details",
        "--cache-report",
    ]
    # --flush-cache: the client empties the server's prefix cache after its warm-up request, before it
    # measures - each window starts from the same empty cache instead of what the windows before it left
    if w["flush_cache"]:
        argv.append("--flush-cache")
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    if model:
        argv += ["--model", model]
    return argv + list(extra_args or [])


def _num(value) -> str:
    if value == "inf":
        return "inf"
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


# ---------------------------------------------------------------------------------------------- parsing


def parse_result_lines(text: str) -> list[dict]:
    """Every JSON object of a bench_serving --output-file (one per line).

    Raises BenchError when the file is empty or a line is not a complete JSON object (a client killed
    mid-write leaves a truncated last line): such a file proves nothing.
    """
    records = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise BenchError("bench_serving wrote no result line (empty --output-file)")
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise BenchError(
                f"result line {number} of {len(lines)} is not complete JSON ({exc.msg} at column "
                f"{exc.colno}): the client was cut off while writing; line starts {line[:80]!r}"
            ) from exc
        if not isinstance(record, dict):
            raise BenchError(f"result line {number} is JSON but not an object: {line[:80]!r}")
        records.append(record)
    return records


def extract_figures(record: dict) -> dict:
    """The figures epforge reports, from one bench_serving result record.

    Raises BenchError listing the missing or non-numeric required figures (an incomplete run).
    Non-finite numbers (request_rate inf) become strings so the facts stay strict JSON.
    """
    figures = {}
    for name, key in FIGURE_KEYS.items():
        value = record.get(key)
        if isinstance(value, bool) or (value is not None and not isinstance(value, int | float)):
            value = None
        figures[name] = value
    missing = [n for n in REQUIRED_FIGURES if figures.get(n) is None]
    if missing:
        raise BenchError(
            "result record is incomplete: missing or non-numeric "
            + ", ".join(f"{n} ({FIGURE_KEYS[n]})" for n in missing)
        )
    if figures["accept_length"] is not None and figures["accept_length"] <= 0:
        figures["accept_length"] = None
    figures["cached_token_share"] = cached_token_share(record)
    return {k: _finite(v) for k, v in figures.items()}


def cached_token_share(record: dict) -> float | None:
    """The share of the successful requests' prompt tokens the server took from its prefix cache (its own
    meta_info cached_tokens, summed by the client under --cache-report: "cache_report", sglang 0.5.16 and
    0.5.23), or None when the record has no cache report."""
    report = record.get("cache_report")
    if not isinstance(report, dict):
        return None
    prompt, cached = report.get("total_prompt_tokens"), report.get("total_cached_tokens")
    if not isinstance(prompt, int | float) or not isinstance(cached, int | float) or prompt <= 0:
        return None
    return round(float(cached) / float(prompt), 4)


def record_workload(record: dict) -> dict:
    """The workload as the client itself recorded it (to check it ran what was asked)."""
    return {
        "tag": record.get("tag"),
        "dataset": record.get("dataset_name"),
        "input_len": record.get("random_input_len"),
        "output_len": record.get("random_output_len"),
        "range_ratio": _finite(record.get("random_range_ratio")),
        "max_concurrency": record.get("max_concurrency"),
        "request_rate": _finite(record.get("request_rate")),
    }


def check_record_matches(record: dict, workload: dict) -> list[str]:
    """Differences between the workload asked for and the one the client recorded."""
    seen = record_workload(record)
    problems = []
    # a file kind's or generated-shared-prefix's record holds the client's random_* defaults, unused
    lengths = ("input_len", "output_len") if workload["dataset"] == "random-ids" else ()
    for key in ("dataset", *lengths, "max_concurrency"):
        if seen[key] is not None and seen[key] != workload[key]:
            problems.append(f"{key}: asked {workload[key]!r}, client ran {seen[key]!r}")
    if seen["tag"] is not None and seen["tag"] != workload["name"]:
        problems.append(f"tag: asked {workload['name']!r}, client recorded {seen['tag']!r}")
    return problems


def expected_output(workload: dict, extra_args=()) -> dict:
    """What a run of this workload must produce: every request completed and, because bench_serving sends
    its random datasets with ignore_eos (unless --disable-ignore-eos), at least
    num_prompts x output_len x range_ratio generated tokens (exactly num_prompts x output_len at ratio 1.0,
    sglang/bench_serving.py: output lengths are drawn from [output_len x ratio, output_len])."""
    ignores_eos = "--disable-ignore-eos" not in flag_names(extra_args)
    # a file kind's replies are cut at exactly output_len (--sharegpt-output-len); range_ratio is random-ids'
    ratio = 1.0 if workload["dataset"] in FILE_DATASETS else float(workload["range_ratio"])
    per_request = max(1, int(workload["output_len"] * ratio))
    return {
        "completed": int(workload["num_prompts"]),
        "min_output_tokens": int(workload["num_prompts"]) * (per_request if ignores_eos else 1),
        "ignores_eos": ignores_eos,
    }


def check_validity(figures: dict, workload: dict, extra_args=()) -> tuple[str, list[str], dict]:
    """(status, reasons, expected) of a run that wrote a complete result line.

    status: 'failed' when no token was generated (never a measurement), 'invalid' when fewer requests
    completed or fewer tokens came back than the workload asked for (the figures then describe another,
    smaller load), else 'ok'. Each reason names the figure, what was asked and what came back.
    """
    expected = expected_output(workload, extra_args)
    completed = figures.get("completed")
    tokens = figures.get("total_output_tokens")
    if not tokens:
        return (
            "failed",
            [
                f"no output tokens were generated (total_output_tokens {tokens!r}, "
                f"{completed!r} of {expected['completed']} requests completed)"
            ],
            expected,
        )
    reasons = []
    if completed is None or completed < expected["completed"]:
        reasons.append(f"completed {completed} of {expected['completed']} requests")
    if tokens < expected["min_output_tokens"]:
        how = (
            f"num_prompts {workload['num_prompts']} x output_len {workload['output_len']}"
            + (f" x range_ratio {workload['range_ratio']}" if float(workload["range_ratio"]) < 1 else "")
            if expected["ignores_eos"]
            else f"one per request ({workload['num_prompts']})"
        )
        reasons.append(
            f"generated {tokens} output tokens, fewer than the {expected['min_output_tokens']} "
            f"asked for ({how})"
        )
    reasons += input_length_problems(figures, workload)
    return ("invalid" if reasons else "ok"), reasons, expected


# A window's prompts as counted (the client's record: the server's own prompt_tokens from sglang 0.5.23's
# client on, the client's count before) may differ this much from what the workload asked, per request.
INPUT_TOKENS_TOLERANCE = 0.10


def counted_input_tokens(record: dict) -> tuple[int, int] | None:
    """(prompt tokens, requests) of the successful requests as --output-details counted them ("input_lens":
    the server's own prompt_tokens from sglang 0.5.23's client on, the dataset's count in 0.5.16); None
    without aligned details. total_input_tokens is always the dataset's count: it cannot show a shortfall."""
    lens, errors = record.get("input_lens"), record.get("errors")
    if not (isinstance(lens, list) and isinstance(errors, list) and len(lens) == len(errors)):
        return None
    counted = [int(n) for n, error in zip(lens, errors, strict=True) if not error and n is not None]
    return (sum(counted), len(counted)) if counted else None


def _counted_per_request(figures: dict, workload: dict) -> float | None:
    counted, requests = figures.get("counted_input_tokens"), figures.get("counted_requests")
    if workload["dataset"] not in GENERATED_DATASETS or not requests or counted is None:
        return None
    return float(counted) / int(requests)


def _bounds(workload: dict) -> tuple[float, float]:
    low = workload["input_len"] * float(workload["range_ratio"]) * (1 - INPUT_TOKENS_TOLERANCE)
    return low, workload["input_len"] * (1 + INPUT_TOKENS_TOLERANCE)


def input_length_problems(figures: dict, workload: dict) -> list[str]:
    """A random-ids or generated-shared-prefix window whose prompts were counted (figure
    counted_input_tokens, over the requests of figure counted_requests) more than INPUT_TOKENS_TOLERANCE away
    from input_len per request (below input_len x range_ratio, or above input_len): it measured another
    context length (a "128k" run that was really 82k). generated-shared-prefix is judged below only: its
    client cannot hit input_len from above (input_length_notes). A file kind's lengths are the file's own:
    not judged here."""
    per_request = _counted_per_request(figures, workload)
    if per_request is None:
        return []
    low, high = _bounds(workload)
    if low <= per_request <= high or (workload["dataset"] == SHARED_PREFIX and per_request > high):
        return []
    drift = per_request / workload["input_len"] - 1
    return [
        f"prompts were counted at {per_request:.0f} tokens per request "
        f"({int(figures['counted_input_tokens'])} in {int(figures['counted_requests'])}), the workload asked "
        f"input_len {workload['input_len']} "
        f"({drift:+.0%}): the window measured another context length"
    ]


def input_length_notes(figures: dict, workload: dict) -> list[str]:
    """What a valid window's figures mean that its workload does not say: generated-shared-prefix prompts
    counted longer than input_len beyond the tolerance. Both pinned releases' client makes that text by
    decoding random token ids and the tokenizer encodes the text again (gen_prompt,
    sglang/benchmark/datasets/common.py; tests/unit/test_bench_shared_prefix.py reads it in the wheels), so
    a byte-level BPE counts it longer: on the lent H200 (2026-12-04, docs/gpu-runs.md) 384 + 128 asked came
    back as 427.5 + 143.9, 573 per request (+12 %). Every run of one seed sends the same text, so runs
    compare; the note says which context length the figures are for."""
    per_request = _counted_per_request(figures, workload)
    if per_request is None or workload["dataset"] != SHARED_PREFIX or per_request <= _bounds(workload)[1]:
        return []
    drift = per_request / workload["input_len"] - 1
    return [
        f"{workload['name']}: prompts were counted at {per_request:.0f} tokens per request, {drift:+.0%} "
        f"over input_len {workload['input_len']}: the client makes {SHARED_PREFIX} text from random token "
        "ids decoded and encoded again, which this tokenizer counts longer; the figures are for "
        f"{per_request:.0f}-token prompts"
    ]


# -------------------------------------------------------------------------------------- failure classes

# (class, regex, plain explanation) checked in order against the client's output.
FAILURE_SIGNATURES = (
    (
        "client_not_installed",
        re.compile(r"No module named '?(sglang|aiohttp|transformers|torch|triton)"),
        "the bench client's environment lacks SGLang or one of the packages bench_serving imports",
    ),
    (
        "tokenizer_missing",
        re.compile(
            r"(Can't load tokenizer|Repository Not Found|is not a local folder and "
            r"is not a valid model identifier|We couldn't connect to)"
        ),
        "bench_serving could not load a tokenizer offline: pass a local tokenizer directory",
    ),
    (
        "server_not_ready",
        re.compile(r"Server at \S+ is not ready"),
        "the server did not answer /v1/models within the ready-check timeout",
    ),
    (
        "connection_refused",
        re.compile(r"(Connection refused|ClientConnectorError|Cannot connect to host)"),
        "nothing listens at the server URL (server stopped or crashed)",
    ),
    (
        "warmup_failed",
        re.compile(r"(Warmup failed|Initial test run failed)"),
        "the warm-up request failed: the server rejects or cannot serve the workload",
    ),
    (
        "unauthorized",
        re.compile(r"(401|403)\b.*(Unauthorized|Forbidden)|Invalid API key", re.IGNORECASE),
        "the server requires an API key the client did not send",
    ),
    (
        "server_error",
        re.compile(r"(Internal Server Error|\b500\b|CUDA out of memory|NCCL error)"),
        "the server failed while serving requests",
    ),
)


def classify_failure(output: str, rc: int | None) -> tuple[str, str]:
    """(class, explanation) of a failed benchmark from the client's output and exit code."""
    if rc == 124:
        return "timeout", "the client did not finish within the timeout (server hung or too slow)"
    for name, pattern, explanation in FAILURE_SIGNATURES:
        if pattern.search(output or ""):
            return name, explanation
    return "client_failed", "bench_serving failed; see the log tail"
