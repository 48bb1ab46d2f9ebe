"""The hash of content: bytes, a file, a source tree. One recipe each, one list of what a tree leaves out.

(The digest of JSON data - inputs, stamps - is plugins/module_utils/digests.py's.)

A tree's hash is its revision: sha256 over (relative path, executable bit or link, content hash) of every
file that makes up the source, build products, VCS metadata and caches left out (TREE_EXCLUDE_*). The same
exclusions decide what a build copies (tree_ignore). Used by the cuda_extension, deepep and wheelhouse
modules and the collective probe; unit-tested in tests/unit/test_content_hashes.py.
"""

from __future__ import annotations

import hashlib
import os
import stat

# Paths that never belong to a source's identity: build products, VCS metadata, caches.
TREE_EXCLUDE_DIRS = frozenset(
    {".git", ".hg", ".svn", "build", "dist", "__pycache__", ".eggs", ".pytest_cache", ".tox", ".venv"}
)
TREE_EXCLUDE_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".egg-info")
CHUNK = 1 << 20


def bytes_sha256(data: bytes) -> str:
    """sha256 (hex) of bytes: what a file holding exactly them hashes to."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str) -> str:
    """sha256 (hex) of a file's content, read in 1 MiB blocks (no hashlib.file_digest: hosts may run a
    Python older than 3.11)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def excluded(name: str, is_dir: bool) -> bool:
    """Whether a directory or file of this name is left out of a tree."""
    return (is_dir and name in TREE_EXCLUDE_DIRS) or name.endswith(TREE_EXCLUDE_SUFFIXES)


def tree_files(root: str) -> list[str]:
    """Relative paths of the files that make up a source tree (sorted; build products excluded)."""
    found = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not excluded(d, True))
        for name in files:
            if excluded(name, False):
                continue
            full = os.path.join(current, name)
            if os.path.islink(full) or os.path.isfile(full):
                found.append(os.path.relpath(full, root))
    return sorted(found)


def tree_hash(root: str) -> str:
    """sha256 over (path, executable bit or link, content hash) of every source file: a tree's revision."""
    digest = hashlib.sha256()
    for rel in tree_files(root):
        full = os.path.join(root, rel)
        if os.path.islink(full):
            content = "link:" + os.readlink(full)
            mode = "l"
        else:
            content = file_sha256(full)
            mode = "x" if os.stat(full).st_mode & stat.S_IXUSR else "-"
        digest.update(f"{rel}\0{mode}\0{content}\n".encode())
    return digest.hexdigest()


def tree_ignore(directory: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: what tree_files leaves out (a build copies the tree its hash names)."""
    return {name for name in names if excluded(name, os.path.isdir(os.path.join(directory, name)))}
