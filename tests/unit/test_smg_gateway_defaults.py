"""The gateway's defaults for SGLang (issue 37): smg's health-check timeout above what SGLang's /health may
take, and worker overload protection always said, on or off.

Upstream facts are checked against the releases themselves: smg's flag names and defaults against the pinned
smg's own parser (the installed package, the version the stacks pin), SGLang's SGLANG_HEALTH_CHECK_TIMEOUT
against data/sglang_env/<version>.json (written from each wheel, checked by that data's own test). The
live test runs the real smg in front of the SGLang stand-in (a TEST DOUBLE) whose /health is slow."""

from __future__ import annotations

import argparse
import importlib.metadata
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
import yaml
from hub_mirror import free_port

from ansible_collections.epforge.ep.plugins.filter.sglang_health_timeout import sglang_health_timeout
from ansible_collections.epforge.ep.plugins.module_utils.smg_gateway.request import (
    OWNED_FLAGS,
    GatewayRequest,
    RequestError,
)
from ansible_collections.epforge.ep.plugins.module_utils.smg_health import (
    MARGIN_S,
    release_default,
)

ROOT = Path(__file__).resolve().parents[2]
TABLES = ROOT / "data" / "sglang_env"
STACKS = [
    yaml.safe_load(path.read_text())["epforge_stack_spec"] for path in sorted((ROOT / "stacks").glob("*.yml"))
]
PINNED_SGLANG = sorted({stack["sglang"]["version"] for stack in STACKS})
ROLE_DEFAULTS = yaml.safe_load((ROOT / "roles" / "gateway" / "defaults" / "main.yml").read_text())


def sglang_default(version: str) -> int:
    return release_default(json.loads((TABLES / f"{version}.json").read_text()), version)


def request(**over) -> GatewayRequest:
    params = {
        "workers": ["http://127.0.0.1:30001"],
        "host": "127.0.0.1",
        "port": 30080,
        "metrics_port": 29000,
        "policy": "cache_aware",
        "health_check_interval": 10,
        "health_failure_threshold": 3,
        "health_check_timeout": ROLE_DEFAULTS["gateway_health_check_timeout"],
        "sglang_health_timeout": sglang_default("0.5.23"),
        "overload_protection": ROLE_DEFAULTS["gateway_overload_protection"],
        "overload_waiting_requests": ROLE_DEFAULTS["gateway_overload_waiting_requests"],
        "overload_token_usage": ROLE_DEFAULTS["gateway_overload_token_usage"],
        "api_key": "",
        "extra_args": [],
    }
    params.update(over)
    return GatewayRequest.from_params(params)


def smg_parse(flags: list[str]):
    """The pinned smg's own reading of `smg launch` flags (smg/launch_router.py), validated as it launches."""
    from smg.launch_router import parse_router_args  # noqa: PLC0415 - the installed release, imported late

    assert flags[0] == "launch"
    parsed = parse_router_args(flags[1:])
    parsed._validate_router_args()
    return parsed


# ------------------------------------------------------------------------- upstream facts, from the releases


def test_the_installed_smg_is_the_release_the_stacks_pin():
    pinned = {stack["gateway"]["version"] for stack in STACKS if stack["gateway"]["package"] == "smg"}
    assert pinned == {importlib.metadata.version("smg")}, pinned


def test_every_flag_the_module_owns_is_a_flag_of_the_pinned_smg():
    from smg.router_args import RouterArgs  # noqa: PLC0415

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser)
    missing = [flag for flag in OWNED_FLAGS if flag not in parser._option_string_actions]
    assert missing == []


def test_untold_smg_times_out_before_sglang_answers_and_sheds_load():
    """Why epforge says both: smg's own defaults (its parser, no flag given) against SGLang's /health wait in
    every pinned release; the role's thresholds are smg's own."""
    untold = smg_parse(["launch", "--worker-urls", "http://127.0.0.1:30001"])
    assert all(untold.health_check_timeout_secs <= sglang_default(v) for v in PINNED_SGLANG), (
        untold.health_check_timeout_secs,
        {v: sglang_default(v) for v in PINNED_SGLANG},
    )
    assert untold.worker_overload_protection is True
    assert (untold.worker_overload_waiting_requests, untold.worker_overload_token_usage) == (
        ROLE_DEFAULTS["gateway_overload_waiting_requests"],
        ROLE_DEFAULTS["gateway_overload_token_usage"],
    )


# ------------------------------------------------------------------------- the rendered argv, as smg reads it


@pytest.mark.parametrize(
    ("over", "timeout", "overload"),
    [
        ({}, None, {"enabled": False}),  # the role's defaults: derived, off
        ({"health_check_timeout": 60}, 60, {"enabled": False}),
        (
            {"overload_protection": True, "overload_waiting_requests": 32, "overload_token_usage": 0.95},
            None,
            {"enabled": True, "waiting_requests": 32, "token_usage": 0.95},
        ),
    ],
)
def test_the_rendered_flags_are_read_by_the_pinned_smg_as_the_request_says(over, timeout, overload):
    req = request(**over)
    expected_timeout = timeout or sglang_default("0.5.23") + MARGIN_S
    parsed = smg_parse(req.flags())
    assert req.health_timeout == parsed.health_check_timeout_secs == expected_timeout
    assert req.overload == overload
    assert parsed.worker_overload_protection is overload["enabled"]
    if overload["enabled"]:
        assert (parsed.worker_overload_waiting_requests, parsed.worker_overload_token_usage) == (
            overload["waiting_requests"],
            overload["token_usage"],
        )


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"health_check_timeout": 20}, "health_check_timeout 20 s is not above the 20 s SGLang's /health"),
        ({"health_check_timeout": -1}, "health_check_timeout -1 must be at least 1"),
        ({"health_check_timeout": 0, "sglang_health_timeout": None}, "which is not given"),
        ({"sglang_health_timeout": 0}, "sglang_health_timeout 0 must be at least 1"),
        ({"overload_protection": True, "overload_waiting_requests": 0}, "must be at least 1"),
        ({"overload_protection": True, "overload_token_usage": 1.5}, "must be in (0, 1]"),
        ({"extra_args": ["--health-check-timeout-secs", "5"]}, "may not set --health-check-timeout-secs"),
        ({"extra_args": ["--worker-overload-protection"]}, "may not set --worker-overload-protection"),
    ],
)
def test_a_bad_setting_is_refused_with_the_reason(over, says):
    with pytest.raises(RequestError) as caught:
        request(**over)
    assert says in str(caught.value), str(caught.value)


# ------------------------------------------------------------------------- the servers' wait, as they run


def hostvars(**servers) -> dict:
    return {
        host: {"sglang_server_endpoint": {"sglang_version": version, "sglang_env": env}} if version else {}
        for host, (version, env) in servers.items()
    }


def test_the_longest_wait_of_the_verified_servers_comes_from_their_release_and_environment(tmp_path):
    from ansible.errors import AnsibleFilterError  # noqa: PLC0415

    default = sglang_default("0.5.23")
    plain = hostvars(a=("0.5.23", {}), b=("0.5.16", {"SGLANG_OTHER": "1"}), c=(None, {}))
    assert sglang_health_timeout(plain, ["a", "b", "c"], str(TABLES)) == max(
        map(sglang_default, ("0.5.23", "0.5.16"))
    )
    longer = hostvars(a=("0.5.23", {}), b=("0.5.23", {"SGLANG_HEALTH_CHECK_TIMEOUT": default + 40}))
    assert sglang_health_timeout(longer, ["a", "b"], str(TABLES)) == default + 40
    assert sglang_health_timeout(plain, [], str(TABLES)) == 0
    with pytest.raises(
        AnsibleFilterError, match=r"the server on b: SGLANG_HEALTH_CHECK_TIMEOUT='30s' is not"
    ):
        sglang_health_timeout(
            hostvars(b=("0.5.23", {"SGLANG_HEALTH_CHECK_TIMEOUT": "30s"})), ["b"], str(TABLES)
        )
    with pytest.raises(AnsibleFilterError, match=r"release the server on a runs \(9\.9\.9\).*9\.9\.9\.json"):
        sglang_health_timeout(hostvars(a=("9.9.9", {})), ["a"], str(TABLES))
    (tmp_path / "1.0.json").write_text(json.dumps({"typed": {}, "literals": {}}))
    with pytest.raises(
        AnsibleFilterError, match=r"SGLang 1\.0's variable table names no single integer default"
    ):
        sglang_health_timeout(hostvars(a=("1.0", {})), ["a"], str(tmp_path))


# ------------------------------------------------------------------------- live: a slow /health


def start_slow_worker(seconds: float) -> tuple[subprocess.Popen, str]:
    """The stand-in, whose /health takes seconds once ready (as SGLang's generates a token); ready when its
    /ready answers (start_standin waits on /health, which this one answers slowly on purpose)."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(bench_env.STANDIN), SGLANG_STANDIN_LOAD_SECONDS="0.1")
    env["SGLANG_STANDIN_HEALTH_SECONDS"] = str(seconds)
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/slow-health"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/ready", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the stand-in did not become ready in 30 s")


def healthy_workers(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/workers", timeout=2) as answer:
            return sum(1 for w in json.load(answer).get("workers") or [] if w.get("is_healthy"))
    except OSError:
        return 0


def test_smg_with_the_derived_timeout_takes_a_worker_whose_health_is_slow_and_untold_smg_does_not(tmp_path):
    """/health answers in 7 s (SGLang's may take 20): smg with the rendered flags lists the worker healthy;
    the same flags without --health-check-timeout-secs (smg's default) give up on its first check."""
    worker, worker_url = start_slow_worker(7)
    gateways = {}
    try:
        for name in ("rendered", "untold"):
            flags = request(workers=[worker_url], port=free_port(), metrics_port=free_port()).flags()
            if name == "untold" and "--health-check-timeout-secs" in flags:  # smg's own default
                at = flags.index("--health-check-timeout-secs")
                del flags[at : at + 2]
            log = (tmp_path / f"smg-{name}.log").open("wb")
            proc = subprocess.Popen(
                [sys.executable, "-m", "smg", *flags],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            gateways[name] = (proc, f"http://127.0.0.1:{flags[flags.index('--port') + 1]}")
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and healthy_workers(gateways["rendered"][1]) == 0:
            time.sleep(0.25)
        assert healthy_workers(gateways["rendered"][1]) == 1, (tmp_path / "smg-rendered.log").read_text()[
            -2000:
        ]
        assert healthy_workers(gateways["untold"][1]) == 0
    finally:
        for proc, _ in gateways.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
