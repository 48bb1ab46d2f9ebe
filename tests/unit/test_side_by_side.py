"""bench/side_by_side.py's parts that need no GPU: the hand-env variant launches by hand with exactly the
environment module sglang_server gives its server (what isolates the environment from the launcher, issue 36:
the module's TTFT and TPOT differed from the hand launch's on one H200), and variants may repeat (order
effects of warm caches)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_sglang_server import MODULE, STANDIN, run_module, server

sys.path.insert(0, str(ROOT / "bench"))
import side_by_side

__all__ = ["server"]  # the fixture, used by name


def test_repeated_variants_are_keyed_in_order_and_unknown_ones_refused():
    keys = side_by_side.variant_keys(["hand", "module", "hand-env", "module", "hand"])
    assert keys == [
        ("hand", "hand"),
        ("module", "module"),
        ("hand-env", "hand-env"),
        ("module", "module-2"),
        ("hand", "hand-2"),
    ]
    with pytest.raises(SystemExit, match=r"unknown variant.*hnad"):
        side_by_side.variant_keys(["hand", "hnad"])


def test_hand_env_is_the_environment_the_module_gives_its_server(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "x-controller-only")
    args = {k: v for k, v in server.items() if k != "api_key"}
    started = run_module(MODULE, {**args, "cuda_home": "/opt/cuda-test"}, tmp_path)
    assert started["_rc"] == 0, started
    raw = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
    environ = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    bench_args = argparse.Namespace(python=server["python"], cuda_home="/opt/cuda-test")
    assert side_by_side.module_env(bench_args, server["settings"]) == environ
    assert environ["PYTHONPATH"] == str(STANDIN) and "MY_TOKEN" not in environ
