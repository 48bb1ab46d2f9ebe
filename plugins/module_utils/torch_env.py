"""Torch in a Python env: the rules both ml_env modules (venv and existing) apply to it, written once.

- torch_inputs(): refuse, before anything changes, a torch/toolkit pair of different CUDA majors (torch
  will not build extensions with an nvcc of another major) and an arch list that does not parse.
- torch_evidence(): import torch in the env (payload torch_facts) and read its facts, or fail.
A torch version without its local part (2.14.1+cu130 -> 2.14.1): version.base_version().
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ansible_collections.epforge.ep.plugins.module_utils.arch import arch_list
from ansible_collections.epforge.ep.plugins.module_utils.build import cuda_major
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv
from ansible_collections.epforge.ep.plugins.module_utils.payloads import torch_facts
from ansible_collections.epforge.ep.plugins.module_utils.process import TIMED_OUT, run_bounded


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


def torch_probe(python: str, timeout: float):
    """Run payload torch_facts in python: (the finished process, the argv a failure shows)."""
    argv, shown = payload_argv(python, torch_facts)
    return run_bounded(argv, timeout=timeout), shown


def read_facts(proc) -> dict | None:
    """The JSON on the probe's last stdout line (None when it printed none)."""
    try:
        return json.loads(proc.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def torch_evidence(
    module, python: str, *, timeout: float, failed: str, result: dict, timed_out: str = ""
) -> dict:
    """Import torch in python (payload torch_facts) and return its facts, or fail_json.

    failed words a probe that exited non-zero; timed_out (when given) one that ran past timeout.
    """
    proc, argv = torch_probe(python, timeout)
    if timed_out and proc.timed_out:
        module.fail_json(msg=timed_out, cmd=argv, rc=TIMED_OUT, **result)
    if proc.rc != 0:
        module.fail_json(msg=failed, cmd=argv, rc=proc.rc, log_tail=tail(proc.err or proc.out), **result)
    facts = read_facts(proc)
    if facts is None:
        module.fail_json(
            msg="could not read torch's versions", cmd=argv, rc=proc.rc, log_tail=tail(proc.out), **result
        )
    return facts
