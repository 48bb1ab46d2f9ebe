"""What became of a launch_server flag the stack's SGLang release does not know: removed (in which release),
or replaced by a successor an older release's own parser names (its Deprecated*Action's new_flag, or its
help: "[Deprecated] Alias for --elastic-ep-join-mode recover."). From data/sglang_flag_successors.json,
written from the releases' wheels and flag tables by scripts/sglang_flag_successors.py.

Pure; sglang_args' refusals of an unknown setting or extra_args flag use retired_flag for their "did you
mean". A successor that the release lacks too is followed to its own successor (--enable-piecewise-cuda-graph
-> --enforce-piecewise-cuda-graph -> --cuda-graph-backend-prefill=tc_piecewise).
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import dest_flag
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

MAX_HOPS = 4


def release_options(flags: dict) -> dict[str, str]:
    """{option: dest} of a release's flag table (flags by dest)."""
    found = {}
    for dest, spec in flags.items():
        for option in [spec.get("flag"), *(spec.get("aliases") or [])]:
            if option:
                found[option] = dest
    return found


def entry_of(name: str, successors: dict | None) -> tuple[str, dict] | None:
    """(option, entry) for a flag (--x-y) or a setting named like its dest (x_y)."""
    table = (successors or {}).get("flags") or {}
    option = name if name.startswith("-") else dest_flag(name)
    if option in table:
        return option, table[option]
    for other, entry in sorted(table.items()):
        if not name.startswith("-") and entry.get("dest") == name:
            return other, entry
    return None


def _resolve(entry: dict, options: dict, table: dict, hops: list) -> list[dict] | None:
    """The successor flags of entry that the release has, following a successor it lacks to that one's
    successor (hops collects each step); None when one cannot be reached."""
    moved = entry.get("successor_flags") or []
    if not moved:
        return None
    found = []
    for item in moved:
        if item["flag"] in options:
            found.append(item)
            continue
        onward = table.get(item["flag"])
        if onward is None or len(hops) >= MAX_HOPS or not onward.get("successor_flags"):
            return None
        hops.append(onward)
        further = _resolve(onward, options, table, hops)
        if further is None:
            return None
        # An alias chain keeps the value named first (--x=v -> --y, the old spelling of --z -> --z=v).
        found += [dict(f, value=f["value"] or item["value"]) for f in further]
    return found


def _suggestion(found: list[dict], flags: dict, options: dict, as_setting: bool) -> str:
    """The successor as settings (dest: value; a switch is true, a flag whose value the parser does not
    name is the bare dest) or as extra_args flags (--flag value)."""
    parts = []
    for item in found:
        dest, value = options[item["flag"]], item["value"]
        if value is None and (flags.get(dest) or {}).get("kind") == "bool":
            value = "true" if as_setting else None
        if as_setting:
            parts.append(dest if value is None else f"{dest}: {value}")
        else:
            parts.append(item["flag"] if value is None else f"{item['flag']} {value}")
    return " and ".join(parts)


def _status(option: str, entry: dict, options: dict, version: str) -> str:
    removed = entry.get("removed_in")
    if option in options:
        # A spelling the release keeps for another dest (--disable-piecewise-cuda-graph in 0.5.16).
        deprecated = " deprecated" if version in (entry.get("deprecated_in") or []) else ""
        return f"{option} is a{deprecated} spelling of {options[option]} in SGLang {version}"
    if removed and version_tuple(version) >= version_tuple(removed):
        since = entry.get("deprecated_in") or []
        return f"{option} was removed in SGLang {removed}" + (f" (deprecated in {since[0]})" if since else "")
    had = entry.get("releases") or []
    return f"SGLang {version} has no {option}" + (f" (a flag of SGLang {', '.join(had)})" if had else "")


def retired_flag(
    name: str, flags: dict, version: str, successors: dict | None, *, as_setting: bool = True
) -> str | None:
    """What became of a flag (or a setting named like its dest) the release does not know, with the
    successor to use as a setting (as_setting) or as an extra_args flag; None when no data names it."""
    found_entry = entry_of(name, successors)
    if found_entry is None:
        return None
    option, entry = found_entry
    options = release_options(flags)
    status = _status(option, entry, options, version)
    named, named_in = entry.get("successor"), entry.get("named_in")
    if not named:
        return f"{status}, no successor named"
    env = entry.get("successor_env") or {}
    if env:
        pairs = ", ".join(f"{key}: '{val}'" for key, val in env.items())
        shown = f"env: {{{pairs}}}" if as_setting else "the environment variables " + named
        return (
            f"{status}; SGLang {named_in} names environment variables as its successor: did you mean {shown}?"
        )
    hops: list[dict] = []
    found = _resolve(entry, options, (successors or {}).get("flags") or {}, hops)
    chain = "".join(
        f" (SGLang {hop['named_in']} names that one's successor {hop['successor']})" for hop in hops
    )
    if found is None:
        lacking = f", which SGLang {version} lacks too"
        return f"{status}; SGLang {named_in} names its successor {named}{chain}{lacking}"
    suggestion = _suggestion(found, flags, options, as_setting)
    return f"{status}; SGLang {named_in} names its successor {named}{chain}: did you mean {suggestion}?"
