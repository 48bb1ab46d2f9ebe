"""Do two runs record the same facts? The local facts of two clean-state runs (bench/first_run.py --facts),
the fields that differ on every run masked by a declared list, each with its reason (issue 40: behaviour does
not change across the refactor, except where a change is declared).

    .venv/bin/python bench/facts_diff.py before.json after.json

Prints every difference left after the masks, grouped by fact file, and exits 1 when there is one: a fact
added or gone, a field added, gone or of another value. A field is named by its path (fact/key/0/key).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from pathlib import Path

# Field names (the last part of a path, fnmatch) whose values differ on every run, and why.
MASKED = {
    "*_s": "a duration in seconds",
    "*seconds*": "a duration",
    "*_at": "a time stamp",
    "since": "a time stamp",
    "started*": "a time stamp",
    "finished*": "a time stamp",
    "time": "a time stamp",
    "timestamp": "a time stamp",
    "date": "a time stamp",
    "recorded": "a time stamp",
    "mtime*": "a file time",
    "pid": "a process id",
    "*_pid": "a process id",
    "boot_id": "the container's boot",
    "run_id": "an id of the run",
    "hostname": "the container's name",
    "inode": "a file's inode",
    "history_id": "an id of the run (its time and a random part)",
    "seed": "the workload's seed, drawn for each run",
}
# Paths (fnmatch over the path within a fact) whose values differ on every run, and why.
MASKED_PATHS = {
    "*figures/*": "a measured figure (the stand-in's own timing varies from run to run)",
    "history/*/id": "an id of the run (its time and a random part)",
    "last*/id": "an id of the run (its time and a random part)",
}


# Changes declared on purpose (path pattern, fnmatch over the whole path), and why.
DECLARED = {
    "configurations/*/settings_digest": (
        "a sweep configuration's launch digest: stop 50's canonical layout, over a launch whose port "
        "differs on every run and which the facts do not hold whole (only the last server's), not recomputed"
    ),
    "history/*/server/env": (
        "a sweep configuration without env records no empty env in its benchmark's server (filter "
        "tune_settings, the tuner's one rule, leaves it out; the launch and its digest are the same)"
    ),
    "checks/5/detail": (
        "preflight's disk check (the sixth, checks are in a fixed order) says what the space is enough for "
        "whatever the run (98e08e6: provision and serve wrote two texts, so each rewrote the other's fact)"
    ),
    "known_issues/warnings/*/consequence": (
        "the known-issues table's text (data/known_issues.yml: the DeepGEMM-on-SM120 consequence names the "
        "release since SGLang 0.5.23 changed it)"
    ),
}


def server_objects(value):
    """Every dict in value that is a server settings object's launch (sglang_version, argv, env, digest)."""
    if isinstance(value, dict):
        if {"sglang_version", "argv", "env", "digest"} <= set(value):
            yield value
        for item in value.values():
            yield from server_objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from server_objects(item)


def launch_digests(after: dict) -> dict[str, str]:
    """{old digest: new digest} for every server launch the new run recorded whose digest is in the canonical
    layout (stop 50: sorted JSON with spaces -> canonical JSON): the old layout of the same launch gives the
    digest the older run recorded for it. Short forms (12 characters, as messages and names show them) too."""
    pairs = {}
    for launch in server_objects(after):
        data = {k: launch[k] for k in ("sglang_version", "argv", "env")}
        spaced = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        canonical = hashlib.sha256(
            json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        if launch["digest"] == canonical and spaced != canonical:
            pairs[spaced] = canonical
            pairs[spaced[:12]] = canonical[:12]
    return pairs


def relaid_out(old, new, pairs: dict[str, str]) -> bool:
    """Whether old becomes new once each older-layout digest in it is written in the canonical layout."""
    if not pairs or not isinstance(old, str) or not isinstance(new, str):
        return False
    for spaced in sorted(pairs, key=len, reverse=True):
        old = old.replace(spaced, pairs[spaced])
    return old == new


# What differs between two runs of one test by construction, not by behaviour (bench/scenario_facts.py: each
# run gets its own temporary folders and a free port), written the same way in both before they are compared.
RUN_PATHS = (
    (re.compile(r"/tmp/(epforge-[a-z-]+?-)[a-z0-9_]{8}(?![a-z0-9_])"), r"/tmp/\1<tmp>"),
    (re.compile(r"/tmp/pytest-of-\w+/pytest-\d+"), "<pytest-tmp>"),
    (re.compile(r"(/tuning(?:-[\w-]+)?/)[0-9a-f]{16}\.json"), r"\1<plan digest>.json"),
    # in messages: the pid of a server that exited, a measured figure
    (re.compile(r"\bprocess \d+\b"), "process <pid>"),
    (re.compile(r"\b\d+(?:\.\d+)? tok/s\b"), "<figure> tok/s"),
    (re.compile(r"\bgenerated \d+ output tokens\b"), "generated <count> output tokens"),
)


def layouts(launch: dict) -> dict[str, str]:
    """{digest: layout} of a launch (sglang_version, argv, env): the spaced (older) and canonical layouts."""
    data = {k: launch[k] for k in ("sglang_version", "argv", "env")}
    return {
        hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest(): "spaced",
        hashlib.sha256(
            json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest(): "canonical",
    }


def normalized(facts: dict) -> tuple[dict, dict[str, int]]:
    """(facts with each run's own paths, ports and launch digests written alike, {layout: digests seen}). A
    launch's digest becomes <launch NAME>, NAME naming the launch once paths and ports are alike, so two runs
    of one launch compare equal whatever their port; the layouts are counted (stop 50's relayout)."""
    ports = {str(o["settings"]["port"]) for o in server_objects(facts) if "port" in (o.get("settings") or {})}
    digests, counted = {}, {"spaced": 0, "canonical": 0}
    for launch in server_objects(facts):
        layout = layouts(launch).get(launch["digest"])
        if not layout:
            continue
        counted[layout] += 1
        alike = json.dumps({k: launch[k] for k in ("sglang_version", "argv", "env")}, sort_keys=True)
        for pattern, replacement in RUN_PATHS:
            alike = pattern.sub(replacement, alike)
        for port in ports:
            alike = re.sub(rf"\b{port}\b", "<port>", alike)
        name = hashlib.sha256(alike.encode()).hexdigest()[:8]
        digests[launch["digest"]] = f"<launch {name}>"
        digests[launch["digest"][:12]] = f"<launch {name}>"

    def alike(value):
        if isinstance(value, dict):
            return {key: alike(item) for key, item in value.items()}
        if isinstance(value, list):
            return [alike(item) for item in value]
        if isinstance(value, int) and not isinstance(value, bool) and str(value) in ports:
            return "<port>"
        if not isinstance(value, str):
            return value
        for digest in sorted(digests, key=len, reverse=True):
            value = value.replace(digest, digests[digest])
        for pattern, replacement in RUN_PATHS:
            value = pattern.sub(replacement, value)
        for port in ports:
            value = re.sub(rf"(?<![\w.]){port}(?![\w.])", "<port>", value)
        return value

    return alike(facts), counted


def flatten(value, path: str = "") -> dict[str, object]:
    """{path: leaf value} of nested dicts and lists."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}/{key}" if path else str(key)))
        return out or {path: {}}
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{path}/{index}"))
        return out or {path: []}
    return {path: value}


def mask_of(path: str) -> str:
    """The reason a path's value is masked ('' when it is compared)."""
    for pattern, reason in MASKED_PATHS.items():
        if fnmatch.fnmatch(path, pattern):
            return reason
    for part in reversed(path.split("/")):
        if part.isdigit():
            continue
        for pattern, reason in MASKED.items():
            if fnmatch.fnmatch(part, pattern):
                return reason
        return ""
    return ""


def differences(before: dict, after: dict) -> tuple[list[str], int, list[str]]:
    """(the differences left, how many differing fields the masks covered, the declared ones)."""
    found, masked, declared = [], 0, []
    relayout = launch_digests(after)
    for fact in sorted(set(before) | set(after)):
        if fact not in after or fact not in before:
            found.append(f"{fact}: {'gone' if fact not in after else 'added'}")
            continue
        a, b = flatten(before[fact]), flatten(after[fact])
        for path in sorted(set(a) | set(b)):
            old, new = a.get(path, "<absent>"), b.get(path, "<absent>")
            if old == new:
                continue
            if mask_of(path):
                masked += 1
                continue
            line = f"{fact}: {path}: {old!r} -> {new!r}"
            if relaid_out(old, new, relayout):
                declared.append(f"{fact}: {path}: the same launch's digest in the canonical layout (stop 50)")
            elif any(fnmatch.fnmatch(path, pattern) for pattern in DECLARED):
                declared.append(line)
            else:
                found.append(line)
    return found, masked, declared


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
    (before, counted_before), (after, counted_after) = normalized(before), normalized(after)
    found, masked, declared = differences(before, after)
    print(
        "each run's own temporary folders, port and plan digest written alike; server launch digests: "
        f"before {counted_before}, after {counted_after} (by layout; stop 50 made the canonical one)"
    )
    print(f"{len(before)} fact files before, {len(after)} after; {masked} differing fields masked:")
    for pattern, reason in {**MASKED, **MASKED_PATHS}.items():
        print(f"  {pattern:<12} {reason}")
    print(f"{len(declared)} declared change(s):")
    for pattern, reason in DECLARED.items():
        print(f"  {pattern}: {reason}")
    for line in declared:
        print(f"  {line[:300]}")
    print(f"{len(found)} difference(s) left" + (":" if found else ""))
    for line in found:
        print(f"  {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
