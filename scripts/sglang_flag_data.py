#!/usr/bin/env python3
"""Write the complete list of `python -m sglang.launch_server` flags of one SGLang release as data.

The flags are read from the release's OWN argparse parser: the release's wheel is unpacked into a temp dir
and, in a process of the given python, put first on sys.path (so that release's server_args.py is imported,
not an installed sglang); `ServerArgs.add_cli_args(argparse.ArgumentParser())` builds the parser and every
action of it (but help) is recorded by its dest. The python needs torch and the parser's import deps
(roles/sglang/vars/main.yml, __sglang_parser_deps_measured), not that SGLang release. No GPU is needed.

    scripts/sglang_flag_data.py --python PY --version 0.5.23 --wheel-dir .cache/sglang-wheels \\
        --out data/sglang_flags/0.5.23.json
    scripts/sglang_flag_data.py --python PY --wheel path/to/sglang-0.5.23-....whl --out ... --check

--version downloads the wheel with pip (`pip download --no-deps --only-binary=:all:` for one fixed target,
TARGET_PYTHON / TARGET_PLATFORM, so that the recorded wheel and its sha256 do not depend on the machine that
regenerates). --check writes nothing: it exits 1 and prints a diff when the file on disk differs from what
would be written. Besides, the script prints the renames it sees between the releases already in the output
folder (a dest of an older release gone from a newer one, with the newer flag that looks like its successor).

The output (json.dumps(indent=1, sort_keys=True), no timestamps) is rendered by render_json from the
extracted records; that part and compare() import nothing of SGLang, so tests use them directly.
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SCHEMA = 1
GENERATOR = "scripts/sglang_flag_data.py"
# The wheel that pip download picks for 0.5.16+ is per CPython version and platform (it carries Rust
# extensions); one fixed target keeps the recorded wheel name and sha256 the same on every machine.
TARGET_PYTHON = "3.11"
TARGET_PLATFORM = "manylinux_2_34_x86_64"
HELP_MAX = 200
EXTRACT_TIMEOUT = 600
DOWNLOAD_TIMEOUT = 900
RESULT_MARK = "EPFORGE_SGLANG_FLAG_DATA "

# Runs in the given python with argv [wheel_root]. Prints one marked JSON line: the imported sglang's file
# and every parser action, with each value made JSON-safe here (the objects do not leave this process).
EXTRACT_SCRIPT = r"""
import argparse, json, sys
root = sys.argv[1]
sys.path.insert(0, root)
import sglang
from sglang.srt.server_args import ServerArgs

def safe(value):
    try:
        json.dumps(value, allow_nan=False)
        return {"value": value}
    except (TypeError, ValueError):
        return {"repr": repr(value)}

def type_name(kind):
    if kind is None:
        return None
    return getattr(kind, "__name__", None) or type(kind).__name__

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
keywords = {cls: key for key, cls in parser._registries["action"].items() if key is not None}
actions = []
for action in parser._actions:
    if isinstance(action, argparse._HelpAction):
        continue
    choices = action.choices
    if isinstance(choices, (set, frozenset)):
        # A set's order changes from run to run (0.5.23's --sampling-backend): record it sorted.
        choices = sorted(choices, key=repr)
    actions.append({
        "dest": action.dest,
        "option_strings": list(action.option_strings),
        "action": keywords.get(type(action), type(action).__name__),
        "base": next((keywords[cls] for cls in type(action).__mro__ if cls in keywords), None),
        "type": type_name(action.type),
        "nargs": action.nargs,
        "choices": None if choices is None else [safe(choice) for choice in choices],
        "default": safe(action.default),
        "deprecated": bool(getattr(action, "deprecated", False)),
        "help": action.help if isinstance(action.help, str) else None,
    })
print("\n__MARK__" + json.dumps({"sglang_file": sglang.__file__, "actions": actions}))
""".replace("__MARK__", RESULT_MARK)


# ----------------------------------------------------------------------------------- pure rendering


# A sentence ends at . ! or ? before a capital letter, but not at "e.g." / "i.e.".
_SENTENCE_END = re.compile(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+(?=[A-Z])")


def first_sentence(text: str | None) -> str:
    """The help's first sentence (whitespace folded), cut to HELP_MAX characters."""
    folded = " ".join((text or "").split())
    sentence = _SENTENCE_END.split(folded, maxsplit=1)[0]
    return sentence if len(sentence) <= HELP_MAX else sentence[: HELP_MAX - 3].rstrip() + "..."


def json_value(safe: dict):
    """A value the child made JSON-safe: itself, or its repr() string when it was not serialisable."""
    return safe["value"] if "value" in safe else safe["repr"]


def kind_of(record: dict) -> str:
    """bool, list, int, float, str or other: what a setting's value must be for this flag.

    A custom Action class counts as the argparse action it extends (record["base"]), and one that takes no
    value and defaults to a bool is a switch: SGLang's deprecated flags (DeprecatedStoreTrueAction of
    --enable-dp-attention in 0.5.23, an argparse.Action with nargs=0) still store a bool."""
    action, nargs, kind = record.get("base") or record["action"], record["nargs"], record["type"]
    if action in ("store_true", "store_false", "BooleanOptionalAction"):
        return "bool"
    if nargs == 0 and isinstance(record["default"].get("value"), bool):
        return "bool"
    if nargs in ("*", "+") or (isinstance(nargs, int) and nargs > 1) or action == "append":
        return "list"
    if kind in ("int", "float"):
        return kind
    if action == "store" and kind in ("str", None):
        return "str"
    return "other"


def flag_entry(record: dict) -> dict:
    options = record["option_strings"]
    long = [option for option in options if option.startswith("--")]
    flag = long[0] if long else (options[0] if options else record["dest"])
    choices = record["choices"]
    help_text = record["help"] or ""
    return {
        "flag": flag,
        "aliases": [option for option in options if option != flag],
        "kind": kind_of(record),
        "action": record["action"],
        "type": record["type"],
        "nargs": record["nargs"],
        "choices": None if choices is None else [json_value(choice) for choice in choices],
        "default": json_value(record["default"]),
        "deprecated": bool(record["deprecated"])
        or "deprecated" in help_text.lower()
        or record["action"].startswith("Deprecated"),
        "help": first_sentence(help_text),
    }


def render_flags(actions: list[dict]) -> dict:
    """{dest: entry}. A dest that two actions share (an --x / --no-x pair, say) keeps the first action's
    entry and lists the other's option strings among its aliases, so no flag goes unrecorded."""
    flags: dict[str, dict] = {}
    for record in actions:
        entry = flag_entry(record)
        known = flags.get(record["dest"])
        if known is None:
            flags[record["dest"]] = entry
        else:
            known["aliases"] += [option for option in record["option_strings"] if option != known["flag"]]
    return flags


def render_json(actions: list[dict], version: str, wheel_name: str, sha256: str) -> str:
    """The data file's exact text for one release."""
    data = {
        "schema": SCHEMA,
        "sglang_version": version,
        "source": {"wheel": wheel_name, "sha256": sha256, "generator": GENERATOR},
        "flags": render_flags(actions),
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def compare(path: Path, text: str) -> str:
    """'' when path holds exactly text; otherwise a unified diff from the file on disk to text."""
    current = path.read_text() if path.exists() else ""
    if current == text:
        return ""
    lines = difflib.unified_diff(
        current.splitlines(keepends=True), text.splitlines(keepends=True), str(path), "regenerated"
    )
    return "".join(lines) or f"{path}: differs (missing or whitespace only)\n"


# ------------------------------------------------------------------------------------------ renames

_WORDS = re.compile(r"[a-z0-9]+")


def _similarity(old: str, new: str) -> float:
    return difflib.SequenceMatcher(None, old, new).ratio()


def successor(old_dest: str, old: dict, new_flags: dict) -> str | None:
    """The newer release's dest that most looks like old_dest's successor: one whose help names the old
    flag, else one whose name starts with or resembles the old one (None when nothing is close)."""
    old_flag = old["flag"]
    # Renamed with the old spelling kept as an alias (often a deprecated one).
    kept = [dest for dest, entry in new_flags.items() if old_flag in entry["aliases"]]
    if kept:
        return sorted(kept)[0]
    named = [dest for dest, entry in new_flags.items() if old_flag in entry["help"].split()]
    if named:
        return sorted(named)[0]
    prefixed = sorted(dest for dest in new_flags if dest.startswith(old_dest + "_"))
    if prefixed:
        return prefixed[0]
    close = difflib.get_close_matches(old_dest, list(new_flags), n=1, cutoff=0.8)
    return close[0] if close else None


def renames(older: dict, newer: dict) -> list[tuple[str, str, bool]]:
    """[(old flag, new flag, whether newer still accepts the old spelling)] for the dests of older gone
    from newer that have a likely successor."""
    old_flags, new_flags = older["flags"], newer["flags"]
    found = []
    for dest in sorted(set(old_flags) - set(new_flags)):
        new_dest = successor(dest, old_flags[dest], new_flags)
        if new_dest is not None and new_dest not in old_flags:
            old_flag, new_entry = old_flags[dest]["flag"], new_flags[new_dest]
            found.append((old_flag, new_entry["flag"], old_flag in new_entry["aliases"]))
    # A dest both releases have whose older spelling the newer dropped (--cuda-graph-max-bs, an alias of
    # --cuda-graph-max-bs-decode up to 0.5.19, is gone in 0.5.20+).
    new_options = {option for entry in new_flags.values() for option in options_of(entry)}
    for dest in sorted(set(old_flags) & set(new_flags)):
        for option in options_of(old_flags[dest]):
            if option not in new_options:
                found.append((option, new_flags[dest]["flag"], False))
    return found


def options_of(entry: dict) -> list[str]:
    return [entry["flag"], *entry["aliases"]]


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in _WORDS.findall(version))


def report_renames(folder: Path) -> list[str]:
    """Lines naming the renames between consecutive releases whose data lies in folder."""
    files = sorted(folder.glob("*.json"), key=lambda path: _version_key(path.stem))
    tables = [json.loads(path.read_text()) for path in files]
    lines = []
    for older, newer in itertools.pairwise(tables):
        for old_flag, new_flag, kept in renames(older, newer):
            lines.append(
                f"{old_flag} ({older['sglang_version']}) -> {new_flag} ({newer['sglang_version']}): "
                + ("the old spelling is still accepted" if kept else "the old spelling is gone")
            )
    return lines


# ---------------------------------------------------------------------------- wheel and extraction


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def download_argv(pip_python: str, version: str, wheel_dir: Path) -> list[str]:
    return [
        pip_python,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        TARGET_PYTHON,
        "--platform",
        TARGET_PLATFORM,
        f"sglang=={version}",
        "-d",
        str(wheel_dir),
    ]


def find_wheel(wheel_dir: Path, version: str) -> Path | None:
    """The downloaded wheel of version for the fixed target (pure-Python or that CPython's build)."""
    tag = "cp" + TARGET_PYTHON.replace(".", "")
    for path in sorted(wheel_dir.glob(f"sglang-{version}-*.whl")):
        if "-py3-none-any" in path.name or (f"-{tag}-" in path.name and TARGET_PLATFORM in path.name):
            return path
    return None


def download_wheel(pip_python: str, version: str, wheel_dir: Path) -> Path:
    """The release's wheel in wheel_dir, downloaded with pip unless it is there already.

    Under an exclusive lock of wheel_dir: pip writes the file in place, so a second caller (another
    pytest-xdist worker on a fresh CI machine) looking while it is written would open half a zip."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with open(wheel_dir / ".download.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_wheel(wheel_dir, version)
        if found is None:
            proc = subprocess.run(
                download_argv(pip_python, version, wheel_dir),
                capture_output=True,
                text=True,
                timeout=DOWNLOAD_TIMEOUT,
                check=False,
            )
            found = find_wheel(wheel_dir, version)
            if proc.returncode != 0 or found is None:
                failed = f"pip download sglang=={version} failed (rc {proc.returncode})"
                sys.exit(f"{failed}:\n{proc.stderr[-3000:]}")
    return found


def wheel_version(wheel: Path) -> str:
    """The release a wheel holds, from its file name (sglang-<version>-<tags>.whl)."""
    return wheel.name.split("-")[1]


def extract_actions(python: str, wheel: Path) -> list[dict]:
    """The parser actions of the wheel's own server_args.py, read in a process of python."""
    # SGLang's own environment variables can change the parser (0.5.23 adds a --sampling-backend choice
    # under SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE): the data is the parser of a plain environment. A fixed
    # hash seed keeps any order derived from a set the same from run to run.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SGLANG_", "SGL_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)
    # The child runs in the temp dir: a relative path to python would point there (no resolve(): a venv's
    # python is a symlink whose venv is known by the link's own path).
    python = os.path.abspath(python) if os.sep in python else python
    with tempfile.TemporaryDirectory(prefix="sglang-wheel-") as root:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(root)
        proc = subprocess.run(
            [python, "-c", EXTRACT_SCRIPT, root],
            capture_output=True,
            text=True,
            timeout=EXTRACT_TIMEOUT,
            env=env,
            cwd=root,
            check=False,
        )
        marked = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
        if proc.returncode != 0 or not marked:
            sys.exit(
                f"reading the parser of {wheel.name} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
            )
        result = json.loads(marked[-1][len(RESULT_MARK) :])
        # The release's own files, not an installed sglang, must have been imported.
        if not Path(result["sglang_file"]).resolve().is_relative_to(Path(root).resolve()):
            sys.exit(f"{python} imported sglang from {result['sglang_file']}, not from {wheel.name}")
    return result["actions"]


# ---------------------------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="python with torch and SGLang's parser import deps")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="an SGLang wheel file")
    source.add_argument("--version", help="an SGLang release, downloaded with pip")
    parser.add_argument("--wheel-dir", type=Path, default=Path(".cache/sglang-wheels"))
    parser.add_argument("--pip-python", default=sys.executable, help="python whose pip downloads the wheel")
    parser.add_argument("--out", type=Path, required=True, help="data/sglang_flags/<version>.json")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff on change")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wheel = args.wheel or download_wheel(args.pip_python, args.version, args.wheel_dir)
    version = wheel_version(wheel)
    if args.version and version != args.version:
        sys.exit(f"{wheel.name} holds {version}, not {args.version}")
    text = render_json(extract_actions(args.python, wheel), version, wheel.name, sha256_of(wheel))
    if args.check:
        diff = compare(args.out, text)
        if diff:
            sys.stdout.write(diff)
            return 1
        print(f"{args.out}: up to date ({wheel.name})")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"{args.out}: {len(json.loads(text)['flags'])} flags of SGLang {version} ({wheel.name})")
    for line in report_renames(args.out.parent):
        print("rename:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
