"""SGLang's environment variables by name, per release: which SGLANG_/SGL_ variables a release reads and what
a typed one accepts, from data/sglang_env/<version>.json (written from the release's wheel by
scripts/sglang_env_data.py: the typed table of sglang/srt/environ.py and every SGLANG_/SGL_ literal of the
wheel's modules).

Pure; validate_settings (sglang_args) calls env_problems for the request's env. A variable with another
prefix (NCCL_*, CUDA_*, HF_*) is another program's and passes as it is.
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.suggest import closest

OWN_PREFIXES = ("SGLANG_", "SGL_")
ENVIRON = "sglang/srt/environ.py"


def render_value(value) -> str:
    """An env value as the server's environment holds it (a YAML true is 'true')."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _reading(name: str, table: dict) -> dict | None:
    """How the release reads name: {"name", "typed" (its environ.py entry) or "literal" (its entry)}, or
    {"name"} for a name a recorded prefix completes; None when the release names it nowhere."""
    typed = table.get("typed") or {}
    aliases = {entry["alias"]: owner for owner, entry in typed.items() if entry.get("alias")}
    if name in typed:
        return {"name": name, "typed": typed[name]}
    if name in aliases:
        # A *WithAlias field reads its deprecated name with its own type.
        return {"name": aliases[name], "typed": typed[aliases[name]]}
    literal = (table.get("literals") or {}).get(name)
    if literal is not None:
        return {"name": name, "literal": literal}
    if any(name.startswith(prefix) for prefix in table.get("prefixes") or {}):
        return {"name": name}
    return None


def reading(name: str, table: dict) -> dict | None:
    """_reading, through the legacy prefix environ.py rewrites at import (SGL_X is read as SGLANG_X)."""
    found = _reading(name, table)
    if found is not None:
        return found
    for old, new in (table.get("legacy_prefixes") or {}).items():
        if name.startswith(old):
            found = _reading(new + name[len(old) :], table)
            if found is not None:
                return found
    return None


def known_names(table: dict) -> list[str]:
    """Every SGLANG_/SGL_ name the release reads (typed, their aliases, literals), for "did you mean"."""
    typed = table.get("typed") or {}
    names = set(typed) | {entry["alias"] for entry in typed.values() if entry.get("alias")}
    names |= set(table.get("literals") or {})
    return sorted(name for name in names if name.startswith(OWN_PREFIXES))


def _parses(kind: str, text: str, spec: dict) -> bool:
    if kind == "bool":
        word = text.lower() if spec.get("lowercased") else text
        return word in (spec.get("true") or []) or word in (spec.get("false") or [])
    try:
        {"int": int, "float": float}.get(kind, str)(text)
    except ValueError:
        return False
    return True


def _accepted(kind: str, spec: dict) -> str:
    if kind == "bool":
        case = " (any case)" if spec.get("lowercased") else ""
        return "one of " + ", ".join([*spec.get("true", []), *spec.get("false", [])]) + case
    return {"int": "an integer", "float": "a number"}.get(kind, "a string")


def _value_problem(name: str, value, found: dict, table: dict, *, where: str, version: str) -> str | None:
    """A sentence when the value does not parse as what the release reads the name as, else None."""
    text = render_value(value)
    via = f" (SGLang reads it as {found['name']})" if found["name"] != name else ""
    if "typed" in found:
        entry = found["typed"]
        spec = (table.get("types") or {}).get(entry["type"]) or {}
        kind = spec.get("parse", "str")
        if _parses(kind, text, spec):
            return None
        default = f"its default {entry['default']!r}" if "default" in entry else "its default"
        return (
            f"{where} must be {_accepted(kind, spec)} for SGLang {version} ({entry['type']} in {ENVIRON}), "
            f"got {text!r}{via}: SGLang would only warn and use {default}"
        )
    literal = found.get("literal") or {}
    for kind in literal.get("parse") or []:
        if not _parses(kind, text, {}):
            return (
                f"{where} must be {_accepted(kind, {})} for SGLang {version}, got {text!r}{via}: "
                f"{literal['file']} reads it with {kind}(), which raises on that value"
            )
    return None


def env_problems(env, table: dict | None, where: str = "env") -> list[str]:
    """One sentence per SGLANG_/SGL_ variable of env that the release reads nowhere (with the closest name
    it does read) or whose value does not parse as its type. No table (a release without data): none."""
    if not table or not isinstance(env, dict):
        return []
    version = table.get("sglang_version") or "this release"
    problems = []
    for name, value in env.items():
        if not isinstance(name, str) or not name.startswith(OWN_PREFIXES):
            continue
        found = reading(name, table)
        if found is None:
            near = closest(name, known_names(table))
            hint = f" (did you mean {near}?)" if near else ""
            problems.append(
                f"{where}.{name} is not a variable SGLang {version} reads{hint}: neither its {ENVIRON} "
                "table nor any of its modules names it; variables without the SGLANG_/SGL_ prefix pass as "
                "they are"
            )
            continue
        problem = _value_problem(name, value, found, table, where=f"{where}.{name}", version=version)
        if problem:
            problems.append(problem)
    return problems
