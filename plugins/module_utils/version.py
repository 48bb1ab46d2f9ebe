"""Version strings: as comparable tuples (the one parser the stack rules, the known-issue rules and the SGLang
flag renames share), and without their local label (the one rule for 'the same release' of a local build).
Unit-tested in tests/unit/test_version.py."""

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


def base_version(version) -> str:
    """A version without its PEP 440 local label: '2.14.1+cu130' -> '2.14.1', '2.14.1' -> '2.14.1',
    None or '' -> ''. A pin without a local label matches any local build of that release."""
    return str(version or "").split("+", 1)[0]
