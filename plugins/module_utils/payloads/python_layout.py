"""Payload: how an interpreter is laid out - its version, implementation and machine, its prefix, its site
directories (where pip installs pure and platform packages), its C headers' directory and its import path.

Runs as `python -c SOURCE` in the python asked about (modules final_env_check, cuda_extension_install,
cuda_extension_plan, python_headers, the preflight's python version and the watch list of
plugins/module_utils/watch.py, through payload.py). Prints one JSON line: {major, minor, micro, impl, machine,
prefix, base_prefix, purelib, platlib, include, path} (include: where the interpreter's C headers, Python.h,
are - its base installation's for a venv). Standard library only (the collection cannot be imported there).
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
        "micro": sys.version_info[2],
        "impl": sys.implementation.name,
        "machine": platform.machine(),
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "purelib": paths["purelib"],
        "platlib": paths["platlib"],
        "include": paths["include"],
        "path": sys.path,
    }


def main() -> int:
    print(json.dumps(layout()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
