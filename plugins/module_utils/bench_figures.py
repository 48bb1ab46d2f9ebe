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

# A window's speculative acceptance as a distribution over its requests (each request's spec_accept_length,
# kept by the one-client driver: the release writes only the server's average, accept_length).
ACCEPT_DISTRIBUTION_KEYS = ("accept_length_p10", "accept_length_p50", "accept_length_p90", "accept_requests")


def accept_distribution(values) -> dict:
    """{accept_length_p10, _p50, _p90, accept_requests} of the requests' acceptance lengths ({} if none)."""
    found = sorted(float(v) for v in values or [] if isinstance(v, (int, float)) and v > 0)
    if not found:
        return {}

    def rank(q: float) -> float:  # linear between the closest ranks (numpy's default percentile)
        position = q * (len(found) - 1)
        low = int(position)
        high = min(low + 1, len(found) - 1)
        return round(found[low] + (found[high] - found[low]) * (position - low), 3)

    return {
        "accept_length_p10": rank(0.1),
        "accept_length_p50": rank(0.5),
        "accept_length_p90": rank(0.9),
        "accept_requests": len(found),
    }
