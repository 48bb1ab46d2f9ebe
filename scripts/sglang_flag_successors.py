#!/usr/bin/env python3
"""Write what became of SGLang's retired launch_server flags, as data: the successor each release's own
parser names, and the releases that have each flag.

Two sources, nothing of SGLang imported:
- each given release's wheel (zipfile + ast over the parser's source: sglang/srt/server_args.py and
  sglang/srt/arg_groups/): an add_argument() whose action is one of SGLang's Deprecated*Action classes or
  whose help starts "Deprecated" / "[Deprecated]" / "(Deprecated", and a ServerArgs field whose help does
  (`name: A[type, "Deprecated. Use --x=v ..."]`). The successor is the action's new_flag=, else the flag
  its error_message= or help names after "use" / "alias for" ("[Deprecated] Alias for
  --elastic-ep-join-mode recover." in 0.5.16);
- the flag tables data/sglang_flags/<version>.json (each written from its release's own parser by
  scripts/sglang_flag_data.py): which releases have a flag, so "removed in X" is data too, and the kinds and
  choices that tell a successor's value ("=cuda_ipc", " recover") from a word of the sentence ("instead").

An entry is written for every option a wheel's parser deprecates and every option one flag table has and
the next lacks (removed with or without a deprecation first).

    scripts/sglang_flag_successors.py --version 0.5.10.post1 --version 0.5.16 --version 0.5.23 \\
        --out data/sglang_flag_successors.json
    scripts/sglang_flag_successors.py --wheel A.whl --wheel B.whl --out ... --check

--check writes nothing: it exits 1 and prints a diff when the file on disk differs from what would be
written. The output is json.dumps(indent=1, sort_keys=True), no timestamps.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import re
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_flag_data as flag_data

SCHEMA = 1
GENERATOR = "scripts/sglang_flag_successors.py"
PARSER_FILES = re.compile(r"^sglang/srt/(server_args\.py|arg_groups/.+\.py)$")
# The flag a deprecation sentence points to, and what may follow it: "=value" or " value"; or the
# environment variables it points to instead ("Use SGLANG_SPEC_NAN_DETECTION=1 and ... instead").
SUCCESSOR = re.compile(
    r"(?:\b[Uu]se|\b[Aa]lias for)\s+'?(--[a-z0-9](?:[a-z0-9{},-]*[a-z0-9}])?)"
    r"(?:([= ])([A-Za-z0-9_<>-]+(?:\.[A-Za-z0-9_<>-]+)*))?"  # a value ends before a full stop
)
ENV_SUCCESSOR = re.compile(
    r"\b[Uu]se\s+((?:SGLANG_[A-Z0-9_]+=[^\s,]+)(?:(?:,\s*|\s+and\s+)SGLANG_[A-Z0-9_]+=[^\s,]+)*)"
)
ENV_ITEM = re.compile(r"(SGLANG_[A-Z0-9_]+)=([^\s,]+)")
BRACES = re.compile(r"\{([a-z0-9,_-]+)\}")


# ---------------------------------------------------------------------------------- parser source


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def is_deprecation(help_text: str | None) -> bool:
    return bool(help_text) and help_text.lstrip("[( ").lower().startswith("deprecated")


def named_successor(text: str | None) -> str | None:
    """The successor a sentence names, as written: "Use --x=v instead" -> "--x=v", "Alias for --x v." ->
    "--x v" (whether v is a value is decided against the flag table), "Use SGLANG_A=1 and SGLANG_B=1" ->
    "SGLANG_A=1 SGLANG_B=1"."""
    match = SUCCESSOR.search(text or "")
    if match is not None:
        flag, sep, value = match.groups()
        return flag + (sep + value if value else "")
    match = ENV_SUCCESSOR.search(text or "")
    if match is not None:
        return " ".join(f"{name}={value}" for name, value in ENV_ITEM.findall(match.group(1)))
    return None


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _action_name(node: ast.expr | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return _text(node) or "store"


def _from_add_argument(call: ast.Call) -> list[dict]:
    options = [t for t in (_text(a) for a in call.args) if t and t.startswith("-")]
    keywords = _keywords(call)
    action = _action_name(keywords.get("action"))
    help_text = _text(keywords.get("help"))
    if not options or not (action.startswith("Deprecated") or is_deprecation(help_text)):
        return []
    new_flag = _text(keywords.get("new_flag"))
    error = _text(keywords.get("error_message"))
    how, named = next(
        ((how, named) for how, named in (
            ("new_flag", new_flag),
            ("error_message", named_successor(error)),
            ("help", named_successor(help_text)),
        ) if named),
        (None, None),
    )  # fmt: skip
    return [{"option": option, "action": action, "successor": named, "named_by": how} for option in options]


def _from_field(stmt: ast.AnnAssign) -> list[dict]:
    """A ServerArgs field `name: A[type, "help"]` or `A[type, Arg(help=..., cli_name=...)]`."""
    if not (isinstance(stmt.target, ast.Name) and isinstance(stmt.annotation, ast.Subscript)):
        return []
    parts = stmt.annotation.slice
    if not (isinstance(parts, ast.Tuple) and len(parts.elts) >= 2):
        return []
    meta, cli_name = parts.elts[1], None
    help_text = _text(meta)
    if isinstance(meta, ast.Call):
        keywords = _keywords(meta)
        help_text, cli_name = _text(keywords.get("help")), _text(keywords.get("cli_name"))
        if isinstance(keywords.get("no_cli"), ast.Constant) and keywords["no_cli"].value is True:
            return []
    if not is_deprecation(help_text):
        return []
    option = cli_name or "--" + stmt.target.id.replace("_", "-")
    named = named_successor(help_text)
    return [{"option": option, "action": "field", "successor": named, "named_by": "help" if named else None}]


def deprecations(sources: dict[str, bytes]) -> dict[str, dict]:
    """{option: {"action", "successor", "named_by"}} of one release's parser source; an option deprecated
    twice keeps the record that names a successor (the first, in path order, when both do)."""
    found: dict[str, dict] = {}
    for path in sorted(sources):
        if not PARSER_FILES.match(path) or b"eprecated" not in sources[path]:
            continue
        for node in ast.walk(ast.parse(sources[path], filename=path)):
            records = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "add_argument":
                    records = _from_add_argument(node)
            elif isinstance(node, ast.ClassDef):
                records = [
                    r for stmt in node.body if isinstance(stmt, ast.AnnAssign) for r in _from_field(stmt)
                ]
            for record in records:
                option = record.pop("option")
                if option not in found or (found[option]["successor"] is None and record["successor"]):
                    found[option] = record
    return found


# ---------------------------------------------------------------------------------------- the data


def options_of(table: dict) -> dict[str, str]:
    """{option: dest} of a flag table (its flags and their aliases)."""
    return {option: dest for dest, entry in table["flags"].items() for option in flag_data.options_of(entry)}


def successor_flags(named: str, table: dict | None) -> list[dict]:
    """[{"flag", "value"}] of a successor as named ("--cuda-graph-backend-{decode,prefill}=disabled" is two
    flags). A value after "=" is kept unless the flag is a switch, has choices without it, or it is a
    placeholder (<dp-size>); a word after a space only when it is one of the flag's choices in the naming
    release's table ("--elastic-ep-join-mode recover", not "--swa-full-tokens-ratio instead")."""
    flag, sep, value = re.fullmatch(r"(\S+?)(?:([= ])(.*))?", named).groups()
    match = BRACES.search(flag)
    flags = (
        [flag[: match.start()] + part + flag[match.end() :] for part in match.group(1).split(",")]
        if match
        else [flag]
    )
    spec_of = {}
    if table:
        spec_of = {option: table["flags"][dest] for option, dest in options_of(table).items()}
    out = []
    for name in flags:
        spec = spec_of.get(name) or {}
        choices = [str(choice) for choice in spec.get("choices") or []]
        kept = value or None
        if kept and (kept.startswith("<") or spec.get("kind") == "bool" or (choices and kept not in choices)):
            kept = None
        if kept and sep == " " and kept not in choices:
            kept = None
        out.append({"flag": name, "value": kept})
    return out


def successor_text(named: str, flags: list[dict]) -> str:
    """The successor as named, less a word that successor_flags found not to be a value."""
    if all(item["value"] is None for item in flags):
        return re.split(r"[= ]", named, maxsplit=1)[0]
    return named


def successor_env(named: str) -> dict[str, str]:
    return dict(ENV_ITEM.findall(named)) if not named.startswith("--") else {}


def render(tables: dict[str, dict], parsed: dict[str, dict], wheels: dict[str, dict]) -> dict:
    """The data file: tables {version: flag table}, parsed {version: deprecations()}, wheels {version:
    {"wheel", "sha256"}} (the releases whose parser source was read)."""
    versions = sorted(tables, key=flag_data._version_key)
    has = {version: options_of(tables[version]) for version in versions}
    wanted = {option for found in parsed.values() for option in found}
    for older, newer in itertools.pairwise(versions):
        wanted |= set(has[older]) - set(has[newer])
    flags = {}
    for option in sorted(wanted):
        releases = [v for v in versions if option in has[v]]
        last = releases[-1] if releases else None
        later = versions[versions.index(last) + 1 :] if last else []
        marked = [v for v in versions if option in parsed.get(v, {})]
        naming = [v for v in marked if parsed[v][option]["successor"]]
        entry = {
            "dest": has[last][option] if last else None,
            "releases": releases,
            "removed_in": later[0] if later else None,
            "deprecated_in": marked,
            "successor": None,
            "successor_flags": [],
            "successor_env": {},
            "named_in": None,
        }
        if naming:
            named_in = naming[-1]
            named = parsed[named_in][option]["successor"]
            env = successor_env(named)
            moved = [] if env else successor_flags(named, tables.get(named_in))
            entry.update(named_in=named_in, successor=named if env else successor_text(named, moved))
            entry.update(successor_flags=moved, successor_env=env)
        flags[option] = entry
    return {
        "schema": SCHEMA,
        "source": {
            "generator": GENERATOR,
            "wheels": wheels,
            "flag_tables": [f"data/sglang_flags/{version}.json" for version in versions],
        },
        "flags": flags,
    }


def render_json(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def parser_sources(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist() if PARSER_FILES.match(name)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, action="append", default=[], help="an SGLang wheel file")
    parser.add_argument("--version", action="append", default=[], help="an SGLang release, downloaded")
    parser.add_argument("--wheel-dir", type=Path, default=Path(".cache/sglang-wheels"))
    parser.add_argument("--pip-python", default=sys.executable, help="python whose pip downloads the wheel")
    parser.add_argument("--tables", type=Path, default=Path("data/sglang_flags"), help="the flag tables")
    parser.add_argument("--out", type=Path, required=True, help="data/sglang_flag_successors.json")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff on change")
    args = parser.parse_args(argv)
    if not args.wheel and not args.version:
        parser.error("give at least one --wheel or --version")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wheel_files = list(args.wheel)
    wheel_files += [flag_data.download_wheel(args.pip_python, v, args.wheel_dir) for v in args.version]
    tables = {path.stem: json.loads(path.read_text()) for path in sorted(args.tables.glob("*.json"))}
    parsed, wheels = {}, {}
    for wheel in wheel_files:
        version = flag_data.wheel_version(wheel)
        if version not in tables:
            sys.exit(f"{args.tables} has no flag table of {version}: run scripts/sglang_flag_data.py first")
        parsed[version] = deprecations(parser_sources(wheel))
        wheels[version] = {"wheel": wheel.name, "sha256": flag_data.sha256_of(wheel)}
    text = render_json(render(tables, parsed, wheels))
    if args.check:
        diff = flag_data.compare(args.out, text)
        if diff:
            sys.stdout.write(diff)
            return 1
        print(f"{args.out}: up to date ({', '.join(sorted(wheels, key=flag_data._version_key))})")
        return 0
    args.out.write_text(text)
    flags = json.loads(text)["flags"]
    named = sum(1 for entry in flags.values() if entry["successor"])
    print(f"{args.out}: {len(flags)} retired or deprecated options, {named} with a successor named")
    return 0


if __name__ == "__main__":
    sys.exit(main())
