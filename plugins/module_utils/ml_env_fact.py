"""The ML env's local fact (epforge_ml_env), recorded by the module that ensured or adopted the env.

Both ml_env modules (venv and existing) call record_ml_env_fact() as their last step, so the no-op rerun
records the fact in the same module call that found the env current (one call instead of two); the file
is written only when its content changes, through the one writer (epforge_local_facts).
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version

FACT_NAME = "epforge_ml_env"

# An adopted env installs nothing: its fact names no pip source.
ADOPTED_PIP_SOURCE = "none (adopted env, nothing installed)"


def ml_env_fact(method: str, path: str, p: dict, result: dict) -> dict:
    """The fact's content: the env, the torch the module verified (or read from its stamp), what pip keeps."""
    torch_version = result.get("torch_version")
    return {
        "method": method,
        "path": path,
        "python": result["python"],
        "torch_version": torch_version or "",
        "torch_cuda": result.get("torch_cuda") or "",
        "torch_arch_list": result.get("torch_arch_list") or [],
        "toolkit_cuda": p["toolkit_cuda"],
        "archs": p["archs"],
        "key": result.get("key", ""),
        # What every later pip run must keep (sglang_keep, ml_env_keep): the adopted or installed torch.
        "keep": [f"torch=={base_version(torch_version or p['torch_version'])}"],
        # Where pip took torch and the build tools from (an adopted env installs nothing).
        "pip_source": ADOPTED_PIP_SOURCE if method == "existing" else p["pip_source"],
    }


def record_ml_env_fact(module, method: str, path: str, result: dict) -> None:
    """Write the fact under facts_dir when that option is set (check mode writes nothing); marks result
    changed and adds the fact's diff only when the content changed."""
    p = module.params
    if not p.get("facts_dir"):
        return
    try:
        wrote = write_local_fact(
            p["facts_dir"], FACT_NAME, ml_env_fact(method, path, p, result), check_mode=module.check_mode
        )
    except OSError as exc:
        module.fail_json(
            msg=f"writing the local fact {FACT_NAME} under {p['facts_dir']} failed: {exc}", **result
        )
    result["fact_changed"] = wrote["changed"]
    if wrote["changed"]:
        result["changed"] = True
        diffs = result.get("diff")
        result["diff"] = [*([diffs] if isinstance(diffs, dict) else diffs or []), wrote["diff"]]
