"""fleet_bench_record (module_utils/fleet_bench_record/split.py): a fleet window counts for N workers only if
each worker's own access log shows its share. The issue's case: a worker killed mid-run and brought back
served 8 of 240 requests in the next fleet benchmark, and the figure was reported for 3 workers."""

from __future__ import annotations

import json

from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.fleet_bench_record.split import judge_split
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import record_run
from epforge.report.fleet import throughput_table

WORKERS = ["worker1", "worker2", "worker3"]


def pending_run(tmp_path, status="ok", reasons=()):
    """The pending history as module sglang_bench writes it (record_run), one fleet run."""
    entry = {
        "id": "run-1",
        "status": status,
        "label": "fleet-3-workers",
        "figures": {"output_throughput": 5000.0, "completed": 240},
        "fleet": {"gateway": "http://127.0.0.1:30080", "workers": 3, "worker_hosts": WORKERS},
        **({"invalid_reasons": list(reasons)} if reasons else {}),
    }
    path = tmp_path / "pending.fact"
    record_run(str(path), entry, 50)
    return path


def record(tmp_path, counts, **extra):
    args = {
        "pending_path": str(pending_run(tmp_path, **extra)),
        "fact_path": str(tmp_path / "facts" / "epforge_fleet_bench.fact"),
        "workers": WORKERS,
        "counts": counts,
    }
    return run_module_in(tmp_path, "fleet_bench_record", args)


def history(tmp_path) -> list[dict]:
    return json.loads((tmp_path / "facts" / "epforge_fleet_bench.fact").read_text())["history"]


def test_a_worker_that_served_8_of_240_makes_the_window_invalid_for_3_workers(tmp_path):
    result = record(tmp_path, {"worker1": 120, "worker2": 8, "worker3": 112})
    assert result["_rc"] == 0, result
    (entry,) = history(tmp_path)
    assert entry["status"] == "invalid" and entry["fleet"]["served_workers"] == 2
    assert entry["fleet"]["split"] == {"worker1": 120, "worker2": 8, "worker3": 112}
    assert entry["fleet"]["share_bound"] == 40.0
    assert entry["invalid_reasons"] == [
        "2 of 3 workers served their share (at least 0.5 x 80.0 requests each): worker2 8 of 240; "
        "the figure is not valid for 3 workers"
    ]
    assert entry["figures"]["output_throughput"] == 5000.0  # kept, never ok
    assert not (tmp_path / "pending.fact").exists()


def test_an_even_enough_split_counts_for_every_worker(tmp_path):
    result = record(tmp_path, {"worker1": 100, "worker2": 41, "worker3": 99})
    (entry,) = history(tmp_path)
    assert result["_rc"] == 0 and entry["status"] == "ok" and entry["fleet"]["served_workers"] == 3
    assert "invalid_reasons" not in entry


def test_an_uncounted_worker_and_an_earlier_reason_both_show(tmp_path):
    lost = ["completed 230 of 240 requests"]
    result = record(tmp_path, {"worker1": 120, "worker3": 120}, status="invalid", reasons=lost)
    (entry,) = history(tmp_path)
    assert result["_rc"] == 0 and entry["status"] == "invalid"
    assert entry["invalid_reasons"][0] == "completed 230 of 240 requests"
    assert "worker2 not counted (no access log)" in entry["invalid_reasons"][1]


def test_nothing_pending_records_nothing(tmp_path):
    args = {
        "pending_path": str(tmp_path / "none.fact"),
        "fact_path": str(tmp_path / "fleet.fact"),
        "workers": WORKERS,
        "counts": {},
    }
    result = run_module_in(tmp_path, "fleet_bench_record", args)
    assert result["_rc"] == 0 and result["recorded"] is False and not (tmp_path / "fleet.fact").exists()


def test_the_bound_is_a_share_of_an_even_split():
    assert judge_split({"a": 40, "b": 120, "c": 80})["valid"] is True  # 40 = half of 80
    assert judge_split({"a": 39, "b": 121, "c": 80})["served_workers"] == 2
    assert judge_split({"a": 0, "b": 0})["valid"] is False  # nothing served
    assert judge_split({"a": 10, "b": 90}, min_share=0.25)["valid"] is False  # 10 < 0.25 x 50


def test_the_report_says_how_many_served_and_compares_no_share(tmp_path):
    """A window two of three workers served is shown so, and not set against the sum of the hosts alone."""
    record(tmp_path, {"worker1": 120, "worker2": 8, "worker3": 112})
    fleet = json.loads((tmp_path / "facts" / "epforge_fleet_bench.fact").read_text())
    alone = {"history": [{"status": "ok", "figures": {"output_throughput": 2000.0}}]}
    hosts = {"gw": {"fleet_bench": fleet}, **{w: {"bench": alone} for w in WORKERS}}
    _, body = throughput_table(hosts)
    assert body[0][0] == "fleet via gw (2 of 3 workers served their share)" and body[0][-1] == "invalid"
    assert not [row for row in body if row[0] == "fleet / sum of hosts alone"]
