"""Module smoke_model: a real checkpoint written by the module (through the test venv's python, which has
numpy and tokenizers but no torch), read back with transformers (AutoConfig, AutoTokenizer), the safetensors
library and SGLang's Qwen3-MoE weight names; determinism, the no-op rerun, check mode, refusals. The model
forward pass on CPU needs torch: tests/unit/test_smoke_model_torch.py."""

from __future__ import annotations

import json
import math
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors
from moduletools import run_module
from smoke_model_sizes import TINY_MODEL as TINY
from transformers import AutoConfig, AutoTokenizer  # the test extra (pyproject.toml) brings it

from ansible_collections.epforge.ep.plugins.module_utils.smoke_model import model as sm


def write(tmp_path: Path, name: str = "model", check: bool = False, **settings) -> tuple[int, dict]:
    return run_module(
        "smoke_model",
        {"path": str(tmp_path / name), "python": sys.executable, **settings},
        check=check,
        timeout=300,
    )


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def sglang_qwen3_moe_names(layers: int, experts: int) -> set[str]:
    """The checkpoint names SGLang 0.5.16's Qwen3MoeForCausalLM.load_weights maps (python/sglang/srt/models/
    qwen3_moe.py: stacked q/k/v -> qkv_proj, gate/up -> gate_up_proj, per-expert experts.E.*_proj, router
    mlp.gate), listed here independently of the writer's own table."""
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for n in range(layers):
        p = f"model.layers.{n}"
        names |= {
            f"{p}.input_layernorm.weight",
            f"{p}.post_attention_layernorm.weight",
            f"{p}.mlp.gate.weight",
            f"{p}.self_attn.q_norm.weight",
            f"{p}.self_attn.k_norm.weight",
        }
        names |= {f"{p}.self_attn.{x}_proj.weight" for x in "qkvo"}
        names |= {
            f"{p}.mlp.experts.{e}.{x}_proj.weight" for e in range(experts) for x in ("gate", "up", "down")
        }
    return names


def test_default_checkpoint_loads_with_transformers_and_has_sglangs_names(tmp_path):
    rc, res = write(tmp_path)
    assert rc == 0, res
    assert res["changed"] is True and res["deepep_low_latency_hidden"] is True
    model = tmp_path / "model"

    config = AutoConfig.from_pretrained(model, local_files_only=True)
    assert type(config).__name__ == "Qwen3MoeConfig" and config.architectures == ["Qwen3MoeForCausalLM"]
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        config.num_experts,
        config.num_experts_per_tok,
        config.moe_intermediate_size,
        config.vocab_size,
    ) == (2048, 2, 16, 4, 128, 16, 4, 256, 2048)
    assert config.hidden_size in sm.DEEPEP_LL_HIDDEN_SIZES

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    assert type(tokenizer).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    assert len(tokenizer) == config.vocab_size  # every id the model can emit decodes
    text = "Expert parallelism over PCIe, 2048 tokens!"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and max(ids) < config.vocab_size
    assert tokenizer.eos_token == sm.SPECIAL_TOKENS[0] and tokenizer.eos_token_id == config.eos_token_id
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    header = safetensors_header(model / "model.safetensors")
    assert header.pop("__metadata__") == {"format": "pt"}
    assert set(header) == sglang_qwen3_moe_names(2, 16)
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert header["model.layers.1.mlp.experts.15.down_proj.weight"]["shape"] == [2048, 256]
    assert header["model.layers.0.mlp.gate.weight"]["shape"] == [16, 2048]
    assert header["model.layers.0.self_attn.k_proj.weight"]["shape"] == [512, 2048]
    total = sum(math.prod(v["shape"]) for v in header.values())
    assert total == res["parameters"] == 79_768_064
    assert res["bytes"] == sum(p.stat().st_size for p in model.iterdir() if p.name != sm.MANIFEST)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging dir left


def test_safetensors_library_reads_the_hand_written_file(tmp_path):
    assert write(tmp_path, **TINY)[0] == 0
    with safetensors.safe_open(str(tmp_path / "model" / "model.safetensors"), framework="numpy") as handle:
        keys = set(handle.keys())
        assert handle.metadata() == {"format": "pt"}
    assert keys == sglang_qwen3_moe_names(2, 4)


def test_same_settings_give_identical_bytes_and_a_rerun_is_a_no_op(tmp_path):
    rc, first = write(tmp_path, "a", **TINY)
    assert rc == 0 and first["changed"] is True
    assert write(tmp_path, "b", **TINY)[0] == 0
    a, b = tmp_path / "a", tmp_path / "b"
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    for name in os.listdir(a):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name

    before = {p.name: p.stat().st_mtime_ns for p in a.iterdir()}
    rc, again = write(tmp_path, "a", **TINY)
    assert rc == 0 and again["changed"] is False and again["reason"] == "manifest matches"
    assert {p.name: p.stat().st_mtime_ns for p in a.iterdir()} == before

    rc, other = write(tmp_path, "a", **{**TINY, "seed": 1})
    assert rc == 0 and other["changed"] is True and other["reason"] == "settings changed"
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_a_damaged_model_is_rewritten(tmp_path):
    assert write(tmp_path, **TINY)[0] == 0
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-2])
    rc, res = write(tmp_path, **TINY)
    assert rc == 0 and res["changed"] is True
    assert res["reason"] == "model.safetensors is missing or has another size"
    assert write(tmp_path, **TINY)[1]["changed"] is False


def test_check_mode_writes_nothing(tmp_path):
    rc, res = write(tmp_path, check=True, **TINY)
    assert rc == 0 and res["changed"] is True and res["diff"]["after"]["key"] == res["key"]
    assert not (tmp_path / "model").exists() and list(tmp_path.iterdir()) == []


def test_the_fact_is_written_in_the_same_call_only_when_it_changes(tmp_path):
    facts = tmp_path / "facts"
    fact_file = facts / "epforge_smoke_model.fact"
    rc, dry = write(tmp_path, check=True, facts_dir=str(facts), **TINY)
    assert rc == 0 and dry["changed"] is True and dry["fact"]["bytes"] == 0
    assert [d["after_header"] for d in dry["diff"][1:]] == [str(fact_file)]
    assert list(tmp_path.iterdir()) == []

    rc, first = write(tmp_path, facts_dir=str(facts), **TINY)
    assert rc == 0 and first["changed"] is True
    fact = json.loads(fact_file.read_text())
    assert fact == first["fact"] and fact["path"] == str(tmp_path / "model") and fact["key"] == first["key"]
    assert fact["bytes"] == first["bytes"] > 0 and fact["parameters"] == first["parameters"]
    assert fact["deepep_low_latency_hidden"] is first["deepep_low_latency_hidden"] is False  # TINY's width
    written = fact_file.stat().st_mtime_ns

    # The model is current: the one call finds the fact current too, and writes nothing.
    rc, again = write(tmp_path, facts_dir=str(facts), **TINY)
    assert rc == 0 and again["changed"] is False and fact_file.stat().st_mtime_ns == written
    # A fact that lost its content (an older writer, a hand edit) is rewritten by the same call.
    fact_file.write_text("{}\n")
    rc, fixed = write(tmp_path, facts_dir=str(facts), **TINY)
    assert rc == 0 and fixed["changed"] is True and json.loads(fact_file.read_text()) == fact


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"num_experts_per_tok": 32}, "num_experts_per_tok (32) exceeds num_experts (16)"),
        ({"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads (3)"),
        ({"vocab_size": 100}, "vocab_size (100) is below"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, settings, expected):
    rc, res = write(tmp_path, **settings)
    assert rc != 0 and expected in res["msg"] and "nothing was written" in res["msg"]
    assert list(tmp_path.iterdir()) == []


def test_real_weights_are_never_replaced(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model-00001-of-00002.safetensors").write_bytes(b"real weights")
    rc, res = write(tmp_path, **TINY)
    assert rc != 0 and "is not a smoke model written by epforge" in res["msg"]
    assert [p.name for p in model.iterdir()] == ["model-00001-of-00002.safetensors"]


def test_a_python_without_numpy_and_tokenizers_is_refused(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    args = {"path": str(tmp_path / "model"), "python": str(bare / "bin" / "python"), **TINY}
    rc, res = run_module("smoke_model", args)
    assert rc != 0 and "lacks numpy, tokenizers" in res["msg"] and "nothing was written" in res["msg"]
    assert not (tmp_path / "model").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bare"]  # the staging dir is gone too


def test_hidden_size_deepep_cannot_serve_warns(tmp_path):
    rc, res = write(tmp_path, **{**TINY, "hidden_size": 320})
    assert rc == 0 and res["deepep_low_latency_hidden"] is False
    assert "'Unsupported hidden'" in json.dumps(res["warnings"])  # ansible-core 2.19 wraps warnings in events


def test_the_model_is_readable_by_other_users(tmp_path):
    """The server runs unprivileged: a root-only (mkdtemp's 0700) model directory made SGLang report
    'Unrecognized model ... Should have a model_type key' on the lent H200. An old 0700 model is fixed."""
    assert write(tmp_path, "m", **TINY)[0] == 0
    model = tmp_path / "m"
    assert stat.S_IMODE(model.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(f.stat().st_mode) & 0o044 == 0o044 for f in model.iterdir())
    model.chmod(0o700)
    rc, again = write(tmp_path, "m", **TINY)
    assert rc == 0 and again["changed"] is True and again["reason"] == "manifest matches"
    assert stat.S_IMODE(model.stat().st_mode) == 0o755
    assert write(tmp_path, "m", **TINY)[1]["changed"] is False
