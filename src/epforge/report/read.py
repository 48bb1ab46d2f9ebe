"""Read and save the recorded results: epforge's local facts from ansible_local or from a directory of saved
facts (DIR/HOST/epforge_NAME.fact), as {host: {NAME: fact}} with NAME the fact's name without `epforge_`.

A fact is trusted only as far as it was checked: one that cannot be read, is not JSON, is not a JSON object,
is nested deeper than MAX_DEPTH or is not a regular file (a FIFO, a device, a link to one) is skipped and
named (`skipped`), and the report goes on with the rest. A host's name becomes one path component
(host_file_name), so no inventory name writes outside the output directory."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from urllib.parse import quote, unquote

# Deeper than any fact epforge records (a few levels); far below what json and the renderers recurse into.
MAX_DEPTH = 64
# Larger than any fact epforge records (a bench history is some KiB); a bigger file is not read whole.
MAX_BYTES = 64 * 2**20
FACT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def host_file_name(host: str) -> str:
    """host as one file name, never a path: every character but letters, digits and `_.-~` percent-encoded
    (`/` included) and a leading `.` too, so `..`, `../../x` and `.hidden` stay inside the directory.
    load_fact_dir turns it back into the host's name (unquote)."""
    name = quote(str(host), safe="")
    return "%2E" + name[1:] if name.startswith(".") else name or "%00"


def depth_problem(value) -> str:
    """Why a fact's value is not a fact ('' when it is one): a JSON object nested at most MAX_DEPTH deep."""
    if not isinstance(value, dict):
        kind = {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
        return f"a JSON {kind}, not an object"
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return ""


def _describe(path: Path) -> str:
    """The path, and where it points when it is a symlink."""
    if path.is_symlink():
        try:
            return f"{path} (a link to {os.readlink(path)})"
        except OSError:
            return f"{path} (a link)"
    return str(path)


def read_fact(path: Path):  # noqa: PLR0911 - one return per reason a file is not a fact
    """(fact, '') or (None, why it is not one): a regular file (links followed), at most MAX_BYTES, UTF-8
    JSON, an object at most MAX_DEPTH deep. O_NONBLOCK: a FIFO cannot hang the report."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return None, "not a regular file"
        try:
            data = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            return None, f"cannot be read ({exc.strerror or exc})"
    if len(data) > MAX_BYTES:
        return None, f"larger than {MAX_BYTES // 2**20} MiB"
    try:
        fact = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not JSON (not UTF-8 text)"
    except RecursionError:
        return None, f"nested more than {MAX_DEPTH} levels deep"
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    problem = depth_problem(fact)
    return (None, problem) if problem else (fact, "")


def _report(skipped: list[str] | None, line: str) -> None:
    if skipped is None:
        print(line, file=sys.stderr)
    else:
        skipped.append(line)


def load_fact_dir(directory: str | Path, skipped: list[str] | None = None) -> dict[str, dict]:
    """Facts saved as DIR/HOST/epforge_NAME.fact (or .json) -> {host: {NAME: fact}}. A fact that is not
    one (read_fact) is left out, with a line in skipped (stderr when it is None) naming its file and why."""
    hosts: dict[str, dict] = {}
    base = Path(directory)
    if not base.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory of saved facts (DIR/HOST/epforge_NAME.fact)")
    for host_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        facts = {}
        try:
            paths = sorted(host_dir.iterdir())
        except OSError as exc:
            _report(skipped, f"skipped {_describe(host_dir)}: cannot be listed ({exc.strerror or exc})")
            continue
        for path in paths:
            if path.suffix not in (".fact", ".json") or not path.stem.startswith("epforge_"):
                continue
            fact, problem = read_fact(path)
            if problem:
                _report(skipped, f"skipped {_describe(path)}: {problem}")
                continue
            facts[path.stem[len("epforge_") :]] = fact
        if facts:
            hosts[unquote(host_dir.name)] = facts
    return hosts


def from_ansible_local(ansible_local: dict, host: str = "", skipped: list[str] | None = None) -> dict:
    """ansible_local (setup's local facts) -> {NAME: fact} for the epforge_* facts. One that is not a JSON
    object nested at most MAX_DEPTH deep (setup gives a fact file that is not JSON as a string) or whose
    name is not a plain file name is left out with a line in skipped naming host and fact."""
    facts = {}
    for key, value in (ansible_local or {}).items():
        if not str(key).startswith("epforge_"):
            continue
        problem = "" if FACT_NAME.fullmatch(key) else "not a plain fact name"
        problem = problem or depth_problem(value)
        if problem:
            _report(skipped, f"skipped {host or '?'}: local fact {key!r}: {problem}")
            continue
        facts[key[len("epforge_") :]] = value
    return facts


def save_fact_dir(hosts: dict[str, dict], directory: str | Path) -> None:
    """Each host's facts as DIR/host_file_name(HOST)/epforge_NAME.fact: always inside DIR."""
    for host, facts in hosts.items():
        host_dir = Path(directory) / host_file_name(host)
        host_dir.mkdir(parents=True, exist_ok=True)
        for name, fact in facts.items():
            (host_dir / f"epforge_{host_file_name(name)}.fact").write_text(
                json.dumps(fact, indent=1, sort_keys=True) + "\n"
            )
