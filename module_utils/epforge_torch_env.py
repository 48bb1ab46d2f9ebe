"""Torch in a Python env: the rules both ml_env modules (venv and existing) apply to it, written once.

- torch_inputs(): refuse, before anything changes, a torch/toolkit pair of different CUDA majors (torch
  will not build extensions with an nvcc of another major) and an arch list that does not parse.
- probe_torch(): run a probe script in the env and read its last stdout line as JSON.
- base_version(): a torch version without its local part (2.14.1+cu130 -> 2.14.1).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ansible.module_utils.epforge_arch import arch_list
from ansible.module_utils.epforge_build import cuda_major
from ansible.module_utils.epforge_process import Completed, run_bounded


def base_version(version: str | None) -> str:
    return str(version or "").split("+", 1)[0]


def torch_inputs(module, p: dict, result: dict, mismatch_msg: Callable[[int, int], str]) -> tuple[int, list]:
    """(toolkit CUDA major, arch list) of p, or fail_json.

    mismatch_msg(toolkit_major, torch_major) words the refusal of two CUDA majors for the calling module.
    """
    toolkit_major, torch_major = cuda_major(p["toolkit_cuda"]), cuda_major(p["torch_cuda"])
    if toolkit_major is None or torch_major is None:
        module.fail_json(
            msg=f"cannot read a CUDA major version from torch_cuda '{p['torch_cuda']}' "
            f"or toolkit_cuda '{p['toolkit_cuda']}'",
            **result,
        )
    if toolkit_major != torch_major:
        module.fail_json(msg=mismatch_msg(toolkit_major, torch_major), **result)
    try:
        archs = arch_list(p["archs"])
    except ValueError as err:
        module.fail_json(msg=f"archs: {err}", **result)
    return toolkit_major, archs


def probe_torch(argv: list[str], timeout: float) -> tuple[Completed, dict | None]:
    """Run the probe; its evidence is the JSON on the last stdout line (None when rc != 0 or unreadable)."""
    proc = run_bounded(argv, timeout=timeout)
    if proc.rc != 0:
        return proc, None
    try:
        return proc, json.loads(proc.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return proc, None
