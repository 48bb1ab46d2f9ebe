"""Settings of module smoke_model for a model small enough to write in well under a second (the module tests
and the torch load test use it; the module's defaults make the real smoke model)."""

from __future__ import annotations

TINY_MODEL = {
    "num_hidden_layers": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "vocab_size": 512,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
