"""Payload: what a server's first forward pass builds, built beforehand in the server's environment.

Runs as `python -c SOURCE` (module server_jit_check, through payload.py's payload_argv) as the server's
account with the server's environment. With FlashInfer: its rmsnorm JIT module is built (FlashInfer's own
cache decides whether anything compiles). Without it: the tools a JIT would run are resolved on PATH, and a
missing one raises the FileNotFoundError the server would print. Prints one line `EPFORGE_SERVER_JIT
{"kernel": the library or "", "built": whether this run wrote it, "tools": {ninja, nvcc, c++: path or
null}}`. Standard library and FlashInfer only (the collection cannot be imported there).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

MARK = "EPFORGE_SERVER_JIT "


def first_build() -> dict:
    tools = {name: shutil.which(name) for name in ("ninja", "nvcc", "c++")}
    kernel, built = "", False
    if importlib.util.find_spec("flashinfer") is not None:
        from flashinfer.jit.norm import gen_norm_module  # noqa: PLC0415 - only where FlashInfer is

        spec = gen_norm_module()
        path = spec.jit_library_path
        before = path.stat().st_mtime_ns if path.exists() else None
        spec.build(verbose=False)
        after = path.stat().st_mtime_ns if path.exists() else None
        kernel, built = str(path), after is not None and after != before
    elif tools["ninja"] is None:
        raise FileNotFoundError(2, "No such file or directory", "ninja")
    elif os.environ.get("CUDA_HOME") and tools["nvcc"] is None:
        raise FileNotFoundError(2, "No such file or directory", "nvcc")
    return {"kernel": kernel, "built": built, "tools": tools}


def main() -> int:
    print(MARK + json.dumps(first_build()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
