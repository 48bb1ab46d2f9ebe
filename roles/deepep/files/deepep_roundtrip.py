"""DeepEP GPU verify: a dispatch + combine round trip across the GPUs of one host, checked and timed.

Run by the deepep role (module deepep_gpu_verify) with the env's Python:
    python deepep_roundtrip.py --num-processes 2 --out result.json [--modes normal,low_latency]

normal:       intranode dispatch (bf16 tokens with top-k routing) then combine. Every token that reaches k
              ranks comes back as k times itself (combine adds without weights), so combined / k == x.
low_latency:  the NVSHMEM low-latency kernels SGLang uses for decode (and on PCIe hosts): dispatch to
              experts, combine with top-k weights; combined == x * sum(valid weights).
Latency: CUDA events around one dispatch+combine, after warm-up, mean and min over the timed iterations
(rank 0's view; every rank takes part). Writes one JSON object; exit code 0 only if every mode passed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback

import deep_ep
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(fn, warmup: int, iters: int) -> tuple[float, float]:
    for _unused in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _unused in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return sum(times) / len(times), min(times)


def rel_diff(x, y) -> float:
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    if float(denom) == 0.0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)


def routed_tokens(shape: dict, seed: int, *, sort_topk: bool):
    """Random bf16 tokens, their top-k experts (by random scores) and top-k weights, seeded per rank."""
    tokens, hidden, topk, experts = shape["tokens"], shape["hidden"], shape["topk"], shape["experts"]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((tokens, hidden), dtype=torch.bfloat16, device="cuda", generator=gen)
    scores = torch.rand((tokens, experts), dtype=torch.float32, device="cuda", generator=gen) + 1
    topk_idx = torch.topk(scores, topk, dim=-1, sorted=sort_topk)[1].to(torch.int64)
    topk_weights = torch.rand((tokens, topk), dtype=torch.float32, device="cuda", generator=gen)
    return x, topk_idx, topk_weights


def mode_result(ok: bool, diff: float, timing: tuple[float, float], wire_bytes: int, shape: dict) -> dict:
    """One mode's JSON: the check, latency (mean, min in us), bandwidth of the bytes moved, the shape."""
    mean_us, min_us = timing
    return {
        "ok": bool(ok),
        "rel_diff": diff,
        "latency_us_mean": round(mean_us, 2),
        "latency_us_min": round(min_us, 2),
        "gbps_mean": round(wire_bytes / mean_us / 1e3, 1),
        **shape,
    }


def normal_mode(args, rank: int, num_ranks: int, group) -> dict:
    tokens, hidden, topk, experts = args.num_tokens, args.hidden, args.num_topk, args.num_experts
    shape = {"tokens": tokens, "hidden": hidden, "topk": topk, "experts": experts}
    buffer = deep_ep.Buffer(group, int(1e9), 0, low_latency_mode=False, explicitly_destroy=True)
    try:
        x, topk_idx, topk_weights = routed_tokens(shape, 1234 + rank, sort_topk=False)
        per_rank, _unused, per_expert, in_rank, _unused = buffer.get_dispatch_layout(topk_idx, experts)

        def roundtrip():
            recv_x, _unused, _unused, _unused, handle, _unused = buffer.dispatch(
                x,
                num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank,
                num_tokens_per_expert=per_expert,
                topk_idx=topk_idx,
                topk_weights=topk_weights,
            )
            combined, _unused, _unused = buffer.combine(recv_x, handle)
            return recv_x, combined

        recv_x, combined = roundtrip()
        torch.cuda.synchronize()
        copies = in_rank.sum(dim=1).clamp(min=1).unsqueeze(1).float()
        diff = rel_diff(combined.float() / copies, x.float())
        # Every rank must receive exactly the tokens routed to it (global count check).
        expect = per_rank.clone()
        dist.all_reduce(expect, group=group)
        count_ok = int(expect[rank].item()) == recv_x.size(0)
        timing = timed(roundtrip, args.warmup, args.iters)
        # NVLink bytes per rank: the received tokens (bf16) come in on dispatch and go back on combine.
        wire = int(recv_x.size(0)) * hidden * 2 * 2
        result = mode_result(diff < 5e-6 and count_ok, diff, timing, wire, shape)
        return {**result, "recv_tokens": int(recv_x.size(0)), "count_ok": count_ok}
    finally:
        buffer.destroy()


def low_latency_mode(args, rank: int, num_ranks: int, group) -> dict:
    tokens, hidden, topk, experts = args.ll_num_tokens, args.hidden, args.num_topk, args.ll_num_experts
    shape = {"tokens": tokens, "hidden": hidden, "topk": topk, "experts": experts}
    rdma_bytes = deep_ep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, num_ranks, experts)
    buffer = deep_ep.Buffer(
        group,
        num_rdma_bytes=rdma_bytes,
        low_latency_mode=True,
        num_qps_per_rank=experts // num_ranks,
        explicitly_destroy=True,
    )
    try:
        x, topk_idx, topk_weights = routed_tokens(shape, 4321 + rank, sort_topk=True)

        def dispatch():
            recv, _count, handle, _unused, _unused = buffer.low_latency_dispatch(
                x, topk_idx, tokens, experts, use_fp8=False, async_finish=False
            )
            return recv, handle

        # Checked once: the experts' output is the received tokens themselves (copied out of the receive
        # buffer, which combine reuses), so combined == x * sum(top-k weights).
        recv, handle = dispatch()
        combined, _unused, _unused = buffer.low_latency_combine(recv.clone(), topk_idx, topk_weights, handle)
        torch.cuda.synchronize()
        ref = x.float() * topk_weights.sum(dim=1, keepdim=True)
        diff = rel_diff(combined.float(), ref)
        # Timed: dispatch + combine of a separate "expert output" tensor, as after a grouped GEMM.
        expert_out = recv.clone()

        def roundtrip():
            _unused, handle = dispatch()
            buffer.low_latency_combine(expert_out, topk_idx, topk_weights, handle)

        timing = timed(roundtrip, args.warmup, args.iters)
        # Bytes on the wire per rank: every (token, expert) pair sends hidden bf16 values each way.
        wire = tokens * topk * hidden * 2 * 2
        return mode_result(diff < 1e-5, diff, timing, wire, shape)
    finally:
        buffer.destroy()


def worker(local_rank: int, num_ranks: int, port: int, args, queue) -> None:
    torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        world_size=num_ranks,
        rank=local_rank,
        device_id=torch.device(f"cuda:{local_rank}"),
    )
    group = dist.new_group(list(range(num_ranks)))

    results = {}
    for mode in args.modes:
        fn = {"normal": normal_mode, "low_latency": low_latency_mode}[mode]
        try:
            results[mode] = fn(args, local_rank, num_ranks, group)
        except Exception as exc:
            results[mode] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback_tail": traceback.format_exc()[-1500:],
            }
        dist.barrier(group=group)
    queue.put((local_rank, results))
    dist.barrier()
    dist.destroy_process_group()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--modes", default="normal,low_latency")
    parser.add_argument("--num-tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--num-topk", type=int, default=8)
    parser.add_argument("--num-experts", type=int, default=256)
    parser.add_argument("--ll-num-tokens", type=int, default=128)
    parser.add_argument("--ll-num-experts", type=int, default=288)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    return args


def collect(queue, procs: list, num_ranks: int) -> dict:
    """rank -> its results, as the workers report them (bounded by DEEPEP_VERIFY_TIMEOUT seconds)."""
    per_rank = {}
    deadline = time.monotonic() + float(os.environ.get("DEEPEP_VERIFY_TIMEOUT", "400"))
    while len(per_rank) < num_ranks and time.monotonic() < deadline:
        try:
            rank, res = queue.get(timeout=5)
            per_rank[rank] = res
        except Exception:  # queue.Empty: keep waiting while the workers live
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    return per_rank


def run_ranks(args) -> tuple[dict, list]:
    """Start one worker per rank, collect their results, end them; return (per_rank, exit codes)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=worker, args=(r, args.num_processes, port, args, queue))
        for r in range(args.num_processes)
    ]
    for proc in procs:
        proc.start()
    per_rank = collect(queue, procs, args.num_processes)
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    return per_rank, [p.exitcode for p in procs]


def mode_entry(mode: str, per_rank: dict, num_ranks: int) -> dict:
    """A mode's result across ranks: rank 0's figures, ok only when every rank reported ok."""
    ranks = [per_rank[r].get(mode, {"ok": False, "error": "no result"}) for r in sorted(per_rank)]
    entry = dict(ranks[0]) if ranks else {"ok": False, "error": "no rank reported"}
    entry["ok"] = bool(ranks) and len(ranks) == num_ranks and all(r.get("ok") for r in ranks)
    entry["per_rank_ok"] = [bool(r.get("ok")) for r in ranks]
    entry["max_rel_diff"] = max((r.get("rel_diff", 1.0) for r in ranks), default=1.0)
    if not entry["ok"] and "error" not in entry:
        errors = [r.get("error") for r in ranks if r.get("error")]
        entry["error"] = errors[0] if errors else "round trip result incorrect"
    return entry


def verify(args, out: dict) -> None:
    """Run the round trips on the GPUs and record each mode's entry (and any error) in out."""
    if torch.cuda.device_count() < args.num_processes:
        out["error"] = f"{args.num_processes} GPUs needed, {torch.cuda.device_count()} visible"
        return
    per_rank, exit_codes = run_ranks(args)
    if len(per_rank) < args.num_processes:
        out["error"] = (
            f"only {len(per_rank)} of {args.num_processes} ranks reported (exit codes {exit_codes})"
        )
    for mode in args.modes:
        out["modes"][mode] = mode_entry(mode, per_rank, args.num_processes)
    out["ok"] = "error" not in out and all(m["ok"] for m in out["modes"].values())


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    out = {
        "num_processes": args.num_processes,
        "device_count": torch.cuda.device_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
        "torch": torch.__version__,
        "modes": {},
        "ok": False,
    }
    verify(args, out)
    out["seconds"] = round(time.monotonic() - started, 1)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=1)
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
