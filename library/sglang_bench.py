#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: run SGLang's own bench_serving client against a server with a named workload, parse its
result file, return the figures as facts and record the run in an append-only history."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Run SGLang's bench_serving with a named workload and return (and record) its figures
description:
  - Runs C(python -m sglang.bench_serving) (SGLang's own client; epforge has no load generator) from the
    environment of O(python) against O(base_url), with a named workload (O(workload)) - the C(random-ids)
    dataset (token ids drawn from the tokenizer's vocabulary, no download), fixed input/output lengths
    (range ratio 1.0), a number of prompts, a maximum concurrency, a request rate and a seed. The argv is a
    list, never a shell string; the client's output is appended to O(log_path); O(timeout) bounds it.
  - Parses the client's C(--output-file) (one JSON object per line) and returns output/total token
    throughput, request throughput, TTFT/TPOT/ITL/E2E mean, median and p99, and the speculative accept
    length, as C(ansible_facts.epforge_bench_result).
  - Fails with the client's output tail, the command and a classified reason (for example
    C(connection_refused), C(tokenizer_missing), C(timeout), C(incomplete_result)) when the client fails,
    writes no result, writes an incomplete one, or when more than O(max_failed_requests) requests failed.
    A run that generated no output token at all always fails (C(no_output_tokens)).
  - A run that completed fewer requests than asked, or generated fewer tokens than asked (bench_serving
    sends the random datasets with ignore_eos, so it must return num_prompts x output_len tokens; with
    C(--disable-ignore-eos) in O(extra_args) at least one per request) is recorded with C(status=invalid),
    its figures, what was expected (C(expected)) and the reasons (C(invalid_reasons)) - never as ok. The
    module then succeeds with a warning (the figures describe a smaller load than asked; the sweep and
    C(epforge report) show the run as invalid).
  - With O(fact_path) every run, succeeded or failed, is appended to a local fact holding the last result
    and a bounded history (O(history_max) entries), written atomically (temp file, fsync, rename, under a
    lock) - an interrupted write leaves the previous history intact and a failed run never removes entries.
  - A benchmark run is a state change by nature (it measures now, and appends to the history), so a run
    reports C(changed=true). Check mode runs nothing, writes nothing and reports C(changed=true).
  - bench_serving needs a tokenizer offline - O(tokenizer) (a local directory) or the model path the
    server reports. C(HF_HUB_OFFLINE=1) is set for the client unless O(env) says otherwise.
options:
  python:
    description: Python of an environment with SGLang and the packages bench_serving imports (absolute path).
    type: path
    required: true
  base_url:
    description: URL of the SGLang server (for example C(http://127.0.0.1:30000)).
    type: str
    required: true
  workload:
    description:
      - The named workload. Keys C(name) (default C(decode-heavy)), C(dataset) (C(random-ids)),
        C(dataset_path) (empty), C(input_len) (1024), C(output_len) (256), C(range_ratio) (1.0),
        C(num_prompts) (64), C(max_concurrency) (16), C(request_rate) (C(inf) or requests/s), C(seed) (42),
        C(warmup_requests) (1), C(flush_cache) (true - the client empties the server's prefix cache after its
        warm-up request, so that each run starts from the same empty cache; false measures with whatever the
        cache holds).
      - C(dataset) C(generated-shared-prefix) makes prefix-heavy prompts from the tokenizer's vocabulary -
        C(shared_prefix_groups) system prompts of C(shared_prefix_len) tokens (both 0 by default), each
        followed by C(num_prompts)/C(shared_prefix_groups) questions of its own (C(input_len) tokens per
        prompt in all).
        The client pickles what it generates under its HOME, keyed by the tokenizer's class name; the module
        gives it a HOME of its own per tokenizer under O(work_dir).
      - C(dataset) C(custom) (JSON lines) or C(sharegpt) (a JSON array) sends the prompts of the file at
        C(dataset_path) on the host, each reply cut at C(output_len); the file is checked before the client
        starts (a bad record is refused by line or entry and field, never quoting its text), and its sha256,
        size and prompt count go into the history entry as C(prompt_file).
    type: dict
    default: {}
  tokenizer:
    description: Tokenizer path or name for the client (C(--tokenizer)); empty uses the server's model.
    type: str
    default: ""
  model:
    description: Model name sent in requests (C(--model)); empty asks the server's C(/v1/models).
    type: str
    default: ""
  backend:
    description: bench_serving backend (C(sglang) is SGLang's native streaming C(/generate)).
    type: str
    default: sglang
    choices: [sglang, sglang-native, sglang-oai, sglang-oai-chat]
  client_module:
    description: The client module (C(sglang.bench_serving); C(sglang.benchmark.serving) in newer releases).
    type: str
    default: sglang.bench_serving
  api_key:
    description: API key the server requires (sent as a Bearer token through the client's environment).
    type: str
  env:
    description: Extra environment variables for the client.
    type: dict
    default: {}
  extra_args:
    description: Extra bench_serving arguments, one argv item each.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds the client may run before it is killed (the run then fails with class C(timeout)).
    type: float
    default: 1800
  ready_check_timeout:
    description: Seconds the client waits for the server's C(/v1/models) before it gives up (0 skips).
    type: int
    default: 60
  max_failed_requests:
    description: Requests that may fail (C(num_prompts - completed)) before the run counts as failed.
    type: int
    default: 0
  work_dir:
    description: Directory of the client's result file (C(NAME.last.jsonl), replaced each run).
    type: path
    default: /var/lib/epforge/bench
  log_path:
    description: Log the client's output is appended to (tail it during a run).
    type: path
    default: /var/log/epforge/sglang-bench.log
  fact_path:
    description:
      - Local fact file to append this run to (for example C(/etc/ansible/facts.d/epforge_bench.fact)).
    type: path
  record_success:
    description:
      - Append a successful run to O(fact_path). False records failures only (a warm-up run - its failure is
        the run's failure, its figures are not a measurement).
    type: bool
    default: true
  history_max:
    description: Entries the history keeps (the oldest beyond it are dropped).
    type: int
    default: 50
  record:
    description:
      - Context stored with the run in the history, for example C(label) (the configuration's name),
        C(stack), C(server) (settings; secret-looking values are redacted), C(gpu) (GPU facts).
    type: dict
    default: {}
  windows:
    description:
      - Several windows in order in ONE client process (a driver that calls the release's own
        bench_serving entry once per window, the tokenizer loaded once), instead of one run of O(workload).
        Each item holds workload keys over O(workload) (C(name) required and unique, C(max_concurrency),
        C(num_prompts), C(seed), ...); a window without C(seed) gets O(workload)'s seed plus its position.
        Other keys of an item (for example C(purpose)) are returned with its result, not sent to the client.
      - Each window is checked as a single run is (a failed window fails the call and ends the sequence;
        the windows before it are returned in C(windows)); with O(fact_path) each window is one entry.
    type: list
    elements: dict
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode runs no client and writes nothing; it reports a change, as a real run does.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Benchmark the running server
  epforge.ep.sglang_bench:
    python: /opt/epforge/venv/bin/python
    base_url: http://127.0.0.1:30000
    tokenizer: /models/Kimi-K2.5
    workload: {name: decode-c32, input_len: 1024, output_len: 512, num_prompts: 128, max_concurrency: 32}
    fact_path: /etc/ansible/facts.d/epforge_bench.fact
    record:
      label: ep8-deepep-low-latency
      stack: "{{ epforge_stack_spec.name }}"
      server: "{{ epforge_server }}"
"""

RETURN = r"""
figures:
  description:
    - The parsed figures (also in C(ansible_facts.epforge_bench_result.figures)).
    - With O(windows), a speculative window also holds C(accept_length_p10), C(accept_length_p50),
      C(accept_length_p90) and C(accept_requests) - its requests' own acceptance lengths (the server's
      per-request C(spec_accept_length), kept by the one-client driver), beside the server's average
      C(accept_length).
  returned: success
  type: dict
  sample:
    {output_throughput: 1131.2, total_throughput: 3393.6, request_throughput: 2.21, ttft_median_ms: 180.2,
     ttft_p99_ms: 410.9, tpot_median_ms: 27.1, tpot_p99_ms: 33.0, itl_median_ms: 25.3, itl_p99_ms: 61.8,
     e2e_median_ms: 14012.5, e2e_p99_ms: 15876.0, accept_length: 2.6, completed: 128}
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    epforge_bench_result:
      description:
        - This run's history entry (status, timestamp, workload, figures, context).
        - With a C(custom) or C(sharegpt) workload, C(prompt_file) holds the file's C(dataset), C(sha256),
          C(bytes) and C(prompts) (its count of usable prompts), never its text.
      type: dict
argv:
  description: The client command.
  returned: always
  type: list
  elements: str
result_file:
  description: The client's result file (JSON lines) of this run.
  returned: when the client ran
  type: str
seconds:
  description: Wall time of the client run.
  returned: when the client ran
  type: float
history_length:
  description: Entries in the history after this run (with O(fact_path)).
  returned: with fact_path
  type: int
status:
  description: C(ok), or C(invalid) when the run completed fewer requests or tokens than asked.
  returned: success
  type: str
invalid_reasons:
  description: Why the run is invalid (each names the figure, what was asked and what came back).
  returned: success
  type: list
  elements: str
  sample: ["generated 0 output tokens ..."]
notes:
  description:
    - What a valid run's figures mean that its workload does not say, each also a warning - for dataset
      C(generated-shared-prefix), prompts the tokenizer counted longer than the C(input_len) of O(workload)
      (the client makes that text from random token ids decoded and encoded again).
  returned: success
  type: list
  elements: str
failure_class:
  description: Classified reason of a failure (C(timeout), C(connection_refused), C(incomplete_result), ...).
  returned: failure
  type: str
windows:
  description:
    - With O(windows), one record per window that ran, in order - the item's own keys, C(workload),
      C(status), C(figures), C(invalid_reasons), C(expected), C(started), C(finished) (epoch seconds) and
      C(seconds) (its wall time in the client, traffic and the release's own warm-up request included).
  returned: with windows
  type: list
  elements: dict
client:
  description:
    - With O(windows), the one client process - C(seconds) (its wall time), C(startup_s) (start to the
      client module imported), C(tokenizer_s) (the tokenizer's load, once), C(gaps_s) (each window's end to
      the next one's start).
  returned: with windows
  type: dict
"""

import inspect
import json
import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.bench_figures import accept_distribution
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import bytes_sha256
from ansible_collections.epforge.ep.plugins.module_utils.process import run_logged
from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import (
    FILE_DATASETS,
    PromptFileError,
    check_prompt_file,
)
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench import driver
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.streams import cut_streams
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.windows import (
    driver_spec,
    read_timeline,
    window_workloads,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import (
    SHARED_PREFIX,
    BenchError,
    bench_argv,
    check_record_matches,
    check_validity,
    classify_failure,
    counted_input_tokens,
    expected_output,
    extract_figures,
    input_length_notes,
    normalize_workload,
    parse_result_lines,
    record_run,
    record_workload,
)

LOG_TAIL_LINES = 30


def read_new_log(path: str, offset: int) -> str:
    """What the client appended to the log in this run (at most the last 256 kB)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(offset, size - 256 * 1024))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "base_url": {"type": "str", "required": True},
    "workload": {"type": "dict", "default": {}},
    "tokenizer": {"type": "str", "default": "", "no_log": False},  # a path or model name, not a token
    "model": {"type": "str", "default": ""},
    "backend": {
        "type": "str",
        "default": "sglang",
        "choices": ["sglang", "sglang-native", "sglang-oai", "sglang-oai-chat"],
    },
    "client_module": {"type": "str", "default": "sglang.bench_serving"},
    "api_key": {"type": "str", "no_log": True},
    "env": {"type": "dict", "default": {}},
    "extra_args": {"type": "list", "elements": "str", "default": []},
    "timeout": {"type": "float", "default": 1800},
    "ready_check_timeout": {"type": "int", "default": 60},
    "max_failed_requests": {"type": "int", "default": 0},
    "work_dir": {"type": "path", "default": "/var/lib/epforge/bench"},
    "log_path": {"type": "path", "default": "/var/log/epforge/sglang-bench.log"},
    "fact_path": {"type": "path"},
    "history_max": {"type": "int", "default": 50},
    "record_success": {"type": "bool", "default": True},
    "record": {"type": "dict", "default": {}},
    "windows": {"type": "list", "elements": "dict"},
}
# Keys of a window item that describe it to the caller and are not workload keys
WINDOW_LABELS = ("purpose", "concurrency", "repeat")


def input_problems(p: dict) -> tuple[dict | list[dict] | None, list[str]]:
    """The normalized workload (with windows: one per window; None when bad) and every problem of the
    input."""
    problems = []
    try:
        if p["windows"] is not None:
            workload = window_workloads(p["workload"], [_workload_keys(w) for w in p["windows"]])
        else:
            workload = normalize_workload(p["workload"])
    except BenchError as exc:
        problems.append(str(exc))
        workload = None
    if not os.path.isabs(p["python"]):
        problems.append(f"python must be an absolute path, got {p['python']!r}")
    if not p["base_url"].startswith(("http://", "https://")):
        problems.append(f"base_url must start with http:// or https://, got {p['base_url']!r}")
    if p["timeout"] <= 0:
        problems.append(f"timeout must be > 0 seconds, got {p['timeout']}")
    if p["history_max"] < 1:
        problems.append(f"history_max must be >= 1, got {p['history_max']}")
    if p["max_failed_requests"] < 0:
        problems.append(f"max_failed_requests must be >= 0, got {p['max_failed_requests']}")
    return workload, problems


def _workload_keys(window) -> dict:
    return {k: v for k, v in window.items() if k not in WINDOW_LABELS} if isinstance(window, dict) else window


def prompt_file_problems(workloads: list[dict]) -> tuple[dict, list[str]]:
    """Each prompt file the workloads read, checked once for the most prompts any of them sends: its
    identity by path (prompt_file.py), and the problems of those that cannot be used."""
    need: dict[str, tuple[str, int]] = {}
    for w in workloads:
        if w["dataset"] in FILE_DATASETS:
            _unused, most = need.get(w["dataset_path"], (w["dataset"], 0))
            need[w["dataset_path"]] = (w["dataset"], max(most, w["num_prompts"]))
    identities, problems = {}, []
    for path, (dataset, most) in need.items():
        try:
            identities[path] = check_prompt_file(path, dataset, most)
        except PromptFileError as exc:
            problems.append(str(exc))
    return identities, problems


def history_entry(p: dict, workload: dict, prompt_file: dict | None = None) -> dict:
    """This run's history entry before it runs: id, time, workload, its prompt file's identity (never its
    text), client and the caller's context."""
    context = dict(p["record"])
    if "server" in context:
        context["server"] = redact(context["server"])
    return {
        "id": f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "label": str(context.pop("label", "") or workload["name"]),
        "workload": workload,
        **({"prompt_file": prompt_file} if prompt_file else {}),
        "base_url": p["base_url"],
        "client": {"python": p["python"], "module": p["client_module"], "backend": p["backend"]},
        **context,
    }


def client_env(p: dict, workloads: list[dict]) -> dict:
    """The client's environment: offline hub, unbuffered output, the env option and the key. A
    generated-shared-prefix run gets a HOME of its own per tokenizer: both pinned clients pickle the prompts
    they generate under ~/.cache/sglang/benchmark by a key holding the tokenizer's class name, not its path,
    so another model with a tokenizer of the same class would be sent this one's prompts (the Hub cache stays
    where it was, through HF_HOME)."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({str(k): str(v) for k, v in p["env"].items()})
    if p["api_key"]:
        env["OPENAI_API_KEY"] = p["api_key"]
    if any(w["dataset"] == SHARED_PREFIX for w in workloads):
        env.setdefault("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface"))
        owner = bytes_sha256((p["tokenizer"] or p["base_url"]).encode())[:16]
        env["HOME"] = os.path.join(p["work_dir"], "client-home", owner)
        os.makedirs(env["HOME"], mode=0o700, exist_ok=True)
    return env


def summary(workload: dict, figures: dict, invalid_reasons: list[str]) -> str:
    return (
        ("INVALID (" + "; ".join(invalid_reasons) + "): " if invalid_reasons else "")
        + f"{workload['name']}: {figures['output_throughput']:.1f} output tok/s, "
        f"TTFT median {figures['ttft_median_ms']:.1f} ms, TPOT median "
        f"{figures['tpot_median_ms']:.2f} ms ({figures['completed']} requests)"
    )


class BenchRun:
    """One client run: its argv, history entry, output; every failure recorded (with fact_path) and raised."""

    def __init__(self, module: AnsibleModule, workload: dict) -> None:
        self.module = module
        self.p = p = module.params
        self.workload = workload
        self.result_file = os.path.join(p["work_dir"], f"{workload['name']}.last.jsonl")
        self.argv = bench_argv(
            p["python"],
            p["base_url"].rstrip("/"),
            workload,
            self.result_file,
            tokenizer=p["tokenizer"],
            model=p["model"],
            backend=p["backend"],
            module=p["client_module"],
            ready_check_timeout=p["ready_check_timeout"],
            extra_args=p["extra_args"],
        )
        self.entry: dict = {}
        self.rc = 0
        self.output = ""
        self.seconds = 0.0
        # each request's speculative acceptance, where the one-client driver kept them (windows only)
        self.accept_lengths: list = []

    def exit_check_mode(self) -> None:
        p = self.p
        self.module.exit_json(
            changed=True,
            argv=self.argv,
            msg=f"would run workload {self.workload['name']} against "
            f"{p['base_url']}" + (f" and append it to {p['fact_path']}" if p["fact_path"] else ""),
        )

    def record(self) -> int:
        """Append the entry to the history at fact_path; the history's length."""
        return len(record_run(self.p["fact_path"], self.entry, self.p["history_max"])["history"])

    def fail(self, msg: str, failure_class: str, explanation: str, **extra) -> None:
        p = self.p
        self.entry.update(
            status="failed",
            # figures stay only where the client finished (requests_failed): they show how far it got
            figures=self.entry.get("figures"),
            error={
                "class": failure_class,
                "reason": explanation,
                "msg": msg,
                "rc": self.rc,
                "log_tail": tail(self.output, 15),
            },
        )
        history_length = None
        if p["fact_path"]:
            try:
                history_length = self.record()
            except (BenchError, OSError) as exc:
                msg += f" (and the failure could not be recorded: {exc})"
        self.module.fail_json(
            msg=msg,
            cmd=self.argv,
            rc=self.rc,
            failure_class=failure_class,
            log_path=p["log_path"],
            log_tail=tail(self.output, LOG_TAIL_LINES),
            history_length=history_length,
            ansible_facts={"epforge_bench_result": self.entry},
            **extra,
        )

    def prepare_dirs(self) -> int:
        """Create the work and log dirs, drop the last result; the log's size before this run."""
        p = self.p
        try:
            os.makedirs(p["work_dir"], exist_ok=True)
            os.makedirs(os.path.dirname(p["log_path"]) or ".", exist_ok=True)
            if os.path.exists(self.result_file):
                os.unlink(self.result_file)
            return os.path.getsize(p["log_path"]) if os.path.exists(p["log_path"]) else 0
        except OSError as exc:
            self.module.fail_json(msg=f"cannot prepare {p['work_dir']} or {p['log_path']}: {exc}")
        return 0

    def run_client(self) -> None:
        log_offset = self.prepare_dirs()
        header = f"bench_serving workload {self.workload['name']}"
        self.rc, seconds = run_logged(
            self.argv,
            self.p["log_path"],
            env=client_env(self.p, [self.workload]),
            timeout=self.p["timeout"],
            header=header,
        )
        self.output = read_new_log(self.p["log_path"], log_offset)
        self.seconds = round(seconds, 2)
        self.entry["seconds"] = self.seconds
        if self.rc != 0:
            failure_class, explanation = classify_failure(self.output, self.rc)
            self.fail(
                f"bench_serving failed ({failure_class}: {explanation}), rc {self.rc}",
                failure_class,
                explanation,
                seconds=self.seconds,
            )

    def read_record(self) -> tuple[dict, dict]:
        """The client's last result record and its figures (a missing or cut-off result fails)."""
        try:
            with open(self.result_file, encoding="utf-8") as handle:
                record = parse_result_lines(handle.read())[-1]
            return record, extract_figures(record)
        except FileNotFoundError:
            failure_class, explanation = classify_failure(self.output, self.rc)
            if failure_class == "client_failed":
                failure_class, explanation = "no_result", "the client exited 0 but wrote no result file"
            self.fail(
                f"bench_serving wrote no result file ({failure_class}: {explanation})",
                failure_class,
                explanation,
                seconds=self.seconds,
            )
        except (BenchError, OSError) as exc:
            self.fail(
                f"bench_serving result is incomplete: {exc}",
                "incomplete_result",
                "the result file is missing figures or holds a cut-off line",
                result_file=self.result_file,
            )
        return {}, {}

    def judge(self, record: dict, figures: dict) -> tuple[str, list[str], dict]:
        """Fail on another workload, no output token or too many failed requests; else the validity."""
        workload, p = self.workload, self.p
        mismatch = check_record_matches(record, workload)
        if mismatch:
            self.fail(
                "bench_serving ran another workload than asked: " + "; ".join(mismatch),
                "workload_mismatch",
                "the client's recorded workload differs from the request",
                result_file=self.result_file,
            )
        # a stream that ended without its final chunk is a failed request, though the client counts it done
        cut = cut_streams(record, workload, expected_output(workload, p["extra_args"])["ignores_eos"])
        if cut["count"]:
            figures["completed"] = int(figures["completed"]) - cut["count"]
            figures["total_output_tokens"] = int(figures["total_output_tokens"]) - cut["phantom_tokens"]
        figures["cut_streams"] = cut["count"]
        counted = counted_input_tokens(record)
        if counted:
            figures["counted_input_tokens"], figures["counted_requests"] = counted
        figures.update(accept_distribution(self.accept_lengths))
        failed_requests = workload["num_prompts"] - int(figures["completed"])
        figures["failed_requests"] = failed_requests
        status, invalid_reasons, expected = check_validity(figures, workload, p["extra_args"])
        if cut["count"]:
            invalid_reasons.append(
                f"{cut['count']} stream(s) ended without their final chunk (counted as failed)"
            )
        if status == "failed":
            self.entry["figures"] = figures
            self.fail(
                f"bench_serving produced nothing: {invalid_reasons[0]}",
                "no_output_tokens",
                "the server answered without generating any token",
                result_file=self.result_file,
            )
        if failed_requests > p["max_failed_requests"]:
            self.entry["figures"] = figures
            self.fail(
                f"{failed_requests} of {workload['num_prompts']} requests failed (max_failed_requests "
                f"{p['max_failed_requests']})",
                "requests_failed",
                "the server answered some requests with errors",
                result_file=self.result_file,
            )
        return status, invalid_reasons, expected

    def record_success(self, figures: dict) -> int | None:
        if not (self.p["fact_path"] and self.p["record_success"]):
            return None
        try:
            return self.record()
        except (BenchError, OSError) as exc:
            self.module.fail_json(
                msg=f"benchmark ran but could not be recorded in {self.p['fact_path']}: {exc}",
                figures=figures,
                ansible_facts={"epforge_bench_result": self.entry},
            )
        return None

    def outcome(self) -> dict:
        """The run's checked result (a failure exits through fail()); its entry recorded with fact_path."""
        record, figures = self.read_record()
        status, invalid_reasons, expected = self.judge(record, figures)
        self.entry.update(
            status=status,
            expected=expected,
            figures=figures,
            client_recorded=record_workload(record),
            server_version=(record.get("server_info") or {}).get("version"),
        )
        if status == "invalid":
            # The figures describe a smaller load than asked: recorded (with the reasons) but never as ok.
            self.entry["invalid_reasons"] = invalid_reasons
            self.module.warn(f"benchmark {self.workload['name']} is INVALID: " + "; ".join(invalid_reasons))
        notes = [] if status == "invalid" else input_length_notes(figures, self.workload)
        if notes:
            self.entry["notes"] = notes
        for note in notes:
            self.module.warn(note)
        return {
            "figures": figures,
            "expected": expected,
            "status": status,
            "invalid_reasons": invalid_reasons,
            "notes": notes,
            "history_length": self.record_success(figures),
        }

    def finish(self) -> None:
        done = self.outcome()
        self.module.exit_json(
            changed=True,
            argv=self.argv,
            figures=done["figures"],
            result_file=self.result_file,
            seconds=self.seconds,
            history_length=done["history_length"],
            ansible_facts={"epforge_bench_result": self.entry},
            status=done["status"],
            invalid_reasons=done["invalid_reasons"],
            notes=done["notes"],
            msg=summary(self.workload, done["figures"], done["invalid_reasons"]),
        )


class WindowRun(BenchRun):
    """One window of a driver run: checked as a single run is; a failure also returns the windows before."""

    def __init__(self, module: AnsibleModule, workload: dict, done: list[dict], client: dict) -> None:
        super().__init__(module, workload)
        self.done = done
        self.client = client

    def fail(self, msg: str, failure_class: str, explanation: str, **extra) -> None:
        super().fail(
            f"window {self.workload['name']}: {msg}",
            failure_class,
            explanation,
            windows=self.done,
            client=self.client,
            **extra,
        )


class WindowsRun:
    """Every window of O(windows) in one client process (plugins/module_utils/sglang_bench/driver.py)."""

    def __init__(self, module: AnsibleModule, workloads: list[dict], prompt_files: dict) -> None:
        self.module = module
        self.prompt_files = prompt_files
        self.p = p = module.params
        self.items = p["windows"]
        self.done: list[dict] = []
        self.client: dict = {}
        self.runs = [WindowRun(module, w, self.done, self.client) for w in workloads]
        self.driver_path = os.path.join(p["work_dir"], "epforge_bench_windows.py")
        self.spec_path = os.path.join(p["work_dir"], "epforge_bench_windows.json")
        self.timeline_path = os.path.join(p["work_dir"], "epforge_bench_windows.timeline.jsonl")
        self.argv = [p["python"], self.driver_path, self.spec_path]

    def exit_check_mode(self) -> None:
        names = ", ".join(run.workload["name"] for run in self.runs)
        self.module.exit_json(
            changed=True, argv=self.argv, msg=f"would run windows {names} against {self.p['base_url']}"
        )

    def prepare(self) -> int:
        """The driver's source, its spec and an empty timeline in work_dir; the log's size before the run."""
        offset = 0
        for run in self.runs:
            offset = run.prepare_dirs()
        spec = driver_spec(
            self.p["client_module"],
            self.timeline_path,
            [(run.workload, run.argv[3:]) for run in self.runs],  # the argv after `python -m MODULE`
        )
        try:
            with open(self.driver_path, "w", encoding="utf-8") as handle:
                handle.write(inspect.getsource(driver))  # works from Ansible's zipped module_utils too
            with open(self.spec_path, "w", encoding="utf-8") as handle:
                json.dump(spec, handle, indent=1)
            with open(self.timeline_path, "w", encoding="utf-8"):
                pass
        except OSError as exc:
            self.module.fail_json(msg=f"cannot write the bench driver into {self.p['work_dir']}: {exc}")
        return offset

    def run(self) -> None:
        offset = self.prepare()
        names = ", ".join(run.workload["name"] for run in self.runs)
        rc, seconds = run_logged(
            self.argv,
            self.p["log_path"],
            env=client_env(self.p, [run.workload for run in self.runs]),
            timeout=self.p["timeout"],
            header=f"bench_serving windows {names} (one client)",
        )
        output = read_new_log(self.p["log_path"], offset)
        try:
            with open(self.timeline_path, encoding="utf-8") as handle:
                timeline = read_timeline(handle.read())
        except OSError:
            timeline = read_timeline("")
        self.client.update(
            seconds=round(seconds, 2),
            startup_s=timeline["startup_s"],
            tokenizer_s=timeline["tokenizer_s"],
            gaps_s=timeline["gaps_s"],
        )
        for item, run in zip(self.items, self.runs, strict=True):
            times = timeline["windows"].get(run.workload["name"])
            finished = times is not None and times["finished"] is not None and times["error"] is None
            prompt_file = self.prompt_files.get(run.workload["dataset_path"])
            run.entry = history_entry(self.p, run.workload, prompt_file)
            run.output, run.rc = output, (rc if not finished else 0)
            run.seconds = run.entry["seconds"] = (times or {}).get("seconds") or 0.0
            run.accept_lengths = (times or {}).get("accept_lengths") or []
            if not finished:
                self.fail_window(run, rc, times)
            done = run.outcome()
            self.done.append(
                {
                    **item,
                    "workload": run.workload,
                    "status": done["status"],
                    "figures": done["figures"],
                    "invalid_reasons": done["invalid_reasons"],
                    **({"notes": done["notes"]} if done["notes"] else {}),
                    "expected": done["expected"],
                    "started": times["started"],
                    "finished": times["finished"],
                    "seconds": times["seconds"],
                }
            )
        last = self.runs[-1]
        self.module.exit_json(
            changed=True,
            argv=self.argv,
            windows=self.done,
            client=self.client,
            seconds=self.client["seconds"],
            ansible_facts={"epforge_bench_result": last.entry},
            msg="; ".join(
                summary(run.workload, window["figures"], window["invalid_reasons"])
                for run, window in zip(self.runs, self.done, strict=True)
            )
            + f" (one client, {self.client['seconds']} s)",
        )

    def fail_window(self, run: WindowRun, rc: int, times: dict | None) -> None:
        """The first window that did not finish fails the call, classified from the client's output."""
        failure_class, explanation = classify_failure(run.output, rc if rc != 0 else 1)
        if rc == 124:
            what = "did not finish within the timeout"
        elif times is None:
            what = "never started (the client failed before it)"
        else:
            what = f"failed ({times['error'] or 'cut off'})"
        run.fail(
            f"bench_serving {what}: {failure_class}: {explanation}, rc {rc}",
            failure_class,
            explanation,
            seconds=self.client["seconds"],
        )


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    workload, problems = input_problems(module.params)
    prompt_files = {}
    if not problems:
        prompt_files, problems = prompt_file_problems(workload if isinstance(workload, list) else [workload])
    if problems:
        module.fail_json(msg="bad sglang_bench input: " + "; ".join(problems), problems=problems)
    if module.params["windows"] is not None:
        windows = WindowsRun(module, workload, prompt_files)
        if module.check_mode:
            windows.exit_check_mode()
        windows.run()
        return
    run = BenchRun(module, workload)
    if module.check_mode:
        run.exit_check_mode()
    run.entry = history_entry(module.params, workload, prompt_files.get(workload["dataset_path"]))
    run.run_client()
    run.finish()


if __name__ == "__main__":
    main()
