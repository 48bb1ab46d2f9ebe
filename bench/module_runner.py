"""Run an epforge module the way Ansible runs it (its JSON arguments in a file, the collection's
module_utils importable from collections/ as ansible_collections.epforge.ep.plugins.module_utils.NAME), for
the bench scripts that time a module as a command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = (
    f"import runpy, sys; sys.path.insert(0, {str(ROOT / 'collections')!r}); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def call_module(module: Path, module_args: dict, workdir: Path, timeout: float) -> tuple[dict, float]:
    """The module's JSON result and the epoch time its process ended; exits when it printed no JSON."""
    args_file = workdir / f"args-{time.monotonic_ns()}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(module), str(args_file)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    ended = time.time()
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ended
    except (IndexError, ValueError):
        sys.exit(f"module printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
