"""gpu_clean_slate (module_utils/gpu_clean_slate/memory.py): between two tuner candidates, the last server's
process groups gone and every GPU's used memory back within a bound of its baseline after a bounded wait,
else failure class gpu_memory_not_released with the figures. Run as Ansible runs the module, against a fake
nvidia-smi whose memory.used drops late or never, and against real process groups."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.gpu_clean_slate.memory import (
    over_bound,
    parse_memory_used,
)

# The real capture of the lent 2x H200 (tests/fixtures/nvidia-smi/README.md): its GPU indexes, and the
# csv,noheader,nounits form ("0, 143771") the memory query answers in.
CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "h200x2-query.csv"
INDEXES = [line.split(",")[0] for line in CAPTURE.read_text().splitlines() if line.strip()]
TOTAL_MIB = int(CAPTURE.read_text().splitlines()[0].split(",")[3])

# The fake answers the memory query with the Nth line of its schedule on its Nth call (the last line
# once the schedule is spent); it refuses any other query, so a wrong argv fails the test.
FAKE = """#!/bin/sh
[ "$*" = "--query-gpu=index,memory.used --format=csv,noheader,nounits" ] || {{ echo "bad: $*" >&2; exit 2; }}
n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}
line=$(sed -n "${{n}}p" {schedule}); [ -n "$line" ] || line=$(tail -n 1 {schedule})
i=0; for used in $line; do echo "$(sed -n "$((i + 1))p" {indexes}), $used"; i=$((i + 1)); done
"""


def fake_smi(tmp_path: Path, schedule: list[list[int]]) -> Path:
    """A fake nvidia-smi whose call N answers memory.used = schedule[N] per GPU of the capture."""
    (tmp_path / "schedule").write_text("".join(" ".join(map(str, row)) + "\n" for row in schedule))
    (tmp_path / "indexes").write_text("".join(f"{index}\n" for index in INDEXES))
    script = tmp_path / "nvidia-smi"
    script.write_text(
        FAKE.format(count=tmp_path / "count", schedule=tmp_path / "schedule", indexes=tmp_path / "indexes")
    )
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> int:
    return int((tmp_path / "count").read_text())


def test_the_memory_query_parses_the_capture_form():
    assert parse_memory_used("0, 0\n1, 143771\n") == {"0": 0, "1": TOTAL_MIB}
    with pytest.raises(ValueError, match="memory query line 1"):
        parse_memory_used("0, N/A\n")
    # a GPU with no baseline counts from 0; one exactly at the bound is within it
    assert over_bound({"0": 100}, {"0": 1124, "1": 2000}, 1024) == ["1"]


def test_the_baseline_is_measured_when_none_is_given(tmp_path):
    smi = fake_smi(tmp_path, [[3, 5]])
    result = run_module_in(tmp_path, "gpu_clean_slate", {"nvidia_smi_path": str(smi)})
    assert result["_rc"] == 0 and result["baseline"] == {"0": 3, "1": 5}


def test_memory_released_late_within_the_wait_is_a_clean_slate(tmp_path):
    # GPU1 still holds a server's 120 GiB for two polls, then drops to 6 MiB above its baseline
    smi = fake_smi(tmp_path, [[0, 122880], [0, 122880], [0, 6]])
    args = {"nvidia_smi_path": str(smi), "baseline": {"0": 0, "1": 0}, "wait_s": 20, "interval_s": 0.1}
    result = run_module_in(tmp_path, "gpu_clean_slate", args)
    assert result["_rc"] == 0, result
    assert calls(tmp_path) == 3
    assert [gpu["now_mib"] for gpu in result["gpus"]] == [0, 6]


def test_memory_never_released_fails_the_candidate_with_the_figures(tmp_path):
    smi = fake_smi(tmp_path, [[0, 122880]])
    args = {
        "nvidia_smi_path": str(smi),
        "baseline": {"0": 0, "1": 512},
        "bound_mib": 1024,
        "wait_s": 0.5,
        "interval_s": 0.1,
    }
    result = run_module_in(tmp_path, "gpu_clean_slate", args)
    assert result["_rc"] != 0 and result["failure_class"] == "gpu_memory_not_released"
    assert result["gpus"][1] == {
        "index": "1",
        "baseline_mib": 512,
        "now_mib": 122880,
        "bound_mib": 1024,
        "over": True,
    }
    assert result["gpus"][0]["over"] is False
    assert 0.5 <= result["waited_s"] < 5 and calls(tmp_path) > 2
    assert "GPU1: 122880 MiB used, baseline 512 MiB, bound +1024 MiB" in result["msg"]


def test_a_live_process_group_of_the_previous_server_is_not_a_clean_slate(tmp_path):
    smi = fake_smi(tmp_path, [[0, 0]])
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        args = {
            "nvidia_smi_path": str(smi),
            "baseline": {"0": 0, "1": 0},
            "process_groups": [server.pid],
            "wait_s": 0.3,
            "interval_s": 0.1,
        }
        result = run_module_in(tmp_path, "gpu_clean_slate", args)
        assert result["_rc"] != 0 and result["process_groups_left"] == [server.pid]
        assert f"process group(s) {server.pid} of the previous server still alive" in result["msg"]

        # the group ends during the wait (reaped at once, as the server's manager does): the slate clears
        def stop() -> None:
            time.sleep(0.5)
            os.killpg(server.pid, signal.SIGTERM)
            server.wait()

        stopper = threading.Thread(target=stop)
        stopper.start()
        result = run_module_in(tmp_path, "gpu_clean_slate", {**args, "wait_s": 20})
        stopper.join()
        assert result["_rc"] == 0 and result["process_groups_left"] == [], result
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_host_without_nvidia_smi_waits_for_the_groups_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    started = time.monotonic()
    result = run_module_in(tmp_path, "gpu_clean_slate", {"baseline": {}, "process_groups": [2**22 + 7]})
    assert result["_rc"] == 0 and result["gpus"] == [] and result["reason"] == "nvidia-smi not found on PATH"
    assert time.monotonic() - started < 30
