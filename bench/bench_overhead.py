#!/usr/bin/env python3
"""Harness overhead of sglang_bench: the module (through `ansible localhost -m sglang_bench`, parse + history
append included) versus SGLang's bench_serving run directly, against the same SGLang stand-in server (a TEST
DOUBLE), same workload and seed, interleaved A/B so machine load hits both alike.

Reports the wall-time ratio (median of pairs; target <= 1.05) and checks that the figures are the same:
- the workload-determined figures (completed, total input/output tokens) are identical between the two runs;
- the module's figures are exactly what the shared parser reads from the module's own result file, and the
  direct run's file parses to the same set of figure keys.

Usage: .venv/bin/python bench/bench_overhead.py [--pairs 3] [--prompts 64] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
sys.path.insert(0, str(ROOT / "collections"))
import bench_env  # noqa: E402

from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (  # noqa: E402
    bench_argv,
    extract_figures,
    normalize_workload,
    parse_result_lines,
)

DETERMINED = ("completed", "total_input_tokens", "total_output_tokens")


def run_direct(python: Path, url: str, tok: Path, workload: dict, out: Path) -> tuple[float, dict]:
    argv = bench_argv(str(python), url, workload, str(out), tokenizer=str(tok))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"direct bench_serving failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return seconds, extract_figures(parse_result_lines(out.read_text())[-1])


def run_module(python: Path, url: str, tok: Path, workload: dict, work: Path) -> tuple[float, dict, dict]:
    args = {
        "python": str(python),
        "base_url": url,
        "tokenizer": str(tok),
        "workload": workload,
        "work_dir": str(work / "bench"),
        "log_path": str(work / "bench.log"),
        "fact_path": str(work / "epforge_bench.fact"),
        "record": {"label": "overhead"},
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_NOCOLOR="1",
    )
    ansible = Path(sys.executable).parent / "ansible"
    argv = [
        str(ansible),
        "localhost",
        "-c",
        "local",
        "-i",
        "localhost,",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        "epforge.ep.sglang_bench",
        "-a",
        json.dumps(args),
    ]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False)
    seconds = time.monotonic() - started
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as exc:
        raise RuntimeError(f"ansible printed no result: {proc.stdout[-1500:]}{proc.stderr[-1500:]}") from exc
    if result.get("failed"):
        raise RuntimeError(f"sglang_bench failed: {result.get('msg')}\n{result.get('log_tail', '')}")
    return seconds, result["figures"], result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--json", default="")
    parser.add_argument(
        "--token-delay-ms",
        default="10",
        help="stand-in milliseconds per generated token (a server that takes time, like a real one)",
    )
    args = parser.parse_args()
    python = bench_env.bench_client_python()
    work = Path(tempfile.mkdtemp(prefix="epforge-overhead-"))
    tok = bench_env.make_tokenizer_with(python, work / "tokenizer")
    workload = normalize_workload(
        {
            "name": "overhead",
            "input_len": 256,
            "output_len": 64,
            "num_prompts": args.prompts,
            "max_concurrency": 16,
        }
    )
    proc, url = bench_env.start_standin(
        str(tok), log_path=work / "standin.log", env={"SGLANG_STANDIN_TOKEN_DELAY_MS": args.token_delay_ms}
    )
    pairs = []
    try:
        for i in range(args.pairs):
            d_s, d_fig = run_direct(python, url, tok, workload, work / f"direct-{i}.jsonl")
            m_s, m_fig, m_res = run_module(python, url, tok, workload, work)
            reparsed = extract_figures(parse_result_lines(Path(m_res["result_file"]).read_text())[-1])
            same_parse = all(m_fig[k] == reparsed[k] for k in reparsed)
            same_workload = all(d_fig[k] == m_fig[k] for k in DETERMINED)
            pairs.append(
                {
                    "direct_s": round(d_s, 2),
                    "module_s": round(m_s, 2),
                    "ratio": round(m_s / d_s, 3),
                    # the client's own run inside the module: what is left of module_s is the harness
                    "module_client_s": m_res.get("seconds"),
                    "harness_s": round(m_s - float(m_res.get("seconds") or 0), 2),
                    "direct_output_tok_s": round(d_fig["output_throughput"], 1),
                    "module_output_tok_s": round(m_fig["output_throughput"], 1),
                    "identical_determined_figures": same_workload,
                    "module_figures_equal_its_file": same_parse,
                    "same_figure_keys": set(d_fig) <= set(m_fig),
                }
            )
            print(json.dumps(pairs[-1]), flush=True)
    finally:
        bench_env.stop(proc)
    ratio = statistics.median(p["ratio"] for p in pairs)
    delta = statistics.median(p["module_s"] - p["direct_s"] for p in pairs)
    summary = {
        "pairs": pairs,
        "median_ratio": ratio,
        "median_delta_s": round(delta, 2),
        "median_harness_s": statistics.median(p["harness_s"] for p in pairs),
        "ratio_range": [min(p["ratio"] for p in pairs), max(p["ratio"] for p in pairs)],
        "target": 1.05,
        "meets_target": ratio <= 1.05,
        "figures_ok": all(
            p["identical_determined_figures"] and p["module_figures_equal_its_file"] and p["same_figure_keys"]
            for p in pairs
        ),
        "workload": workload,
        "token_delay_ms": args.token_delay_ms,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(
        f"median wall-time ratio sglang_bench / direct bench_serving: {ratio:.3f} (target <= 1.05; pairs "
        f"{summary['ratio_range'][0]:.3f}..{summary['ratio_range'][1]:.3f}), median extra {delta:.2f} s, "
        "of which "
        f"harness (ansible + module outside the client) {summary['median_harness_s']:.2f} s; "
        f"figures consistent: {summary['figures_ok']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if summary["figures_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
