"""Payload: the installed versions of the named distributions, from their metadata (nothing else imported).

Runs in the Python whose environment is asked about: `python -c SOURCE NAME...`. Prints one JSON line,
{name: version, or null when the distribution is not installed}. Standard library only (it cannot import the
collection there).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys


def versions(names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str]) -> int:
    print(json.dumps(versions(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
