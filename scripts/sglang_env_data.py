#!/usr/bin/env python3
"""Write the environment variables one SGLang release reads, by name, as data.

Read from the release's wheel with zipfile and ast; nothing of SGLang is imported, so any python will do:
- the typed table of sglang/srt/environ.py: every field of its class Envs (name, descriptor type - EnvBool,
  EnvInt, EnvFloat, EnvStr, ... - the default where it is a literal, the deprecated alias a *WithAlias
  field also reads), and what each descriptor type accepts, read from the type's own parse() (EnvBool's
  spellings, int(), float());
- every string literal of the wheel's .py files that is a whole SGLANG_/SGL_ name (SGLang reads many
  variables outside environ.py: os.getenv, os.environ.get, its own helpers), each with one file that uses
  it; where os.getenv / os.environ.get reads it, the literal defaults of those reads and whether a read is
  wrapped in int() or float() (which raises on a value that does not parse: the server stops);
- name prefixes SGLang completes at run time (f"SGLANG_CACHE_DIT_{...}", a literal ending in _);
- the legacy prefix environ.py rewrites at import (SGL_X becomes SGLANG_X).

    scripts/sglang_env_data.py --version 0.5.23 --out data/sglang_env/0.5.23.json
    scripts/sglang_env_data.py --wheel path/to/sglang-0.5.23-....whl --out ... --check

--version downloads the wheel with pip (the helper of scripts/sglang_flag_data.py, one fixed target).
--check writes nothing: it exits 1 and prints a diff when the file on disk differs from what would be
written. The output is json.dumps(indent=1, sort_keys=True), no timestamps.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_flag_data as flag_data

SCHEMA = 1
GENERATOR = "scripts/sglang_env_data.py"
ENVIRON = "sglang/srt/environ.py"
REGISTRY = "Envs"
# A whole variable name of SGLang's own prefixes; a name ending in _ is a prefix completed at run time.
NAME = re.compile(r"(?:SGLANG|SGL)_[A-Z0-9_]+")
# A module can hold such a literal only where a quote opens on the name (a fast test before ast.parse).
MARKER = re.compile(rb"[\'\"](?:SGLANG|SGL)_")
# The calls that read one variable with an optional default, and the wrappers that parse what they return.
READS = frozenset({"os.getenv", "os.environ.get"})
PARSERS = frozenset({"int", "float"})


# ------------------------------------------------------------------------------------------ environ.py


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [base.id for base in cls.bases if isinstance(base, ast.Name)]


def _bool_spellings(parse: ast.FunctionDef) -> dict | None:
    """{"true": [...], "false": [...], "lowercased": bool} from `if value in [...]: return True/False`."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(parse):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
            continue
        test, body = node.test, node.body
        if not (len(test.ops) == 1 and isinstance(test.ops[0], ast.In) and body):
            continue
        values, ret = test.comparators[0], body[0]
        if not (isinstance(values, (ast.List, ast.Tuple, ast.Set)) and isinstance(ret, ast.Return)):
            continue
        if isinstance(ret.value, ast.Constant) and isinstance(ret.value.value, bool):
            words = [v.value for v in values.elts if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            found[str(ret.value.value).lower()] = words
    if set(found) != {"true", "false"}:
        return None
    lowered = any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "lower"
        for node in ast.walk(parse)
    )
    return {**found, "lowercased": lowered}


def _own_parse(cls: ast.ClassDef) -> dict | None:
    """What the class's own parse() accepts: bool (its spellings), int, float or str (any text); None when
    it has no parse() or one that only raises (EnvField's)."""
    parse = _method(cls, "parse")
    if parse is None or all(isinstance(stmt, (ast.Raise, ast.Expr)) for stmt in parse.body):
        return None
    spellings = _bool_spellings(parse)
    if spellings:
        return {"parse": "bool", **spellings}
    called = {
        node.func.id
        for node in ast.walk(parse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    for builtin in ("int", "float"):
        if builtin in called:
            return {"parse": builtin}
    return {"parse": "str"}


def field_types(tree: ast.Module) -> dict[str, dict]:
    """{descriptor class: what its parse() accepts} for every subclass of EnvField in environ.py; a class
    without its own parse() takes its bases' in order (EnvBoolWithAlias(_DeprecatedEnvFallback, EnvBool))."""
    classes = _classes(tree)

    def derives(name: str, seen=()) -> bool:
        cls = classes.get(name)
        return name == "EnvField" or bool(
            cls and any(derives(b, (*seen, name)) for b in _base_names(cls) if b not in seen)
        )

    def accepts(name: str) -> dict | None:
        cls = classes.get(name)
        if cls is None:
            return None
        own = _own_parse(cls)
        return own or next((found for b in _base_names(cls) if (found := accepts(b))), None)

    return {
        name: found
        for name in classes
        if name != "EnvField" and derives(name) and (found := accepts(name)) is not None
    }


def _json_value(node: ast.expr) -> tuple[bool, object]:
    """(True, value) for a literal that JSON can hold (a tuple as a list), else (False, None)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    value = list(value) if isinstance(value, tuple) else value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


def typed_table(tree: ast.Module, types: dict[str, dict]) -> dict[str, dict]:
    """{name: {"type", "default" (only where literal), "alias" (a deprecated name it also reads)}} of the
    fields of class Envs."""
    registry = _classes(tree).get(REGISTRY)
    if registry is None:
        sys.exit(f"{ENVIRON} has no class {REGISTRY}")
    table: dict[str, dict] = {}
    for stmt in registry.body:
        if not (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            continue
        call = stmt.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in types):
            continue
        entry: dict = {"type": call.func.id}
        default = (
            call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "default"), None)
        )
        if default is not None:
            literal, value = _json_value(default)
            if literal:
                entry["default"] = value
        alias = next((k.value for k in call.keywords if k.arg == "deprecated_name"), None)
        if isinstance(alias, ast.Constant) and isinstance(alias.value, str):
            entry["alias"] = alias.value
        table[stmt.targets[0].id] = entry
    return table


def legacy_prefixes(tree: ast.Module) -> dict[str, str]:
    """{old prefix: new prefix} for each `key.replace("SGL_", "SGLANG_", ...)` of environ.py: SGLang copies
    a variable named with the old prefix to the new name at import."""
    found = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "replace"
        ):
            args = [
                a.value for a in node.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            if len(args) == 2 and all(NAME.fullmatch(a + "X") for a in args):
                found[args[0]] = args[1]
    return found


# ------------------------------------------------------------------------------------ every .py file


def _fstring_prefix(node: ast.JoinedStr) -> str | None:
    """The name prefix an f-string starts with (f"SGLANG_CACHE_DIT_{key}"), else None."""
    head = node.values[0] if node.values else None
    if (
        isinstance(head, ast.Constant)
        and isinstance(head.value, str)
        and NAME.fullmatch(head.value)
        and len(node.values) > 1
        and isinstance(node.values[1], ast.FormattedValue)
    ):
        return head.value
    return None


def _record_read(node: ast.Call, reads: dict[str, dict], wrapped: dict[int, str]) -> None:
    """An os.getenv / os.environ.get of a whole name: its literal default and the int()/float() around it."""
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return
    if not NAME.fullmatch(first.value) or first.value.endswith("_"):
        return
    read = reads.setdefault(first.value, {"defaults": [], "parse": set()})
    default = node.args[1] if len(node.args) > 1 else None
    default = default or next((k.value for k in node.keywords if k.arg == "default"), None)
    if default is not None:
        literal, value = _json_value(default)
        if literal and value not in read["defaults"]:
            read["defaults"].append(value)
    if id(node) in wrapped:
        read["parse"].add(wrapped[id(node)])


def scan_module(tree: ast.Module) -> tuple[set[str], set[str], dict[str, dict]]:
    """(names, prefixes, reads) of one module: the whole-name literals, the prefixes completed at run time,
    and for each name the os.getenv / os.environ.get reads: {"defaults": [...], "parse": {...}}."""
    names: set[str] = set()
    prefixes: set[str] = set()
    reads: dict[str, dict] = {}
    in_fstring: set[int] = set()
    wrapped: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            in_fstring.update(id(part) for part in node.values)
            prefix = _fstring_prefix(node)
            if prefix:
                prefixes.add(prefix)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PARSERS:
            if node.args:
                wrapped[id(node.args[0])] = node.func.id
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstring:
            if NAME.fullmatch(node.value):
                (prefixes if node.value.endswith("_") else names).add(node.value)
        elif isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in READS:
            _record_read(node, reads, wrapped)
    return names, prefixes, reads


def _sorted_values(values: list) -> list:
    return sorted(values, key=lambda v: json.dumps(v, sort_keys=True))


def literal_names(sources: dict[str, bytes]) -> tuple[dict[str, dict], dict[str, str]]:
    """({name: {"file", "defaults"?, "parse"?}}, {prefix: file}) over the modules (path -> source), in
    path order: a name's file is the first that reads it through int() or float() of os.getenv /
    os.environ.get, else the first that reads it through those, else the first that names it."""
    names: dict[str, dict] = {}
    prefixes: dict[str, str] = {}
    for path in sorted(sources):
        source = sources[path]
        if not MARKER.search(source):
            continue
        found, starts, reads = scan_module(ast.parse(source, filename=path))
        for prefix in starts:
            prefixes.setdefault(prefix, path)
        for name in found:
            entry = names.setdefault(name, {"file": path, "rank": 0, "defaults": [], "parse": set()})
            read = reads.get(name)
            if read is None:
                continue
            # The file shown: the first that parses it (where a bad value raises), else the first reading it.
            rank = 2 if read["parse"] else 1
            if rank > entry["rank"]:
                entry["file"], entry["rank"] = path, rank
            entry["defaults"] += [d for d in read["defaults"] if d not in entry["defaults"]]
            entry["parse"] |= read["parse"]
    rendered = {}
    for name, entry in names.items():
        out = {"file": entry["file"]}
        if entry["defaults"]:
            out["defaults"] = _sorted_values(entry["defaults"])
        if entry["parse"]:
            out["parse"] = sorted(entry["parse"])
        rendered[name] = out
    return rendered, prefixes


# ------------------------------------------------------------------------------------------ the file


def wheel_sources(wheel: Path) -> dict[str, bytes]:
    """Every .py file of the wheel, by its path in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist() if name.endswith(".py")}


def render(sources: dict[str, bytes], version: str, wheel_name: str, sha256: str) -> dict:
    if ENVIRON not in sources:
        sys.exit(f"{wheel_name} has no {ENVIRON}")
    environ = ast.parse(sources[ENVIRON], filename=ENVIRON)
    types = field_types(environ)
    literals, prefixes = literal_names(sources)
    return {
        "schema": SCHEMA,
        "sglang_version": version,
        "source": {"wheel": wheel_name, "sha256": sha256, "generator": GENERATOR},
        "types": types,
        "typed": typed_table(environ, types),
        "legacy_prefixes": legacy_prefixes(environ),
        "literals": literals,
        "prefixes": prefixes,
    }


def render_json(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def counts(data: dict) -> dict[str, int]:
    """The figures a run prints: typed names, and SGLANG_/SGL_ names found only outside the typed table."""
    typed = set(data["typed"])
    return {
        "typed": len(typed),
        "typed_sglang": sum(1 for name in typed if NAME.fullmatch(name)),
        "literals": len(data["literals"]),
        "only_elsewhere": len(set(data["literals"]) - typed),
        "prefixes": len(data["prefixes"]),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="an SGLang wheel file")
    source.add_argument("--version", help="an SGLang release, downloaded with pip")
    parser.add_argument("--wheel-dir", type=Path, default=Path(".cache/sglang-wheels"))
    parser.add_argument("--pip-python", default=sys.executable, help="python whose pip downloads the wheel")
    parser.add_argument("--out", type=Path, required=True, help="data/sglang_env/<version>.json")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff on change")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wheel = args.wheel or flag_data.download_wheel(args.pip_python, args.version, args.wheel_dir)
    version = flag_data.wheel_version(wheel)
    if args.version and version != args.version:
        sys.exit(f"{wheel.name} holds {version}, not {args.version}")
    data = render(wheel_sources(wheel), version, wheel.name, flag_data.sha256_of(wheel))
    text = render_json(data)
    if args.check:
        diff = flag_data.compare(args.out, text)
        if diff:
            sys.stdout.write(diff)
            return 1
        print(f"{args.out}: up to date ({wheel.name})")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    figures = counts(data)
    print(
        f"{args.out}: SGLang {version}: {figures['typed']} typed names in {ENVIRON} "
        f"({figures['typed_sglang']} SGLANG_/SGL_), {figures['only_elsewhere']} SGLANG_/SGL_ names only "
        f"elsewhere, {figures['prefixes']} prefixes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
