#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: a deterministic random-weight MoE checkpoint (Hugging Face layout) and its tokenizer."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: smoke_model
short_description: Write a deterministic random-weight Qwen3-MoE checkpoint and a matching tokenizer
description:
  - Writes, without any hub access, a Hugging Face model directory that SGLang and transformers load -
    C(config.json) (C(Qwen3MoeForCausalLM)), C(generation_config.json), one bf16 C(model.safetensors) in the
    per-expert layout (C(model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight), router
    C(model.layers.N.mlp.gate.weight), attention C(q/k/v/o_proj) with C(q_norm)/C(k_norm), norms,
    C(embed_tokens), C(lm_head)) and a byte-level BPE tokenizer (C(tokenizer.json),
    C(tokenizer_config.json)) trained with the C(tokenizers) library on fixed built-in text - so server
    settings (TP, EP, DeepEP, CUDA graphs) can be rehearsed before real weights are fetched.
  - Deterministic - the same settings give byte-identical files (values from numpy's PCG64 bit generator
    seeded per tensor from O(seed) and the tensor name).
  - The writing runs in O(python), which needs C(numpy) and C(tokenizers) (no torch, no safetensors - the
    file is assembled by hand). A python lacking them is refused before anything changes.
  - A manifest (C(epforge-smoke-model.json)) holds the settings' key and each file's size and sha256; when
    it matches, nothing is written (changed=false).
  - Written into a temp directory next to O(path) and renamed into place, so a killed run leaves no half
    model. An existing O(path) that is not a smoke model (no manifest) is refused, never replaced.
  - With O(facts_dir), also records the model as the local fact C(epforge_smoke_model) (path, key,
    parameters, bytes, deepep_low_latency_hidden) in the same call, written only when its content changes,
    so a rerun with the same settings is one module call and changed=false.
  - Check mode reports whether the model would be written, with a diff of the key (and of the fact).
options:
  path:
    description: Model directory to write (what C(epforge_server.model_path) points to).
    type: path
    required: true
  python:
    description: Interpreter that writes the files (the ML env's python); needs numpy and tokenizers.
    type: path
    required: true
  architecture:
    description: Model class in C(config.json).
    type: str
    default: Qwen3MoeForCausalLM
    choices: [Qwen3MoeForCausalLM]
  num_hidden_layers:
    description: Decoder layers (every one a MoE layer).
    type: int
    default: 2
  hidden_size:
    description:
      - Model width. DeepEP v1.2.1's low-latency kernels accept only 2048, 2560, 4096, 5120, 6144, 7168 and
        8192; another size writes the model but warns and returns C(deepep_low_latency_hidden=false).
    type: int
    default: 2048
  num_attention_heads:
    description: Query heads.
    type: int
    default: 16
  num_key_value_heads:
    description: Key/value heads (O(num_attention_heads) must be a multiple).
    type: int
    default: 4
  head_dim:
    description: Width of one attention head.
    type: int
    default: 128
  num_experts:
    description: Routed experts per layer.
    type: int
    default: 16
  num_experts_per_tok:
    description: Experts each token is routed to (top-k).
    type: int
    default: 4
  moe_intermediate_size:
    description: Inner width of one expert.
    type: int
    default: 256
  vocab_size:
    description: Embedding rows; the tokenizer is trained and padded to exactly this size.
    type: int
    default: 2048
  max_position_embeddings:
    description: Longest sequence the config declares.
    type: int
    default: 4096
  seed:
    description: Seed of the random weights.
    type: int
    default: 0
  initializer_range:
    description: Standard deviation of the random weights.
    type: float
    default: 0.02
  timeout:
    description: Seconds the writer may take.
    type: int
    default: 600
extends_documentation_fragment:
  - epforge.ep.facts_dir.optional
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode writes no model and no fact; it reports whether they would be written.
  diff_mode:
    support: partial
    details: >-
      The diff shows the model's key and the local fact; fixing the mode of a model directory an older run
      left at 0700 is a change without a diff.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Write the smoke model with the ML env's python
  epforge.ep.smoke_model:
    path: /opt/epforge/models/smoke-qwen3-moe
    python: /opt/epforge/ml-env/bin/python

- name: A wider, deeper variant for DeepEP with 8 ranks
  epforge.ep.smoke_model:
    path: /opt/epforge/models/smoke-qwen3-moe-7168
    python: /opt/torch/.venv/bin/python3
    hidden_size: 7168
    num_hidden_layers: 4
    num_experts: 64
    num_experts_per_tok: 8
"""

RETURN = r"""
path:
  description: The model directory.
  returned: always
  type: str
key:
  description: sha256 of the settings and the writer version (the manifest's key).
  returned: always
  type: str
reason:
  description: Why the model was (or would be) written, or C(manifest matches).
  returned: always
  type: str
parameters:
  description: Number of parameters.
  returned: always
  type: int
  sample: 79768064
bytes:
  description: Size of the model's files, the manifest excepted.
  returned: success
  type: int
  sample: 159568000
seconds:
  description: Time the writer took in this run (0 when nothing was written).
  returned: success
  type: float
files:
  description: Each file with its size and sha256 (from the manifest).
  returned: success
  type: dict
deepep_low_latency_hidden:
  description: Whether O(hidden_size) is one DeepEP v1.2.1's low-latency kernels are compiled for.
  returned: always
  type: bool
fact:
  description: The local fact C(epforge_smoke_model) as written (or as it would be, in check mode).
  returned: when O(facts_dir) is set and the module succeeds
  type: dict
"""

import inspect
import json
import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, replace_dir
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.smoke_model import model as sm

SETTING_TYPES = {
    "architecture": {
        "type": "str",
        "default": sm.DEFAULTS["architecture"],
        "choices": sorted(sm.ARCHITECTURES),
    },
    **{
        # no_log False: sanity reads "_key_" in num_key_value_heads as a secret's name; it is a head count
        key: {"type": "int", "default": value, "no_log": False}
        for key, value in sm.DEFAULTS.items()
        if isinstance(value, int) and not isinstance(value, bool)
    },
    "initializer_range": {"type": "float", "default": sm.DEFAULTS["initializer_range"]},
}


# The model directory: readable by the server's unprivileged account (files get the writer's umask, 0644).
MODEL_DIR_MODE = 0o755

FACT_NAME = "epforge_smoke_model"


def read_manifest(path: str) -> dict:
    return read_json(os.path.join(path, sm.MANIFEST)) or {}


def refuse_foreign_path(module: AnsibleModule, path: str, result: dict) -> None:
    """Never replace a file, or a directory of files that is not a smoke model epforge wrote."""
    if os.path.exists(path) and not os.path.isdir(path):
        module.fail_json(msg=f"{path} exists and is not a directory: refusing to replace it", **result)
    if os.path.isdir(path) and os.listdir(path) and not os.path.exists(os.path.join(path, sm.MANIFEST)):
        module.fail_json(
            msg=(
                f"{path} holds files but no {sm.MANIFEST}: it is not a smoke model written by "
                "epforge (real weights?), refusing to replace it; choose another path"
            ),
            **result,
        )


def keep_current_model(module: AnsibleModule, path: str, result: dict) -> None:
    """The manifest matches: report the model's files, fix the directory mode an older run left."""
    manifest = read_manifest(path)
    result.update(
        files=manifest.get("files", {}),
        seconds=0.0,
        bytes=sum(f["size"] for f in manifest.get("files", {}).values()),
    )
    if os.stat(path).st_mode & 0o777 != MODEL_DIR_MODE:  # an older run left mkdtemp's 0700
        result["changed"] = True
        if not module.check_mode:
            os.chmod(path, MODEL_DIR_MODE)


def finish(module: AnsibleModule, result: dict) -> None:
    """Record the model as the local fact (only when its content changes), then exit."""
    facts_dir = module.params["facts_dir"]
    if facts_dir:
        fact = {key: result.get(key) for key in ("path", "key", "parameters", "deepep_low_latency_hidden")}
        fact["bytes"] = result.get("bytes", 0)
        written = write_local_fact(facts_dir, FACT_NAME, fact, check_mode=module.check_mode)
        result.update(fact=fact, changed=result["changed"] or written["changed"])
        if written["diff"]:
            # Ansible prints one diff or a list of them: the model key's and the fact's.
            result["diff"] = [result["diff"], written["diff"]] if "diff" in result else written["diff"]
    module.exit_json(**result)


def require_python(module: AnsibleModule, python: str, result: dict) -> None:
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(
            msg=(
                f"python {python} does not exist or is not executable (set "
                "smoke_model_python to an interpreter with numpy and tokenizers)"
            ),
            **result,
        )


def new_staging_dir(path: str) -> str:
    """A fresh staging dir beside path (stale ones a killed run left are removed), readable by all."""
    parent = os.path.dirname(path) or "."
    os.makedirs(parent, exist_ok=True)
    prefix = f".{os.path.basename(path)}.tmp-"
    for stale in os.listdir(parent):  # left by a killed run
        if stale.startswith(prefix):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    staging = tempfile.mkdtemp(prefix=prefix, dir=parent)
    # mkdtemp makes it 0700, but the server's unprivileged user must read the model (on the lent H200 SGLang
    # saw no config.json in a root-only directory: "Unrecognized model ... Should have a model_type key").
    os.chmod(staging, MODEL_DIR_MODE)
    return staging


def missing_modules(proc) -> list[str]:
    """The Python modules the writer reported missing (its exit code 3 with a JSON line)."""
    if proc.rc != 3:
        return []
    try:
        return json.loads(proc.out.strip().splitlines()[-1]).get("missing", [])
    except (ValueError, IndexError, AttributeError):
        return []


def fail_writer(module: AnsibleModule, python: str, proc, argv: list[str], result: dict) -> None:
    missing = missing_modules(proc)
    if missing:
        module.fail_json(
            msg=(
                f"{python} lacks {', '.join(missing)}: install them into that env "
                f"(pip install {' '.join(missing)}) or set smoke_model_python to one that "
                "has them; nothing was written"
            ),
            cmd=argv[:3],
            rc=proc.rc,
            **result,
        )
    module.fail_json(
        msg="writing the smoke model failed; nothing was replaced",
        cmd=argv[:3],
        rc=proc.rc,
        log_tail=tail(proc.err or proc.out),
        **result,
    )


def write_model(
    module: AnsibleModule, p: dict, staging: str, settings: dict, result: dict
) -> tuple[dict, float]:
    """Run the writer (plugins/module_utils/smoke_model/model.py fed on stdin) into staging: (manifest,
    seconds)."""
    argv = [p["python"], "-", staging, json.dumps(settings, sort_keys=True), result["key"]]
    started = time.monotonic()
    proc = run_bounded(argv, input_text=inspect.getsource(sm), timeout=p["timeout"])
    if proc.timed_out:
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(
            msg=f"writing the smoke model took more than {p['timeout']} s",
            cmd=argv[:3],
            rc=124,
            log_tail=tail(proc.err),
            **result,
        )
    seconds = round(time.monotonic() - started, 2)
    if proc.rc != 0:
        shutil.rmtree(staging, ignore_errors=True)
        fail_writer(module, p["python"], proc, argv, result)
    return json.loads(proc.out.strip().splitlines()[-1]), seconds


def warn_deepep_hidden(module: AnsibleModule, hidden_size: int) -> None:
    module.warn(
        f"hidden_size {hidden_size} is not one DeepEP v1.2.1's low-latency kernels support "
        f"({', '.join(map(str, sm.DEEPEP_LL_HIDDEN_SIZES))}): --moe-a2a-backend deepep will fail "
        "with 'Unsupported hidden' on this model"
    )


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "python": {"type": "path", "required": True},
    **SETTING_TYPES,
    "timeout": {"type": "int", "default": 600},
    "facts_dir": {"type": "path"},
}


class SmokeModel:
    """The module's one job: the smoke model's files at path for these settings, kept when the manifest
    there already matches their key, else written by the env's python into a staging dir and swapped in."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.path = self.p["path"].rstrip("/")
        self.settings = {key: self.p[key] for key in sm.DEFAULTS}
        self.result = {
            "changed": False,
            "path": self.path,
            "key": "",
            "reason": "",
            "deepep_low_latency_hidden": self.p["hidden_size"] in sm.DEEPEP_LL_HIDDEN_SIZES,
        }

    def run(self) -> None:
        """Keep a matching model, report the write in check mode, else write it."""
        module, path, result = self.module, self.path, self.result
        key = self.key()
        matches, reason = sm.manifest_matches(path, key)
        result["reason"] = reason
        if matches:
            keep_current_model(module, path, result)
            finish(module, result)

        before = read_manifest(path).get("key")
        result["diff"] = {"before": {"path": path, "key": before}, "after": {"path": path, "key": key}}
        if module.check_mode:
            result["changed"] = True
            finish(module, result)
        self.write()

    def key(self) -> str:
        """The settings' key, after refusing bad settings and a path that is not a smoke model's (nothing
        is written before)."""
        module, p, result = self.module, self.p, self.result
        problems = sm.settings_problems(self.settings)
        if problems:
            module.fail_json(
                msg="smoke model settings refused, nothing was written: " + "; ".join(problems), **result
            )
        # equal key = equal files (the digest of plugins/module_utils/digests.py, the same bytes as before)
        key = digest({"settings": self.settings, "writer_version": sm.WRITER_VERSION})
        result.update(key=key, parameters=sm.parameter_count(self.settings))
        if not result["deepep_low_latency_hidden"]:
            warn_deepep_hidden(module, p["hidden_size"])
        refuse_foreign_path(module, self.path, result)
        return key

    def write(self) -> None:
        """Write the model into a staging dir with the env's python, then swap it in at path and exit."""
        module, p, result = self.module, self.p, self.result
        require_python(module, p["python"], result)
        staging = new_staging_dir(self.path)
        manifest, seconds = write_model(module, p, staging, self.settings, result)
        replace_dir(staging, self.path)  # an older smoke model there is moved aside, then removed
        result.update(
            changed=True,
            seconds=seconds,
            files=manifest["files"],
            bytes=sum(f["size"] for f in manifest["files"].values()),
        )
        finish(module, result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    SmokeModel(module).run()


if __name__ == "__main__":
    main()
