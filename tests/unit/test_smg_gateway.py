"""Module smg_gateway (the real smg from PyPI in front of SGLang stand-ins, a TEST DOUBLE of SGLang's server),
module server_access_count (on a real SGLang capture and on the stand-in's log) and the fleet address rule
(filters epforge.ep.gateway_workers / gateway_unreachable). The podman fleet is molecule/gateway."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bench_env
import pytest
from hub_mirror import free_port
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.filter.gateway_workers import gateway_workers, unreachable_reason
from ansible_collections.epforge.ep.plugins.module_utils.smg_gateway.request import (
    GatewayRequest,
    RequestError,
)
from playbooks import run_playbook, write_vars

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "epforge_sglang_launch.py"
CAPTURE = ROOT / "tests" / "fixtures" / "sglang_h200" / "tp1-graph-server.log"
KEY = "sk-gateway-test-0b7e2c55-never-print-me"
MODEL = "/models/fleet"


def params(**over) -> dict:
    base = {
        "workers": ["http://127.0.0.1:30001"],
        "host": "127.0.0.1",
        "port": 30080,
        "metrics_port": 29000,
        "policy": "cache_aware",
        "health_check_interval": 10,
        "health_failure_threshold": 3,
        "health_check_timeout": 0,
        "sglang_health_timeout": 20,
        "overload_protection": False,
        "overload_waiting_requests": 8,
        "overload_token_usage": 0.8,
        "api_key": "",
        "extra_args": [],
    }
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"workers": []}, "workers is empty"),
        (
            {"workers": ["http://10.0.0.5:30000"]},
            "non-loopback address (http://10.0.0.5:30000) need an API key",
        ),
        ({"host": "0.0.0.0"}, "binds every interface without an API key"),
        ({"workers": ["10.0.0.5:30000"], "api_key": KEY}, "is not an http(s)://HOST:PORT URL"),
        ({"workers": ["http://127.0.0.1:1", "http://127.0.0.1:1/"]}, "more than once"),
        ({"metrics_port": 30080}, "port and metrics_port are both 30080"),
        ({"extra_args": ["--api-key=x", "--log-level", "debug"]}, "extra_args may not set --api-key"),
        ({"extra_args": ["--worker-urls", "http://127.0.0.1:2"]}, "may not set --worker-urls"),
        ({"health_failure_threshold": 0}, "health_failure_threshold must be at least 1"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(over, says):
    with pytest.raises(RequestError, match=None) as caught:
        GatewayRequest.from_params(params(**over))
    assert says in str(caught.value), str(caught.value)


def test_the_flags_are_rendered_once_and_the_key_is_not_among_them():
    request = GatewayRequest.from_params(
        params(workers=["http://10.0.0.5:30000/"], api_key=KEY, extra_args=["--log-level", "debug"])
    )
    flags = request.flags()
    assert flags[:5] == ["launch", "--host", "127.0.0.1", "--port", "30080"]
    assert flags[flags.index("--worker-urls") + 1] == "http://10.0.0.5:30000"  # trailing slash dropped
    assert flags[flags.index("--prometheus-host") + 1] == "127.0.0.1"
    assert flags[-2:] == ["--log-level", "debug"]
    assert KEY not in flags and "--api-key" not in flags


class HostVars(dict):
    """hostvars as the filter reads it: hostvars[host] -> that host's variables."""


def endpoint(bind: str, port: int = 30000, url: str | None = None) -> dict:
    return {
        "url": url or f"http://127.0.0.1:{port}",
        "bind": bind,
        "port": port,
        "model": MODEL,
        "log_path": "/var/log/epforge/sglang-server.log",
        "api_key_set": True,
    }


def test_workers_are_addressed_by_the_one_rule():
    hostvars = HostVars(
        {
            "gw": {"sglang_server_endpoint": endpoint("127.0.0.1")},  # the gateway's own host: as confirmed
            "a": {"sglang_server_endpoint": endpoint("0.0.0.0"), "ansible_host": "10.0.0.11"},
            "b": {"sglang_server_endpoint": endpoint("0.0.0.0"), "gateway_worker_address": "10.1.0.12"},
            "c": {"sglang_server_endpoint": endpoint("10.0.0.13", 30001)},
            "d": {"sglang_server_endpoint": endpoint("0.0.0.0")},  # no ansible_host: its inventory name
            "e": {},  # no verified server: left out
        }
    )
    urls = [w["url"] for w in gateway_workers(hostvars, ["gw", "a", "b", "c", "d", "e"], "gw")]
    assert urls == [
        "http://127.0.0.1:30000",
        "http://10.0.0.11:30000",
        "http://10.1.0.12:30000",
        "http://10.0.0.13:30001",
        "http://d:30000",
    ]


def test_a_server_bound_to_loopback_on_another_host_is_refused_with_the_remedy():
    from ansible.errors import AnsibleFilterError  # noqa: PLC0415

    hostvars = HostVars({"a": {"sglang_server_endpoint": endpoint("127.0.0.1")}})
    with pytest.raises(AnsibleFilterError, match=r"only a itself reaches.*epforge_server\.host"):
        gateway_workers(hostvars, ["a"], "gw")
    assert unreachable_reason("127.0.0.1", "a", ["a"]) == ""  # its own gateway reaches it
    assert unreachable_reason("0.0.0.0", "a", ["gw"]) == ""
    assert "without an API key" in unreachable_reason("0.0.0.0", "a", ["gw"], False)
    assert "only a itself reaches" in unreachable_reason("::1", "a", ["gw"])
    assert "but the gateway on gw fronts it" in unreachable_reason("127.0.0.1", "a", ["gw", "a"])
    assert "but the gateways on gw, gw2 front it" in unreachable_reason("127.0.0.1", "a", ["gw", "gw2"])


def test_a_gateway_only_host_is_left_to_the_gateway_play(tmp_path):
    """site.yml on an inventory whose gateway host serves nothing (in group epforge_gateway, not in
    epforge_gateway_serves): play 1 says so and ends there (no preflight, no install), play 2 runs the
    gateway role, which finds no verified server and records that; the summary holds both steps."""
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "gpu_hosts": {"hosts": {}},
                        "epforge_gateway": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        },
                    },
                    "vars": {"epforge_gateway_serves": "gpu_hosts"},
                }
            }
        )
    )
    state = {f"epforge_{name}_dir": str(tmp_path / name) for name in ("state", "log", "facts")}
    proc = run_playbook(
        ROOT / "site.yml", vars_file=write_vars(tmp_path / "vars.json", state), inventories=(inventory,)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "localhost is in group epforge_gateway and not in group gpu_hosts: it runs the gateway only" in (
        " ".join(proc.stdout.split())
    )
    assert "preflight :" not in proc.stdout and "ml_env :" not in proc.stdout
    steps = json.loads((tmp_path / "facts" / "epforge_steps.fact").read_text())["steps"]
    assert [(s["step"], s["status"]) for s in steps] == [
        ("gateway", "skipped"),
        ("fleet_benchmark", "skipped"),
    ]
    assert "no server of group gpu_hosts was verified" in steps[0]["reason"]


def test_access_lines_of_a_real_sglang_capture_are_counted(tmp_path):
    """tests/fixtures/sglang_h200/tp1-graph-server.log is real SGLang 0.5.16 output on an H200 (uvicorn access
    lines included); the count must equal what grep finds there, with its 200s apart."""
    text = CAPTURE.read_text()
    expected = sum(1 for line in text.splitlines() if '"POST /generate HTTP/1.1"' in line)
    expected_ok = sum(1 for line in text.splitlines() if '"POST /generate HTTP/1.1" 200 OK' in line)
    result = run_module_in(tmp_path, "server_access_count", {"log_path": str(CAPTURE)})
    assert result["changed"] is False
    assert (result["requests"], result["ok"]) == (expected, expected_ok) and expected > 0
    assert result["by_client"] == {"127.0.0.1": expected}
    marked = run_module_in(
        tmp_path, "server_access_count", {"log_path": str(CAPTURE), "since": result["size"]}
    )
    assert marked["requests"] == 0  # nothing since the mark


@pytest.fixture
def workers(tmp_path):
    """Two stand-ins with the key, their logs in tmp_path."""
    started = [
        bench_env.start_standin(MODEL, extra_args=["--api-key", KEY], log_path=tmp_path / f"worker{i}.log")
        for i in range(2)
    ]
    yield [url for _, url in started]
    for proc, _ in started:
        bench_env.stop(proc)


def gateway_args(tmp_path: Path, urls: list[str], **over) -> dict:
    args = {
        "manager": "process",
        "python": sys.executable,
        "launcher": str(LAUNCHER),
        "workers": urls,
        "model": MODEL,
        "api_key": KEY,
        "port": free_port(),
        "metrics_port": free_port(),
        "policy": "round_robin",
        "health_check_interval": 1,
        "sglang_health_timeout": 20,
        "log_path": str(tmp_path / "gateway.log"),
        "state_dir": str(tmp_path / "state"),
        "timeout": 60,
    }
    args.update(over)
    return args


def cmdlines_with(text: str, *also: str) -> list[str]:
    """Pids whose command line holds text and every one of also."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if all(word.encode() in cmdline for word in (text, *also)):
            found.append(pid)
    return found


def test_the_gateway_fronts_the_workers_proves_it_and_reruns_unchanged(tmp_path, workers):
    args = gateway_args(tmp_path, workers)
    try:
        first = run_module_in(tmp_path, "smg_gateway", args)
        assert first.get("failed") is not True, first.get("msg")
        assert first["changed"] is True and first["version"] == "smg 1.13.0"
        assert sorted((w["url"], w["healthy"], w["model_id"]) for w in first["workers"]) == sorted(
            (url, True, MODEL) for url in workers
        )
        assert first["generation"]["status"] == 200 and first["generation"]["completion_tokens"] == 8
        assert first["requests_sent"] == 9  # the first + four per worker
        # what the gateway's fact records, as on smg's argv: the derived timeout (SGLang's 20 s + 5), no
        # overload protection
        assert (first["health_check_timeout"], first["overload_protection"]) == (25, {"enabled": False})
        assert "--health-check-timeout-secs\n25\n--disable-worker-overload-protection" in "\n".join(
            first["argv"]
        )
        # round robin: the workers' own access logs show the gateway's generations, answered 200
        counts = [
            run_module_in(tmp_path, "server_access_count", {"log_path": str(tmp_path / f"worker{i}.log")})
            for i in range(2)
        ]
        assert [c["ok"] for c in counts] == [5, 4] or [c["ok"] for c in counts] == [4, 5], counts
        # the key: on none of the gateway's command lines (the stand-ins here take it as a flag), in no log,
        # in no result
        assert cmdlines_with(str(LAUNCHER)) and cmdlines_with(KEY, str(LAUNCHER)) == []
        assert KEY not in (tmp_path / "gateway.log").read_text()
        assert KEY not in json.dumps(first)

        again = run_module_in(tmp_path, "smg_gateway", args)
        assert again["changed"] is False and again["pid"] == first["pid"]

        # check mode on a changed policy: says changed, shows the diff, restarts nothing
        check = run_module_in(tmp_path, "smg_gateway", dict(args, policy="random"), check=True, diff=True)
        assert check["changed"] is True and "--policy\nrandom" in check["diff"][0]["after"]
        assert run_module_in(tmp_path, "smg_gateway", args)["pid"] == first["pid"]

        # a restart keeps the workers: they are on its command line
        restarted = run_module_in(tmp_path, "smg_gateway", dict(args, state="restarted"))
        assert restarted["changed"] is True and restarted["pid"] != first["pid"]
        assert sorted(w["url"] for w in restarted["workers"] if w["healthy"]) == sorted(workers)
    finally:
        gone = run_module_in(tmp_path, "smg_gateway", dict(args, state="absent"))
    assert gone["changed"] is True and not (tmp_path / "state" / "epforge-gateway.pid").exists()


def test_an_unreachable_worker_is_refused_before_anything_starts(tmp_path, workers):
    dead = f"http://127.0.0.1:{free_port()}"
    result = run_module_in(tmp_path, "smg_gateway", gateway_args(tmp_path, [workers[0], dead]))
    assert result["failed"] is True
    assert "cannot reach these workers" in result["msg"] and dead in result["msg"]
    assert result["unreachable_workers"] == [dead]
    assert not (tmp_path / "state").exists() and not (tmp_path / "gateway.log").exists()


def test_a_worker_with_another_model_is_refused_before_the_gateway_starts(tmp_path, workers):
    result = run_module_in(
        tmp_path, "smg_gateway", gateway_args(tmp_path, workers, model="/models/other", timeout=4)
    )
    assert result["failed"] is True
    assert f"{workers[0]} serves '{MODEL}', not '/models/other'" in result["msg"]
    assert f"{workers[1]} serves '{MODEL}', not '/models/other'" in result["msg"]
    assert [w["url"] for w in result["bad_workers"]] == workers
    assert not (tmp_path / "state" / "epforge-gateway.pid").exists()
    assert cmdlines_with(str(tmp_path / "state")) == []


class NotSglang(BaseHTTPRequestHandler):
    """A plain web server that answers 200 to everything (its /health too), not SGLang."""

    def do_GET(self):
        body = b"<html><body>hello</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def plain_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotSglang)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_bad_new_worker_is_refused_before_the_gateway_is_touched_and_a_failed_start_rolled_back(
    tmp_path, workers, plain_server
):
    """Issue 35 item 4: a running gateway with a good worker; a rerun with one more worker that is a plain web
    server, or the gateway's own URL, is refused before the running gateway is touched (it keeps serving,
    same pid), naming the worker and why; a new configuration that fails after its start (smg exits) brings
    the previous one back."""
    args = gateway_args(tmp_path, workers[:1], verify_requests=0, timeout=10)
    own = f"http://127.0.0.1:{args['port']}"
    try:
        first = run_module_in(tmp_path, "smg_gateway", args)
        assert first.get("failed") is not True, first.get("msg")
        for bad, why in (
            (plain_server, "does not answer as an SGLang server (GET /get_model_info: HTTP 200"),
            (own, "are the gateway's own address"),
        ):
            started = time.monotonic()
            refused = run_module_in(tmp_path, "smg_gateway", dict(args, workers=[workers[0], bad]))
            assert refused.get("failed") is True, refused
            assert bad in refused["msg"] and why in refused["msg"], refused["msg"]
            assert [w["url"] for w in refused["bad_workers"]] == [bad]
            assert "rolled_back" not in refused and time.monotonic() - started < 8
            kept = run_module_in(tmp_path, "smg_gateway", args)
            assert kept.get("failed") is not True, kept.get("msg")
            assert kept["changed"] is False and kept["pid"] == first["pid"]
            assert kept["generation"]["status"] == 200

        # smg refuses a flag at its start: the new configuration dies, the previous one comes back
        failed = run_module_in(
            tmp_path, "smg_gateway", dict(args, workers=workers, extra_args=["--no-such-smg-flag"])
        )
        assert failed.get("failed") is True and failed["rolled_back"] is True, failed
        assert "stopped while starting" in failed["msg"]
        assert "the previous configuration was brought back" in failed["msg"], failed["msg"]
        assert [(w["url"], w["healthy"]) for w in failed["rollback_workers"]] == [(workers[0], True)]
        back = run_module_in(tmp_path, "smg_gateway", args)
        assert back.get("failed") is not True, back.get("msg")
        assert back["changed"] is False and back["pid"] == failed["pid"] != first["pid"]
        assert back["generation"]["status"] == 200
    finally:
        run_module_in(tmp_path, "smg_gateway", dict(args, state="absent"))


def test_check_mode_shows_the_systemd_unit_it_would_write(tmp_path, workers):
    """manager systemd in check and diff mode on this machine (no systemd): the unit and the 0600 env file it
    would write, the key only as a fingerprint, nothing written."""
    args = gateway_args(
        tmp_path,
        workers,
        manager="systemd",
        user="nobody",
        unit_dir=str(tmp_path / "units"),
        env_file=str(tmp_path / "etc" / "gateway.env"),
    )
    result = run_module_in(tmp_path, "smg_gateway", args, check=True, diff=True)
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    unit = next(d["after"] for d in result["diff"] if d["after_header"].endswith("epforge-gateway.service"))
    env = next(d["after"] for d in result["diff"] if d["after_header"].endswith("gateway.env"))
    assert "Description=smg gateway epforge-gateway (epforge)" in unit and "User=nobody" in unit
    assert f"EnvironmentFile={tmp_path / 'etc' / 'gateway.env'}" in unit
    assert f"{LAUNCHER} launch --host 127.0.0.1" in unit and "--policy round_robin" in unit
    assert "EPFORGE_SGLANG_MODULE=smg" in env and "EPFORGE_SGLANG_API_KEY=" in env
    assert KEY not in json.dumps(result)
    assert not (tmp_path / "units").exists() and not (tmp_path / "etc").exists()
