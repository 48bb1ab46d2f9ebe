#!/usr/bin/env python3
"""How long does the smoke model take to write, and how big is it?

Runs the project's smoke_model module (as Ansible runs it: a JSON args file) with the default settings
(hidden 2048, 2 layers, 16 heads / 4 kv heads, head_dim 128, 16 experts, top-4, moe_intermediate 256, vocab
2048) into a fresh temp directory --repeat times, then once more into the last directory (the no-op rerun),
and prints the machine, the parameter count, the files' size, the median/min/max write time and the rerun's
time. The writer runs in --python (default: this interpreter; it needs numpy and tokenizers).

    .venv/bin/python bench/smoke_model_write.py [--repeat 3] [--python PATH] [-s hidden_size=7168 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The module's imports resolve through collections/ (the checkout as collection epforge.ep), as in
# ansible.cfg.
RUNNER = (
    f"import runpy, sys; sys.path.insert(0, {str(ROOT / 'collections')!r}); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_module(args: dict, workdir: Path) -> tuple[float, dict]:
    args_file = workdir / f"args-{time.monotonic_ns()}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(ROOT / "library" / "smoke_model.py"), str(args_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1200,
    )
    seconds = time.monotonic() - started
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if proc.returncode != 0:
        sys.exit(f"smoke_model failed: {result.get('msg')}")
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "-s", "--setting", action="append", default=[], help="NAME=INT, e.g. hidden_size=7168"
    )
    opts = parser.parse_args()
    settings = {name: int(value) for name, value in (item.split("=", 1) for item in opts.setting)}
    work = Path(tempfile.mkdtemp(prefix="epforge-bench-smoke-"))
    try:
        times, writer, result = [], [], {}
        for i in range(opts.repeat):
            target = work / f"model-{i}"
            seconds, result = run_module({"path": str(target), "python": opts.python, **settings}, work)
            assert result["changed"] is True
            times.append(seconds)
            writer.append(result["seconds"])
            if i < opts.repeat - 1:
                shutil.rmtree(target)
        rerun, again = run_module({"path": str(target), "python": opts.python, **settings}, work)
        assert again["changed"] is False
        print(
            f"machine: {platform.node()} ({os.cpu_count()} CPUs, {platform.machine()}), python {opts.python}"
        )
        print(f"settings: defaults{' + ' + json.dumps(settings) if settings else ''}")
        print(
            f"parameters: {result['parameters']:,}; files: {result['bytes']:,} bytes "
            f"({result['bytes'] / 2**20:.0f} MiB), model.safetensors "
            f"{result['files']['model.safetensors']['size']:,} bytes"
        )
        print(
            f"write, whole module call ({opts.repeat}x): median {statistics.median(times):.2f} s, "
            f"min {min(times):.2f} s, max {max(times):.2f} s; the writer process alone: median "
            f"{statistics.median(writer):.2f} s"
        )
        print(f"no-op rerun (manifest matches, changed=false): {rerun:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
