"""TEST DOUBLE of `python -m sglang.launch_server` (NOT SGLang): epforge's stand-in server.

Accepts the launch_server flags epforge renders (same names and choices as SGLang 0.5.23; an unknown
flag or a bad choice exits 2 like SGLang's argparse), then serves SGLang's HTTP API on --host/--port
with made-up text, standard library only:

  GET  /health /health_generate        503 while "loading", then 200 (no auth, like SGLang)
  GET  /get_server_info /server_info   every parsed arg + launch_command + internal_states
                                       (avg_spec_accept_length when speculative) + version
  GET  /get_model_info /model_info     model_path, served_model_name, tokenizer_path, is_generation
  GET  /v1/models                      OpenAI model list
  POST /generate                       SGLang native (text + meta_info); "stream": true gives SSE
                                       `data: {...}` chunks with cumulative text, then `data: [DONE]`
                                       (what bench_serving's async_request_sglang_generate reads)
  POST /v1/chat/completions /v1/completions   OpenAI-compatible, streaming or not
  GET|POST /flush_cache

Behaviour knobs (environment variables, all optional):
  SGLANG_STANDIN_LOAD_SECONDS  seconds /health answers 503 before 200 (default 1.0)
  SGLANG_STANDIN_READY_AT      absolute epoch seconds at which it becomes ready (overrides LOAD_SECONDS)
  SGLANG_STANDIN_HANG          "1": never become ready (stays alive, /health 503 forever)
  SGLANG_STANDIN_HEALTH_SECONDS  seconds a ready server takes to answer /health and /health_generate
                               (default 0): SGLang's /health generates a token and waits for it, up to
                               SGLANG_HEALTH_CHECK_TIMEOUT
  SGLANG_STANDIN_CRASH_AFTER   seconds after start to crash: print SGLANG_STANDIN_CRASH_LINE (default a
                               RuntimeError) to stderr and exit SGLANG_STANDIN_CRASH_RC (default 1)
  SGLANG_STANDIN_CRASH_ON_REQUEST  N: crash the same way when the Nth generation request arrives (a server
                               that dies under load, e.g. with a CUDA out-of-memory error: its client sees
                               the connection drop, then refused)
  SGLANG_STANDIN_TOKEN_DELAY_MS  milliseconds per generated token (default 2)
  SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS  milliseconds before the first token of every generation, as a
                               prefill (time to first token; default 0)
  SGLANG_STANDIN_COLD_REQUESTS  how many generations after ready are cold (JIT compiles, CUDA-graph capture:
                               default 0); each of them takes SGLANG_STANDIN_COLD_FACTOR times as long
                               (default 1: first-token and per-token delays multiplied)
  SGLANG_STANDIN_NOISE_SEED    seed of the noise below (default 0); a real server's speed moves between
                               launches and between windows (issue 38: on one H200 the same settings read
                               8403 then 6923 output tok/s in two launches)
  SGLANG_STANDIN_LAUNCH_NOISE  log standard deviation of a speed factor drawn once per launch (default 0)
  SGLANG_STANDIN_WINDOW_NOISE  log standard deviation of a speed factor drawn per slot of
                               SGLANG_STANDIN_WINDOW_SECONDS (default 1.0) since ready (default 0)
  SGLANG_STANDIN_NOISE_COUNTER  path of a file counting launches (created, incremented at each start): the
                               launch's draws come from the seed and this count, so a relaunch of the same
                               settings draws anew and a run with the same seed draws the same
  SGLANG_STANDIN_COMPILE_MS    per-batch-size compile delays, "BS:MS,BS:MS" (as lazy CUDA-graph capture): the
                               first generation that finds the running batch at a size <= BS (the smallest
                               such BS) for the first time waits MS before its first token
  SGLANG_STANDIN_CAPTURE_SECONDS  seconds of CUDA-graph capture before ready when graphs are on (default 0):
                               whole on the first launch of this account (HOME) with these graph settings,
                               a tenth once its compile caches exist (a marker under
                               $HOME/.cache/sglang-standin/). Real SGLang 0.5.16 on one H200 (2026-12-03)
                               captured its prefill graphs in 60.1 s on the first launch with graphs, 6.5 s on
                               the next (tests/fixtures/sglang_h200/graph-capture-*.log): which launch goes
                               first decides a ready-time comparison
  SGLANG_STANDIN_ACCEPT_LENGTH   avg_spec_accept_length reported when speculative (default 2.5)
  SGLANG_STANDIN_SPEC_BY_PROMPT  "1": with --speculative-algorithm, acceptance from the prompt's own
                               repetition and a gain that shrinks with concurrency (State.spec); the
                               server's avg_spec_accept_length is then the mean of the requests served
  SGLANG_STANDIN_SPEC_OVERHEAD   drafting cost per token with SPEC_BY_PROMPT (default 0.15)
  SGLANG_STANDIN_PROMPT_DIGESTS  path: each received prompt's sha256 appended, one line per request
  SGLANG_STANDIN_PEER_LOSS_SECONDS  with --nnodes > 1: seconds between a peer's connection closing and this
                               rank's end (default 2.0). A real rank finds its group broken at its next
                               collective or by NCCL's watchdog, not at once; ending at once put the two
                               ranks' exits within the jitter of their journals, and the multinode scenario
                               once read the survivor's as the first (CI, 2026-12-04)
  SGLANG_STANDIN_PROMPT_TOKEN_FACTOR  prompt tokens reported per prompt token sent (default 1; below 1 a
                               server that counted less than it was sent, as a context cut short)
  SGLANG_STANDIN_READY_FILE    path: written with the epoch time the server became ready
  SGLANG_STANDIN_ACCESS_LOG    "0": no access lines (default: one per request, uvicorn's format, as SGLang)
  SGLANG_STANDIN_MAX_NEW_TOKENS  cap on the tokens of every generation, whatever the request asks (as a
                               server that stops early although the client set ignore_eos)
  SGLANG_STANDIN_ADJUST        JSON object merged into /get_server_info (as if SGLang had adjusted a
                               setting, e.g. {"ep_size": 1})

Before it serves, it does what a real server's first forward pass does with the tools on its PATH: where
the env holds FlashInfer, one real FlashInfer JIT build of the rmsnorm module (sgl_kernel -> flashinfer.norm
-> gen_norm_module().build_and_load() on SGLang 0.5.16; no GPU needed to compile it,
FLASHINFER_CUDA_ARCH_LIST defaults to 9.0 here); else it runs `ninja --version` by name, as FlashInfer's
run_ninja does, so a PATH without ninja dies with the real `FileNotFoundError: [Errno 2] No such file or
directory: 'ninja'` that killed every launch on an H200 (docs/gpu-runs.md, 2026-12-03).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.0.0+standin"
MOE_A2A_CHOICES = [
    "none",
    "deepep",
    "mooncake",
    "nixl",
    "mori",
    "ascend_fuseep",
    "flashinfer",
    "megamoe",
    "deepep_v2",
    "pplx",
    "ascend_tp",
    "flashinfer_megamoe",
]
WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
)


def build_parser() -> argparse.ArgumentParser:
    """The subset of SGLang's launch_server flags the stand-in understands (names as in SGLang 0.5.23)."""
    p = argparse.ArgumentParser(prog="sglang serve (stand-in)")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--dist-timeout", type=int, default=None)
    p.add_argument("--moe-a2a-backend", choices=MOE_A2A_CHOICES, default="none")
    p.add_argument("--deepep-mode", choices=["auto", "normal", "low_latency"], default="auto")
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        dest="speculative_draft_model_path",
        default=None,
    )
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--cuda-graph-max-bs-decode", dest="cuda_graph_max_bs_decode", type=int, default=None)
    p.add_argument("--cuda-graph-max-bs-prefill", dest="cuda_graph_max_bs_prefill", type=int, default=None)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--enable-torch-symm-mem", action="store_true")
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--log-level", default="info")
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    # SGLang's cap on the requests decoded together; beyond it a request waits in the queue (here: for a slot)
    p.add_argument("--max-running-requests", type=int, default=None)
    return p


def graph_capture_seconds(args: argparse.Namespace) -> float:
    """Seconds this launch captures CUDA graphs before it is ready (SGLANG_STANDIN_CAPTURE_SECONDS): whole
    when this account has not captured these graph settings before, a tenth when it has (the marker)."""
    whole = float(os.environ.get("SGLANG_STANDIN_CAPTURE_SECONDS", "0"))
    if whole <= 0 or args.disable_cuda_graph:
        return 0.0
    cache = os.path.join(os.environ.get("HOME") or "/tmp", ".cache", "sglang-standin")
    marker = os.path.join(cache, f"graphs-{args.cuda_graph_max_bs_decode}-{args.cuda_graph_max_bs_prefill}")
    warm = os.path.exists(marker)
    with contextlib.suppress(OSError):
        os.makedirs(cache, exist_ok=True)
        open(marker, "a").close()
    seconds = whole / 10 if warm else whole
    log(f"Capture target prefill CUDA graph: {seconds:.2f} s ({'warm' if warm else 'cold'} compile caches)")
    return seconds


def log(message: str) -> None:
    """A log line shaped like SGLang's ('[time] message'), on stderr."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp}] {message}\n")
    sys.stderr.flush()


class State:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.started = time.time()
        ready_at = os.environ.get("SGLANG_STANDIN_READY_AT")
        if ready_at:
            self.ready_at = float(ready_at)
        else:
            self.ready_at = self.started + float(os.environ.get("SGLANG_STANDIN_LOAD_SECONDS", "1.0"))
        self.ready_at += graph_capture_seconds(args)
        self.hang = os.environ.get("SGLANG_STANDIN_HANG", "") == "1"
        self.health_seconds = float(os.environ.get("SGLANG_STANDIN_HEALTH_SECONDS", "0"))
        self.token_delay = float(os.environ.get("SGLANG_STANDIN_TOKEN_DELAY_MS", "2")) / 1000.0
        self.first_token_delay = float(os.environ.get("SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS", "0")) / 1000.0
        self.cold_left = int(os.environ.get("SGLANG_STANDIN_COLD_REQUESTS", "0"))
        self.cold_factor = float(os.environ.get("SGLANG_STANDIN_COLD_FACTOR", "1"))
        self.crash_on = int(os.environ.get("SGLANG_STANDIN_CRASH_ON_REQUEST", "0"))
        self.generations = 0
        # A capacity like a real server's: at most --max-running-requests generations at once, others queue.
        limit = args.max_running_requests
        self.running = threading.BoundedSemaphore(limit) if limit else contextlib.nullcontext()
        self.accept_length = float(os.environ.get("SGLANG_STANDIN_ACCEPT_LENGTH", "2.5"))
        # What was really sent (issue 39): each prompt's sha256, one line per request, in the file named here
        # (tests compare them with their own prompts byte for byte); and a server that counts fewer prompt
        # tokens than it was sent (a context cut short: a "128k" run that was really 82k), by this factor.
        self.prompt_digests = os.environ.get("SGLANG_STANDIN_PROMPT_DIGESTS", "")
        self.prompt_token_factor = float(os.environ.get("SGLANG_STANDIN_PROMPT_TOKEN_FACTOR", "1"))
        # a prefix cache as a radix cache reports it: the longest word prefix shared with an earlier prompt
        self.prompts_seen: list[list[str]] = []
        # speculation whose gain depends on the prompt and the load (issue 39; off unless asked): see spec()
        self.spec_by_prompt = os.environ.get("SGLANG_STANDIN_SPEC_BY_PROMPT", "") == "1"
        self.spec_overhead = float(os.environ.get("SGLANG_STANDIN_SPEC_OVERHEAD", "0.15"))
        self.accepted: list[float] = []
        self.served_name = args.served_model_name or args.model_path
        self.announced = False
        self.lock = threading.Lock()
        self.noise = Noise()
        self.compile_ms = {
            int(bs): float(ms)
            for bs, ms in (
                item.split(":") for item in os.environ.get("SGLANG_STANDIN_COMPILE_MS", "").split(",") if item
            )
        }
        self.compiled: set[int] = set()
        self.in_flight = 0

    @contextlib.contextmanager
    def flight(self):
        """One generation running: the batch size a compile delay is keyed by."""
        with self.lock:
            self.in_flight += 1
        try:
            yield
        finally:
            with self.lock:
                self.in_flight -= 1

    def compile_delay(self) -> float:
        """Seconds this generation waits for the first capture of its batch size (once per size)."""
        with self.lock:
            size = next((bs for bs in sorted(self.compile_ms) if self.in_flight <= bs), None)
            if size is None or size in self.compiled:
                return 0.0
            self.compiled.add(size)
        return self.compile_ms[size] / 1000.0

    def ready(self) -> bool:
        if self.hang or time.time() < self.ready_at:
            return False
        with self.lock:
            if not self.announced:
                self.announced = True
                log("The server is fired up and ready to roll!")
                ready_file = os.environ.get("SGLANG_STANDIN_READY_FILE")
                if ready_file:
                    with open(ready_file, "w", encoding="utf-8") as handle:
                        handle.write(f"{time.time():.6f}\n")
        return True

    def delays(self, uncached: float = 1.0) -> tuple[float, float]:
        """(seconds before the first token, seconds per token) for one generation: a cold one (the first
        SGLANG_STANDIN_COLD_REQUESTS after ready) is SGLANG_STANDIN_COLD_FACTOR times slower; the prefill
        covers only the `uncached` share of the prompt, as a radix cache spares a real server the rest (the
        H200's random-ids windows ran faster as its cache filled, 2026-12-04)."""
        with self.lock:
            cold = self.cold_left > 0
            self.cold_left -= 1 if cold else 0
        factor = (self.cold_factor if cold else 1.0) / self.noise.speed(time.time() - self.ready_at)
        prefill = self.first_token_delay * factor * uncached
        return prefill + self.compile_delay(), self.token_delay * factor

    def flush_cache(self) -> None:
        """/flush_cache: the prefix cache emptied (what SGLang's radix cache does when no request runs)."""
        with self.lock:
            self.prompts_seen.clear()

    def spec(self, prompt: str) -> tuple[float, float]:
        """(accept length, per-token time factor) of one speculative generation (SPEC_BY_PROMPT).

        Drafts are accepted as often as the prompt repeats itself (the share of its word bigrams seen earlier
        in it: near 0 for random ids, near 1 for a repeated text; NGRAM drafts from exactly such matches), up
        to SGLANG_STANDIN_ACCEPT_LENGTH; the gain shrinks with the generations running at once (a batch
        already fills the GPU: on 8x RTX PRO 6000, EAGLE-3 gave +32 % at concurrency 1 and about +1 % at
        128), and drafting costs SGLANG_STANDIN_SPEC_OVERHEAD per token either way."""
        seen, repeats, pairs = set(), 0, 0
        for pair in itertools.pairwise(prompt.split()):
            pairs += 1
            repeats += pair in seen
            seen.add(pair)
        repeated = repeats / pairs if pairs else 0.0
        accept = 1.0 + (self.accept_length - 1.0) * repeated
        with self.lock:
            running = max(1, self.in_flight)
            self.accepted.append(accept)
        gain = 1.0 + (accept - 1.0) / (1.0 + (running - 1) / 16.0)
        return accept, (1.0 + self.spec_overhead) / gain

    def crash_due(self) -> bool:
        """Whether this generation request is the SGLANG_STANDIN_CRASH_ON_REQUEST-th since start."""
        with self.lock:
            self.generations += 1
            return self.generations == self.crash_on

    @property
    def speculative(self) -> bool:
        return bool(self.args.speculative_algorithm)

    def server_info(self) -> dict:
        info = dict(vars(self.args))
        info["launch_command"] = " ".join(["python", "-m", "sglang.launch_server", *self.argv])
        info["served_model_name"] = self.served_name
        info["tokenizer_path"] = self.args.tokenizer_path or self.args.model_path
        state = {"last_gen_throughput": 0.0, "memory_usage": {"weight": 0.0, "kvcache": 0.0}}
        if self.speculative:
            accepted = self.accepted if self.spec_by_prompt else []
            state["avg_spec_accept_length"] = (
                round(sum(accepted) / len(accepted), 4) if accepted else self.accept_length
            )
        info["internal_states"] = [state]
        info["startup_time"] = self.started
        info["version"] = VERSION
        info["frontend"] = "python"
        info["standin"] = True
        info.update(json.loads(os.environ.get("SGLANG_STANDIN_ADJUST") or "{}"))
        return info


def capped(count: int) -> int:
    """count, or less under SGLANG_STANDIN_MAX_NEW_TOKENS (a server that ends generations early)."""
    cap = os.environ.get("SGLANG_STANDIN_MAX_NEW_TOKENS")
    return min(count, int(cap)) if cap not in (None, "") else count


def make_tokens(prompt: str, count: int) -> list[str]:
    """Deterministic made-up tokens: the same prompt gives the same text."""
    seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    return [WORDS[(seed + i * 7) % len(WORDS)] for i in range(count)]


def shared_prefix(words: list[str], seen: list[str]) -> int:
    """How many leading words two prompts share."""
    count = 0
    for a, b in zip(words, seen, strict=False):
        if a != b:
            break
        count += 1
    return count


def prompt_of(body: dict) -> tuple[str, int]:
    """(prompt text, prompt token count) for native and OpenAI bodies."""
    if "input_ids" in body and body["input_ids"] is not None:
        ids = body["input_ids"]
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return " ".join(str(i) for i in ids), len(ids)
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [] if isinstance(m, dict))
    else:
        text = body.get("text", body.get("prompt", ""))
        if isinstance(text, list):
            text = text[0] if text else ""
    text = str(text)
    return text, max(1, len(text.split()))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglang-standin/" + VERSION
    state: State  # set on the class by serve()

    def log_message(self, format, *args):
        if os.environ.get("SGLANG_STANDIN_ACCESS_LOG") == "1":
            log(f"{self.address_string()} {format % args}")

    def log_request(self, code="-", size="-"):
        """One access line per request in uvicorn's format, as real SGLang prints by default (captured in
        tests/fixtures/sglang_h200/tp1-graph-server.log: `INFO:     127.0.0.1:41222 - "POST /generate
        HTTP/1.1" 200 OK`); SGLANG_STANDIN_ACCESS_LOG=0 silences them."""
        if os.environ.get("SGLANG_STANDIN_ACCESS_LOG") == "0":
            return
        status = int(code) if str(code).isdigit() else 0
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        host, port = self.client_address[:2]
        log(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}'.rstrip())

    # -- helpers
    def send_json(self, status: int, obj: object) -> None:
        payload = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def authorized(self) -> bool:
        key = self.state.args.api_key
        if not key or self.path.startswith(("/health", "/ready", "/metrics")):
            return True
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token == key:
            return True
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def read_body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"error": {"message": "body is not JSON"}})
            return None
        if not isinstance(body, dict):
            self.send_json(400, {"error": {"message": "body must be a JSON object"}})
            return None
        return body

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, obj: object) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    # -- routes
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        st = self.state
        if path in ("/health", "/health_generate", "/ready"):
            ready = st.ready()
            if ready and path != "/ready":
                time.sleep(st.health_seconds)  # the token SGLang's /health generates
            self.send_empty(200 if ready else 503)
            return
        if not self.authorized():
            return
        if not st.ready() and path not in ("/get_server_info", "/server_info"):
            self.send_json(503, {"error": "server is starting"})
            return
        if path in ("/get_server_info", "/server_info"):
            self.send_json(200, st.server_info())
        elif path in ("/get_model_info", "/model_info"):
            self.send_json(
                200,
                {
                    "model_path": st.args.model_path,
                    "served_model_name": st.served_name,
                    "tokenizer_path": st.args.tokenizer_path or st.args.model_path,
                    "is_generation": True,
                    "weight_version": "default",
                },
            )
        elif path == "/v1/models":
            self.send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": st.served_name,
                            "object": "model",
                            "created": int(st.started),
                            "owned_by": "sglang",
                            "root": st.served_name,
                            "max_model_len": st.args.context_length or 4096,
                        }
                    ],
                },
            )
        elif path == "/flush_cache":
            self.state.flush_cache()
            self.send_json(200, {"success": True})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if not self.authorized():
            return
        if path == "/flush_cache":
            self.state.flush_cache()
            self.send_json(200, {"success": True})
            return
        if not self.state.ready():
            self.send_json(503, {"error": "server is starting"})
            return
        body = self.read_body()
        if body is None:
            return
        if path not in ("/generate", "/v1/chat/completions", "/v1/completions"):
            self.send_json(404, {"detail": "Not Found"})
            return
        if self.state.crash_due():
            crash_later(0)  # the process ends under this request: no answer, then nothing listens
            time.sleep(30)
            return
        with self.state.running, self.state.flight():
            if path == "/generate":
                self.generate(body)
            else:
                self.openai(body, chat=path == "/v1/chat/completions")

    def meta(
        self,
        rid: str,
        prompt_tokens: int,
        done: int,
        started: float,
        finished: bool,
        *,
        cached: int = 0,
        accept: float | None = None,
    ) -> dict:
        meta = {
            "id": rid,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": done,
            "cached_tokens": cached,
            "e2e_latency": time.time() - started,
            "finish_reason": {"type": "length", "length": done} if finished else None,
        }
        if self.state.speculative:
            accept = self.state.accept_length if accept is None else accept
            meta["spec_accept_length"] = accept
            meta["spec_verify_ct"] = max(1, int(done / accept))
        return meta

    def received(self, body: dict) -> tuple[str, int, int]:
        """The prompt, the prompt tokens this server counts and those its prefix cache held; the prompt's
        digest logged when asked."""
        prompt, prompt_tokens = prompt_of(body)
        words = prompt.split()
        with self.state.lock:
            cached = max((shared_prefix(words, seen) for seen in self.state.prompts_seen), default=0)
            if len(self.state.prompts_seen) < 4096:
                self.state.prompts_seen.append(words)
            if self.state.prompt_digests:
                with open(self.state.prompt_digests, "a", encoding="utf-8") as handle:
                    handle.write(hashlib.sha256(prompt.encode("utf-8")).hexdigest() + "\n")
        counted = max(1, round(prompt_tokens * self.state.prompt_token_factor))
        return prompt, counted, min(cached, counted - 1)

    def generate(self, body: dict) -> None:
        started = time.time()
        prompt, prompt_tokens, cached = self.received(body)
        params = body.get("sampling_params") or {}
        if int(params.get("max_new_tokens", 16)) < 0:  # SGLang 0.5.16's answer (tests/fixtures/sglang_h200)
            self.send_json(
                400,
                {
                    "error": {
                        "message": f"max_new_tokens must be at least 0, got {int(params['max_new_tokens'])}."
                    }
                },
            )
            return
        count = capped(max(1, int(params.get("max_new_tokens", 16))))
        tokens = make_tokens(prompt, count)
        rid = body.get("rid") or uuid.uuid4().hex
        first, per_token = self.state.delays(1.0 - cached / prompt_tokens)
        accept = None
        if self.state.speculative and self.state.spec_by_prompt:
            accept, factor = self.state.spec(prompt)
            per_token *= factor
        if body.get("stream"):
            self.start_stream()
            time.sleep(first)
            for i in range(1, count + 1):
                time.sleep(per_token)
                self.sse(
                    {
                        "text": " ".join(tokens[:i]),
                        "meta_info": self.meta(
                            rid, prompt_tokens, i, started, i == count, cached=cached, accept=accept
                        ),
                    }
                )
            self.sse("[DONE]")
            return
        time.sleep(first + per_token * count)
        self.send_json(
            200,
            {
                "text": " ".join(tokens),
                "meta_info": self.meta(
                    rid, prompt_tokens, count, started, True, cached=cached, accept=accept
                ),
            },
        )

    def openai(self, body: dict, *, chat: bool) -> None:
        prompt, prompt_tokens, cached = self.received(body)
        count = capped(max(1, int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)))
        tokens = make_tokens(prompt, count)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        model = body.get("model") or self.state.served_name
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count,
            "total_tokens": prompt_tokens + count,
        }
        first, per_token = self.state.delays(1.0 - cached / prompt_tokens)
        if body.get("stream"):
            self.start_stream()
            time.sleep(first)
            for i, token in enumerate(tokens):
                time.sleep(per_token)
                piece = token if i == 0 else " " + token
                last = i == count - 1
                choice = (
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": piece} if i == 0 else {"content": piece},
                    }
                    if chat
                    else {"index": 0, "text": piece}
                )
                choice["finish_reason"] = "length" if last else None
                self.sse(
                    {
                        "id": rid,
                        "object": kind + (".chunk" if chat else ""),
                        "created": created,
                        "model": model,
                        "choices": [choice],
                    }
                )
            if (body.get("stream_options") or {}).get("include_usage"):
                self.sse(
                    {
                        "id": rid,
                        "object": kind + (".chunk" if chat else ""),
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            self.sse("[DONE]")
            return
        time.sleep(first + per_token * count)
        text = " ".join(tokens)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            if chat
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        self.send_json(
            200,
            {
                "id": rid,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage,
            },
        )


def crash_later(seconds: float) -> None:
    def crash() -> None:
        time.sleep(seconds)
        line = os.environ.get("SGLANG_STANDIN_CRASH_LINE", "RuntimeError: stand-in crash requested")
        sys.stderr.write('Traceback (most recent call last):\n  File "standin", line 1, in <module>\n')
        sys.stderr.write(line.replace("\\n", "\n") + "\n")
        sys.stderr.flush()
        os._exit(int(os.environ.get("SGLANG_STANDIN_CRASH_RC", "1")))

    threading.Thread(target=crash, daemon=True).start()


def first_forward_jit() -> None:
    """The JIT builds of a real server's first forward pass, with this process's PATH (see the docstring)."""
    import importlib.util  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    if importlib.util.find_spec("flashinfer") is not None:
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0")
        from flashinfer.jit.norm import gen_norm_module  # noqa: PLC0415

        started = time.monotonic()
        gen_norm_module().build(verbose=False)
        log(f"TEST DOUBLE: FlashInfer JIT built the norm module in {time.monotonic() - started:.1f} s")
        return
    subprocess.run(["ninja", "--version"], check=True, capture_output=True, timeout=30)


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def watch_peers(peers: list[socket.socket], node_rank: int) -> None:
    """A peer's connection closing means its process died: the group is broken, as NCCL's collectives would
    find out - SGLANG_STANDIN_PEER_LOSS_SECONDS later, as SGLang fails at its next collective or its
    watchdog."""
    delay = float(os.environ.get("SGLANG_STANDIN_PEER_LOSS_SECONDS", "2.0"))

    def watch(sock: socket.socket) -> None:
        try:
            while sock.recv(64):
                pass
        except OSError:
            pass
        time.sleep(delay)
        log(f"RuntimeError: [node_rank {node_rank}] lost a peer of the distributed group (connection closed)")
        os._exit(1)

    for sock in peers:
        threading.Thread(target=watch, args=(sock,), daemon=True).start()


def rendezvous(args) -> list[socket.socket]:
    """--nnodes > 1: SGLang's distributed init over real TCP at --dist-init-addr. Rank 0 listens there and
    waits for every other rank; rank k connects (retrying) and says which rank it is. Printed like SGLang
    0.5.23 (sglang/srt/distributed/bootstrap.py: "Init parallel begin." / "Init parallel ends. elapsed=...");
    a timeout (--dist-timeout, default 60 s here) fails like torch's TCPStore."""
    if args.nnodes <= 1:
        return []
    host, port = split_addr(args.dist_init_addr or "127.0.0.1:25000")
    timeout = args.dist_timeout or 60
    started = time.monotonic()
    log("Init parallel begin.")
    peers = []
    if args.node_rank == 0:
        listener = socket.create_server(("", port), reuse_port=False)
        listener.settimeout(0.5)
        while len(peers) < args.nnodes - 1:
            if time.monotonic() - started > timeout:
                log(
                    "torch.distributed.DistStoreError: Timed out after "
                    f"{timeout} seconds waiting for clients. {len(peers) + 1}/{args.nnodes} clients joined."
                )
                sys.exit(1)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            peers.append(conn)
        listener.close()
        for conn in peers:
            conn.sendall(b"go\n")
    else:
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=2)
                conn.sendall(f"rank {args.node_rank}\n".encode())
                conn.settimeout(max(1.0, timeout - (time.monotonic() - started)))
                if conn.recv(3) == b"go\n":
                    conn.settimeout(None)
                    peers.append(conn)
                    break
                conn.close()
            except OSError:
                pass
            if time.monotonic() - started > timeout:
                log(
                    "torch.distributed.DistNetworkError: The client socket has timed out after "
                    f"{timeout}s while trying to connect to ({host}, {port})."
                )
                sys.exit(1)
            time.sleep(0.5)
    log(f"Init parallel ends. elapsed={time.monotonic() - started:.2f} s")
    watch_peers(peers, args.node_rank)
    return peers


class Noise:
    """The server's speed factor: one draw per launch, one per window slot since ready (log-normal, seeded:
    SGLANG_STANDIN_NOISE_SEED, the launch's count in SGLANG_STANDIN_NOISE_COUNTER)."""

    def __init__(self) -> None:
        self.seed = int(os.environ.get("SGLANG_STANDIN_NOISE_SEED", "0"))
        self.window_sigma = float(os.environ.get("SGLANG_STANDIN_WINDOW_NOISE", "0"))
        self.window_s = float(os.environ.get("SGLANG_STANDIN_WINDOW_SECONDS", "1.0"))
        self.launch = self.count_launch(os.environ.get("SGLANG_STANDIN_NOISE_COUNTER", ""))
        sigma = float(os.environ.get("SGLANG_STANDIN_LAUNCH_NOISE", "0"))
        self.launch_factor = random.Random(f"{self.seed}-{self.launch}").lognormvariate(0.0, sigma)  # noqa: S311
        if sigma or self.window_sigma:
            log(f"TEST DOUBLE noise: launch {self.launch}, speed factor {self.launch_factor:.3f}")

    @staticmethod
    def count_launch(path: str) -> int:
        if not path:
            return 0
        with open(path, "a+", encoding="utf-8") as handle:
            handle.seek(0)
            count = int(handle.read().strip() or "0") + 1
            handle.seek(0)
            handle.truncate()
            handle.write(f"{count}\n")
        return count

    def speed(self, since_ready: float) -> float:
        if not self.window_sigma:
            return self.launch_factor
        slot = int(max(since_ready, 0.0) // self.window_s)
        draw = random.Random(f"{self.seed}-{self.launch}-{slot}").lognormvariate(0.0, self.window_sigma)  # noqa: S311
        return self.launch_factor * draw


class HealthOnlyHandler(BaseHTTPRequestHandler):
    """What a node_rank >= 1 serves in SGLang 0.5.23 once its schedulers joined (sglang/srt/entrypoints/
    engine.py calls launch_dummy_health_check_server, sglang/srt/utils/common.py): /health, /health_generate
    and /ping answer 200, nothing else; its uvicorn logs at warning level, so no access lines."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        status = 200 if self.path.split("?", 1)[0] in ("/health", "/health_generate", "/ping") else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # exits 2 on an unknown flag or a bad choice, like SGLang
    state = State(args, argv)
    # Like SGLang 0.5.23, log every resolved argument (the api key included): epforge's launcher must
    # keep it out of the log file.
    log(f"server_args={vars(args)}")
    log("TEST DOUBLE: this is epforge's SGLang stand-in, not SGLang")
    crash_after = os.environ.get("SGLANG_STANDIN_CRASH_AFTER")
    if crash_after:
        crash_later(float(crash_after))
    first_forward_jit()  # a missing tool ends the server here, with its traceback, as on a real host
    peers = rendezvous(args)  # noqa: F841 - held open: a peer's death ends this process
    Handler.state = state
    handler = HealthOnlyHandler if args.nnodes > 1 and args.node_rank >= 1 else Handler
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    log(
        f"Load weight begin. tp_size={args.tp_size} ep_size={args.ep_size} "
        f"moe_a2a_backend={args.moe_a2a_backend}"
    )

    stopping = []

    def stop(signum, _frame):
        # A handler can interrupt the main thread inside sys.stderr.write (a buffered writer that refuses
        # a reentrant call): write the line with one os.write, and act on the first signal only.
        if stopping:
            return
        stopping.append(signum)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(2, f"[{stamp}] Received signal {signum}; shutting down\n".encode())
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    server.serve_forever(poll_interval=0.05)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
