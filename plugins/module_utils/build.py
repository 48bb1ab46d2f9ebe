"""Build evidence for epforge: input keys, stamps and an atomic wheel cache (content hashes:
plugins/module_utils/content_hashes.py).

Pure functions (plus small file helpers) shared by the ml_env and cuda_extension modules and unit-tested
directly. The rule they implement: a build or install is skipped only when a stamp of *every* input
matches, and a build that dies half-way leaves neither a stamp nor a wheel behind.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tarfile
import tempfile
import zipfile

from ansible_collections.epforge.ep.plugins.module_utils.arch import torch_arch_list
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, replace_dir
from ansible_collections.epforge.ep.plugins.module_utils.pynames import dist_info_name_version, normalize

KEY_LENGTH = 20
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar", ".zip")
GIT_URL_RE = re.compile(r"^(https?://|git://|ssh://|git@|file://).+|.+\.git/?$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


# ---------------------------------------------------------------- keys and canonical forms


def input_key(inputs: dict, length: int = KEY_LENGTH) -> str:
    """The cache key of a build: the digest of every input (plugins/module_utils/digests.py), shortened."""
    return digest(inputs)[:length]


def cuda_major(version: str) -> int | None:
    match = re.match(r"\s*(\d+)", str(version or ""))
    return int(match.group(1)) if match else None


def python_tag(major: int, minor: int, implementation: str = "cpython") -> str:
    prefix = {"cpython": "cp", "pypy": "pp"}.get(implementation, implementation[:2])
    return f"{prefix}{major}{minor}"


# ---------------------------------------------------------------- sources


def source_kind(source: str) -> str:
    """'git', 'archive' or 'dir' for a cuda_extension source."""
    text = str(source).strip()
    if text.lower().endswith(ARCHIVE_SUFFIXES) and not text.startswith(("http://", "https://")):
        return "archive"
    if GIT_URL_RE.match(text):
        return "git"
    return "dir"


def safe_extract(archive_path: str, dest: str) -> None:
    """Unpack a tar archive refusing members that escape dest (absolute paths, '..', links out of it).

    Uses tarfile's 'data' filter where the Python has it (3.11.4+, 3.12); Debian bookworm's 3.11.2 does not,
    so the same checks are made here first.
    """
    root = os.path.realpath(dest)
    with tarfile.open(archive_path) as archive:
        members = archive.getmembers()
        for member in members:
            target = os.path.realpath(os.path.join(root, member.name))
            if target != root and not target.startswith(root + os.sep):
                raise ValueError(f"archive member {member.name} lies outside the destination")
            if member.issym() or member.islnk():
                link_base = os.path.dirname(target) if member.issym() else root
                link = os.path.realpath(os.path.join(link_base, member.linkname))
                if not link.startswith(root + os.sep):
                    raise ValueError(f"archive member {member.name} links outside the destination")
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                raise ValueError(f"archive member {member.name} is a device or fifo")
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, members=members, filter="data")
        else:
            archive.extractall(dest, members=members)  # noqa: S202  (every member checked above)


# ---------------------------------------------------------------- stamps and atomic files


def stamp_matches(stamp: dict | None, key: str, required_files=()) -> tuple[bool, str]:
    """Whether a stamp proves the work with this key is done; the reason when it does not."""
    if not stamp:
        return False, "no stamp"
    if stamp.get("key") != key:
        return False, f"inputs changed (stamp key {stamp.get('key')}, wanted {key})"
    for path in required_files:
        if not os.path.exists(path):
            return False, f"{path} is missing"
    return True, "stamp matches"


# ---------------------------------------------------------------- the wheel cache

MANIFEST = "manifest.json"


def cache_entry(entry_dir: str, verify_hash: bool = True) -> dict | None:
    """The manifest of a complete cache entry (wheel present, hash right), else None."""
    manifest = read_json(os.path.join(entry_dir, MANIFEST))
    if not manifest or not manifest.get("wheel"):
        return None
    wheel = os.path.join(entry_dir, manifest["wheel"])
    if not os.path.isfile(wheel):
        return None
    if verify_hash and file_sha256(wheel) != manifest.get("sha256"):
        return None
    return manifest


def make_manifest(wheel_path: str, key: str, inputs: dict, extra: dict | None = None) -> dict:
    manifest = {
        "key": key,
        "wheel": os.path.basename(wheel_path),
        "sha256": file_sha256(wheel_path),
        "inputs": inputs,
        "so_members": wheel_so_members(wheel_path),
    }
    manifest.update(extra or {})
    return manifest


def staging_dir(parent: str, key: str) -> str:
    """A fresh temp directory next to the final one (same file system, so rename is atomic)."""
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=parent)


def publish_dir(tmp_dir: str, final_dir: str) -> bool:
    """Atomically move a complete staging dir into place. Return True when this call published it.

    When another run published the same key first, the staging dir is discarded (same inputs, same wheel).
    """
    if cache_entry(final_dir, verify_hash=False):
        shutil.rmtree(tmp_dir, ignore_errors=True)
        return False
    try:
        # an incomplete entry there (from an older, non-atomic writer) is replaced
        replace_dir(tmp_dir, final_dir)
    except OSError:
        if cache_entry(final_dir, verify_hash=False):
            return False  # another run published it meanwhile (replace_dir removed tmp_dir)
        raise
    return True


def clean_stale_staging(parent: str) -> list[str]:
    """Remove staging dirs left by killed builds; return what was removed."""
    removed = []
    for path in glob.glob(os.path.join(parent, ".tmp-*")):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


# ---------------------------------------------------------------- wheels


def wheel_so_members(wheel_path: str) -> list[str]:
    """Paths (relative to site-packages) of the shared objects inside a wheel."""
    with zipfile.ZipFile(wheel_path) as archive:
        names = archive.namelist()
    return sorted(n for n in names if re.search(r"\.so(\.\d+)*$", n) and ".data/" not in n.split("/")[0])


def find_wheels(directory: str) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "*.whl")))


def dist_info_version(site_dir: str, dist: str) -> str | None:
    """The version of an installed distribution read from its dist-info directory name (no import)."""
    norm = normalize(dist)
    for path in glob.glob(os.path.join(site_dir, "*.dist-info")):
        found = dist_info_name_version(path)
        if found and found[0] == norm:
            return found[1]
    return None


# ---------------------------------------------------------------- build failures

ERROR_LINE_RE = re.compile(
    r"(\berror\b|\bfatal\b|not found|No such file|undefined reference|Killed signal|out of memory|"
    r"Unsupported gpu architecture|requires|refuses|mismatch)",
    re.IGNORECASE,
)
# pip -v prints its setup.py shim (which mentions errors) and its own summary: not the cause.
ERROR_NOISE_RE = re.compile(
    r"(ImportError as error|ERROR: Can not execute|subprocess-exited-with-error|Failed building wheel|"
    r"Failed to build|originates from a subprocess|error: command .* failed with exit code|"
    r"^\s*(raise|File \"|subprocess\.CalledProcessError)|Running setup\.py clean)",
    re.IGNORECASE,
)


def error_lines(log_text: str, limit: int = 15) -> list[str]:
    """The lines of a build log that name the cause (compiler errors, missing tools), first ones first.

    Only the last build in the log counts (after its last '=== ' header line).
    """
    marker = log_text.rfind("\n=== ")
    section = log_text[marker + 1 :] if marker >= 0 else log_text
    found = []
    for line in section.splitlines():
        text = line.strip()
        if text and ERROR_LINE_RE.search(text) and not ERROR_NOISE_RE.search(text) and text not in found:
            found.append(text[:400])
            if len(found) >= limit:
                break
    return found


# ---------------------------------------------------------------- build settings


def auto_max_jobs(cpus: int | None, mem_bytes: int | None, cap: int = 16, gib_per_job: float = 3.0) -> int:
    """MAX_JOBS bounded by CPUs, memory (nvcc jobs of torch extensions take 2-3 GiB each) and a cap."""
    bound = [cap, max(1, cpus or 1)]
    if mem_bytes:
        bound.append(max(1, int(mem_bytes / (gib_per_job * 1024**3))))
    return max(1, min(bound))


def build_env(
    base: dict,
    *,
    cuda_home: str,
    archs,
    max_jobs: int,
    extra_env: dict | None = None,
    include_dirs=(),
    tool_dirs=(),
) -> dict:
    """The environment of an extension build: toolchain, arch list, job bound, then the caller's extras.
    tool_dirs follow the toolkit's bin on PATH: the env's own bin, whose ninja (role ml_env installs it)
    torch's build needs - without one on PATH it falls back to its slow serial backend (2026-12-05: a fresh
    Debian 12 has no ninja of its own)."""
    env = dict(base)
    env["CUDA_HOME"] = cuda_home
    env["CUDA_PATH"] = cuda_home
    env["PATH"] = os.pathsep.join(
        [os.path.join(cuda_home, "bin"), *[str(d) for d in tool_dirs], env.get("PATH", "/usr/bin:/bin")]
    )
    env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(archs)
    env["MAX_JOBS"] = str(max_jobs)
    if include_dirs:
        parts = [str(d) for d in include_dirs] + ([env["CPATH"]] if env.get("CPATH") else [])
        env["CPATH"] = os.pathsep.join(parts)
    for name, value in (extra_env or {}).items():
        env[str(name)] = str(value)
    return env
