"""Payload: the facts a wheelhouse is built for, of one interpreter: its Python version, machine, glibc
version and, when asked, every installed distribution with its version (from metadata; nothing imported).

Runs as `python -c SOURCE LIST` (module wheelhouse_probe, through payload.py): LIST "1" lists the
distributions, "0" does not (the env's python does not exist yet and the base python answers for it). Prints
one JSON line: {python_version, machine, glibc ("" when the C library is not glibc), installed: {name:
version}}. Standard library only (the collection cannot be imported there).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import sys


def facts(list_installed: bool) -> dict:
    installed = {}
    if list_installed:
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"]
            if name:
                installed[name] = dist.version
    libc, version = platform.libc_ver()
    return {
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "glibc": version if libc == "glibc" else "",
        "installed": installed,
    }


def main(argv: list[str]) -> int:
    print(json.dumps(facts(argv[:1] == ["1"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
