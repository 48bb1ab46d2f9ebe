"""Known failure signatures -> classification (plugins/module_utils/signatures.py), and the
bounded
readiness wait of plugins/module_utils/server_http.py.

The log lines below are the error texts named in each signature's `source` (SGLang, FlashInfer, torch,
NCCL, argparse), set inside the noise of a real launch log; they are not captured from a GPU host."""

from __future__ import annotations

import pytest
from test_signatures_upstream import UPSTREAM_TESTED_IDS

from ansible_collections.epforge.ep.plugins.module_utils.server_http import MIN_POLL_INTERVAL, wait_until
from ansible_collections.epforge.ep.plugins.module_utils.signatures import (
    SIGNATURES,
    classify,
    describe,
    explain_failure,
    final_exception_line,
)

NOISE = """[2026-11-30 10:00:01] server_args=ServerArgs(model_path='/models/Kimi-K2.5', tp_size=8)
[2026-11-30 10:00:05 TP0] Load weight begin. avail mem=94.12 GB
[2026-11-30 10:03:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16
"""

CASES = [
    (
        "torch_symm_mem_keyerror",
        """Traceback (most recent call last):
  File "/venv/sglang/srt/distributed/device_communicators/torch_symm_mem.py", line 71
    self.max_size = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability][self.world_size]
KeyError: 12""",
    ),
    ("flashinfer_no_target_arch", "RuntimeError: FlashInfer requires GPUs with sm75 or higher"),
    ("deep_ep_missing", "ModuleNotFoundError: No module named 'deep_ep'"),
    ("python_module_missing", "ModuleNotFoundError: No module named 'flashinfer'"),
    ("deep_ep_no_gpu", "ImportError: The NVIDIA driver does not expose a usable CUDA device"),
    (
        "no_kernel_image",
        "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
    ),
    (
        "cuda_graph_capture_failed",
        "Exception: Capture cuda graph failed: CUDA error: operation failed "
        "due to a previous error during capture",
    ),
    (
        "cuda_out_of_memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 3 has a total capacity of 94.97 GiB",
    ),
    ("cuda_out_of_memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    (
        "nccl_error",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, unhandled system error, NCCL version 2.28.9\nncclSystemError: "
        "System call (e.g. socket, malloc) or external library call failed",
    ),
    (
        "cuda_driver_too_old",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12040).",
    ),
    ("no_gpu", "RuntimeError: No CUDA GPUs are available"),
    (
        "multinode_join_timeout",
        "torch.distributed.DistNetworkError: The client socket has timed out after 600s while trying to "
        "connect to (10.0.0.11, 25000).",
    ),
    (
        "multinode_join_timeout",
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. "
        "1/2 clients joined.",
    ),
    (
        "not_enough_gpus",
        "torch.AcceleratorError: CUDA error: invalid device ordinal\nGPU device may be out "
        "of range, do you have enough GPUs?",
    ),
    (
        "port_in_use",
        "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
        "address already in use",
    ),
    ("bad_cli_flag", "sglang serve: error: unrecognized arguments: --tp-sise 8"),
    ("bad_cli_flag", "sglang serve: error: argument --moe-a2a-backend: invalid choice: 'deepepp'"),
    (
        "model_not_found",
        "OSError: /models/nope is not a local folder and is not a valid model identifier "
        "listed on 'https://huggingface.co/models'",
    ),
    ("permission_denied", "PermissionError: [Errno 13] Permission denied: '/root/.cache/huggingface'"),
]


@pytest.mark.parametrize(("expected", "error"), CASES)
def test_known_errors_are_classified(expected, error):
    found = classify(NOISE + error + "\n[2026-11-30 10:04:00] Killing process tree\n")
    assert found, error
    assert found[0]["id"] == expected
    assert found[0]["remedy"]
    assert found[0]["line"] in error


def test_every_signature_id_has_a_case():
    # Here, or (rows whose text is read from the raise site itself) in tests/unit/test_signatures_upstream.py.
    assert {row["id"] for row in SIGNATURES} == {case[0] for case in CASES} | UPSTREAM_TESTED_IDS


def test_clean_log_and_unrelated_keyerror_are_not_classified():
    assert classify(NOISE + "The server is fired up and ready to roll!\n") == []
    assert classify("") == [] and classify(None) == []
    # KeyError: 13 without any allreduce context is some other bug, not the symm-mem table.
    assert classify("Traceback...\nKeyError: 13\n") == []


def test_primary_is_the_specific_signature():
    text = NOISE + "NCCL WARN Cuda failure 'out of memory'\nKeyError: 12\n"
    found = classify(text)
    assert [f["id"] for f in found] == ["torch_symm_mem_keyerror", "nccl_error"]
    assert describe(found).startswith("[torch_symm_mem_keyerror]")
    assert "enable-torch-symm-mem" in describe(found)
    assert describe([]) == ""


def test_missing_module_names_the_package_and_the_role():
    found = classify(
        NOISE + '  File "/venv/sglang/srt/layers/sampler.py", line 12\n'
        "ModuleNotFoundError: No module named 'flashinfer.sampling'\n"
    )
    assert found[0]["id"] == "python_module_missing"
    assert "flashinfer.sampling" in found[0]["summary"]
    assert "flashinfer-python" in found[0]["remedy"] and "role flashinfer" in found[0]["remedy"]
    other = classify("ModuleNotFoundError: No module named 'orjson'")[0]
    assert "orjson" in other["summary"] and "no epforge role installs it" in other["remedy"]
    # deep_ep keeps its own, more specific row
    assert classify("ModuleNotFoundError: No module named 'deep_ep'")[0]["id"] == "deep_ep_missing"


# Shape of an SGLang 0.5.16 scheduler crash (logger prefix on the first line, traceback under it); the
# assertion text is the one in sglang 0.5.16's DeepEP MoE path.
UNKNOWN_CRASH = (
    NOISE
    + """[2026-11-30 10:04:00 TP1] Scheduler hit an exception: Traceback (most recent call \
last):
  File "/venv/sglang/srt/managers/scheduler.py", line 2561, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/venv/sglang/srt/layers/moe/ep_moe/layer.py", line 402, in forward_deepgemm_masked
    assert False, "forward_deepgemm_masked is deprecated"
AssertionError: forward_deepgemm_masked is deprecated

[2026-11-30 10:04:01] Received sigquit from a child process. It usually means the child failed.
"""
)


def test_unknown_crash_names_its_final_exception_line():
    assert classify(UNKNOWN_CRASH) == []
    assert final_exception_line(UNKNOWN_CRASH) == "AssertionError: forward_deepgemm_masked is deprecated"
    [entry] = explain_failure(UNKNOWN_CRASH)
    assert entry["id"] == "unclassified"
    assert entry["line"] == "AssertionError: forward_deepgemm_masked is deprecated"
    assert describe([entry]).startswith(
        "[unclassified] no known failure signature matched; the log's final "
        "exception is: AssertionError: forward_deepgemm_masked is deprecated"
    )
    # the last of several exceptions wins (a chained traceback ends with the one that killed the process)
    chained = (
        "ValueError: first\nDuring handling of the above exception, another exception occurred:\n"
        "[2026-11-30 10:04:00 TP0] torch.distributed.DistStoreError: timed out after 600 s\n"
    )
    assert final_exception_line(chained) == "torch.distributed.DistStoreError: timed out after 600 s"


def test_a_log_without_exception_still_says_it_is_unclassified():
    [entry] = explain_failure(NOISE + "Killed\n")
    assert entry["id"] == "unclassified" and entry["line"] == ""
    assert "holds no exception line" in entry["summary"]
    assert explain_failure("KeyError: 12")[0]["id"] == "torch_symm_mem_keyerror"


class FakeClock:
    def __init__(self, probe_cost=0.0):
        self.now = 0.0
        self.sleeps = []
        self.probe_cost = probe_cost

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_polls_on_a_fixed_bounded_cadence():
    fake = FakeClock()
    times = []

    def probe():
        times.append(fake.now)
        fake.now += 0.01
        return fake.now >= 1.0

    out = wait_until(probe, timeout=10, interval=0.25, clock=fake.clock, sleep=fake.sleep)
    assert out["ready"] and out["reason"] == "ready"
    assert times == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    # A request for a faster rate is clamped.
    fake2 = FakeClock()
    out2 = wait_until(lambda: False, timeout=1, interval=0.001, clock=fake2.clock, sleep=fake2.sleep)
    assert out2["reason"] == "timeout" and out2["interval"] == MIN_POLL_INTERVAL
    assert out2["polls"] <= 1 / MIN_POLL_INTERVAL + 1


def test_wait_stops_at_once_on_death_and_at_deadline():
    fake = FakeClock()
    deaths = iter([None, None, "exited with status 1"])
    out = wait_until(
        lambda: False,
        timeout=100,
        interval=0.5,
        alive=lambda: next(deaths),
        clock=fake.clock,
        sleep=fake.sleep,
    )
    assert out["reason"] == "died" and out["detail"] == "exited with status 1" and out["polls"] == 2
    assert fake.now == pytest.approx(1.0)
    fake = FakeClock()
    out = wait_until(lambda: False, timeout=1.1, interval=0.5, clock=fake.clock, sleep=fake.sleep)
    assert out["reason"] == "timeout" and fake.now == pytest.approx(1.1)
