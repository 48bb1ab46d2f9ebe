#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: measure per-call NCCL allreduce and all_to_all latency at decode-sized messages on the
host's GPUs, and estimate per-step communication of TP allreduce versus EP all-to-all."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: collective_probe
short_description: Measure NCCL allreduce vs all_to_all latency at decode sizes and estimate TP vs EP cost
description:
  - Runs epforge's probe script (shipped by the C(collective_probe) role) with the ML env's python - one
    process per GPU, bf16 tensors of [tokens x hidden] (hidden 7168, tokens 1/8/64/512 by default),
    C(all_reduce) and C(all_to_all_single), eager and captured in CUDA graphs. Each variant (a set of
    environment variables such as C(NCCL_P2P_DISABLE=1) or C(NCCL_P2P_LEVEL=SYS)) is one bounded run; its
    output is appended to O(log_path).
  - From the measured latencies and the model's layer counts (O(model)) it estimates the communication
    time of one decode step with tensor parallelism (allreduces) and with expert parallelism (all-to-all
    dispatch and combine), per variant, mode and token count (C(estimate_by_variant)), and per mode and token
    count from each side's fastest variant (C(estimate)), so a user sees before a long server launch whether
    EP pays on this interconnect, against the fastest all-reduce measured (SGLang's PCIe-IPC one included).
  - With O(pcie_ipc) the variant C(pcie_ipc) (C(SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1), NCCL as it is) is added -
    its allreduces go the way SGLang 0.5.23 sends them, to FlashInfer's PCIe-IPC kernels (bf16, 2/4/8 ranks,
    contiguous tensors of 2 or more dimensions within the decode-sized workspace) or else NCCL, and each row
    and curve point records its C(path). Where the kernels cannot act at all (FlashInfer without
    C(PcieIpcAllReduceWorkspace), another world size, CPU processes) that variant is recorded as skipped with
    the reason, not a failure.
  - A host without a usable GPU (O(gpu_count=0), or the script finding none) is not an error - the module
    returns C(skipped=true) with the reason and changes nothing.
  - Idempotent by evidence. With O(facts_dir), the inputs (GPU list, variants, sizes, script hash) are
    hashed; when fact C(epforge_collective) there holds results for the same hash and O(force) is false
    nothing is run and C(changed=false). A new measurement writes the fact and reports C(changed=true).
  - Check mode runs nothing and reports whether a measurement would run.
options:
  python:
    description: The python of the ML env (torch with NCCL); an absolute path.
    type: path
    required: true
  script:
    description: Path of C(epforge_collective_probe.py) on the host.
    type: path
    required: true
  gpu_count:
    description:
      - GPUs on the host (from C(epforge_gpu_facts)); 0 skips with the reason, -1 lets the script find out.
    type: int
    default: -1
  gpus:
    description: GPU descriptions (from C(epforge_gpu_facts.gpus)), part of the inputs hash and the record.
    type: list
    elements: dict
    default: []
  world_size:
    description: Ranks (0 is every visible GPU).
    type: int
    default: 0
  tokens:
    description: Token counts per message (decode batch sizes, or batch x draft tokens when speculative).
    type: list
    elements: int
    default: [1, 8, 64, 512]
  curve_sizes:
    description:
      - Message sizes in bytes for the latency curve (for example powers of two from 1024 to 67108864). Each
        op is also timed (eager) on a flat message of each size, per variant; the fact's C(curve) holds one
        point per variant, op and size (the slowest rank's figures). Empty measures no curve.
    type: list
    elements: int
    default: []
  hidden:
    description: Hidden size (7168 for DeepSeek-V3 and Kimi-K2).
    type: int
    default: 7168
  dtype:
    description: Element type of the messages.
    type: str
    choices: [bfloat16, float16, float32]
    default: bfloat16
  iters:
    description: Timed calls (eager) or graph replays (graph) per measurement.
    type: int
    default: 200
  warmup:
    description: Untimed calls before each measurement.
    type: int
    default: 20
  graph_calls:
    description: Calls captured in one CUDA graph.
    type: int
    default: 10
  cuda_graphs:
    description: Also measure with CUDA graphs (how SGLang runs decode).
    type: bool
    default: true
  variants:
    description:
      - Environment variants, each run separately. Each item is C({name, env}) with C(env) a mapping of
        environment variables (values as strings).
    type: list
    elements: dict
    default:
      - {name: default, env: {}}
      - {name: nccl_pcie, env: {NCCL_P2P_LEVEL: SYS, NCCL_PROTO: "LL,LL128,Simple"}}
      - {name: nccl_p2p_disabled, env: {NCCL_P2P_DISABLE: "1"}}
  env:
    description: Environment variables for every variant (a variant's own C(env) wins).
    type: dict
    default: {}
  pcie_ipc:
    description:
      - >-
        Add the variant C({name: pcie_ipc, env: {SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: "1"}}) to O(variants)
        unless one of them sets that variable on already. Role C(collective_probe) sets it where SGLang's
        PCIe-IPC all-reduce can act (known-issues row C(pcie_ipc_allreduce_opt_in),
        C(module_utils/pcie_ipc.py)).
    type: bool
    default: false
  pcie_ipc_reason:
    description: Why the caller did or did not ask for the C(pcie_ipc) variant; recorded in the fact.
    type: str
    default: ""
  model:
    description:
      - Layer counts for the per-step estimate. Keys (all optional) C(name), C(num_layers) (61),
        C(moe_layers) (60), C(allreduce_per_layer) (2, TP - after attention and after the MLP/MoE),
        C(a2a_per_moe_layer) (2, EP - dispatch and combine), C(ep_attention_allreduce_per_layer)
        (1 when attention stays tensor-parallel, 0 with DP attention).
    type: dict
    default: {}
  timeout:
    description: Seconds one variant may take.
    type: float
    default: 300
  output_dir:
    description: Directory for each variant's raw JSON (C(collective-probe-NAME.json)); empty keeps none.
    type: path
  force:
    description: Measure even when the fact holds results for the same inputs.
    type: bool
    default: false
  backend:
    description:
      - C(nccl) on GPUs (what serving uses). C(gloo) runs the same probe on CPU processes, without CUDA
        graphs, to exercise the whole path on a host without a GPU (tests); its figures say nothing about
        GPUs.
    type: str
    choices: [nccl, gloo]
    default: nccl
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.facts_dir.OPTIONAL
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode measures nothing; it reports a change when a measurement would run.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Probe NCCL allreduce vs all_to_all on this host
  epforge.ep.collective_probe:
    python: /opt/epforge/venv/bin/python
    script: /usr/local/lib/epforge/epforge_collective_probe.py
    gpu_count: "{{ ansible_facts['epforge_gpu_facts'].gpu_count }}"
    gpus: "{{ ansible_facts['epforge_gpu_facts'].gpus }}"
    variants:
      - {name: default, env: {}}
      - {name: p2p_sys_ll, env: {NCCL_P2P_LEVEL: SYS, NCCL_PROTO: "LL,LL128,Simple"}}
    model: {name: Kimi-K2.5, num_layers: 61, moe_layers: 60}
    log_path: /var/log/epforge/collective-probe.log
    facts_dir: /etc/ansible/facts.d
"""

RETURN = r"""
skipped:
  description: True when the host has no usable GPU (or one GPU); C(msg) says why.
  returned: always
  type: bool
measured:
  description: True when a measurement ran in this call (false when the fact's inputs hash matched).
  returned: always
  type: bool
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    epforge_collective_probe:
      description: The measurement (the same JSON as the local fact).
      type: dict
      contains:
        status:
          description: ok, or skipped with C(reason).
          type: str
        inputs_sha256:
          description: Hash of the inputs that decide whether a rerun measures again.
          type: str
        variants:
          description: >-
            Per variant, its env, C(status) (ok, or skipped with C(reason) where its PCIe-IPC all-reduce
            cannot act), NCCL/torch versions, the GPU name and, for the PCIe-IPC variant, C(pcie_ipc) (the
            workspace bound C(max_numel) and where it comes from, the autotuned shapes).
          type: dict
        pcie_ipc:
          description: >-
            The variants that switch SGLang's PCIe-IPC all-reduce on (C(variants)) and why the caller asked
            for it or not (C(reason), O(pcie_ipc_reason)).
          type: dict
        table:
          description: >-
            One row per variant, op, mode and token count with C(mean_us), C(median_us), C(p99_us)
            (slowest rank) and C(path), what served it (C(pcie_ipc), or the backend: C(nccl), C(gloo)).
          type: list
          elements: dict
          sample:
            - {variant: default, op: allreduce, mode: graph, tokens: 1, mean_us: 11.0, median_us: 11.0,
               p99_us: 11.3, path: nccl}
        curve:
          description: >-
            The latency curve (O(curve_sizes)) - one point per variant, op and message size, eager calls, with
            C(bytes) sent per rank, C(mean_us), C(median_us), C(p99_us) (slowest rank) and C(path).
          type: list
          elements: dict
          sample:
            - {variant: default, op: allreduce, size: 1048576, bytes: 1048576, mean_us: 61.2, median_us: 60.8,
               p99_us: 66.0, path: nccl}
        estimate:
          description: >-
            Per mode and token count, the communication microseconds of one decode step with TP (C(tp_us),
            from the fastest allreduce of any variant: C(tp_variant), C(tp_path)) and with EP (C(ep_us), the
            variant where EP was cheapest: C(ep_variant)), and which is cheaper (C(cheaper)); C(variant) is
            C(fastest). What role tuner orders its candidates by.
          type: list
          elements: dict
        estimate_by_variant:
          description: >-
            The same per variant, mode and token count (C(variant), C(tp_us), C(ep_us), C(cheaper),
            C(tp_path)).
          type: list
          elements: dict
"""

import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail_file
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    digest,
    digest_matches,
    is_older_layout,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, read_json, write_atomic
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.pcie_ipc import ENV_ON, switched_on
from ansible_collections.epforge.ep.plugins.module_utils.process import option_argv, run_logged

NO_GPU_RC = 3
# The probe script's answer for a variant whose PCIe-IPC all-reduce cannot act on this host (status skipped).
VARIANT_SKIPPED_RC = 4
# SGLang's PCIe-IPC all-reduce on, NCCL as it is: the tuner's pcie-ipc candidate (tune_plan/space.py).
PCIE_IPC_VARIANT = {"name": "pcie_ipc", "env": dict(ENV_ON)}
MODEL_DEFAULTS = {
    "name": "Kimi-K2.5 (DeepSeek-V3 layout)",
    "num_layers": 61,
    "moe_layers": 60,
    "allreduce_per_layer": 2,
    "a2a_per_moe_layer": 2,
    "ep_attention_allreduce_per_layer": 1,
}


def model_spec(model: dict | None) -> dict:
    """Layer counts for the estimate, defaults filled in, validated (ValueError names the problem)."""
    spec = dict(MODEL_DEFAULTS)
    unknown = sorted(set(model or {}) - set(MODEL_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown model keys {unknown}: known are {sorted(MODEL_DEFAULTS)}")
    spec.update({k: v for k, v in (model or {}).items() if v is not None})
    for key in (
        "num_layers",
        "moe_layers",
        "allreduce_per_layer",
        "a2a_per_moe_layer",
        "ep_attention_allreduce_per_layer",
    ):
        if not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0:
            raise ValueError(f"model {key} must be an integer >= 0, got {spec[key]!r}")
    if spec["moe_layers"] > spec["num_layers"]:
        raise ValueError(
            f"model moe_layers ({spec['moe_layers']}) cannot exceed num_layers ({spec['num_layers']})"
        )
    return spec


def step_us(model: dict, ar: float, a2a: float) -> tuple[float, float]:
    """(TP, EP) communication microseconds of one decode step from one allreduce and one all_to_all.

    TP:  num_layers x allreduce_per_layer allreduces.
    EP:  dense layers keep TP's allreduces; each MoE layer has a2a_per_moe_layer all-to-alls plus
         ep_attention_allreduce_per_layer allreduces (attention stays tensor-parallel unless DP attention).
    """
    dense = model["num_layers"] - model["moe_layers"]
    tp_us = model["num_layers"] * model["allreduce_per_layer"] * ar
    ep_us = dense * model["allreduce_per_layer"] * ar + model["moe_layers"] * (
        model["ep_attention_allreduce_per_layer"] * ar + model["a2a_per_moe_layer"] * a2a
    )
    return tp_us, ep_us


def verdict(tp_us: float, ep_us: float) -> dict:
    """The two per-step figures, rounded, and which parallelism they make cheaper."""
    return {
        "tp_us": round(tp_us, 1),
        "ep_us": round(ep_us, 1),
        "cheaper": "ep" if ep_us < tp_us else "tp",
        "ep_over_tp": round(ep_us / tp_us, 3) if tp_us > 0 else None,
    }


def estimate_by_variant(table: list[dict], model: dict, stat: str = "mean_us") -> list[dict]:
    """Per-step communication time, TP allreduce vs EP all-to-all, for every (variant, mode, tokens) that
    has both an allreduce and an all_to_all measurement (step_us), with the path that served the allreduce."""
    by_key = {(r["variant"], r["mode"], r["tokens"], r["op"]): r for r in table}
    rows = []
    for (variant, mode, tokens, op), row in sorted(by_key.items()):
        if op != "allreduce" or (variant, mode, tokens, "all_to_all") not in by_key:
            continue
        ar, a2a = row[stat], by_key[(variant, mode, tokens, "all_to_all")][stat]
        rows.append(
            {
                "variant": variant,
                "mode": mode,
                "tokens": tokens,
                "allreduce_us": ar,
                "all_to_all_us": a2a,
                "tp_calls": model["num_layers"] * model["allreduce_per_layer"],
                **verdict(*step_us(model, ar, a2a)),
                "tp_path": row.get("path", "nccl"),
            }
        )
    return rows


def estimate(table: list[dict], model: dict, stat: str = "mean_us") -> list[dict]:
    """Which parallelism is cheaper per decode step, per (mode, tokens), each side at its best: TP from the
    fastest allreduce any variant measured (so a faster all-reduce - SGLang's PCIe-IPC one, a tuned NCCL -
    counts), EP from the variant whose EP step was cheapest (estimate_by_variant); each names its variant (a
    candidate runs one variant's environment, so either side is a configuration the tuner can try). Ties go to
    the first variant by name."""
    per_variant = estimate_by_variant(table, model, stat)
    rows = []
    for mode, tokens in sorted({(r["mode"], r["tokens"]) for r in per_variant}):
        ars = [r for r in table if (r["op"], r["mode"], r["tokens"]) == ("allreduce", mode, tokens)]
        tp = min(ars, key=lambda r: (r[stat], r["variant"]))
        ep = min(
            (r for r in per_variant if (r["mode"], r["tokens"]) == (mode, tokens)),
            key=lambda r: (r["ep_us"], r["variant"]),
        )
        tp_us = model["num_layers"] * model["allreduce_per_layer"] * tp[stat]
        _unused, ep_us = step_us(model, ep["allreduce_us"], ep["all_to_all_us"])
        rows.append(
            {
                "variant": "fastest",
                "mode": mode,
                "tokens": tokens,
                "tp_variant": tp["variant"],
                "tp_path": tp.get("path", "nccl"),
                "allreduce_us": tp[stat],
                "tp_calls": model["num_layers"] * model["allreduce_per_layer"],
                "ep_variant": ep["variant"],
                "ep_allreduce_us": ep["allreduce_us"],
                "all_to_all_us": ep["all_to_all_us"],
                **verdict(tp_us, ep_us),
            }
        )
    return rows


def probe_inputs(params: dict, script_sha: str) -> dict:
    """What a measurement depends on: the options that shape it and the probe script's sha256. Its digest
    (plugins/module_utils/digests.py) is the record's inputs_sha256."""
    keys = (
        "backend",
        "gpus",
        "world_size",
        "tokens",
        "hidden",
        "dtype",
        "iters",
        "warmup",
        "graph_calls",
        "cuda_graphs",
        "variants",
        "env",
        "python",
    )
    inputs = {k: params[k] for k in keys}
    if params.get("curve_sizes"):
        inputs["curve_sizes"] = params["curve_sizes"]
    inputs["script_sha256"] = script_sha
    return inputs


def probe_argv(params: dict, out_file: str) -> list[str]:
    gloo = params["backend"] == "gloo"
    modes = "eager,graph" if params["cuda_graphs"] and not gloo else "eager"
    options = [
        ("--world-size", params["world_size"]),
        ("--tokens", ",".join(str(t) for t in params["tokens"])),
        ("--curve-sizes", ",".join(str(b) for b in params["curve_sizes"])),
        ("--hidden", params["hidden"]),
        ("--dtype", params["dtype"]),
        ("--modes", modes),
        ("--iters", params["iters"]),
        ("--warmup", params["warmup"]),
        ("--graph-calls", params["graph_calls"]),
        ("--timeout", params["timeout"]),
        ("--out", out_file),
        ("--backend", params["backend"]),
        ("--device", "cpu" if gloo else "cuda"),
    ]
    return [params["python"], params["script"], *option_argv(options)]


def validate_variants(variants: list[dict]) -> list[dict]:
    clean, names = [], set()
    for item in variants:
        name = item.get("name")
        if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"variant name {name!r} must be letters, digits, '_' or '-'")
        if name in names:
            raise ValueError(f"variant name {name!r} appears twice")
        names.add(name)
        env = item.get("env") or {}
        if not isinstance(env, dict):
            raise ValueError(f"variant {name}: env must be a mapping of variable names to strings")
        unknown = sorted(set(item) - {"name", "env"})
        if unknown:
            raise ValueError(f"variant {name}: unknown keys {unknown} (use name and env)")
        clean.append({"name": name, "env": {str(k): str(v) for k, v in env.items()}})
    if not clean:
        raise ValueError("variants is empty: give at least one, e.g. {name: default, env: {}}")
    return clean


def with_pcie_ipc(variants: list[dict], wanted: bool) -> list[dict]:
    """variants, and the pcie_ipc variant when wanted and none of them switches SGLang's PCIe-IPC all-reduce
    on already (validated again: its name may not clash with one of the user's)."""
    if not wanted or any(switched_on(v["env"]) for v in variants):
        return variants
    return validate_variants([*variants, PCIE_IPC_VARIANT])


FACT_NAME = "epforge_collective"


def read_fact(facts_dir: str | None) -> dict:
    return (read_json(fact_path(facts_dir, FACT_NAME)) if facts_dir else None) or {}


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "script": {"type": "path", "required": True},
    "gpu_count": {"type": "int", "default": -1},
    "gpus": {"type": "list", "elements": "dict", "default": []},
    "world_size": {"type": "int", "default": 0},
    "tokens": {"type": "list", "elements": "int", "default": [1, 8, 64, 512], "no_log": False},
    "curve_sizes": {"type": "list", "elements": "int", "default": []},
    "hidden": {"type": "int", "default": 7168},
    "dtype": {"type": "str", "default": "bfloat16", "choices": ["bfloat16", "float16", "float32"]},
    "iters": {"type": "int", "default": 200},
    "warmup": {"type": "int", "default": 20},
    "graph_calls": {"type": "int", "default": 10},
    "cuda_graphs": {"type": "bool", "default": True},
    "variants": {
        "type": "list",
        "elements": "dict",
        "default": [
            {"name": "default", "env": {}},
            # the PCIe tuning the tuner tries too (tune_plan/space.py PCIE_NCCL), so its curve orders them
            {"name": "nccl_pcie", "env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple"}},
            {"name": "nccl_p2p_disabled", "env": {"NCCL_P2P_DISABLE": "1"}},
        ],
    },
    "env": {"type": "dict", "default": {}},
    "pcie_ipc": {"type": "bool", "default": False},
    "pcie_ipc_reason": {"type": "str", "default": ""},
    "model": {"type": "dict", "default": {}},
    "timeout": {"type": "float", "default": 300},
    "log_path": {"type": "path", "required": True},
    "output_dir": {"type": "path"},
    "facts_dir": {"type": "path"},
    "force": {"type": "bool", "default": False},
    "backend": {"type": "str", "default": "nccl", "choices": ["nccl", "gloo"]},
}

TABLE_COLUMNS = ("op", "mode", "tokens", "bytes", "mean_us", "median_us", "p99_us", "min_us", "path")
CURVE_COLUMNS = ("op", "size", "bytes", "mean_us", "median_us", "p99_us", "min_us", "path")


def input_problems(p: dict) -> tuple[list[dict], dict, list[str]]:
    """The validated variants and model, and every problem of the input."""
    problems = []
    if not os.path.isabs(p["python"]):
        problems.append(f"python must be an absolute path, got {p['python']!r}")
    if any(t < 1 for t in p["tokens"]) or not p["tokens"]:
        problems.append(f"tokens must be a non-empty list of integers >= 1, got {p['tokens']}")
    if any(b < 1 for b in p["curve_sizes"]):
        problems.append(f"curve_sizes must be message sizes in bytes >= 1, got {p['curve_sizes']}")
    for key in ("hidden", "iters", "graph_calls"):
        if p[key] < 1:
            problems.append(f"{key} must be >= 1, got {p[key]}")
    if p["world_size"] == 1:
        problems.append("world_size 1 has no collective to measure: use 0 (every GPU) or >= 2")
    variants, model = [], {}
    try:
        variants = with_pcie_ipc(validate_variants(p["variants"]), p["pcie_ipc"])
        model = model_spec(p["model"])
    except ValueError as exc:
        problems.append(str(exc))
    return variants, model, problems


def too_few_gpus(p: dict) -> str | None:
    """Why an NCCL probe cannot run on this host (no GPU, one GPU), or None."""
    if p["backend"] != "nccl":
        return None
    return {
        0: "no GPU on this host (epforge_gpu_facts.gpu_count is 0): nothing to probe",
        1: "one GPU on this host: a collective needs at least 2 ranks",
    }.get(p["gpu_count"])


def script_sha256(module: AnsibleModule) -> str:
    script = module.params["script"]
    if not os.path.isfile(script):
        module.fail_json(msg=f"probe script {script} is missing: the collective_probe role installs it")
    return file_sha256(script)


def new_record(p: dict, inputs_sha256: str, model: dict, variants: list[dict]) -> dict:
    return {
        "status": "ok",
        "inputs_sha256": inputs_sha256,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hidden": p["hidden"],
        "dtype": p["dtype"],
        "tokens": p["tokens"],
        "iters": p["iters"],
        "graph_calls": p["graph_calls"],
        "gpus": p["gpus"],
        "model": model,
        "variants": {},
        "pcie_ipc": {
            "variants": [v["name"] for v in variants if switched_on(v["env"])],
            "reason": p["pcie_ipc_reason"],
        },
        "table": [],
        "curve": [],
    }


def run_variant(p: dict, variant: dict) -> tuple[list[str], int, float, dict | None]:
    """Run the probe script once with the variant's environment: argv, rc, seconds, its JSON (or None)."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in p["env"].items()})
    env.update(variant["env"])
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory(prefix="epforge-probe-") as tmp:
        out_file = os.path.join(tmp, "probe.json")
        argv = probe_argv(p, out_file)
        header = f"collective probe, variant {variant['name']}"
        rc, seconds = run_logged(argv, p["log_path"], env=env, timeout=p["timeout"] + 60, header=header)
        try:
            with open(out_file, encoding="utf-8") as handle:
                raw = json.load(handle)
        except (OSError, ValueError):
            raw = None
    if raw is not None and p["output_dir"]:
        raw_path = os.path.join(p["output_dir"], f"collective-probe-{variant['name']}.json")
        write_atomic(raw_path, json_text(raw, indent=1))
    return argv, rc, seconds, raw


def add_variant(record: dict, variant: dict, raw: dict, seconds: float) -> None:
    """The variant's versions and errors, and its rows in the table."""
    record["variants"][variant["name"]] = {
        "env": variant["env"],
        "status": "ok",
        "nccl": raw.get("nccl", ""),
        "torch": raw.get("torch", ""),
        "gpu_name": raw.get("gpu_name", ""),
        "world_size": raw.get("world_size"),
        "seconds": round(seconds, 1),
        "errors": raw.get("errors", []),
    }
    if (raw.get("pcie_ipc") or {}).get("asked"):
        record["variants"][variant["name"]]["pcie_ipc"] = raw["pcie_ipc"]
    for row in raw.get("results", []):
        record["table"].append({"variant": variant["name"], **{k: row[k] for k in TABLE_COLUMNS}})
    for point in raw.get("curve", []):
        record["curve"].append({"variant": variant["name"], **{k: point[k] for k in CURVE_COLUMNS}})


def measure(module: AnsibleModule, variants: list[dict], record: dict) -> None:
    """Run every variant into the record; a host without a usable GPU skips, a failed variant fails."""
    p = module.params
    os.makedirs(os.path.dirname(p["log_path"]) or ".", exist_ok=True)
    if p["output_dir"]:
        os.makedirs(p["output_dir"], exist_ok=True)
    for variant in variants:
        argv, rc, seconds, raw = run_variant(p, variant)
        if rc == NO_GPU_RC and raw is not None and raw.get("status") == "skipped":
            module.exit_json(
                changed=False, skipped=True, measured=False, msg=raw.get("reason", "no usable GPU")
            )
        if rc == VARIANT_SKIPPED_RC and raw is not None and raw.get("status") == "skipped":
            # this variant's all-reduce cannot act here (SGLang would stay on NCCL): recorded, not a failure
            record["variants"][variant["name"]] = {
                "env": variant["env"],
                "status": "skipped",
                "reason": raw.get("reason", ""),
                "seconds": round(seconds, 1),
            }
            continue
        if rc != 0 or raw is None or raw.get("status") != "ok":
            reason = (raw or {}).get("reason") or ("timed out" if rc == 124 else f"exit code {rc}")
            module.fail_json(
                msg=f"collective probe variant {variant['name']} failed: {reason}",
                cmd=argv,
                rc=rc,
                log_tail=tail_file(p["log_path"]),
                log_path=p["log_path"],
                probe=raw,
                variant=variant,
            )
        add_variant(record, variant, raw, seconds)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    variants, model, problems = input_problems(p)
    if problems:
        module.fail_json(msg="bad collective_probe input: " + "; ".join(problems), problems=problems)
    skip_reason = too_few_gpus(p)
    if skip_reason:
        module.exit_json(changed=False, skipped=True, measured=False, msg=skip_reason)
    inputs = probe_inputs(dict(p, variants=variants), script_sha256(module))
    previous = read_fact(p["facts_dir"])
    # A record written before the canonical digest (sorted JSON with spaces) still matches its inputs.
    recorded = digest_matches(previous.get("inputs_sha256"), inputs) and previous.get("status") == "ok"
    if recorded and not p["force"]:
        # an older epforge's digest of the same inputs: the record stands, rewritten once in this layout
        rewrite = is_older_layout(previous["inputs_sha256"], inputs)
        if rewrite:
            previous = {**previous, "inputs_sha256": digest(inputs)}
            if p["facts_dir"] and not module.check_mode:
                write_local_fact(p["facts_dir"], FACT_NAME, previous)
        module.exit_json(
            changed=rewrite,
            skipped=False,
            measured=False,
            msg="measurement for these inputs already recorded (force=true measures again)",
            ansible_facts={"epforge_collective_probe": previous},
        )
    if module.check_mode:
        module.exit_json(
            changed=True,
            skipped=False,
            measured=False,
            msg="would measure "
            + ", ".join(v["name"] for v in variants)
            + (f"; {p['pcie_ipc_reason']}" if p["pcie_ipc_reason"] else ""),
        )
    record = new_record(p, digest(inputs), model, variants)
    measure(module, variants, record)
    record["estimate"] = estimate(record["table"], model)
    record["estimate_by_variant"] = estimate_by_variant(record["table"], model)
    if p["facts_dir"]:
        write_local_fact(p["facts_dir"], FACT_NAME, record)
    module.exit_json(
        changed=True,
        skipped=False,
        measured=True,
        msg=f"measured {len(record['table'])} rows over {len(variants)} variant(s)",
        ansible_facts={"epforge_collective_probe": record},
    )


if __name__ == "__main__":
    main()
