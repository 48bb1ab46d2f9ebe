"""A deterministic random-weight MoE checkpoint in Hugging Face layout (Qwen3-MoE), with a matching tokenizer.

Two halves:
- pure planning (stdlib only, imported by library/smoke_model.py in Ansible's python): settings checks,
  config.json, the tensor table (the module takes the inputs key with plugins/module_utils/digests.py);
- the writer (numpy + tokenizers, imported lazily), run as a script in the ML env's python: the module
  sends this file's source on stdin (`python - STAGING_DIR SETTINGS_JSON KEY`), so the target python needs
  no Ansible. torch is not needed: bf16 is written as the top 16 bits of float32 (round to nearest even) and
  the safetensors file is assembled by hand (8-byte header length, JSON header, raw data; format spec:
  https://github.com/huggingface/safetensors#format).

Deterministic: each tensor's values come from numpy's PCG64 bit generator (its raw stream is fixed by
NumPy's compatibility policy, NEP 19) seeded from sha256(seed, tensor name), turned into floats with plain
IEEE arithmetic; the tokenizer is trained on fixed text. Same settings -> byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys

# Bump when the writer's output changes for the same settings (a rerun then rewrites the model).
WRITER_VERSION = 1
MANIFEST = "epforge-smoke-model.json"
SAFETENSORS = "model.safetensors"
ARCHITECTURES = {"Qwen3MoeForCausalLM": "qwen3_moe"}

# Hidden sizes DeepEP v1.2.1's kernels are compiled for (SWITCH_HIDDEN in csrc/kernels/launch.cuh at
# commit 9af0e0d0e74f, the ref SGLang pins); any other size fails its low-latency dispatch with
# "Unsupported hidden".
DEEPEP_LL_HIDDEN_SIZES = (2048, 2560, 4096, 5120, 6144, 7168, 8192)

DEFAULTS = {
    "architecture": "Qwen3MoeForCausalLM",
    "num_hidden_layers": 2,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 256,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
    "seed": 0,
    "initializer_range": 0.02,
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Byte-level BPE starts from 256 byte symbols; below this a model vocab cannot hold the tokenizer.
MIN_VOCAB = 256 + len(SPECIAL_TOKENS) + 64
# ChatML, as Qwen models use, so /v1/chat/completions works against the smoke model.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# The tokenizer's training text: fixed, so the tokenizer is too. Plain words, digits and code-ish text,
# enough for a few hundred merges.
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A smoke model has random weights and says nothing useful,
but it loads, routes tokens to experts and returns text, which is all a rehearsal of server flags needs.
Expert parallelism spreads the experts of each mixture-of-experts layer over the GPUs of a host; every
token is sent to the GPUs that hold its chosen experts and the results are sent back and combined.
Tensor parallelism splits every matrix across GPUs and sums partial results with an allreduce.
Speculative decoding drafts several tokens with a small model and verifies them in one step.
CUDA graphs record a sequence of kernel launches once and replay it with little launch overhead.
Hello, world! How are you today? I am fine, thank you. What time is it? It is ten past three.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 16 32 64 128 256 512 1024 2048 4096 8192 3.14159 2.71828.
def main():\n    print("hello")\n    return 0\n\nfor i in range(10):\n    x = i * i + 1\n
{"role": "user", "content": "Write a haiku about GPUs."} {"role": "assistant", "content": "Silicon rivers"}
One, two, three, four, five, six, seven, eight, nine, ten. Monday, Tuesday, Wednesday, Thursday, Friday.
January February March April May June July August September October November December.
the of and to in is that for it as was with be by on not he this are or his from at which but have an
"""


# ---------------------------------------------------------------- planning (stdlib only)


def settings_problems(s: dict) -> list[str]:
    """Every reason these settings cannot make a loadable model (empty when fine)."""
    problems = []
    if s["architecture"] not in ARCHITECTURES:
        problems.append(f"architecture '{s['architecture']}' is not one of {', '.join(ARCHITECTURES)}")
    for key in (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "vocab_size",
        "max_position_embeddings",
    ):
        if not isinstance(s[key], int) or s[key] < 1:
            problems.append(f"{key} must be a positive integer, not {s[key]!r}")
    if problems:
        return problems
    if s["num_experts_per_tok"] > s["num_experts"]:
        problems.append(
            f"num_experts_per_tok ({s['num_experts_per_tok']}) exceeds num_experts ({s['num_experts']})"
        )
    if s["num_attention_heads"] % s["num_key_value_heads"]:
        problems.append(
            f"num_attention_heads ({s['num_attention_heads']}) must be a multiple of "
            f"num_key_value_heads ({s['num_key_value_heads']})"
        )
    if s["head_dim"] % 2:
        problems.append(f"head_dim ({s['head_dim']}) must be even (rotary embeddings rotate pairs)")
    if s["vocab_size"] < MIN_VOCAB:
        problems.append(
            f"vocab_size ({s['vocab_size']}) is below {MIN_VOCAB}: a byte-level tokenizer needs "
            "256 byte tokens, the special tokens and some merges"
        )
    if s["seed"] < 0:
        problems.append(f"seed must be >= 0, not {s['seed']}")
    if not 0 < s["initializer_range"] < 1:
        problems.append(f"initializer_range must be in (0, 1), not {s['initializer_range']}")
    return problems


def model_config(s: dict) -> dict:
    """config.json as the Hugging Face hub's Qwen3-MoE checkpoints write it (special token ids 0..2)."""
    return {
        "architectures": [s["architecture"]],
        "model_type": ARCHITECTURES[s["architecture"]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "decoder_sparse_step": 1,
        "head_dim": s["head_dim"],
        "hidden_act": "silu",
        "hidden_size": s["hidden_size"],
        "initializer_range": s["initializer_range"],
        # Dense MLP width: unused, every layer is MoE (mlp_only_layers is empty, decoder_sparse_step 1).
        "intermediate_size": s["moe_intermediate_size"] * s["num_experts_per_tok"],
        "max_position_embeddings": s["max_position_embeddings"],
        "max_window_layers": s["num_hidden_layers"],
        "mlp_only_layers": [],
        "moe_intermediate_size": s["moe_intermediate_size"],
        "norm_topk_prob": True,
        "num_attention_heads": s["num_attention_heads"],
        "num_experts": s["num_experts"],
        "num_experts_per_tok": s["num_experts_per_tok"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_key_value_heads": s["num_key_value_heads"],
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": s["vocab_size"],
    }


def tensor_table(s: dict) -> list[tuple[str, list[int], str]]:
    """(name, shape, init) for every weight, in the per-expert layout SGLang's Qwen3-MoE loader maps
    (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight; router model.layers.N.mlp.gate.weight).
    init is 'random' or 'ones' (norm weights). Sorted by name, the order of the safetensors file."""
    h, d = s["hidden_size"], s["head_dim"]
    q, kv, inter = s["num_attention_heads"] * d, s["num_key_value_heads"] * d, s["moe_intermediate_size"]
    table = [
        ("model.embed_tokens.weight", [s["vocab_size"], h], "random"),
        ("model.norm.weight", [h], "ones"),
        ("lm_head.weight", [s["vocab_size"], h], "random"),
    ]
    for n in range(s["num_hidden_layers"]):
        p = f"model.layers.{n}"
        table += [
            (f"{p}.input_layernorm.weight", [h], "ones"),
            (f"{p}.post_attention_layernorm.weight", [h], "ones"),
            (f"{p}.self_attn.q_proj.weight", [q, h], "random"),
            (f"{p}.self_attn.k_proj.weight", [kv, h], "random"),
            (f"{p}.self_attn.v_proj.weight", [kv, h], "random"),
            (f"{p}.self_attn.o_proj.weight", [h, q], "random"),
            (f"{p}.self_attn.q_norm.weight", [d], "ones"),
            (f"{p}.self_attn.k_norm.weight", [d], "ones"),
            (f"{p}.mlp.gate.weight", [s["num_experts"], h], "random"),
        ]
        for e in range(s["num_experts"]):
            table += [
                (f"{p}.mlp.experts.{e}.gate_proj.weight", [inter, h], "random"),
                (f"{p}.mlp.experts.{e}.up_proj.weight", [inter, h], "random"),
                (f"{p}.mlp.experts.{e}.down_proj.weight", [h, inter], "random"),
            ]
    return sorted(table)


def parameter_count(s: dict) -> int:
    total = 0
    for _unused, shape, _unused in tensor_table(s):
        size = 1
        for dim in shape:
            size *= dim
        total += size
    return total


def manifest_matches(directory: str, key: str) -> tuple[bool, str]:
    """Whether DIRECTORY holds the model for KEY, judged by its manifest and the files' sizes (no hashing)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return False, "no manifest"
    if manifest.get("key") != key:
        return False, "settings changed"
    for name, info in sorted(manifest.get("files", {}).items()):
        path = os.path.join(directory, name)
        if not os.path.isfile(path) or os.path.getsize(path) != info.get("size"):
            return False, f"{name} is missing or has another size"
    return True, "manifest matches"


# ---------------------------------------------------------------- the writer (numpy + tokenizers)


def _bf16_random(np, shape: list[int], seed: int, name: str, scale: float):
    """Uniform values in [-scale, scale) as bf16 bit patterns (uint16), fixed by (seed, name)."""
    count = 1
    for dim in shape:
        count *= dim
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    raw = np.random.PCG64(int.from_bytes(digest[:16], "little")).random_raw(count)
    # Top 24 bits -> float32 in [0, 1) exactly; then plain IEEE float32 arithmetic.
    values = (raw >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
    values = (values * np.float32(2.0) - np.float32(1.0)) * np.float32(scale)
    bits = values.view(np.uint32)
    # float32 -> bf16, round to nearest even (no NaN/inf can occur here).
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").reshape(shape)


def write_safetensors(np, path: str, s: dict) -> None:
    """The safetensors file, tensor by tensor (peak memory: the largest tensor)."""
    table = tensor_table(s)
    header, offset = {}, 0
    for name, shape, _unused in table:
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the safetensors library writes it
    # Uniform on [-a, a) has std a/sqrt(3): a = initializer_range * sqrt(3) gives the config's std.
    scale = s["initializer_range"] * 3**0.5
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)))
        handle.write(text)
        for name, shape, init in table:
            if init == "ones":
                handle.write(np.full(shape, 0x3F80, dtype="<u2").tobytes())  # 1.0 in bf16
            else:
                handle.write(_bf16_random(np, shape, s["seed"], name, scale).tobytes())


def write_tokenizer(directory: str, s: dict) -> int:
    """A byte-level BPE trained on TRAINING_TEXT; files that PreTrainedTokenizerFast / AutoTokenizer load."""
    # Imported here, not at the top: Ansible's python imports this file for the planning half only.
    from tokenizers import (  # noqa: PLC0415
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=s["vocab_size"],
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(TRAINING_TEXT.splitlines(), trainer=trainer)
    # The little text gives a few hundred merges; ordinary added tokens fill the rest of the model's vocab,
    # so every id a random model may emit decodes to visible text.
    extra = s["vocab_size"] - tokenizer.get_vocab_size()
    if extra > 0:
        tokenizer.add_tokens([f"<|extra_{i}|>" for i in range(extra)])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[0],
        "eos_token": SPECIAL_TOKENS[0],
        "pad_token": SPECIAL_TOKENS[0],
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": s["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(os.path.join(directory, "tokenizer_config.json"), config)
    _write_json(
        os.path.join(directory, "special_tokens_map.json"),
        {key: SPECIAL_TOKENS[0] for key in ("bos_token", "eos_token", "pad_token")},
    )
    return tokenizer.get_vocab_size()


def _write_json(path: str, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_model(directory: str, s: dict, key: str) -> dict:
    """Write every file into DIRECTORY (an empty staging dir); the manifest, naming the files by KEY (the
    module's digest of the settings and WRITER_VERSION), last. Return the manifest."""
    import numpy as np  # noqa: PLC0415 (the writer's python has numpy; Ansible's need not)
    import tokenizers  # noqa: PLC0415

    config = model_config(s)
    _write_json(os.path.join(directory, "config.json"), config)
    _write_json(
        os.path.join(directory, "generation_config.json"),
        {"bos_token_id": 0, "eos_token_id": 0, "do_sample": False},
    )
    tokenizer_size = write_tokenizer(directory, s)
    write_safetensors(np, os.path.join(directory, SAFETENSORS), s)
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        files[name] = {"size": os.path.getsize(path), "sha256": _file_sha256(path)}
    manifest = {
        "key": key,
        "settings": s,
        "writer_version": WRITER_VERSION,
        "parameters": parameter_count(s),
        "tokenizer_vocab_size": tokenizer_size,
        "files": files,
        "libraries": {"numpy": np.__version__, "tokenizers": tokenizers.__version__},
    }
    _write_json(os.path.join(directory, MANIFEST), manifest)
    return manifest


def _main(argv: list[str]) -> int:
    """python - STAGING_DIR SETTINGS_JSON KEY (source on stdin): write the model, print its manifest."""
    missing = []
    for name in ("numpy", "tokenizers"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        print(json.dumps({"missing": missing}))
        return 3
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    manifest = write_model(argv[1], json.loads(argv[2]), argv[3])
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
