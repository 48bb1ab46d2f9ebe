"""playbooks/tune.yml with a clean slate that does not come (issue 38): before each launch the tuner stops the
server before and waits for every GPU's memory to be back at the baseline it took (module gpu_clean_slate).
A fake nvidia-smi (the capture's format, tests/unit/test_gpu_clean_slate.py) answers the baseline with idle
GPUs, then holds 120 GiB on GPU1 for good: the candidate fails gpu_memory_not_released with the figures and
is never launched. (The clean path, a host without nvidia-smi: every test_tune.py run.)"""

from __future__ import annotations

import os

import pytest
import sglang_parser_env
from test_gpu_clean_slate import fake_smi
from test_tune import base_dir, bench_env, candidates, launches, run_tune, tune_vars, tuning_fact

sglang_env = sglang_parser_env.sglang_env  # the fixture, bound to its name (tests/sglang_parser_env.py)
__all__ = ["base_dir"]  # the fixture, used by name


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_memory_not_released_fails_the_candidate_unlaunched(bench_client, sglang_env, base_dir, tmp_path):
    python, tok = bench_client
    space = [c for c in candidates() if c["name"] == "cold-heavy"]
    smi = fake_smi(tmp_path, [[0, 0], [0, 122880]])
    extra = tune_vars(
        base_dir,
        python,
        tok,
        bench_env.free_port(),
        space,
        parser=sglang_env,
        tuner_nvidia_smi_path=str(smi),
        tuner_gpu_memory_wait_s=1,
    )
    proc = run_tune(base_dir, extra, name="slate")
    assert proc.returncode != 0 and "no winner: nothing left running" in proc.stdout, proc.stdout[-6000:]
    assert launches(base_dir, proc) == []
    (failed,) = tuning_fact(base_dir)["results"]
    assert failed["status"] == "failed" and failed["reason"].startswith("gpu_memory_not_released: "), failed
    assert "GPU1: 122880 MiB used, baseline 0 MiB, bound +1024 MiB" in failed["reason"]
    assert failed["cause"] == {"id": "gpu_memory_not_released"} and failed["symptom"] == {}
