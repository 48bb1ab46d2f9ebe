"""Whether an installed distribution's files changed since it was verified, told from file states only.

A stamp that says "torch imports, CUDA 13.0, sm_120" stays true only while torch's files are the ones that
were imported. Hashing them (torch and its NVIDIA libraries: gigabytes) on every rerun costs too much, and
their dist-info names say nothing about a deleted __init__.py or a truncated library. So the state (size,
mtime_ns, ctime_ns, inode) of a few paths per distribution stands for its files:
- its top-level directories (torch/: its __init__.py deleted or renamed changes it) and each directory that
  holds one of its native libraries;
- every native library it ships (.so): one truncated or rewritten in place changes only itself;
- its RECORD (a reinstall rewrites it).
- for the distribution itself (torch, not its requirements), every directory that holds one of its .py or
  native files (torch/nn/modules/: linear.py deleted or renamed changes it; 368 directories for torch 2.14).
And, apart from the digest, record_problems checks every .py and native file the RECORD lists against the
size the RECORD records (one stat per file, ~2,450 for torch, ~25 ms, no import): a file missing or cut
short or grown is found even when no directory state changed.
Not seen (the docs say so): a .py file edited in place with its size kept (only importing or hashing would
see it; `verify: full` is not offered for torch because a reinstall is the remedy either way).

Used by ml_env_torch (library/ml_env_torch.py): a changed digest makes it import torch again before it
trusts its stamp; the same paths go into its probe-cache `watch` list.
"""

from __future__ import annotations

import glob
import os

from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    dist_info_name_version,
    normalize,
    requirement_name,
)


def dist_info(site: str, name: str) -> str | None:
    """The .dist-info directory of distribution `name` in site, or None."""
    wanted = normalize(name)
    for path in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
        if (dist_info_name_version(path) or ("",))[0] == wanted:
            return path
    return None


def requirements(info_dir: str) -> list[str]:
    """The names a distribution requires unconditionally (Requires-Dist without an extra)."""
    names = []
    try:
        with open(os.path.join(info_dir, "METADATA"), encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first blank line
                if line.startswith("Requires-Dist:") and "extra ==" not in line:
                    names.append(requirement_name(line.split(":", 1)[1]))
    except OSError:
        pass
    return names


def _record_entries(site: str, info_dir: str) -> list[tuple[str, int | None]]:
    """(path, recorded size or None) for each file the RECORD lists inside site."""
    entries = []
    try:
        with open(os.path.join(info_dir, "RECORD"), encoding="utf-8") as handle:
            for line in handle:
                parts = line.rstrip("\n").rsplit(",", 2)
                if len(parts) != 3 or not parts[0] or parts[0].startswith(".."):
                    continue
                size = int(parts[2]) if parts[2].isdigit() else None
                entries.append((os.path.normpath(os.path.join(site, parts[0])), size))
    except OSError:
        pass
    return entries


def _is_code(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith((".py", ".so")) or ".so." in name


def record_problems(site: str, name: str, limit: int = 3) -> list[str]:
    """The distribution's .py and native files that are missing or whose size differs from its RECORD's
    (at most `limit` named, then a count); empty when all match or the RECORD cannot be read."""
    info_dir = dist_info(site, name)
    if info_dir is None:
        return []
    problems = []
    for path, size in _record_entries(site, info_dir):
        if size is None or not _is_code(path):
            continue
        try:
            have = os.stat(path).st_size
        except OSError:
            problems.append(f"{os.path.relpath(path, site)} is missing")
            continue
        if have != size:
            problems.append(f"{os.path.relpath(path, site)} is {have} bytes, its RECORD says {size}")
    if len(problems) > limit:
        problems[limit:] = [f"{len(problems) - limit} more"]
    return problems


def _code_dirs(site: str, info_dir: str) -> set[str]:
    """The directories holding the distribution's .py and native files (a file deleted there changes them)."""
    return {os.path.dirname(path) for path, _unused in _record_entries(site, info_dir) if _is_code(path)}


def _record_paths(site: str, info_dir: str) -> list[str]:
    """The distribution's top-level directories and the directories of its native libraries (a file deleted,
    added or renamed there changes them), the native libraries themselves (one truncated or rewritten in
    place changes only itself), and its RECORD."""
    record = os.path.join(info_dir, "RECORD")
    paths = {record}
    try:
        with open(record, encoding="utf-8") as handle:
            for line in handle:
                rel = line.rsplit(",", 2)[0]
                if not rel:
                    continue
                path = os.path.normpath(os.path.join(site, rel))
                top = os.path.join(site, rel.split("/", 1)[0])
                if top != path:
                    paths.add(top)
                name = os.path.basename(path)
                if name.endswith(".so") or ".so." in name:
                    paths.update((path, os.path.dirname(path)))
    except OSError:
        pass
    return sorted(paths)


def integrity_paths(site: str, name: str) -> list[str]:
    """The paths that stand for the files of `name` and of the distributions it requires (installed ones)."""
    paths: set[str] = set()
    seen: set[str] = set()
    queue = [name]
    while queue:
        current = normalize(queue.pop())
        if current in seen:
            continue
        seen.add(current)
        info_dir = dist_info(site, current)
        if info_dir is None:
            continue
        paths.update(_record_paths(site, info_dir))
        if current == normalize(name):
            paths.update(_code_dirs(site, info_dir))
            queue.extend(requirements(info_dir))  # direct requirements only: torch's NVIDIA libs, triton
    return sorted(paths)


def path_states(paths: list[str]) -> list[list]:
    """The state of each path: [path, size, mtime_ns, ctime_ns, inode], or [path, None] when it is missing."""
    states = []
    for path in paths:
        try:
            stat = os.stat(path)
            states.append([path, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino])
        except OSError:
            states.append([path, None])
    return states


def states_digest(paths: list[str]) -> str:
    """The digest (plugins/module_utils/digests.py) of the state of each path."""
    return digest(path_states(paths))
