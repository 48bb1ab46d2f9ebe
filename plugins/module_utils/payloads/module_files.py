"""Payload: where the named import names are installed, without importing them: each one's origin and the
compiled extension files (.so) it ships.

Runs in the Python whose environment is asked about: `python -c SOURCE NAME...` (module python_locate, through
payload.py). Prints one JSON line, {name: {found, origin, binaries, error}}. A dotted name's parent packages
are imported to find it (importlib.util.find_spec); a top-level name is only looked up. Standard library only
(it cannot import the collection there).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys


def binaries_of(spec) -> list[str]:
    """The .so files of a found module: every one under a package's folders, or the module itself."""
    found = []
    if spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            for root, dirs, files in os.walk(folder):
                dirs.sort()
                found.extend(os.path.join(root, name) for name in sorted(files) if name.endswith(".so"))
    elif spec.origin and spec.origin.endswith(".so"):
        found.append(spec.origin)
    return found


def locate(name: str) -> dict:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a missing or broken parent package
        return {"found": False, "origin": None, "binaries": [], "error": f"{type(exc).__name__}: {exc}"}
    if spec is None:
        return {"found": False, "origin": None, "binaries": [], "error": ""}
    origin = spec.origin if spec.origin not in (None, "namespace") else None
    return {"found": True, "origin": origin, "binaries": binaries_of(spec), "error": ""}


def main(argv: list[str]) -> int:
    print(json.dumps({name: locate(name) for name in argv}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
