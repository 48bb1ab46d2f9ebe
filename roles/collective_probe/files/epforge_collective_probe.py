#!/usr/bin/env python3
"""epforge collective probe: per-call latency of NCCL allreduce and all_to_all at decode-sized messages.

Runs in the ML env (torch with NCCL), one process per GPU (torch.multiprocessing, no torchrun needed), and
prints ONE JSON object on stdout (also written to --out). Every rank builds a bf16 tensor of
[tokens x hidden] (hidden 7168 = DeepSeek-V3/Kimi-K2 width) and times:

  allreduce   dist.all_reduce(x) on [tokens x hidden]: what TP does twice per layer.
  all_to_all  dist.all_to_all_single on [world x tokens x hidden]: each rank sends every rank (itself
              included) one [tokens x hidden] block, the upper bound of an EP dispatch (or combine) of
              all local tokens; EP does two per MoE layer.

Modes: eager (one call between two CUDA events, `iters` times: mean, median, p99 per call) and graph
(`graph_calls` calls captured in one CUDA graph, replayed `iters` times: time per call = replay / calls),
which is how SGLang runs decode. A mode that fails (e.g. capture unsupported) is reported with its error,
the other modes still run.

With --curve-sizes, each op is also timed (eager) on flat messages of those sizes (e.g. 1 KiB to 64 MiB): the
latency curve, in "curve" (per op and size, the slowest rank's figures).

Exit codes: 0 measured, 3 no usable CUDA device (JSON says why), 1 failure (JSON or stderr says why).
`--backend gloo --device cpu` runs the same code on CPU processes (tests without a GPU; no graphs).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
import traceback

NO_GPU_RC = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world-size", type=int, default=0, help="ranks (default: every visible GPU)")
    p.add_argument("--tokens", default="1,8,64,512", help="comma-separated token counts")
    p.add_argument(
        "--curve-sizes",
        default="",
        help="comma-separated message sizes in bytes for the latency curve (eager)",
    )
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--ops", default="allreduce,all_to_all")
    p.add_argument("--modes", default="eager,graph")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--graph-calls", type=int, default=10, help="calls captured per CUDA graph")
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--timeout", type=float, default=300, help="seconds for the whole probe")
    p.add_argument("--out", default="", help="also write the JSON here")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def summarize(samples_us: list[float]) -> dict:
    ordered = sorted(samples_us)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return {
        "mean_us": round(statistics.fmean(ordered), 2),
        "median_us": round(statistics.median(ordered), 2),
        "p99_us": round(p99, 2),
        "min_us": round(ordered[0], 2),
        "samples": len(ordered),
    }


class RankTimer:
    """Times collective calls on one rank: CUDA events on a GPU (eager calls, or calls replayed from one
    CUDA graph), perf_counter on CPU."""

    def __init__(self, torch, dist, args, device, use_cuda: bool) -> None:
        self.torch, self.dist, self.args, self.device, self.use_cuda = torch, dist, args, device, use_cuda

    def make_call(self, op: str, tokens: int):
        """(call, bytes one rank sends) for op on [tokens x hidden]."""
        torch, dist, args = self.torch, self.dist, self.args
        if op == "allreduce":
            x = torch.randn(tokens, args.hidden, dtype=getattr(torch, args.dtype), device=self.device)
            return (lambda: dist.all_reduce(x)), x.numel() * x.element_size()
        if op == "all_to_all":
            x = torch.randn(
                args.world_size * tokens, args.hidden, dtype=getattr(torch, args.dtype), device=self.device
            )
            y = torch.empty_like(x)
            return (lambda: dist.all_to_all_single(y, x)), x.numel() * x.element_size()
        raise ValueError(f"unknown op {op}")

    def make_sized_call(self, op: str, nbytes: int):
        """(call, bytes one rank sends) for op on a flat message of about nbytes (the curve): allreduce of a
        tensor of that size; all_to_all of that size split evenly over the ranks."""
        torch, dist, args = self.torch, self.dist, self.args
        dtype = getattr(torch, args.dtype)
        elem = torch.tensor([], dtype=dtype).element_size()
        numel = max(1, nbytes // elem)
        if op == "all_to_all":
            numel = max(args.world_size, numel // args.world_size * args.world_size)
        x = torch.randn(numel, dtype=dtype, device=self.device)
        if op == "allreduce":
            return (lambda: dist.all_reduce(x)), numel * elem
        if op == "all_to_all":
            y = torch.empty_like(x)
            return (lambda: dist.all_to_all_single(y, x)), numel * elem
        raise ValueError(f"unknown op {op}")

    def measure_curve(self, op: str, nbytes: int, result: dict) -> None:
        """One point of the latency curve (eager calls): the size asked for, the bytes sent, the figures."""
        try:
            call, sent = self.make_sized_call(op, nbytes)
            for _ in range(self.args.warmup):
                call()
            self.sync()
            row = {"op": op, "size": nbytes, "bytes": sent}
            result["curve"].append({**row, **summarize(self.timed_us(call))})
        except Exception as exc:
            result["errors"].append(
                {"op": op, "mode": "curve", "size": nbytes, "error": f"{type(exc).__name__}: {exc}"}
            )
            if self.use_cuda:
                self.torch.cuda.synchronize()
        self.sync()

    def sync(self) -> None:
        if self.use_cuda:
            self.torch.cuda.synchronize()
        self.dist.barrier()

    def event_pairs(self) -> list:
        cuda = self.torch.cuda
        return [
            (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(self.args.iters)
        ]

    def timed_us(self, call, calls_per_run: int = 1) -> list[float]:
        """Microseconds per call of `iters` runs of call (each run makes calls_per_run calls)."""
        if not self.use_cuda:
            samples = []
            for _ in range(self.args.iters):
                t0 = time.perf_counter()
                call()
                samples.append((time.perf_counter() - t0) * 1e6)
            return samples
        events = self.event_pairs()
        for start, end in events:
            start.record()
            call()
            end.record()
        self.torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 / calls_per_run for s, e in events]

    def graph_us(self, call) -> list[float]:
        """Per-call time of graph_calls calls captured in one CUDA graph (how SGLang runs decode)."""
        torch, cuda = self.torch, self.torch.cuda
        stream = cuda.Stream()
        stream.wait_stream(cuda.current_stream())
        with cuda.stream(stream):
            for _ in range(3):
                call()
        cuda.current_stream().wait_stream(stream)
        cuda.synchronize()
        graph = cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(self.args.graph_calls):
                call()
        cuda.synchronize()
        for _ in range(3):
            graph.replay()
        cuda.synchronize()
        self.dist.barrier()
        samples = self.timed_us(graph.replay, self.args.graph_calls)
        del graph
        return samples

    def samples(self, mode: str, call) -> list[float]:
        if mode == "eager":
            return self.timed_us(call)
        if mode == "graph":
            return self.graph_us(call)
        raise ValueError(f"unknown mode {mode}")

    def measure(self, op: str, tokens: int, modes: list[str], result: dict) -> None:
        """One row per mode into result; a mode that fails is an error entry, the others still run."""
        call, nbytes = self.make_call(op, tokens)
        for _ in range(self.args.warmup):
            call()
        self.sync()
        for mode in modes:
            try:
                row = {"op": op, "mode": mode, "tokens": tokens, "bytes": nbytes}
                result["results"].append({**row, **summarize(self.samples(mode, call))})
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                result["errors"].append({"op": op, "mode": mode, "tokens": tokens, "error": error})
                if self.use_cuda:
                    self.torch.cuda.synchronize()
            self.sync()


def worker(rank: int, args, port: int, queue) -> None:
    import torch  # noqa: PLC0415 - only the rank processes need torch
    import torch.distributed as dist  # noqa: PLC0415

    result = {"rank": rank, "results": [], "curve": [], "errors": []}
    try:
        use_cuda = args.device == "cuda"
        if use_cuda:
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=args.world_size,
            **({"device_id": device} if use_cuda else {}),
        )
        modes = [m for m in args.modes.split(",") if m]
        if not use_cuda and "graph" in modes:
            result["errors"].append({"mode": "graph", "error": "CUDA graphs need a CUDA device"})
            modes = [m for m in modes if m != "graph"]
        timer = RankTimer(torch, dist, args, device, use_cuda)
        for op in [o for o in args.ops.split(",") if o]:
            for tokens in [int(t) for t in args.tokens.split(",") if t.strip()]:
                timer.measure(op, tokens, modes, result)
            for size in [int(b) for b in args.curve_sizes.split(",") if b.strip()]:
                timer.measure_curve(op, size, result)
        result["torch"] = torch.__version__
        if use_cuda:
            result["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
            result["gpu_name"] = torch.cuda.get_device_name(rank)
        dist.destroy_process_group()
    except Exception as exc:
        result["fatal"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=8)
    queue.put(result)


def merge(rank_results: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per (op, mode, tokens): the slowest rank's figures (a collective ends when its last rank does)."""
    rows: dict[tuple, dict] = {}
    for rr in rank_results:
        for row in rr["results"]:
            key = (row["op"], row["mode"], row["tokens"])
            best = rows.get(key)
            if best is None or row["mean_us"] > best["mean_us"]:
                rows[key] = dict(row)
    errors = [dict(e, rank=rr["rank"]) for rr in rank_results for e in rr["errors"]]
    return sorted(rows.values(), key=lambda r: (r["op"], r["mode"], r["tokens"])), errors


def merge_curve(rank_results: list[dict]) -> list[dict]:
    """Per (op, size): the slowest rank's point of the curve."""
    points: dict[tuple, dict] = {}
    for rr in rank_results:
        for row in rr.get("curve", []):
            key = (row["op"], row["size"])
            if key not in points or row["median_us"] > points[key]["median_us"]:
                points[key] = dict(row)
    return sorted(points.values(), key=lambda r: (r["op"], r["size"]))


def emit(payload: dict, out: str) -> None:
    text = json.dumps(payload, sort_keys=True)
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text, flush=True)


def base_payload(args) -> dict:
    """What every answer carries: the inputs and the NCCL environment."""
    return {
        "probe": "epforge_collective_probe",
        "version": 1,
        "hidden": args.hidden,
        "dtype": args.dtype,
        "iters": args.iters,
        "warmup": args.warmup,
        "graph_calls": args.graph_calls,
        "backend": args.backend,
        "device": args.device,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "all_to_all_layout": "each rank sends every rank one [tokens x hidden] block",
    }


def settle_world_size(args, torch) -> tuple[int, dict] | None:
    """Set args.world_size (0: every visible GPU, 2 on CPU); (exit code, answer) when no probe can run."""
    if args.device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            reason = (
                "no usable CUDA device (torch.cuda.is_available() "
                f"is False; torch {torch.__version__}, built for CUDA {torch.version.cuda})"
            )
            return NO_GPU_RC, {"status": "skipped", "reason": reason}
        if args.world_size == 0:
            args.world_size = count
        if args.world_size > count:
            return 1, {"status": "failed", "reason": f"world size {args.world_size} > {count} visible GPUs"}
    elif args.world_size == 0:
        args.world_size = 2
    if args.world_size < 2:
        reason = "one GPU: no collective to measure (needs at least 2 ranks)"
        return NO_GPU_RC, {"status": "skipped", "world_size": args.world_size, "reason": reason}
    return None


def collect(procs: list, queue, args, deadline: float, rank_results: list[dict]) -> None:
    """Every rank's result into rank_results; TimeoutError past the deadline, RuntimeError when a rank
    process died (rank_results then holds those that reported)."""
    while len(rank_results) < args.world_size:
        remaining = deadline - time.time()
        if remaining <= 0:
            raise TimeoutError
        try:
            rank_results.append(queue.get(timeout=min(remaining, 5)))
        except Exception:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"rank process exited with {dead[0].exitcode}") from None


def run_ranks(mp, args, started: float) -> tuple[list[dict], str]:
    """Run one process per rank: their results sorted by rank, and why they did not all finish ("" when
    they did)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(rank, args, port, queue)) for rank in range(args.world_size)]
    for proc in procs:
        proc.start()
    rank_results: list[dict] = []
    try:
        collect(procs, queue, args, started + args.timeout, rank_results)
    except (TimeoutError, RuntimeError) as exc:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        return rank_results, f"timed out after {args.timeout} s" if isinstance(exc, TimeoutError) else str(
            exc
        )
    for proc in procs:
        proc.join(timeout=30)
    return sorted(rank_results, key=lambda r: r["rank"]), ""


def report(payload: dict, rank_results: list[dict]) -> tuple[int, dict]:
    """The merged answer (the slowest rank per row) and its exit code."""
    fatal = [r for r in rank_results if r.get("fatal")]
    rows, errors = merge(rank_results)
    first = rank_results[0]
    payload.update(
        results=rows,
        curve=merge_curve(rank_results),
        errors=errors,
        torch=first.get("torch", ""),
        nccl=first.get("nccl", ""),
        gpu_name=first.get("gpu_name", ""),
    )
    if fatal:
        payload.update(
            status="failed",
            reason=f"rank {fatal[0]['rank']}: {fatal[0]['fatal']}",
            traceback=fatal[0].get("traceback", ""),
        )
        return 1, payload
    payload["status"] = "ok" if rows else "failed"
    if not rows:
        payload["reason"] = "no measurement succeeded: " + "; ".join(e["error"] for e in errors[:3])
    return (0 if rows else 1), payload


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.time()
    base = base_payload(args)
    try:
        import torch  # noqa: PLC0415 - a missing torch is reported as JSON
        import torch.multiprocessing as mp  # noqa: PLC0415
    except ImportError as exc:
        emit({**base, "status": "failed", "reason": f"torch is not importable here: {exc}"}, args.out)
        return 1
    refused = settle_world_size(args, torch)
    if refused:
        emit({**base, **refused[1]}, args.out)
        return refused[0]
    rank_results, reason = run_ranks(mp, args, started)
    if reason:
        failed = {"status": "failed", "world_size": args.world_size, "reason": reason}
        emit({**base, **failed, "ranks_reported": len(rank_results)}, args.out)
        return 1
    payload = {**base, "world_size": args.world_size}
    rc, payload = report(payload, rank_results)
    payload["seconds"] = round(time.time() - started, 1)
    emit(payload, args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
