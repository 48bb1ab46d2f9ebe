"""Role sglang_benchmark in a play after role sglang_server (process manager, the SGLang stand-in: a TEST
DOUBLE), with SGLang's REAL bench_serving client: the play ends with ansible_local.epforge_bench holding the
result and the history; a second run appends (never loses); a run against a stopped server appends a failure
record and the play goes on when sglang_benchmark_fail_on_error is false.

The server role creates its unprivileged service account: this test uses `epforge-bench-test` and removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

from playbooks import run_playbook  # noqa: E402

USER = "epforge-bench-test"

PLAY = """---
- name: Serve and benchmark
  hosts: localhost
  gather_facts: false
  roles:
    # preflight builds the server settings object role sglang_server launches
    - role: preflight
    - role: sglang_server
      vars:
        sglang_server_state: "{{ 'started' if serve | bool else 'stopped' }}"
    - role: sglang_benchmark
  post_tasks:
    - name: Read the local facts back
      ansible.builtin.setup:
        gather_subset: ['!all', '!min', 'local']
        fact_path: "{{ epforge_facts_dir }}"
        filter: ansible_local
    - name: Save what the host now holds, and the run's step summary
      ansible.builtin.copy:
        dest: "{{ held_file }}"
        mode: "0644"
        content: >-
          {{ {'bench': ansible_facts['ansible_local'].epforge_bench, 'steps': epforge_steps} | to_json }}
"""


@pytest.fixture
def base_dir():
    """A world-readable base directory: the server runs as the unprivileged service account."""
    with bench_env.service_base_dir("epforge-bench-role-", USER) as path:
        yield path


def play(base: Path, extra: dict, *, serve: bool) -> tuple[subprocess.CompletedProcess, dict]:
    playbook = base / "play.yml"
    playbook.write_text(PLAY)
    vars_file = base / "vars.json"
    held_file = base / "held.json"
    held_file.unlink(missing_ok=True)
    vars_file.write_text(json.dumps({**extra, "serve": serve, "held_file": str(held_file)}))
    proc = run_playbook(playbook, vars_file=vars_file, timeout=900)
    held = json.loads(held_file.read_text()) if held_file.exists() else {"bench": {}, "steps": []}
    return proc, held


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_role_records_and_appends_and_survives_a_failed_run(bench_client_python, base_dir):
    client = bench_client_python
    tok = bench_env.make_tokenizer_with(client, base_dir / "tokenizer")
    port = bench_env.free_port()
    extra = {
        **bench_env.standin_server_vars(base_dir, tok, port, USER),
        "sglang_benchmark_python": str(client),
        "sglang_benchmark_require_gpu": False,
        "sglang_benchmark_label": "tp1-standin",
        "sglang_benchmark_workload": {
            "name": "role-smoke",
            "input_len": 64,
            "output_len": 16,
            "num_prompts": 8,
            "max_concurrency": 4,
        },
        "sglang_benchmark_warmup_workload": {
            "name": "warmup",
            "input_len": 32,
            "output_len": 4,
            "num_prompts": 2,
            "max_concurrency": 2,
        },
    }
    first, out1 = play(base_dir, extra, serve=True)
    held = out1["bench"]
    assert first.returncode == 0, first.stdout[-4000:]
    assert held["runs"] == 1 and len(held["history"]) == 1
    assert held["last"]["status"] == "ok" and held["last"]["label"] == "tp1-standin"
    assert held["last"]["figures"]["completed"] == 8
    assert held["last"]["stack"]["name"] == "cu130" and held["last"]["stack"]["sglang"] == "0.5.23"
    assert held["last"]["workload"]["input_len"] == 64
    step = next(x for x in out1["steps"] if x["step"] == "sglang_benchmark")
    assert step["status"] == "done" and step["detail"].startswith("tp1-standin:")

    # the second run sends the user's own prompts from a file on the controller: checked there, copied to
    # the host once (0600, named by its sha256), read by the client from the copy
    prompts = base_dir / "controller-prompts.jsonl"
    line = {"conversations": [{"role": "user", "content": "the private prompt text of user seven"}] * 2}
    prompts.write_text("".join(json.dumps(line) + "\n" for _ in range(8)))
    from_file = {
        **extra,
        "sglang_benchmark_workload": {
            "name": "role-file",
            "dataset": "custom",
            "prompt_file": str(prompts),
            "output_len": 16,
            "num_prompts": 8,
            "max_concurrency": 4,
        },
    }
    second, out2 = play(base_dir, from_file, serve=True)
    held2 = out2["bench"]
    assert second.returncode == 0, second.stdout[-4000:]
    assert [e["id"] for e in held2["history"][:1]] == [held["history"][0]["id"]]
    assert held2["runs"] == 2 and len(held2["history"]) == 2
    digest = hashlib.sha256(prompts.read_bytes()).hexdigest()
    assert held2["last"]["prompt_file"]["sha256"] == digest and held2["last"]["prompt_file"]["prompts"] == 8
    (staged,) = [p for p in base_dir.rglob(f"{digest}.jsonl") if p != prompts]
    assert staged.read_bytes() == prompts.read_bytes() and staged.stat().st_mode & 0o777 == 0o600
    assert held2["last"]["workload"]["dataset_path"] == str(staged)

    # the server is stopped (the role in the third play): the benchmark fails, is recorded, and
    # (fail_on_error false) the play goes on
    third, out3 = play(
        base_dir,
        {**extra, "sglang_benchmark_fail_on_error": False, "sglang_benchmark_ready_check_timeout": 2},
        serve=False,
    )
    assert third.returncode == 0, third.stdout[-4000:]
    held3 = out3["bench"]
    assert held3["runs"] == 3 and held3["failures"] == 1
    assert [e["id"] for e in held3["history"][:2]] == [e["id"] for e in held2["history"]]
    assert held3["last"]["status"] == "failed" and held3["last_ok"]["id"] == held2["last"]["id"]
    assert held3["last"]["error"]["class"] in ("server_not_ready", "connection_refused")
    failed = next(x for x in out3["steps"] if x["step"] == "sglang_benchmark")
    assert failed["status"] == "failed" and held3["last"]["error"]["class"] in failed["detail"]


def test_benchmark_playbook_alone_skips_a_host_without_gpu(tmp_path):
    """playbooks/benchmark.yml alone runs preflight first (as serve.yml does): on this GPU-less machine both
    steps are recorded as skipped with the reason, and no bench client is started against no server.

    It builds nothing, so its disk check needs only what a server run writes (2 GiB), not the provisioning
    need: CI on 2026-12-03 refused tune, sweep and benchmark runs with 16.9 GiB free of the 20 GiB a build
    needs. Here the build need is set far above this machine's free space."""
    from playbooks import write_vars  # noqa: PLC0415

    free_gib = shutil.disk_usage(tmp_path).free / 1024**3
    extra = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "preflight_min_free_gib": round(free_gib * 2 + 100),
    }
    proc = run_playbook(
        ROOT / "playbooks" / "benchmark.yml", vars_file=write_vars(tmp_path / "vars.json", extra), timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (
        "TASK [sglang_benchmark : Decide whether this host benchmarks, and record a skipped benchmark]"
        in proc.stdout
    )
    assert "Warm up the server" not in proc.stdout and "bench_serving failed" not in proc.stdout
    assert not (tmp_path / "state" / "bench").exists()
    checks = json.loads((tmp_path / "facts" / "epforge_preflight.fact").read_text())["checks"]
    disk = next(check for check in checks if check["name"] == "disk")
    assert disk == {
        "name": "disk",
        "ok": True,
        "status": "passed",
        # preflight_min_free_gib above what is free: enough for this run, not for one that builds
        "detail": f"at least 2 GiB free on {tmp_path / 'state'}: enough for a run that builds nothing, not "
        f"for one that builds ({extra['preflight_min_free_gib']} GiB)",
    }


def test_benchmark_playbook_fails_the_run_on_an_invalid_measurement(bench_client, tmp_path):
    """Issue 34 item 4: playbooks/benchmark.yml through `epforge run` against a stand-in (a TEST DOUBLE) that
    stops every generation after 4 tokens although the client asked 16: the run is recorded (status invalid,
    its figures, the step failed) and then fails the run - `epforge` exits non-zero and says why."""
    from playbooks import write_vars  # noqa: PLC0415

    python, tok = bench_client
    server, url = bench_env.start_standin(str(tok), env={"SGLANG_STANDIN_MAX_NEW_TOKENS": "4"})
    try:
        extra = {
            "epforge_facts_dir": str(tmp_path / "facts"),
            "epforge_state_dir": str(tmp_path / "state"),
            "epforge_log_dir": str(tmp_path / "log"),
            "preflight_min_free_gib": 1,
            "sglang_benchmark_require_gpu": False,
            "sglang_benchmark_python": str(python),
            "sglang_benchmark_base_url": url,
            "sglang_benchmark_tokenizer": str(tok),
            "sglang_benchmark_warmup": False,
            "sglang_benchmark_label": "capped",
            "sglang_benchmark_workload": {
                "name": "capped",
                "input_len": 32,
                "output_len": 16,
                "num_prompts": 4,
                "max_concurrency": 2,
            },
        }
        vars_file = write_vars(tmp_path / "vars.json", extra)
        proc = subprocess.run(
            [sys.executable, "-m", "epforge.cli", "run", "playbooks/benchmark.yml", "-e", f"@{vars_file}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert proc.returncode != 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    bench = json.loads((tmp_path / "facts" / "epforge_bench.fact").read_text())
    # Every stream ended 12 tokens short under ignore_eos: since issue 38 such a request is a stream that did
    # not finish (sglang_bench/streams.py: the client cannot see a final chunk) and counts as failed, so the
    # window has no completed request - recorded failed, with its figures and the count of cut streams.
    last = bench["last"]
    assert last["status"] == "failed" and last["label"] == "capped", last
    assert last["figures"]["cut_streams"] == 4 and last["figures"]["completed"] == 0, last["figures"]
    assert "benchmark capped: failed" in proc.stdout, proc.stdout[-3000:]
    assert "benchmark capped: failed (requests_failed)" in proc.stdout
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED localhost / ")]
    assert failed and all("4 of 4 requests failed" in line for line in failed), proc.stdout[-3000:]
