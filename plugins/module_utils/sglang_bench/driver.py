"""The one-client driver (issue 38, "one client per candidate"): several bench_serving windows in order in ONE
Python process of the client's environment, so a window costs its traffic and not a client start-up each
(on the stand-in a start-up - importing sglang.bench_serving, loading the tokenizer - took seconds per
window, bench/tune_cost.py --breakdown).

It is SGLang's own client: each window is the release's command line entry (`cli_main` of the client module,
in SGLang 0.5.16 and 0.5.23 `sglang/benchmark/serving.py`, re-exported by `sglang.bench_serving`) called with
that window's argv, so its parser, checks, dataset, warm-up request and result file are the release's. The
one change: the release's `get_tokenizer` (looked up in the module's globals by its `run_benchmark`) is
memoized per path, so the tokenizer loads once for all windows. And each request function of the release's
ASYNC_REQUEST_FUNCS is wrapped to keep the speculative acceptance of every request that succeeded (its
RequestFuncOutput.spec_accept_length, from the server's meta_info): the release writes only the server's
average to its result file, and a window's acceptance is a distribution (issue 39). The values go into the
window's end event (accept_lengths), the output is returned unchanged.

Run by module sglang_bench with the client's python: `python driver.py SPEC.json`, SPEC =
{"client_module": "sglang.bench_serving", "timeline": PATH, "windows": [{"name": N, "argv": [bench_serving
arguments]}, ...]}. The driver appends one JSON line per event to the timeline (start: the process's start,
imported: the client module imported, then per window start and end with its wall-clock times and, on a
failure, the error); a window that fails (the release exits or raises) ends the sequence: the windows after
it never run (a failing server fails the candidate; more traffic would only add time). Exit code 0 when
every window ran, else 1.

Standard library only at import time (it is imported by the module for its source, on the controller's
Python too); the client module is imported only by main().
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
import traceback

# What the driver uses of the client module, in every pinned release (tests/unit/test_sglang_bench_windows.py
# reads them in each release's sglang/benchmark/serving.py): the command line entry that parses sys.argv and
# runs one benchmark, and the module-level functions its run_benchmark calls that load the tokenizer - its
# loader, and check_chat_template (a second AutoTokenizer.from_pretrained of the model, for a warning).
ENTRY = "cli_main"
TOKENIZER_LOADER = "get_tokenizer"
MEMOIZED = (TOKENIZER_LOADER, "check_chat_template")
REQUEST_FUNCS = "ASYNC_REQUEST_FUNCS"
ACCEPT_FIELD = "spec_accept_length"


def event(path: str, kind: str, **fields) -> dict:
    """Append one timeline event (wall-clock time included) as a JSON line; flushed at once, so a killed
    driver leaves every event before it."""
    record = {"event": kind, "time": time.time(), **fields}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
    return record


def memoize_tokenizer(entry, path: str) -> None:
    """The release's tokenizer loads (MEMOIZED), as its run_benchmark looks them up (the module globals of
    the entry point), run once per argument; each first call is timed into the timeline."""
    namespace = entry.__globals__
    for name in MEMOIZED:
        load = namespace.get(name)
        if load is not None and not getattr(load, "epforge_memoized", False):
            namespace[name] = _memoized(load, name, path)


def _memoized(load, name: str, path: str):
    @functools.lru_cache(maxsize=4)
    def cached(*args, **kwargs):
        started = time.time()
        found = load(*args, **kwargs)
        event(
            path,
            "tokenizer",
            call=name,
            tokenizer=str(args[0] if args else ""),
            seconds=round(time.time() - started, 3),
        )
        return found

    cached.epforge_memoized = True
    return cached


def capture_acceptance(entry, sink: list) -> None:
    """Wrap each request function of the release (ASYNC_REQUEST_FUNCS in the entry's module globals) so that
    every call appends (its number in the window, the spec_accept_length of a successful request with
    speculation, else None) to sink; the client's warm-up requests are its first calls (window_acceptance
    drops them)."""
    funcs = entry.__globals__.get(REQUEST_FUNCS)
    if not isinstance(funcs, dict):
        return
    for backend, func in list(funcs.items()):
        if callable(func) and not getattr(func, "epforge_capturing", False):
            funcs[backend] = _capturing(func, sink)


def _capturing(func, sink: list):
    @functools.wraps(func)
    async def capturing(*args, **kwargs):
        call = len(sink)  # numbered when it starts: the warm-up's calls start (and end) before the rest
        sink.append((call, None))
        output = await func(*args, **kwargs)
        values = []
        for one in output if isinstance(output, list) else [output]:  # a multi-turn request returns a list
            value = getattr(one, ACCEPT_FIELD, None)
            if getattr(one, "success", False) and isinstance(value, (int, float)) and value > 0:
                values.append(round(float(value), 4))
        sink[call] = (call, values)
        return output

    capturing.epforge_capturing = True
    return capturing


def window_acceptance(sink: list, argv: list) -> list:
    """The measured requests' acceptance lengths of one window: the calls after the client's warm-up
    requests (--warmup-requests, 1 by default in every pinned release)."""
    warmup = 1
    args = [str(a) for a in argv]
    for index, arg in enumerate(args):
        if arg == "--warmup-requests" and index + 1 < len(args):
            warmup = int(args[index + 1])
        elif arg.startswith("--warmup-requests="):
            warmup = int(arg.split("=", 1)[1])
    return [v for call, values in sink if call >= warmup for v in values or []]


def run_window(entry, module_name: str, window: dict) -> str | None:
    """Run one window through the release's command line entry; None when it finished, else the error."""
    saved = sys.argv
    sys.argv = [module_name, *[str(a) for a in window["argv"]]]
    try:
        entry()
    except SystemExit as exc:
        # argparse errors and the release's own sys.exit(1) (server not ready, no model): a failed window
        if exc.code not in (None, 0):
            return f"bench_serving exited with {exc.code!r}"
    except Exception as exc:  # any error of the client fails this window, with its traceback
        traceback.print_exc()
        return f"{type(exc).__name__}: {exc}"
    finally:
        sys.argv = saved
    return None


def run(spec: dict, import_module=importlib.import_module) -> int:
    """Run the spec's windows in order (see the module docstring); 0 when all ran, 1 at the first failure."""
    timeline = spec["timeline"]
    module_name = spec.get("client_module") or "sglang.bench_serving"
    event(timeline, "start", windows=[w["name"] for w in spec["windows"]])
    module = import_module(module_name)
    entry = getattr(module, ENTRY, None)
    if entry is None:
        event(timeline, "error", error=f"{module_name} has no {ENTRY} (not a supported release)")
        return 1
    memoize_tokenizer(entry, timeline)
    accepted: list = []
    capture_acceptance(entry, accepted)
    event(timeline, "imported", module=module_name)
    for index, window in enumerate(spec["windows"]):
        print(f"=== window {index + 1}/{len(spec['windows'])}: {window['name']}", flush=True)
        event(timeline, "window_start", name=window["name"], index=index)
        accepted.clear()
        error = run_window(entry, module_name, window)
        kept = window_acceptance(accepted, window["argv"])
        extra = {"accept_lengths": kept} if kept else {}
        event(timeline, "window_end", name=window["name"], index=index, error=error, **extra)
        if error is not None:
            print(f"=== window {window['name']} failed: {error}", flush=True)
            return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: driver.py SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    return run(spec)


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # every result file and timeline line is written and closed: skip the interpreter's teardown of torch and
    # the client's imports (seconds on a busy host, after the last window, for nothing)
    os._exit(code)
