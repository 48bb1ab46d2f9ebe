"""The figures epforge reads from bench_serving's result: one owner of their names, for the module that
measures (sglang_bench) and the tuner that ranks by them (tune_journal)."""

from __future__ import annotations

# Figures epforge reports, each read from one key of bench_serving's result JSON line
# (sglang/benchmark/serving.py, 0.5.23: the `result` dict written to --output-file).
FIGURE_KEYS = {
    "completed": "completed",
    "duration_s": "duration",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "request_throughput": "request_throughput",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    "total_throughput": "total_throughput",
    "ttft_mean_ms": "mean_ttft_ms",
    "ttft_median_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "tpot_mean_ms": "mean_tpot_ms",
    "tpot_median_ms": "median_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
    "itl_mean_ms": "mean_itl_ms",
    "itl_median_ms": "median_itl_ms",
    "itl_p99_ms": "p99_itl_ms",
    "e2e_mean_ms": "mean_e2e_latency_ms",
    "e2e_median_ms": "median_e2e_latency_ms",
    "e2e_p99_ms": "p99_e2e_latency_ms",
    "concurrency": "concurrency",
    "accept_length": "accept_length",
    "max_output_tokens_per_s": "max_output_tokens_per_s",
}
