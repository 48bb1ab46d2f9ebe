"""Payload: torch as an env imports it - its version, CUDA version, compiled arch list, where it loads from,
and the env's prefix (the evidence both ml_env modules record).

Runs as `python -c SOURCE` in the env's python (modules ml_env_torch and ml_env_existing, through
plugins/module_utils/torch_env.py). Importing torch is the point: a torch that does not import exits non-zero.
Prints one JSON line: {torch, cuda, archs, location, prefix}. Standard library and torch only (the collection
cannot be imported there).
"""

from __future__ import annotations

import json
import os
import sys


def torch_facts() -> dict:
    import torch  # noqa: PLC0415 - the import is what is checked

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "archs": torch.cuda.get_arch_list(),
        "location": os.path.dirname(torch.__file__),
        "prefix": sys.prefix,
    }


def main() -> int:
    print(json.dumps(torch_facts()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
