"""Run a payload (plugins/module_utils/payloads/NAME.py) in a given interpreter and read its JSON answer: the
one way modules run code of their own in another Python (issue 40: such code had been strings in 17 files).

The payload's source is sent as `python -c SOURCE ARGS...` (inspect reads it from Ansible's zipped
module_utils as well as from the checkout), so nothing is written on the host; its last stdout line is JSON.
"""

from __future__ import annotations

import inspect
import json
from typing import NamedTuple

from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


class PayloadRun(NamedTuple):
    rc: int
    answer: object  # the parsed last line, None when the run failed or printed no JSON
    output: str  # stdout and stderr, for a failure's message and log tail
    argv: list  # the argv shown in a failure (the source as <payload NAME>)


def payload_argv(python: str, payload, args=()) -> tuple[list[str], list[str]]:
    """(the argv that runs payload in python with args, the same argv with the source shown as its name)."""
    rest = [str(a) for a in args]
    name = payload.__name__.rsplit(".", 1)[-1]
    return [str(python), "-c", inspect.getsource(payload), *rest], [
        str(python),
        "-c",
        f"<payload {name}>",
        *rest,
    ]


def run_payload(
    python: str,
    payload,
    args=(),
    timeout: float = 120,
    *,
    env: dict | None = None,
    env_update: dict | None = None,
) -> PayloadRun:
    """Run payload (a module of plugins/module_utils/payloads) in python with args (env: its whole
    environment; env_update: changes to this one's)."""
    argv, shown = payload_argv(python, payload, args)
    proc = run_bounded(argv, timeout=timeout, env=env, env_update=env_update)
    answer = None
    if proc.rc == 0:
        lines = proc.out.strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
    return PayloadRun(proc.rc, answer, proc.output, shown)
