"""The closest known name to a misspelt one: the one rule behind every "did you mean" of a refused name
(a server setting, an extra_args flag, an environment variable)."""

from __future__ import annotations

import difflib


def closest(word: str, known) -> str | None:
    """The known name most like word (difflib's ratio, at least 0.6), else None."""
    found = difflib.get_close_matches(str(word), sorted(name for name in known if name), n=1)
    return found[0] if found else None
