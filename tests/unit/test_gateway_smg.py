"""The real Shepherd Model Gateway (smg, PyPI) in front of the SGLang stand-in (a TEST DOUBLE of SGLang's
server): the contract the gateway work of issue 24 builds on. smg asks a worker what it asks real SGLang
(/get_server_info, /get_model_info, /v1/models, /health); the stand-in must answer so that smg lists it as an
SGLang worker with its model, routes generations to it, and routes around it when it dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import bench_env
import pytest
from hub_mirror import free_port

SMG = Path(sys.executable).parent / "smg"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def generate(url: str) -> int:
    body = json.dumps({"text": "w1 w2", "sampling_params": {"max_new_tokens": 4}}).encode()
    request = urllib.request.Request(
        url + "/generate", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass
        time.sleep(0.25)
    return False


@pytest.fixture
def fleet(tmp_path):
    """Two stand-ins with access logs and smg (round robin, health checked every second) in front."""
    workers = [
        bench_env.start_standin(
            "/models/fleet", env={"SGLANG_STANDIN_ACCESS_LOG": "1"}, log_path=tmp_path / f"worker{i}.log"
        )
        for i in range(2)
    ]
    port = free_port()
    argv = [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    argv += ["--worker-urls", *[url for _, url in workers]]
    argv += ["--health-check-interval-secs", "1", "--health-failure-threshold", "2"]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    with (tmp_path / "smg.log").open("wb") as log:
        gateway = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: get_json(url + "/workers")["total"] == 2, 60), (
            tmp_path / "smg.log"
        ).read_text()
        yield url, workers, tmp_path
    finally:
        os.killpg(gateway.pid, signal.SIGKILL)
        gateway.wait(timeout=30)
        for proc, _ in workers:
            bench_env.stop(proc)


def test_smg_lists_the_standins_as_sglang_workers_and_routes_to_each(fleet):
    url, workers, tmp_path = fleet
    listed = get_json(url + "/workers")["workers"]
    assert sorted(w["url"] for w in listed) == sorted(u for _, u in workers)
    for worker in listed:
        assert worker["runtime_type"] == "sglang" and worker["is_healthy"] is True
        assert worker["model_id"] == "/models/fleet" and worker["labels"]["tp_size"] == "1"
    assert [generate(url) for _ in range(6)] == [200] * 6
    served = [(tmp_path / f"worker{i}.log").read_text().count('"POST /generate') for i in range(2)]
    assert served == [3, 3], served  # round robin: every worker got its share, none was skipped


def test_smg_routes_around_a_killed_standin(fleet):
    url, workers, _tmp_path = fleet
    dead_proc, dead_url = workers[0]
    dead_proc.kill()
    dead_proc.wait(timeout=30)
    statuses = [generate(url) for _ in range(20)]
    healthy = {w["url"]: w["is_healthy"] for w in get_json(url + "/workers")["workers"]}
    assert wait_for(
        lambda: (
            not {w["url"]: w["is_healthy"] for w in get_json(url + "/workers")["workers"]}.get(
                dead_url, False
            )
        ),
        15,
    ), healthy
    after = [generate(url) for _ in range(10)]
    assert after == [200] * 10, after
    print(f"during the failure: {statuses.count(200)}/20 succeeded, then 10/10")
