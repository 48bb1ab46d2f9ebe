"""Files that readers must see whole: the one atomic write in epforge, and the one swap of a directory.

The rule: write to a temp file with a unique name beside the target (two writers never share one), set its
final mode (and owner) before it holds data, fsync it, rename it over the target, fsync the directory. A
reader sees the old file or the new one, never a part; an interrupted writer leaves only a temp file named
`.<target>.tmp-*`, which remove_stale_temps() clears. Used for facts, stamps, caches, unit files and the
server's 0600 env file.

A directory (a CUDA_HOME, a build cache entry, the smoke model) is written whole into a staging directory
beside it, then replace_dir() swaps it into place. Unit-tested in tests/unit/test_files.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator


def temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.tmp-"


@contextlib.contextmanager
def atomic_output(
    path: str, mode: int = 0o644, uid: int | None = None, gid: int | None = None
) -> Iterator[str]:
    """Yield a unique temp path beside `path` (created with `mode`, owned by uid:gid when running as root);
    when the block ends without an error it is fsynced and renamed over `path`, else removed."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=directory)
    try:
        os.fchmod(fd, mode)
        if uid is not None and os.geteuid() == 0:
            os.fchown(fd, uid, -1 if gid is None else gid)
        os.close(fd)
        fd = -1
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(
    path: str, data: str | bytes, mode: int = 0o644, uid: int | None = None, gid: int | None = None
) -> None:
    """Write text or bytes to path atomically, with its final mode (and owner, as root) set before it
    appears."""
    payload = data.encode() if isinstance(data, str) else data
    try:
        with atomic_output(path, mode, uid, gid) as tmp, open(tmp, "wb") as handle:
            handle.write(payload)
    except OSError as exc:
        # A write or flush error (ENOSPC, EDQUOT, EIO) carries no file name: name the file it was for, so
        # every message built from it says where (a module's traceback included).
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), path) from exc
        raise


def json_text(data, indent: int = 2, default=None) -> str:
    """The one JSON layout of epforge's files: sorted keys, no NaN, a final newline."""
    return json.dumps(data, indent=indent, sort_keys=True, allow_nan=False, default=default) + "\n"


def write_json_atomic(path: str, data, mode: int = 0o644, indent: int = 2, default=None) -> bool:
    """Write JSON atomically; return False (and write nothing) when the file already holds this content."""
    text = json_text(data, indent=indent, default=default)
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as handle:
        if handle.read() == text:
            return False
    write_atomic(path, text, mode)
    return True


def _remove(path: str) -> None:
    """Remove what is at path (a directory tree, a file or a link), ignoring errors; nothing when absent."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def replace_dir(staging: str, target: str, retired: str | None = None) -> None:
    """Put the complete directory `staging` (written beside target: same file system) at `target`,
    replacing what is there.

    What is at target is renamed aside to `retired`, staging is renamed onto target, then the old one is
    removed. `retired` defaults to staging + '.old', so the caller's clean-up of stale staging dirs also
    removes one a killed run left; one left there is removed first. A reader sees the old directory or the
    new one, except between the two renames, when target is absent. On failure the old one is put back,
    staging is removed, and the error is raised."""
    retired = retired or staging + ".old"
    _remove(retired)
    moved = False
    try:
        if os.path.lexists(target):
            os.rename(target, retired)
            moved = True
        os.rename(staging, target)
    except BaseException:
        if moved and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.rename(retired, target)
        _remove(staging)
        raise
    if moved:
        _remove(retired)


def ensure_directories(paths, mode: int = 0o755, check_mode: bool = False) -> list[str]:
    """Make each directory exist with `mode` (parents as needed), like a file task with state=directory;
    returns the ones created or re-moded (in check mode: the ones that would be), in order, once each."""
    changed = []
    for path in dict.fromkeys(paths):
        try:
            current = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            current = None
        if current == mode:
            continue
        changed.append(path)
        if not check_mode:
            os.makedirs(path, mode=mode, exist_ok=True)
            os.chmod(path, mode)
    return changed


def read_json(path: str) -> dict | None:
    """A JSON object from a file, or None when it is missing, unreadable or no object (a broken stamp = no
    stamp)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_stale_temps(path: str, older_than_s: float = 60.0) -> list[str]:
    """Remove temp files an interrupted writer left beside path (they never replace the target)."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = temp_prefix(path)
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    if now - os.stat(full).st_mtime >= older_than_s:
                        os.unlink(full)
                        removed.append(full)
    return removed
