"""Payload: the requirements (Requires-Dist) of the named distributions, from their metadata (nothing
imported).

Runs as `python -c SOURCE NAME...` in the env's python (module sglang_install, through payload.py). Prints one
JSON line, {name: [requirement, ...], or null when the distribution is not installed}. Standard library only
(the collection cannot be imported there).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys


def requires(names: list[str]) -> dict[str, list[str] | None]:
    out: dict[str, list[str] | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str]) -> int:
    print(json.dumps(requires(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
