"""playbooks/tune.yml end to end on this machine: role tuner plans a list space, launches each candidate
with role sglang_server (process manager; the server is the SGLang stand-in, a TEST DOUBLE, given different
knobs per candidate so that the right answer is known in advance) and measures it with SGLang's REAL
bench_serving client.

The answer known in advance (objective: highest output tok/s at concurrency 4 with TTFT p99 <= 250 ms):
- fastest-bad-ttft: 1 ms per token but 400 ms to the first token - the fastest, and it breaks the constraint
  (its first window says so: stopped early);
- cold-heavy: 4 ms per token, its first generations 3x slower - the winner: its cold burst never ranks;
- steady-slower: 8 ms per token - valid, but its first window is far below the incumbent: stopped early;
- crashes: dies at start-up the way SGLang does without DeepEP - classified, the search goes on;
- nccl-tree: refused by the known-issues table - never launched.
Run as users run it, `epforge tune`: its closing lines name the winner and its figures. Then a space whose
one candidate dies of CUDA out of memory under its first measured request (issue 34 item 4): classified from
the server's log first (cuda_out_of_memory), the client's symptom second; no winner, so the previous server
is restored and the run (ansible-playbook, `epforge tune`) fails.

Every candidate is judged by SGLang's REAL parser (the cached parser-only venv of tests/sglang_parser_env.py)
before its launch, as on a real host (sglang_server_require_verdict true): the candidates above differ only
in their environment, which the parser never sees, so one parser run judges them all and each digest must
still get its own verdict (issue 34 item 2: on a real H200, 4 of 5 such candidates were refused unjudged).

The server role creates its unprivileged service account: each test uses `epforge-tune-<crc of its name>` and
removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
import sglang_parser_env
from sglang_parser_env import parser_run_counter, parser_runs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
import bench_env  # noqa: E402

from playbooks import ANSIBLE_PLAYBOOK, LOCAL_INVENTORY, run_playbook  # noqa: E402

# Each test creates and removes a service account of its own (named after the test), so that pytest-xdist
# may run them at the same time.
ACCOUNTS: dict[Path, str] = {}
PLAYBOOK = ROOT / "playbooks" / "tune.yml"
sglang_env = sglang_parser_env.sglang_env
CRASH = {
    "SGLANG_STANDIN_CRASH_AFTER": "0.2",
    "SGLANG_STANDIN_CRASH_LINE": "ModuleNotFoundError: No module named 'deep_ep'",
}
# Ready and verified (the launch's own checks take two generations), then dead at the cold burst's first
# request the way a real server dies of a CUDA OOM: its client sees the connection drop, then refused.
OOM = {
    "SGLANG_STANDIN_CRASH_ON_REQUEST": "3",
    "SGLANG_STANDIN_CRASH_LINE": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 139.81 GiB of which 1.19 GiB is free.",
}


def candidates() -> list[dict]:
    # 256 output tokens at concurrency 4: 1 ms per token + 400 ms to the first token is the most tok/s
    # (about 1.6x cold-heavy's 4 ms per token) and a TTFT far past the 250 ms constraint.
    # cold-heavy's first 4 generations after ready are 3x slower: the launch's own checks take two, the
    # cold burst (tuner_cold_requests 2) the others.
    return [
        {
            "name": "fastest-bad-ttft",
            "env": {"SGLANG_STANDIN_TOKEN_DELAY_MS": "1", "SGLANG_STANDIN_FIRST_TOKEN_DELAY_MS": "400"},
        },
        {
            "name": "cold-heavy",
            "env": {
                "SGLANG_STANDIN_TOKEN_DELAY_MS": "4",
                "SGLANG_STANDIN_COLD_REQUESTS": "4",
                "SGLANG_STANDIN_COLD_FACTOR": "3",
            },
        },
        {"name": "steady-slower", "env": {"SGLANG_STANDIN_TOKEN_DELAY_MS": "8"}},
        {"name": "crashes", "env": CRASH},
        {"name": "nccl-tree", "env": {"NCCL_ALGO": "Tree"}},
    ]


# A shorter workload for the tests that do not rank on throughput against TTFT (resume, budget, group).
LIGHT = {"name": "tune-light", "input_len": 32, "output_len": 32, "num_prompts": 8, "concurrencies": [4]}


def tune_vars(
    base_dir: Path, python: Path, tok: Path, port: int, space: list[dict], *, parser: dict, **extra
) -> dict:
    """The tuner's variables; parser: the sglang_env fixture (SGLang's real parser judges each candidate)."""
    return {
        **bench_env.standin_server_vars(base_dir, tok, port, ACCOUNTS[base_dir], parser["python"]),
        "sglang_server_poll_interval": 0.1,
        "tuner_require_gpu": False,
        "tuner_python": str(python),
        "tuner_space": {"list": space},
        "tuner_workload": {
            "name": "tune-smoke",
            "input_len": 32,
            "output_len": 256,
            "num_prompts": 8,
            "concurrencies": [4],
        },
        "tuner_cold_requests": 2,
        "tuner_objective": {
            "metric": "output_throughput",
            "goal": "max",
            "constraints": [{"figure": "ttft_p99_ms", "max": 250}],
        },
        "tuner_candidate_limit_s": 300,
        # the stand-in's windows are short (8 prompts): they rank by their requests (4 here; the H200's
        # default is 64), and those under tuner_min_window_s (default 1 s) are listed as short, never dropped
        # (a floor on duration kept only the slow windows on the H200, tests/unit/test_tune_decision_h200.py);
        # its speed barely moves between launches unless its noise knobs say so
        "tuner_min_window_requests": 4,
        **extra,
    }


@pytest.fixture
def base_dir(request):
    """A world-readable base directory: the server runs as the unprivileged service account."""
    user = f"epforge-tune-{zlib.crc32(request.node.name.encode()):08x}"
    with bench_env.service_base_dir("epforge-tune-", user) as path:
        ACCOUNTS[path] = user
        yield path


def run_tune(
    base_dir: Path, extra: dict, *args: str, name: str = "tune", env: dict | None = None, cli: bool = False
) -> subprocess.CompletedProcess:
    """tune.yml through ansible-playbook, or (cli) as users run it: `epforge tune` (ansible-runner)."""
    vars_file = base_dir / f"{name}-vars.json"
    vars_file.write_text(json.dumps(extra))
    if cli:
        run_env = dict(os.environ, **(env or {}))
        run_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT / "src"), run_env.get("PYTHONPATH")) if p
        )
        argv = [sys.executable, "-m", "epforge.cli", "tune", "-e", f"@{vars_file}", *args]
        proc = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False, env=run_env
        )
    else:
        proc = run_playbook(PLAYBOOK, *args, vars_file=vars_file, env=env, timeout=1200)
    (base_dir.parent / f"{base_dir.name}-{name}.log").write_text(proc.stdout + proc.stderr)
    return proc


def closing_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The lines `epforge tune` ends with from its first 'tune on HOST:' line on."""
    lines = proc.stdout.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("tune on ")), len(lines))
    return lines[first:]


def stop_server(base_dir: Path, extra: dict) -> None:
    vars_file = base_dir / "stop-vars.json"
    vars_file.write_text(json.dumps(dict(extra, sglang_server_state="stopped")))
    proc = run_playbook(ROOT / "playbooks" / "serve.yml", vars_file=vars_file, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]


def tuning_fact(base_dir: Path) -> dict:
    return json.loads((base_dir / "facts" / "epforge_tuning.fact").read_text())


def server_fact(base_dir: Path) -> dict:
    return json.loads((base_dir / "facts" / "epforge_sglang_server.fact").read_text())


def server_info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/get_server_info", timeout=10) as answer:
        return json.loads(answer.read())


def verdicts(base_dir: Path) -> list[dict]:
    """The parser's verdicts on this host (role sglang_server's sglang_server_verdicts_file), oldest first."""
    return json.loads((base_dir / "state" / "sglang-flags-check.json").read_text())["verdicts"]


def launches(base_dir: Path, proc: subprocess.CompletedProcess) -> list[str]:
    """The candidates a run launched, from its own output."""
    return [c["name"] for c in candidates() if f"Launch and verify {c['name']}" in proc.stdout]


def assert_the_cli_names_the_winner_and_each_digest_was_judged(
    base_dir: Path, proc: subprocess.CompletedProcess, fact: dict, count_file: Path
) -> None:
    """`epforge tune` ends with the winner and its figures at the objective's concurrency (not the last window
    a candidate measured: before, a loser's), then the failed candidate with its cause. One argv, four
    environments: one run of SGLang's parser, and a verdict under each launched digest (what role
    sglang_server checks), all of this run's plan."""
    results = {r["name"]: r for r in fact["results"]}
    closing = closing_lines(proc)
    # the decision's figures (the median over the winner's ranked windows since issue 38), as in the fact
    winner = fact["winner_figures"]
    assert winner["output_throughput"] and results["cold-heavy"]["steady"]["4"]
    assert closing[:1] == [
        f"tune on localhost: winner cold-heavy (output_throughput {fact['value']:.2f} at concurrency 4): "
        f"{winner['output_throughput']:.1f} output tok/s, TTFT p99 {winner['ttft_p99_ms']:.1f} ms, "
        f"TPOT median {winner['tpot_median_ms']:.2f} ms; winner serving"
    ], proc.stdout[-3000:]
    assert len(closing) == 2 and closing[1].startswith("  failed crashes: deep_ep_missing"), closing
    assert "  benchmark " not in proc.stdout
    assert "has not judged this argv" not in proc.stdout, [r["reason"] for r in fact["results"]]
    assert parser_runs(count_file) == 1
    planned = [v for v in verdicts(base_dir) if v["plan"].startswith("tune-")]
    assert len({v["digest"] for v in planned}) == 4 and len({v["plan"] for v in planned}) == 1, planned
    assert fact["winner_object_digest"] in {v["digest"] for v in planned}


def assert_an_oom_fails_the_run_after_the_restore(
    base_dir: Path, failed: subprocess.CompletedProcess, port: int, running: dict
) -> None:
    """The candidate that died of CUDA OOM under its first measured request: classified from the server's log
    first, the client's symptom second; the server that ran before (the winner) restored, then the run
    failed, and `epforge tune` ends saying so."""
    assert failed.returncode != 0, failed.stdout[-6000:]
    after = tuning_fact(base_dir)
    assert after["winner"] is None and "previous server was restored" in after["decision"]
    (oom,) = after["results"]
    assert oom["status"] == "failed" and oom["reason"].startswith("cuda_out_of_memory: "), oom
    assert oom["cause"]["id"] == "cuda_out_of_memory" and "CUDA out of memory" in oom["cause"]["line"], oom
    symptom = oom["symptom"]["class"]
    assert symptom and symptom != "cuda_out_of_memory" and f"; client: {symptom}: " in oom["reason"], oom
    assert server_fact(base_dir)["settings_digest"] == running["settings_digest"]
    assert server_info(port)["port"] == port
    closing = closing_lines(failed)
    assert closing[0] == (
        "tune on localhost: no winner - no candidate met the constraints: the previous server was restored"
    ), failed.stdout[-3000:]
    assert closing[1].startswith("  failed oom: cuda_out_of_memory: ") and len(closing) == 2, closing
    assert (
        "FAILED localhost / Fail where one of these steps recorded a failure: tune: tune failed:"
        in failed.stdout
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_tune_picks_the_fastest_valid_candidate_and_leaves_it_serving(bench_client, sglang_env, base_dir):
    python, tok = bench_client
    port = bench_env.free_port()
    extra = tune_vars(base_dir, python, tok, port, candidates(), parser=sglang_env)
    counting, count_file = parser_run_counter(base_dir.parent / f"{base_dir.name}-counter")

    check = run_tune(base_dir, extra, "--check", name="check")
    assert check.returncode == 0, check.stdout[-4000:]
    assert "4 planned" in check.stdout and "nccl-tree" in check.stdout
    assert launches(base_dir, check) == [] and not (base_dir / "state" / "tuning").exists()

    proc = run_tune(base_dir, extra, env=counting, cli=True)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    fact = tuning_fact(base_dir)
    results = {r["name"]: r for r in fact["results"]}
    assert_the_cli_names_the_winner_and_each_digest_was_judged(base_dir, proc, fact, count_file)
    assert fact["winner"] == "cold-heavy", json.dumps(fact["ranking"], indent=1)
    assert fact["decision"] == "winner serving"
    # every window of the winner ranked, and each one under a second is listed as short, not dropped
    windows = results["cold-heavy"]["repeats"]["4"]
    assert fact["stats"]["cold-heavy"]["windows"] == len(windows)
    assert len(fact["stats"]["cold-heavy"]["short"]) == sum(w["duration_s"] < 1.0 for w in windows)
    # the fastest broke the TTFT constraint and lost to the second
    fastest = results["fastest-bad-ttft"]
    assert (
        fastest["steady"]["4"]["output_throughput"]
        > results["cold-heavy"]["steady"]["4"]["output_throughput"]
    )
    # its first window already broke the constraint: no later window could make it valid
    assert fastest["status"] == "stopped_early" and "ttft_p99_ms" in fastest["reason"], fastest
    assert "fastest-bad-ttft" not in fact["ranking"]["valid"]
    # the winner's cold burst was its worst moment, kept apart and not ranked
    cold_heavy = results["cold-heavy"]
    assert cold_heavy["cold"]["tpot_median_ms"] > 2 * cold_heavy["steady"]["4"]["tpot_median_ms"]
    assert (
        cold_heavy["cold"]["output_throughput"] < results["steady-slower"]["steady"]["4"]["output_throughput"]
    )
    # stopped early: its first window could not beat the incumbent
    assert results["steady-slower"]["status"] == "stopped_early", results["steady-slower"]
    crashed = results["crashes"]
    assert crashed["status"] == "failed" and crashed["reason"].startswith("deep_ep_missing"), crashed
    refused = {c["name"]: c for c in fact["refused"]}
    assert refused["nccl-tree"]["refused_by"][0]["id"] == "nccl_algo_tree_with_cuda_graphs"
    assert launches(base_dir, proc) == ["fastest-bad-ttft", "cold-heavy", "steady-slower", "crashes"]
    assert fact["not_tried"] == [] and fact["budget"]["spent_s"] > 0
    assert "epforge_server:" in proc.stdout and "SGLANG_STANDIN_COLD_FACTOR" in proc.stdout
    # the winner is serving, and what runs is the winner's settings object, confirmed by the role
    running = server_fact(base_dir)
    assert running["state"] == "started" and running["object"]["env"]["SGLANG_STANDIN_COLD_FACTOR"] == "3"
    assert running["settings_digest"] == fact["winner_object_digest"]
    assert server_info(port)["port"] == port

    # the same tune again: the plan now puts this host's earlier winner first (likely winners first), and the
    # run is still the same journal - every candidate finished, none launched again, the same decision
    again = run_tune(base_dir, extra, name="again")
    assert again.returncode == 0, again.stdout[-6000:]
    assert "its winner cold-heavy and the" in again.stdout and launches(base_dir, again) == []
    assert tuning_fact(base_dir)["winner"] == "cold-heavy"

    # a space whose one candidate dies of CUDA OOM under its first measured request
    all_fail = tune_vars(base_dir, python, tok, port, [{"name": "oom", "env": OOM}], parser=sglang_env)
    failed = run_tune(base_dir, all_fail, name="all-fail", env=counting, cli=True)
    assert_an_oom_fails_the_run_after_the_restore(base_dir, failed, port, running)
    assert parser_runs(count_file) == 1  # the same argv again: judged from the first run's verdicts
    stop_server(base_dir, extra)


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_a_sigkilled_search_resumes_without_running_a_finished_candidate_again(
    bench_client, sglang_env, base_dir
):
    python, tok = bench_client
    port = bench_env.free_port()
    space = [c for c in candidates() if c["name"] in ("steady-slower", "cold-heavy", "fastest-bad-ttft")]
    extra = tune_vars(base_dir, python, tok, port, space, parser=sglang_env, tuner_workload=LIGHT)
    vars_file = base_dir / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    with open(base_dir.parent / f"{base_dir.name}-killed.log", "w") as log:
        first = subprocess.Popen(
            [str(ANSIBLE_PLAYBOOK), "-i", str(LOCAL_INVENTORY), str(PLAYBOOK), "-e", f"@{vars_file}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        journal_dir = base_dir / "state" / "tuning"
        deadline = time.monotonic() + 600
        finished: list[str] = []
        while time.monotonic() < deadline and first.poll() is None:
            journals = list(journal_dir.glob("*.json"))
            if journals:
                finished = [r["name"] for r in json.loads(journals[0].read_text())["results"]]
                if finished:
                    break
            time.sleep(0.2)
        assert finished, "no candidate finished before the deadline"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    proc = run_tune(base_dir, extra, name="resumed")
    assert proc.returncode == 0, proc.stdout[-6000:]
    relaunched = launches(base_dir, proc)
    assert not set(finished) & set(relaunched), (finished, relaunched)
    fact = tuning_fact(base_dir)
    assert sorted(r["name"] for r in fact["results"]) == sorted(c["name"] for c in space)
    assert fact["winner"] == "cold-heavy"
    stop_server(base_dir, extra)


def test_check_mode_prints_each_hosts_default_plan_and_launches_nothing(tmp_path):
    """tune.yml --check on a 1-GPU host and on the fake 8x RTX PRO 6000 PCIe host: different default spaces,
    printed as the plan; no journal, no fact, no server."""
    sys.path.insert(0, str(ROOT / "tests"))
    from gpu_fact_samples import gpu_facts  # noqa: PLC0415

    plans = {}
    for label, facts in (("one", gpu_facts("9.0", 1, "none")), ("eight", gpu_facts("12.0", 8, "pcie"))):
        extra = {
            "epforge_facts_dir": str(tmp_path / label / "facts"),
            "epforge_state_dir": str(tmp_path / label / "state"),
            "epforge_log_dir": str(tmp_path / label / "log"),
            "epforge_server": {"model_path": "/models/demo-moe", "tp_size": 1},
            "preflight_min_free_gib": 1,
            "tuner_require_gpu": False,
            "tuner_gpu_facts": facts,
            "tuner_draft_model": "/models/draft",
            "tuner_workload": {
                "input_len": 128,
                "output_len": 64,
                "num_prompts": 8,
                "concurrencies": [1, 64],
            },
        }
        vars_file = tmp_path / f"{label}.json"
        vars_file.write_text(json.dumps(extra))
        if label == "one":
            proc = run_playbook(PLAYBOOK, "--check", vars_file=vars_file, timeout=300)
        else:  # as users run it: `epforge tune --check` (ansible-runner, streamed; the summary at the end)
            proc = subprocess.run(
                [sys.executable, "-m", "epforge.cli", "tune", "--check", "-v", "-e", f"@{vars_file}"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
                env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
            )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        plans[label] = proc.stdout
        assert "Launch and verify" not in proc.stdout and "nothing was launched" in proc.stdout
        assert not (tmp_path / label / "state" / "tuning").exists()
        assert not (tmp_path / label / "facts" / "epforge_tuning.fact").exists()
    assert "tp1+eagle3-s3k1d4+graph-default" in plans["one"] and "tp8" not in plans["one"]
    assert "tp8-ep8-deepep+eagle3-s5k4d8+graph-bs64+nccl-pcie" in plans["eight"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_a_spent_budget_lists_the_rest_as_not_tried_and_the_best_so_far_wins(
    bench_client, sglang_env, base_dir
):
    python, tok = bench_client
    port = bench_env.free_port()
    space = [c for c in candidates() if c["name"] in ("steady-slower", "cold-heavy")]
    extra = tune_vars(
        base_dir, python, tok, port, space, parser=sglang_env, tuner_budget_s=1, tuner_workload=LIGHT
    )
    proc = run_tune(base_dir, extra, name="budget")
    assert proc.returncode == 0, proc.stdout[-6000:]
    fact = tuning_fact(base_dir)
    # the first candidate ran (the budget was not spent before it), and used it up
    assert [r["name"] for r in fact["results"]] == ["cold-heavy"] and fact["not_tried"] == ["steady-slower"]
    assert fact["winner"] == "cold-heavy" and fact["budget"]["spent_s"] > fact["budget"]["budget_s"]
    assert launches(base_dir, proc) == ["cold-heavy"]
    stop_server(base_dir, tune_vars(base_dir, python, tok, port, space, parser=sglang_env))


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_two_leaders_within_the_launch_noise_are_relaunched_in_turn_then_declared_a_tie(
    bench_client, sglang_env, base_dir
):
    """Issue 38, seeded: two candidates of the same true speed on a stand-in whose speed moves +-10 % per
    launch (SGLANG_STANDIN_LAUNCH_NOISE, seed 38) are not told apart by one launch each: both relaunched in
    turn (one round), then a TIE declared and broken by the stated rule (fewer settings away from the
    request: `twin-extra` sets one variable more), in the fact and the closing lines."""
    python, tok = bench_client
    port = bench_env.free_port()
    shared = base_dir / "standin-noise"  # the server runs as the service account: it counts its launches here
    shared.mkdir()
    shared.chmod(0o777)
    noise = {
        "SGLANG_STANDIN_TOKEN_DELAY_MS": "4",
        "SGLANG_STANDIN_NOISE_SEED": "38",
        "SGLANG_STANDIN_LAUNCH_NOISE": "0.10",
        "SGLANG_STANDIN_WINDOW_NOISE": "0.03",
        "SGLANG_STANDIN_WINDOW_SECONDS": "0.2",
        "SGLANG_STANDIN_NOISE_COUNTER": str(shared / "launches"),
    }
    space = [
        {"name": "twin-extra", "env": {**noise, "SGLANG_STANDIN_ACCEPT_LENGTH": "2.5"}},
        {"name": "twin", "env": noise},
    ]
    extra = tune_vars(
        base_dir, python, tok, port, space, parser=sglang_env, tuner_workload=LIGHT, tuner_max_relaunches=1
    )
    proc = run_tune(base_dir, extra, name="tie")
    assert proc.returncode == 0, proc.stdout[-6000:]
    fact = tuning_fact(base_dir)
    assert fact["verdict"] == "tie", json.dumps(fact["ranking"], indent=1)
    assert set(fact["tie"]["names"]) == {"twin", "twin-extra"} and fact["tie"]["picked"] == "twin"
    assert fact["winner"] == "twin" and "fewer settings away from the request" in fact["tie"]["rule"]
    # the leader first, then the other: one relaunch each, their windows kept in the result
    relaunched = [r["name"] for r in fact["results"] if r.get("relaunches")]
    assert sorted(relaunched) == ["twin", "twin-extra"] and fact["relaunches"] == 2
    assert all(fact["stats"][name]["launches"] == 2 for name in relaunched), fact["stats"]
    # 2 launches, 2 relaunches (and the winner's, unless it ran last)
    assert int((shared / "launches").read_text()) >= 4
    assert "Launch and verify again: twin" in proc.stdout and "TIE between" in proc.stdout
    # each relaunch waits for a clean slate as a first launch does (tasks/clean_slate.yml)
    for name in ("twin", "twin-extra"):
        assert proc.stdout.count(f"Wait for a clean slate before {name}]") == 2, name
    # The same tune again, as on the H200 (2026-12-04, third lease; docs/gpu-runs.md): a finished journal
    # whose rounds ended at the budget launches nothing and stops nothing. Two rounds allowed now and the
    # budget just under what the journal spent, relaunches included: counting the candidates alone (before)
    # left the relaunches' seconds to spend, and the rerun stopped the winner to relaunch the leaders.
    journal = json.loads(Path(fact["journal"]).read_text())
    spent = sum(r["seconds"] + sum(x["seconds"] for x in r.get("relaunches", [])) for r in journal["results"])
    relaunched_s = spent - sum(r["seconds"] for r in journal["results"])
    assert relaunched_s > 5, journal  # the relaunches' share is what the old count missed
    again_vars = {**extra, "tuner_max_relaunches": 2, "tuner_budget_s": round(spent - 1, 1)}
    again = run_tune(base_dir, again_vars, name="tie-again")
    assert again.returncode == 0, again.stdout[-6000:]
    assert "Launch and verify again" not in again.stdout and launches(base_dir, again) == []
    assert "Stop the server that ran before" not in again.stdout
    again_fact = tuning_fact(base_dir)
    assert (again_fact["verdict"], again_fact["winner"], again_fact["relaunches"]) == ("tie", "twin", 2)
    assert again_fact["budget"]["spent_s"] >= spent
    stop_server(base_dir, extra)


def group_inventory(
    base_dir: Path, tok: Path, ports: dict, gpu: dict | None = None, parser_python: str | None = None
) -> Path:
    """Two hosts of group `boxes` on this machine (local connection), each with its own facts, state, logs,
    server port and files; the service account and its home are shared (one account on one machine)."""
    hosts = {}
    for name, port in ports.items():
        own = base_dir / name
        account = ACCOUNTS.get(base_dir, "epforge-tune-check")
        standin = bench_env.standin_server_vars(own, tok, port, account, parser_python)
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            **{k: v for k, v in standin.items() if k != "sglang_server_home"},
            "sglang_server_home": str(base_dir / "home"),
            **({"tuner_gpu_facts": gpu[name]} if gpu else {}),
        }
    inventory = base_dir / "group-inventory.json"
    inventory.write_text(
        json.dumps({"all": {"vars": {"epforge_stack": "cu130"}, "children": {"boxes": {"hosts": hosts}}}})
    )
    return inventory


def run_group(base_dir: Path, inventory: Path, extra: dict, *args: str) -> subprocess.CompletedProcess:
    vars_file = base_dir / "group-vars.json"
    vars_file.write_text(json.dumps(extra))
    proc = run_playbook(PLAYBOOK, *args, vars_file=vars_file, inventories=(inventory,), timeout=1200)
    (base_dir.parent / f"{base_dir.name}-group.log").write_text(proc.stdout + proc.stderr)
    return proc


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_a_group_is_measured_on_its_first_host_and_every_host_serves_the_winner(
    bench_client, sglang_env, base_dir
):
    python, tok = bench_client
    ports = {"box-a": bench_env.free_port(), "box-b": bench_env.free_port()}
    inventory = group_inventory(base_dir, tok, ports, parser_python=sglang_env["python"])
    space = [c for c in candidates() if c["name"] in ("cold-heavy", "steady-slower")]
    shared = {
        k: v
        for k, v in tune_vars(
            base_dir, python, tok, 0, space, parser=sglang_env, tuner_group="boxes", tuner_workload=LIGHT
        ).items()
        if k.startswith("tuner_") or k == "sglang_server_poll_interval"
    }
    proc = run_group(base_dir, inventory, shared)
    assert proc.returncode == 0, proc.stdout[-6000:]
    a, b = (json.loads((base_dir / h / "facts" / "epforge_tuning.fact").read_text()) for h in ports)
    assert a["winner"] == b["winner"] == "cold-heavy" and b["tuned_on"] == "box-a" == a["tuned_on"]
    assert b["results"] == a["results"] and b["decision"] == "winner serving"
    # measured once, on box-a: box-b has no journal; each serves the winner's settings on its own port
    assert (base_dir / "box-a" / "state" / "tuning").exists()
    assert not (base_dir / "box-b" / "state" / "tuning").exists()
    for host, port in ports.items():
        running = json.loads((base_dir / host / "facts" / "epforge_sglang_server.fact").read_text())
        assert running["state"] == "started" and running["object"]["settings"]["port"] == port
        assert running["object"]["env"]["SGLANG_STANDIN_COLD_FACTOR"] == "3"
        assert server_info(port)["port"] == port
    for host in ports:
        stop_server(
            base_dir / host,
            json.loads((base_dir / "group-vars.json").read_text())
            | {"epforge_facts_dir": str(base_dir / host / "facts")},
        )


def test_a_group_of_unlike_hosts_is_refused_before_anything_changes(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from gpu_fact_samples import gpu_facts  # noqa: PLC0415

    gpu = {"box-a": gpu_facts("12.0", 8, "pcie"), "box-b": gpu_facts("12.0", 4, "pcie")}
    inventory = group_inventory(tmp_path, Path("/models/m"), {"box-a": 30001, "box-b": 30002}, gpu)
    proc = run_group(tmp_path, inventory, {"tuner_group": "boxes", "tuner_require_gpu": False}, "--check")
    assert proc.returncode != 0
    assert "have the GPUs of box-a, which measures for the whole group" in proc.stdout
    assert "this host [4, ['12.0'], 'pcie'], box-a [8, ['12.0'], 'pcie']" in proc.stdout
    assert not (tmp_path / "box-b" / "state" / "tuning").exists()
    assert "TASK [tuner : Plan the candidates" not in proc.stdout  # the whole group stopped, box-a too


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_the_decision_changes_with_the_workload_when_speculation_pays_only_on_real_text(
    bench_client, sglang_env, base_dir
):
    """Issue 39: the same two candidates (NGRAM speculation on and off) tuned on random ids and on a prompt
    file of repeated text (tuner_workload.prompt_file, on the controller), concurrency 1. On the stand-in
    (SGLANG_STANDIN_SPEC_BY_PROMPT) drafts are accepted as often as a prompt repeats itself and cost 15 % per
    token either way: on random ids the speculative candidate is slower, on the file it wins - the tuner's
    answer follows the traffic. Before that, a damaged file fails the run before any plan or launch, naming
    the line and never the prompt; the good one is copied to the host once (0600, named by its sha256) and
    the fact holds its identity, not its text."""
    python, tok = bench_client
    port = bench_env.free_port()
    knob = {"SGLANG_STANDIN_SPEC_BY_PROMPT": "1", "SGLANG_STANDIN_TOKEN_DELAY_MS": "4"}
    # the expected winner of the first run last, so that it is still serving (no relaunch); the second run
    # puts the first run's winner first (the host's earlier decision), so its winner is last too
    space = [
        {"name": "ngram", "server": {"speculative_algorithm": "NGRAM"}, "env": knob},
        {"name": "nospec", "env": knob},
    ]
    private = "the alpha beta gamma delta report says the alpha beta gamma delta report"
    turn = {"content": "a reply"}
    lines = [json.dumps({"conversations": [{"content": f"{private} {private} {i}"}, turn]}) for i in range(8)]
    prompts = base_dir.parent / f"{base_dir.name}-repeated.jsonl"
    prompts.write_text("\n".join([*lines, json.dumps({"conversations": [{"content": private}]})]) + "\n")
    light = {**LIGHT, "concurrencies": [1]}
    from_file = {**light, "dataset": "custom", "prompt_file": str(prompts)}

    def variables(name: str, workload: dict) -> dict:
        extra = tune_vars(base_dir, python, tok, port, space, parser=sglang_env, tuner_workload=workload)
        extra["tuner_objective"] = {"metric": "output_throughput", "goal": "max"}
        extra["tuner_journal_dir"] = str(base_dir / "state" / f"tuning-{name}")
        # this stand-in has no launch noise: a user who measured that lowers the spread, and the 15 % the
        # drafts cost on random ids is told apart without relaunches
        extra["tuner_launch_spread"] = 0.02
        return extra

    refused = run_tune(base_dir, variables("file", from_file), name="bad-prompts")
    assert refused.returncode != 0
    assert "line 9: 'conversations' holds 1 turn(s), at least 2 are needed" in refused.stdout
    assert private not in refused.stdout + refused.stderr
    assert launches(base_dir, refused) == [] and not (base_dir / "state" / "tuning-file").exists()

    prompts.write_text("\n".join(lines) + "\n")
    winners, accept = {}, {}
    for name, workload in (("random", light), ("file", from_file)):
        proc = run_tune(base_dir, variables(name, workload), name=f"spec-{name}")
        assert proc.returncode == 0, proc.stdout[-6000:]
        fact = tuning_fact(base_dir)
        winners[name] = fact["winner"]
        accept[name] = {r["name"]: r["steady"]["1"]["accept_length"] for r in fact["results"]}
        assert all(r["steady"]["1"]["completed"] == LIGHT["num_prompts"] for r in fact["results"])
        assert fact["ranking"]["verdict"] == "clear" and fact["relaunches"] == 0
    assert winners == {"random": "nospec", "file": "ngram"}
    # the server's acceptance (its avg_spec_accept_length, read by the client) says why
    assert accept["random"]["nospec"] is None and accept["file"]["nospec"] is None
    assert accept["random"]["ngram"] < 1.3
    assert accept["file"]["ngram"] > 1.6

    sha256 = hashlib.sha256(prompts.read_bytes()).hexdigest()
    staged = base_dir / "state" / "tuning-file" / "prompts" / f"{sha256}.jsonl"
    assert staged.read_bytes() == prompts.read_bytes() and staged.stat().st_mode & 0o777 == 0o600
    identity = {k: fact["prompt_file"][k] for k in ("dataset", "sha256", "prompts")}
    assert identity == {"dataset": "custom", "sha256": sha256, "prompts": 8}
    assert private not in json.dumps(fact)
    stop_server(base_dir, variables("file", from_file))
