"""Version strings as comparable tuples: the one parser the stack rules, the known-issue rules and the
SGLang flag renames share."""

from __future__ import annotations

import re


def version_tuple(text) -> tuple[int, ...]:
    """'12.8' -> (12, 8); '580.95.05' -> (580, 95, 5); '0.5.10.post1' and 'v0.5.10rc1' -> (0, 5, 10).

    The numeric release part: a leading 'v' is dropped, a part that is not a number ends the tuple, and so
    does the first part with a suffix after its number. None or '' -> ()."""
    parts: list[int] = []
    if text is None:
        return ()
    for piece in str(text).strip().lstrip("v").split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group(0)))
        if match.group(0) != piece:
            break
    return tuple(parts)
