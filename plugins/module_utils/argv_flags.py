"""The one reader of flags in a pass-through argv (epforge_server.extra_args, a benchmark's or a gateway's
extra_args): which flags it holds and with what values. Issue 40: five modules each read it their own way.

Spellings read: `--flag value`, `--flag=value`, and `--flag` alone (a switch: True). A following item that
starts with `--` is the next flag, not a value; items before the first flag are not flags.
"""

from __future__ import annotations


def dest_flag(dest: str) -> str:
    """The flag argparse spells for a dest (x_y -> --x-y): a setting's flag unless a release renamed it."""
    return "--" + dest.replace("_", "-")


def flag_pairs(extra_args) -> list[tuple[str, object]]:
    """(flag, value) pairs in argv order: '--x 1' and '--x=1' give ('--x', '1'), '--x' alone ('--x', True)."""
    pairs: list[tuple[str, object]] = []
    items = [str(item) for item in extra_args or []]
    index = 0
    while index < len(items):
        item = items[index]
        index += 1
        if not item.startswith("--"):
            continue
        if "=" in item:
            flag, value = item.split("=", 1)
            pairs.append((flag, value))
        elif index < len(items) and not items[index].startswith("--"):
            pairs.append((item, items[index]))
            index += 1
        else:
            pairs.append((item, True))
    return pairs


def flag_names(extra_args) -> list[str]:
    """The flags extra_args holds, in order (repeats kept)."""
    return [flag for flag, _unused in flag_pairs(extra_args)]


def flag_values(extra_args, flags) -> list[str]:
    """The values given to any of flags (a switch without a value gives none)."""
    wanted = set(flags)
    return [value for flag, value in flag_pairs(extra_args) if flag in wanted and value is not True]
