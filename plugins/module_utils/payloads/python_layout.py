"""Payload: how an interpreter is laid out - its version, implementation and machine, its prefix, its site
directories (where pip installs pure and platform packages) and its import path.

Runs as `python -c SOURCE` in the python asked about (modules final_env_check, cuda_extension_install,
cuda_extension_plan and the watch list of plugins/module_utils/watch.py, through payload.py). Prints one
JSON line: {major, minor, impl, machine, prefix, purelib, platlib, path}. Standard library only (the
collection cannot be imported there).
"""

from __future__ import annotations

import json
import platform
import sys
import sysconfig


def layout() -> dict:
    paths = sysconfig.get_paths()
    return {
        "major": sys.version_info[0],
        "minor": sys.version_info[1],
        "impl": sys.implementation.name,
        "machine": platform.machine(),
        "prefix": sys.prefix,
        "purelib": paths["purelib"],
        "platlib": paths["platlib"],
        "path": sys.path,
    }


def main() -> int:
    print(json.dumps(layout()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
