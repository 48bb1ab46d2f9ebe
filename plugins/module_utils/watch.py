"""What a probe's answer depends on, as paths: the `watch` list a probe module returns with its no-op answer,
and the file states a stamp compares.

The probe cache (plugins/action/probe_cache.py) reuses a probe's recorded answer while the module args
are the same and no watched path changed (size, mtime_ns, ctime_ns, inode, or existence). So a watch list
names every file or directory the answer depends on: the binaries the module runs (as given, and the file
they resolve to), the stamps, caches and local facts it reads or writes, the directories it ensures, and
where an env's installed distributions live (an install, upgrade or uninstall adds or removes a .dist-info
directory there, which changes the directory's own state). A file edited inside a watched directory is not
seen: a file whose content matters is watched itself.

Used by final_env_check (its own stamp: file_states, record_files), flashinfer_probe, deepep_prebuilt,
sglang_install, cuda_toolkit_verify, ml_env_torch and cuda_extension_plan; unit-tested in
tests/unit/test_watch.py.
"""

from __future__ import annotations

import os

from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import python_layout

# Variables that move where a python finds its distributions. The probe cache's key holds the task's
# environment but not the login environment a module inherits, and a module cannot tell the two apart: when
# one of these is set, where the env's distributions live is not a question of files alone.
IMPORT_PATH_VARIABLES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONPLATLIBDIR",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
)

# Run by the env's python, as the probes' own scripts run it (no -I: the same sys.path they see).


def watch_list(*groups) -> list[str]:
    """One sorted list of distinct absolute paths from groups of paths (empty names left out)."""
    return sorted({os.path.abspath(p) for group in groups for p in group if p})


# Longest chain of symlinks binary_paths follows hop by hop (the kernel's own limit is 40).
MAX_LINK_HOPS = 40


def binary_paths(path: str) -> list[str]:
    """A binary as the module runs it, every symlink it resolves through and the file it resolves to: a
    symlink pointed elsewhere changes the first (or a hop: venv/bin/python -> python3 -> /usr/bin/python3.11),
    a file replaced in place the last. The hops count when a cache compares the links themselves (lstat)."""
    if not path:
        return []
    chain = [path]
    current = os.path.abspath(path)
    for _unused in range(MAX_LINK_HOPS):
        if not os.path.islink(current):
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
        chain.append(current)
    chain.append(os.path.realpath(path))
    return list(dict.fromkeys(chain))


def import_paths(python: str, timeout: float = 60) -> list[str] | None:
    """Where `python` looks for installed distributions (importlib.metadata reads every sys.path entry: the
    purelib and platlib site dirs, a user site, .pth additions), its prefix's pyvenv.cfg (which says whether
    the system site-packages count) and the python itself; None when that cannot be told from files (an
    import-path variable is set, or the python does not answer)."""
    if any(os.environ.get(name) for name in IMPORT_PATH_VARIABLES):
        return None
    seen = run_payload(python, python_layout, timeout=timeout).answer
    if not isinstance(seen, dict):
        return None
    # '' is the module's working directory (python -c), not a place the env's distributions live
    entries = [os.path.realpath(p) for p in seen["path"] if p]
    return [*binary_paths(python), os.path.join(seen["prefix"], "pyvenv.cfg"), *entries]


def file_states(paths) -> dict[str, list[int]]:
    """{path: [size, mtime_ns]} for each path ([-1, -1] when it is missing)."""
    states = {}
    for path in sorted(set(paths)):
        try:
            stat = os.stat(path)
            states[path] = [stat.st_size, stat.st_mtime_ns]
        except OSError:
            states[path] = [-1, -1]
    return states


def record_files(site_dirs: list[str]) -> list[str]:
    """The site dirs and the RECORD (or, for egg-info, PKG-INFO) of every distribution installed in them."""
    found = list(site_dirs)
    for base in site_dirs:
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".dist-info"):
                found.append(os.path.join(entry.path, "RECORD"))
            elif entry.name.endswith(".egg-info"):
                found.append(os.path.join(entry.path, "PKG-INFO"))
    return found
