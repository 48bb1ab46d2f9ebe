"""Where SGLang's PCIe-IPC all-reduce can act, so the tuner's default space tries it and the collective probe
measures it (issue 37; module tune_plan, tune_plan/space.py, module collective_probe, filter pcie_ipc_probe).

SGLang >= 0.5.21 with FlashInfer >= 0.7.0 carries FlashInfer's PCIe-IPC all-reduce, opt-in with
SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 (sglang/srt/distributed/device_communicators/pcie_ipc_ar.py). Where it
applies is the known-issues row pcie_ipc_allreduce_opt_in's condition (PCIe or mixed GPUs, TP 2/4/8 on one
node, the releases, not deterministic, the variable not set by the request): that row is the one owner of the
rule, evaluated here with the tensor-parallel size the default space gives every candidate (all GPUs). What
the row cannot see is the model's dtype: the kernels serve bf16 tensors only (others stay on NCCL, so a
candidate with it on would measure NCCL again), so a request whose dtype, or whose model's config.json under
dtype auto (read from the host by role tuner), is not bfloat16 leaves it out. An unread config plans it, with
the reason. Pure.
"""

from __future__ import annotations

import json

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import evaluate

ROW = "pcie_ipc_allreduce_opt_in"
VARIABLE = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
ENV_ON = {VARIABLE: "1"}
# The values SGLang's EnvBool reads as true, lower-cased (sglang/srt/environ.py; data/sglang_env/ types).
ENV_TRUE = ("true", "1", "yes", "y")
# SGLang's --dtype values that mean bf16 activations; "auto" follows the model (bf16 for a bf16 model).
BF16 = ("bfloat16", "bf16")


def config_dtype(config) -> str | None:
    """The model's dtype from its config.json (its text, or the mapping a template made of it): torch_dtype,
    or dtype in newer configs; None when unread."""
    data = config
    if isinstance(config, (str, bytes)):
        try:
            data = json.loads(config) if config else None
        except ValueError:
            return None
    found = (data.get("torch_dtype") or data.get("dtype")) if isinstance(data, dict) else None
    return str(found) if isinstance(found, str) and found else None


def bf16(request: dict, config_text) -> tuple[bool, str]:
    """(whether the server's activations are bf16, or may be: an unread config counts as may, why)."""
    asked = str((request or {}).get("dtype") or "auto")
    if asked != "auto":
        return asked in BF16, f"the request's dtype is {asked}"
    dtype = config_dtype(config_text)
    if dtype is None:
        return True, "the model's dtype is unread (no config.json with torch_dtype on the host)"
    return dtype in BF16, f"a {dtype} model (its config.json)"


def switched_on(env: dict | None) -> bool:
    """Whether an environment switches SGLang's PCIe-IPC all-reduce on (its variable read as SGLang does)."""
    return str((env or {}).get(VARIABLE, "")).strip().lower() in ENV_TRUE


def can_act(table: dict, gpu_facts: dict, stack: dict, request: dict, config_text=None) -> tuple[bool, str]:
    """(whether the default space tries PCIe-IPC on, why). Raises known_issues.TableError on a bad table."""
    gpus = max(1, int((gpu_facts or {}).get("gpu_count") or 0))
    if gpus < 2 or (gpu_facts or {}).get("interconnect") not in ("pcie", "mixed"):
        return False, ""  # no all-reduce between PCIe peers: nothing to try, nothing to say
    settings = dict(request or {}, tp_size=gpus)
    verdict = evaluate(table, gpu_facts or {}, stack or {}, settings)
    if not any(finding.get("id") == ROW for finding in verdict["findings"]["warnings"]):
        if VARIABLE in ((request or {}).get("env") or {}):
            return False, f"PCIe-IPC all-reduce: the request sets {VARIABLE}, so every candidate keeps it"
        return False, (
            f"PCIe-IPC all-reduce not tried: row {ROW} does not apply to TP {gpus} on this host and stack "
            "(it needs PCIe GPUs, TP 2, 4 or 8 on one node, SGLang >= 0.5.21 with FlashInfer >= 0.7.0)"
        )
    ok, why = bf16(request, config_text)
    if not ok:
        return False, f"PCIe-IPC all-reduce not tried: it serves bf16 only and {why}"
    return True, f"PCIe-IPC all-reduce tried (on, NCCL as it is): TP {gpus} over PCIe, {why}"
