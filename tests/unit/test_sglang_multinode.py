"""One model across nodes (nnodes 2): two ranks of the SGLang stand-in (a TEST DOUBLE of SGLang's server)
through module sglang_server on this machine (process manager, loopback), the rendezvous over real TCP at
dist_init_addr. Ready means joined: rank 0 answers /health only when every rank came, rank 1 serves only
/health (SGLang 0.5.23's dummy health server) once it joined. A rank that never joins is named with its log
tail and classified; the group's death follows one rank's. The podman tier (two hosts) is next."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hub_mirror import free_port
from moduletools import run_module_in

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "epforge_sglang_launch.py"
STANDIN = ROOT / "tests" / "sglang_standin"


def rank_args(tmp_path: Path, rank: int, dist_port: int, *, timeout: float = 30, join_port=None) -> dict:
    """Module arguments of one rank; join_port sends a rank >= 1 to another port than rank 0 listens on."""
    port = free_port()
    return {
        "name": f"group-rank{rank}",
        "manager": "process",
        "settings": {
            "model_path": "/models/standin",
            "tp_size": 2,
            "nnodes": 2,
            "node_rank": rank,
            "dist_init_addr": f"127.0.0.1:{join_port if rank and join_port else dist_port}",
            "port": port,
            "extra_args": ["--dist-timeout", str(int(timeout))],
            "env": {"PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_LOAD_SECONDS": "0.3"},
        },
        "python": sys.executable,
        "launcher": str(LAUNCHER),
        "log_path": str(tmp_path / f"rank{rank}.log"),
        "state_dir": str(tmp_path / f"state{rank}"),
        "timeout": timeout + 15,
        "poll_interval": 0.1,
    }


def launch_group(tmp_path: Path, ranks: list[dict]) -> list[dict]:
    """Every rank's module call at once, as Ansible runs one task on every host of the group."""
    results: list[dict] = [{} for _ in ranks]

    def run(i: int) -> None:
        results[i] = run_module_in(tmp_path / f"args{i}", "sglang_server", ranks[i], timeout=120)

    for i in range(len(ranks)):
        (tmp_path / f"args{i}").mkdir(exist_ok=True)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ranks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(150)
    return results


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.fixture
def group(tmp_path):
    dist_port = free_port()
    ranks = [rank_args(tmp_path, 0, dist_port), rank_args(tmp_path, 1, dist_port)]
    yield ranks
    for i, args in enumerate(ranks):
        (tmp_path / f"args{i}").mkdir(exist_ok=True)
        run_module_in(tmp_path / f"args{i}", "sglang_server", {**args, "state": "absent"})


def test_two_ranks_join_over_tcp_and_serve_as_one(group, tmp_path):
    rank0, rank1 = launch_group(tmp_path, group)
    assert rank0.get("failed") is not True, rank0.get("msg")
    assert rank1.get("failed") is not True, rank1.get("msg")
    assert rank0["group"] == {
        "nnodes": 2,
        "node_rank": 0,
        "dist_init_addr": group[0]["settings"]["dist_init_addr"],
        "joined": True,
    }
    assert rank1["group"]["node_rank"] == 1 and rank1["group"]["joined"] is True
    assert rank0["running"]["nnodes"] == 2 and rank0["settings_mismatch"] == []
    # rank 1: SGLang's health-only server, its settings confirmed on rank 0
    assert rank1["settings_confirmation"]["confirmed"] == []
    assert all("node_rank 0" in u["reason"] for u in rank1["settings_confirmation"]["unconfirmed"])
    url1 = rank1["url"]
    assert status(url1 + "/health") == 200 and status(url1 + "/get_server_info") == 404
    assert status(rank0["url"] + "/get_server_info") == 200
    # what SGLang 0.5.23 prints around the rendezvous (sglang/srt/distributed/bootstrap.py)
    for rank in (0, 1):
        log = (tmp_path / f"rank{rank}.log").read_text()
        assert "Init parallel begin." in log and "Init parallel ends. elapsed=" in log
    # a rerun changes nothing
    again = launch_group(tmp_path, group)
    assert [r["changed"] for r in again] == [False, False]


def test_a_rank_that_never_joins_is_named_with_its_log_tail(tmp_path):
    dist_port = free_port()
    ranks = [
        rank_args(tmp_path, 0, dist_port, timeout=4),
        rank_args(tmp_path, 1, dist_port, timeout=4, join_port=free_port()),  # nothing listens there
    ]
    try:
        rank0, rank1 = launch_group(tmp_path, ranks)
    finally:
        for i, args in enumerate(ranks):
            run_module_in(tmp_path / f"args{i}", "sglang_server", {**args, "state": "absent"})
    assert rank1["failed"] is True
    assert "node_rank 1 of 2" in rank1["msg"] and "stopped while starting" in rank1["msg"]
    assert rank1["classification"][0]["id"] == "multinode_join_timeout"
    assert "DistNetworkError: The client socket has timed out" in rank1["log_tail"]
    assert rank0["failed"] is True and "node_rank 0 of 2" in rank0["msg"]
    assert "1/2 clients joined" in rank0["log_tail"]
    assert rank0["classification"][0]["id"] == "multinode_join_timeout"


def kill_session(leader: int) -> list[int]:
    """kill -9 of every process of the session the launcher leads (the server runs in a process group of its
    own inside it); the pids killed."""
    killed = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == leader:  # field 6 of stat: the session id
            os.kill(int(pid), signal.SIGKILL)
            killed.append(int(pid))
    return killed


def test_when_one_rank_dies_the_other_follows(group, tmp_path):
    rank0, rank1 = launch_group(tmp_path, group)
    assert rank0.get("failed") is not True and rank1.get("failed") is not True
    assert len(kill_session(rank1["pid"])) >= 2  # the launcher and the server
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and status(rank0["url"] + "/health") == 200:
        time.sleep(0.1)
    assert status(rank0["url"] + "/health") == 0
    log = (tmp_path / "rank0.log").read_text()
    assert "lost a peer of the distributed group" in log
    print(json.dumps({"rank0_log_tail": log.splitlines()[-3:]}))
    # what the next serve run asks each rank before any starts (state probed changes nothing)
    probes = [
        run_module_in(tmp_path / f"args{i}", "sglang_server", {**args, "state": "probed"})
        for i, args in enumerate(group)
    ]
    for probe, launched in zip(probes, (rank0, rank1), strict=True):
        assert probe["changed"] is False and probe["alive"] is False and probe["ended"] is True
        assert (
            probe["ready_pid"] == launched["pid"] and probe["ended_at"] is None
        )  # a process leaves no exit time


def test_a_group_that_still_runs_is_not_ended(group, tmp_path):
    launched = launch_group(tmp_path, group)
    probes = [
        run_module_in(tmp_path / f"args{i}", "sglang_server", {**args, "state": "probed"})
        for i, args in enumerate(group)
    ]
    assert [(p["alive"], p["ended"], p["pid"]) for p in probes] == [(True, False, r["pid"]) for r in launched]
