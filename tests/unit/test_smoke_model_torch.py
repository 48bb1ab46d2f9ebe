"""The smoke model as a real model: written by the module through a python with torch, then loaded by
transformers' AutoModelForCausalLM on CPU with no missing or unexpected weights, one forward pass, and greedy
generation that repeats exactly. Weight statistics show the hand-made bf16 values are what the config says
(std = initializer_range).

torch comes from the session fixture torch_cpu_python (tests/conftest.py: a venv built once in the test
cache, CPU torch 2.13 + transformers; about 9 min on this shared 2-core machine the first time). Set
EPFORGE_TEST_TORCH_PYTHON to an interpreter that already has them to skip the build. The module tests
themselves run with the test venv's python (numpy + tokenizers, no torch): tests/unit/test_smoke_model.py."""

from __future__ import annotations

import json
import subprocess

from moduletools import run_module
from smoke_model_sizes import TINY_MODEL

TINY = {**TINY_MODEL, "num_experts": 8}

PROBE = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, output_loading_info=True)
tok = AutoTokenizer.from_pretrained(path)
ids = tok("Expert parallelism rehearsal", return_tensors="pt")["input_ids"]
with torch.no_grad():
    logits = model(input_ids=ids).logits
    runs = [model.generate(ids, max_new_tokens=6, do_sample=False)[0].tolist() for _ in range(2)]
weights = model.state_dict()
down = next(v for k, v in weights.items() if "experts" in k and "down" in k).float()
print(json.dumps({
    "class": type(model).__name__,
    "missing": sorted(map(str, info["missing_keys"])),
    "unexpected": sorted(map(str, info["unexpected_keys"])),
    "mismatched": sorted(map(str, info["mismatched_keys"])),
    "logits_shape": list(logits.shape), "finite": bool(torch.isfinite(logits).all()),
    "runs": runs, "prompt_len": ids.shape[1],
    "std": float(down.std()), "max_abs": float(down.abs().max()),
    "norm": float(model.model.norm.weight.float().mean()),
}))
"""


def test_transformers_loads_and_runs_the_model_on_cpu(tmp_path, torch_cpu_python):
    model = tmp_path / "model"
    rc, res = run_module("smoke_model", {"path": str(model), "python": torch_cpu_python, **TINY}, timeout=300)
    assert rc == 0 and res["changed"] is True, res
    proc = subprocess.run(
        [torch_cpu_python, "-c", PROBE, str(model)], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["class"] == "Qwen3MoeForCausalLM"
    assert out["missing"] == [] and out["unexpected"] == [] and out["mismatched"] == []
    assert out["logits_shape"] == [1, out["prompt_len"], TINY["vocab_size"]] and out["finite"] is True
    first, second = out["runs"]
    assert first == second and len(first) == out["prompt_len"] + 6  # greedy: the same tokens every time
    # Uniform weights with std initializer_range (0.02): bounded by 0.02 * sqrt(3).
    assert 0.019 < out["std"] < 0.021 and out["max_abs"] <= 0.02 * 3**0.5 + 1e-3
    assert out["norm"] == 1.0
