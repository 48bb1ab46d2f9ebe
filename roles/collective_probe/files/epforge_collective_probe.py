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

SGLang's PCIe-IPC all-reduce: with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE on in the environment (the variant
`pcie_ipc`), each allreduce goes the way SGLang 0.5.23 sends it (sglang/srt/distributed/device_communicators/
pcie_ipc_ar.py): to FlashInfer's PcieIpcAllReduceWorkspace (flashinfer/comm/pcie_ipc_ar.py, FlashInfer 0.7.2)
when the tensor is bf16, contiguous, at least 2-D, within the workspace's decode-sized bound and supported by
the workspace, over 2, 4 or 8 ranks; else through NCCL. Every row and curve point says which path served
it ("path": pcie_ipc, or the backend). all_to_all stays on NCCL. Where the all-reduce cannot act at all
(FlashInfer without the workspace class, another world size, CPU processes, messages that are not bf16, a
workspace that cannot be built) the answer is status skipped with the reasons, exit code 4: SGLang would keep
every all-reduce on NCCL, which another variant measures.

Exit codes: 0 measured, 3 no usable CUDA device (JSON says why), 4 this variant's all-reduce cannot act here
(JSON says why), 1 failure (JSON or stderr says why).
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
VARIANT_SKIPPED_RC = 4

# SGLang's PCIe-IPC all-reduce, as SGLang 0.5.23 selects it (sglang/srt/distributed/device_communicators/
# pcie_ipc_ar.py: PcieIpcCommunicator.should_pcie_ipc_ar, _ensure_workspace) and FlashInfer 0.7.2 serves it
# (flashinfer/comm/pcie_ipc_ar.py). The names, world sizes and spellings are checked against those wheels and
# data/sglang_env/0.5.23.json by tests/unit/test_collective_probe_pcie_ipc.py.
PCIE_IPC_SWITCH = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
PCIE_IPC_MAX_NUMEL = "SGLANG_PCIE_IPC_MAX_NUMEL"
ENV_TRUE = ("true", "1", "yes", "y")  # SGLang's EnvBool, lower-cased
ENV_FALSE = ("false", "0", "no", "n")
PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # the kernels build IPC channels for these only
PCIE_IPC_DTYPE = "bfloat16"  # SGLang hands only bf16 to them (FlashInfer would take float16 too)


def pcie_ipc_switch(environ) -> bool:
    """Whether SGLANG_ENABLE_PCIE_IPC_ALLREDUCE switches the PCIe-IPC all-reduce on (EnvBool's spellings;
    ValueError for a value SGLang would refuse)."""
    value = str(environ.get(PCIE_IPC_SWITCH, "")).strip().lower()
    if value in ENV_TRUE:
        return True
    if value in ENV_FALSE or value == "":
        return False
    raise ValueError(f"{PCIE_IPC_SWITCH}={value!r} is not a boolean SGLang reads ({', '.join(ENV_TRUE)})")


def pcie_ipc_bound(environ, hidden: int, tokens: list[int]) -> tuple[int, str]:
    """(max_numel of the workspace, where it comes from): SGLANG_PCIE_IPC_MAX_NUMEL when set and not 0, else
    the widest decode reduction this probe issues (its largest token count x hidden), as SGLang sizes it from
    the widest captured decode batch."""
    raw = str(environ.get(PCIE_IPC_MAX_NUMEL, "")).strip()
    try:
        override = int(raw) if raw else 0
    except ValueError:
        raise ValueError(f"{PCIE_IPC_MAX_NUMEL}={raw!r} is not an integer") from None
    if override:
        return override, PCIE_IPC_MAX_NUMEL
    return max(tokens) * hidden, f"largest tokens ({max(tokens)}) x hidden ({hidden})"


def pcie_ipc_unavailable(world_size: int, device: str, dtype: str, missing_class: str) -> list[str]:
    """Why the PCIe-IPC all-reduce can serve none of this probe's all-reduces (empty: it can serve some)."""
    reasons = []
    if missing_class:
        reasons.append(f"FlashInfer here has no PcieIpcAllReduceWorkspace ({missing_class})")
    if world_size not in PCIE_IPC_WORLD_SIZES:
        reasons.append(f"world size {world_size}: its kernels serve 2, 4 or 8 ranks")
    if device != "cuda":
        reasons.append(f"it needs CUDA devices, this run uses {device}")
    if dtype != PCIE_IPC_DTYPE:
        reasons.append(f"SGLang gives it bf16 tensors only, the messages here are {dtype}")
    return reasons


def pcie_ipc_serves(
    dtype: str, world_size: int, *, ndim: int, contiguous: bool, numel: int, max_numel: int
) -> tuple[bool, str]:
    """(whether SGLang would hand this all-reduce to the PCIe-IPC kernels, why not): bf16, 2/4/8 ranks, a
    contiguous tensor of at least 2 dimensions, within the workspace bound. The workspace's own supports()
    has the last word on a tensor that passes (it may refuse a message too small to split)."""
    if world_size not in PCIE_IPC_WORLD_SIZES:
        return False, f"world size {world_size}"
    if dtype != PCIE_IPC_DTYPE:
        return False, f"{dtype}, not bf16"
    if ndim < 2:
        return False, f"{ndim}-D, SGLang hands it 2-D activations and up"
    if not contiguous:
        return False, "not contiguous"
    if numel > max_numel:
        return False, f"{numel} elements, over the workspace bound {max_numel}"
    return True, ""


def tune_rows(rows: int) -> tuple[int, ...]:
    """The batch rows to autotune for a workspace of `rows` rows: powers of two up to 512 that fit, and rows
    itself (SGLang 0.5.23 pcie_ipc_ar.py, _tune_batches)."""
    ladder = {1 << exp for exp in range(10) if 1 << exp <= rows}
    return tuple(sorted(ladder | ({rows} if rows >= 1 else set())))


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


class PcieIpcAllReduce:
    """One rank's FlashInfer PCIe-IPC workspace, built, tuned and called the way SGLang 0.5.23 does it
    (pcie_ipc_ar.py: PcieIpcCommunicator._ensure_workspace, _tune, pcie_ipc_all_reduce), over the default
    process group. Every rank builds it with the same arguments: its constructor is a collective."""

    def __init__(self, torch, dist, args) -> None:
        # only with the switch on (FlashInfer 0.7.2 flashinfer/comm/__init__.py exports both)
        from flashinfer.comm import PcieIpcAllReduceWorkspace, pcie_ipc_default_cache_path  # noqa: PLC0415

        self.torch, self.max_numel = torch, args.pcie_ipc_max_numel
        rows = self.max_numel // args.hidden
        # tune_cache: FlashInfer's default file, which a server on this host reads at its start too
        self.workspace = PcieIpcAllReduceWorkspace(
            group=dist.group.WORLD,
            max_numel=self.max_numel,
            dtype=torch.bfloat16,
            tune_batches=tune_rows(rows),
            tune_cache=pcie_ipc_default_cache_path(args.world_size),
        )
        self.stream = None
        self.tuned, self.tune_error = 0, ""
        try:
            # SGLang tunes on its gloo (CPU) group; without tuning the kernels run FlashInfer's seed policy
            tuned = self.workspace.tune(
                [args.hidden], dtype=torch.bfloat16, tune_group=dist.new_group(backend="gloo")
            )
            self.tuned = len(tuned or {})
        except Exception as exc:
            self.tune_error = f"{type(exc).__name__}: {exc} (the kernels keep FlashInfer's seed policy)"

    def serves(self, x, world_size: int) -> bool:
        """SGLang's choice for tensor x: the rule above, then the workspace's own supports()."""
        dtype = str(x.dtype).removeprefix("torch.")
        ok, _why = pcie_ipc_serves(
            dtype,
            world_size,
            ndim=x.dim(),
            contiguous=x.is_contiguous(),
            numel=x.numel(),
            max_numel=self.max_numel,
        )
        return ok and bool(self.workspace.supports(x))

    def all_reduce(self, x):
        """Out of place, on the calling stream: a workspace serves one stream, so the binding moves with the
        caller (graph capture and replay run on other streams than eager calls)."""
        stream = self.torch.cuda.current_stream()
        if stream != self.stream:
            self.workspace.rebind_stream()
            self.stream = stream
        return self.workspace.all_reduce(x)

    def destroy(self) -> None:
        self.workspace.destroy()


class RankTimer:
    """Times collective calls on one rank: CUDA events on a GPU (eager calls, or calls replayed from one
    CUDA graph), perf_counter on CPU."""

    def __init__(self, torch, dist, args, device, use_cuda: bool, *, pcie_ipc=None) -> None:
        self.torch, self.dist, self.args, self.device, self.use_cuda = torch, dist, args, device, use_cuda
        self.pcie_ipc = pcie_ipc

    def allreduce_call(self, x):
        """(call, path) for an all-reduce of x: the PCIe-IPC kernels where SGLang would use them, else the
        process group's backend."""
        if self.pcie_ipc is not None and self.pcie_ipc.serves(x, self.args.world_size):
            return (lambda: self.pcie_ipc.all_reduce(x)), "pcie_ipc"
        return (lambda: self.dist.all_reduce(x)), self.args.backend

    def make_call(self, op: str, tokens: int):
        """(call, bytes one rank sends, path) for op on [tokens x hidden]."""
        torch, dist, args = self.torch, self.dist, self.args
        if op == "allreduce":
            x = torch.randn(tokens, args.hidden, dtype=getattr(torch, args.dtype), device=self.device)
            call, path = self.allreduce_call(x)
            return call, x.numel() * x.element_size(), path
        if op == "all_to_all":
            x = torch.randn(
                args.world_size * tokens, args.hidden, dtype=getattr(torch, args.dtype), device=self.device
            )
            y = torch.empty_like(x)
            return (lambda: dist.all_to_all_single(y, x)), x.numel() * x.element_size(), args.backend
        raise ValueError(f"unknown op {op}")

    def make_sized_call(self, op: str, nbytes: int):
        """(call, bytes one rank sends, path) for op on a flat message of about nbytes (the curve): allreduce
        of a [1 x n] tensor of that size (a row, as SGLang's all-reduces are 2-D; NCCL sees the same bytes);
        all_to_all of that size split evenly over the ranks."""
        torch, dist, args = self.torch, self.dist, self.args
        dtype = getattr(torch, args.dtype)
        elem = torch.tensor([], dtype=dtype).element_size()
        numel = max(1, nbytes // elem)
        if op == "all_to_all":
            numel = max(args.world_size, numel // args.world_size * args.world_size)
        if op == "allreduce":
            call, path = self.allreduce_call(torch.randn(1, numel, dtype=dtype, device=self.device))
            return call, numel * elem, path
        if op == "all_to_all":
            x = torch.randn(numel, dtype=dtype, device=self.device)
            y = torch.empty_like(x)
            return (lambda: dist.all_to_all_single(y, x)), numel * elem, args.backend
        raise ValueError(f"unknown op {op}")

    def measure_curve(self, op: str, nbytes: int, result: dict) -> None:
        """One point of the latency curve (eager calls): the size asked for, the bytes sent, the figures."""
        try:
            call, sent, path = self.make_sized_call(op, nbytes)
            for _unused in range(self.args.warmup):
                call()
            self.sync()
            row = {"op": op, "size": nbytes, "bytes": sent, "path": path}
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
            (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
            for _unused in range(self.args.iters)
        ]

    def timed_us(self, call, calls_per_run: int = 1) -> list[float]:
        """Microseconds per call of `iters` runs of call (each run makes calls_per_run calls)."""
        if not self.use_cuda:
            samples = []
            for _unused in range(self.args.iters):
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
            for _unused in range(3):
                call()
        cuda.current_stream().wait_stream(stream)
        cuda.synchronize()
        graph = cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _unused in range(self.args.graph_calls):
                call()
        cuda.synchronize()
        for _unused in range(3):
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
        call, nbytes, path = self.make_call(op, tokens)
        for _unused in range(
            self.args.warmup
        ):  # also settles a PCIe-IPC launch config before any graph capture
            call()
        self.sync()
        for mode in modes:
            try:
                row = {"op": op, "mode": mode, "tokens": tokens, "bytes": nbytes, "path": path}
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
        pcie_ipc = None
        if args.pcie_ipc_max_numel:
            try:  # a collective: every rank fails together (FlashInfer checks jointly), none hangs
                pcie_ipc = PcieIpcAllReduce(torch, dist, args)
            except Exception as exc:
                result["pcie_ipc_unbuilt"] = f"{type(exc).__name__}: {exc}"
        if pcie_ipc is not None or not args.pcie_ipc_max_numel:
            timer = RankTimer(torch, dist, args, device, use_cuda, pcie_ipc=pcie_ipc)
            for op in [o for o in args.ops.split(",") if o]:
                for tokens in [int(t) for t in args.tokens.split(",") if t.strip()]:
                    timer.measure(op, tokens, modes, result)
                for size in [int(b) for b in args.curve_sizes.split(",") if b.strip()]:
                    timer.measure_curve(op, size, result)
        if pcie_ipc is not None:
            result["pcie_ipc"] = {"tuned_shapes": pcie_ipc.tuned, "tune_error": pcie_ipc.tune_error}
            pcie_ipc.destroy()
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
    """What every answer carries: the inputs and the environment that decides the all-reduce's path."""
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
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith("NCCL_") or k in (PCIE_IPC_SWITCH, PCIE_IPC_MAX_NUMEL)
        },
        "all_to_all_layout": "each rank sends every rank one [tokens x hidden] block",
    }


def missing_workspace_class() -> str:
    """Why FlashInfer's PcieIpcAllReduceWorkspace cannot be imported here ("" when it can), the way SGLang
    0.5.23 looks for it (from flashinfer.comm)."""
    try:
        from flashinfer.comm import PcieIpcAllReduceWorkspace  # noqa: F401, PLC0415
    except Exception as exc:  # an ImportError, or a FlashInfer that fails to import at all
        return f"{type(exc).__name__}: {exc}"
    return ""


def settle_pcie_ipc(args) -> tuple[int, dict] | None:
    """Set args.pcie_ipc_max_numel (0: SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is off) and args.pcie_ipc_bound; (exit
    code, answer) for a malformed variable, or where the variant's PCIe-IPC all-reduce can act on none of
    this probe's all-reduces (skipped, with every reason)."""
    args.pcie_ipc_max_numel, args.pcie_ipc_bound = 0, ""
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    try:
        if not pcie_ipc_switch(os.environ):
            return None
        bound, source = pcie_ipc_bound(os.environ, args.hidden, tokens)
    except ValueError as exc:
        return 1, {"status": "failed", "reason": str(exc)}
    reasons = pcie_ipc_unavailable(args.world_size, args.device, args.dtype, missing_workspace_class())
    if reasons:
        reason = "; ".join(reasons)
        return VARIANT_SKIPPED_RC, {
            "status": "skipped",
            "world_size": args.world_size,
            "pcie_ipc": {"asked": True},
            "reason": f"SGLang's PCIe-IPC all-reduce cannot act here: {reason} (SGLang keeps NCCL)",
        }
    args.pcie_ipc_max_numel, args.pcie_ipc_bound = bound, source
    return None


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
    unbuilt = next((r["pcie_ipc_unbuilt"] for r in rank_results if r.get("pcie_ipc_unbuilt")), "")
    if unbuilt and not fatal:
        reason = f"FlashInfer's PCIe-IPC workspace could not be built: {unbuilt} (SGLang keeps NCCL)"
        payload.update(status="skipped", reason=reason, pcie_ipc={"asked": True})
        return VARIANT_SKIPPED_RC, payload
    if payload["pcie_ipc"]["asked"]:
        payload["pcie_ipc"].update(first.get("pcie_ipc") or {})
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
    refused = settle_world_size(args, torch) or settle_pcie_ipc(args)
    if refused:
        emit({**base, **refused[1]}, args.out)
        return refused[0]
    rank_results, reason = run_ranks(mp, args, started)
    if reason:
        failed = {"status": "failed", "world_size": args.world_size, "reason": reason}
        emit({**base, **failed, "ranks_reported": len(rank_results)}, args.out)
        return 1
    asked = {"asked": bool(args.pcie_ipc_max_numel)}
    if asked["asked"]:
        asked.update(max_numel=args.pcie_ipc_max_numel, bound=args.pcie_ipc_bound)
    payload = {**base, "world_size": args.world_size, "pcie_ipc": asked}
    rc, payload = report(payload, rank_results)
    payload["seconds"] = round(time.time() - started, 1)
    emit(payload, args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
