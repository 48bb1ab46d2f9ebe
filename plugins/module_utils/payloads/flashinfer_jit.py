"""Payload: build one FlashInfer JIT kernel (the fused activation-and-mul of ACTIVATION) in the env's python
and say whether it was built now.

Runs as `python -c SOURCE ACTIVATION` (module flashinfer_jit_check, through payload.py's payload_argv), with
the CUDA, arch and workspace variables the module sets. Prints, after FlashInfer's own output, one line
`EPFORGE_FI_JIT {"library": path, "built": it was (re)written by this run, "exists": it is there now}`.
Standard library and FlashInfer only (the collection cannot be imported there).
"""

from __future__ import annotations

import inspect
import json
import sys

MARK = "EPFORGE_FI_JIT "


def build(activation: str) -> dict:
    from flashinfer.jit.activation import gen_act_and_mul_module  # noqa: PLC0415 - only in the env's python

    spec = gen_act_and_mul_module(activation)
    path = spec.jit_library_path
    before = path.stat().st_mtime_ns if path.exists() else None
    # FlashInfer 0.6.x's JitSpec.build(verbose) has no default (0.6.14, seen on an H200); 0.7.x defaults it.
    verbose = inspect.signature(spec.build).parameters.get("verbose")
    if verbose is not None and verbose.default is inspect.Parameter.empty:
        spec.build(verbose=False)
    else:
        spec.build()
    after = path.stat().st_mtime_ns if path.exists() else None
    return {"library": str(path), "built": after is not None and after != before, "exists": after is not None}


def main(argv: list[str]) -> int:
    print(MARK + json.dumps(build(argv[0])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
