"""Version strings as comparable tuples: the one parser the stack rules and the known-issue rules share."""

from __future__ import annotations

import re


def version_tuple(text) -> tuple[int, ...]:
    """'12.8' -> (12, 8); '580.95.05' -> (580, 95, 5). Non-numeric parts end the tuple."""
    parts = []
    for piece in str(text).split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group(0)))
    return tuple(parts)
