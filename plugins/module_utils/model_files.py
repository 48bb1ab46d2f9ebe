"""What makes a model directory verified: hashes against a manifest, safetensors headers, every shard the
index names, config and tokenizer files present, and the stamp that lets a rerun skip the hashing.

Two files beside the weights (plain JSON, 0644):
- MANIFEST (`.epforge-model.json`): what the directory must hold - repo, requested revision, commit, source,
  and each file's size and sha256 (and the Hub's git blob id or LFS sha256 it was checked against). Portable:
  the controller source sends it with the files.
- STAMP (`.epforge-verified.json`): this host's verdict - the manifest's digest and each file's (size,
  mtime, inode) when its hash was last checked. A rerun whose files still have those stats is verified by
  stat() alone (the probe); anything else hashes again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import struct

from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    digest,
    digest_matches,
    is_older_layout,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json

MANIFEST = ".epforge-model.json"
STAMP = ".epforge-verified.json"
PARTIAL = ".epforge-partial"
SMOKE_MANIFEST = "epforge-smoke-model.json"  # role smoke_model's manifest: sizes and sha256 of its files
OWN_FILES = (MANIFEST, STAMP)
SCHEMA = 1
CHUNK = 8 << 20
# Weights SGLang loads without unpickling, and the pickle-based formats refused unless allowed.
SAFE_WEIGHTS = ("*.safetensors",)
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
# Any one of these makes a tokenizer SGLang (transformers) can load.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tiktoken.model",
    "vocab.json",
    "tokenizer_config.json",
)
MAX_HEADER = 100 << 20


def hashes(path: str, kinds=("sha256", "blob_id")) -> dict:
    """The file's digests in one read: sha256, and blob_id (git's object id: sha1 of 'blob SIZE\\0' and the
    content), what the Hub reports for files not stored in LFS. Only the kinds asked for are computed."""
    size = os.path.getsize(path)
    digests = {}
    if "sha256" in kinds:
        digests["sha256"] = hashlib.sha256()
    if "blob_id" in kinds:
        digests["blob_id"] = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            for hasher in digests.values():
                hasher.update(chunk)
    return {kind: hasher.hexdigest() for kind, hasher in digests.items()}


def file_problem(path: str, expected: dict) -> tuple[str, dict]:
    """('' or what is wrong, the file's hashes) for a file that must match expected
    {size, sha256?, blob_id?}; the hash is the first of sha256, blob_id that expected has."""
    if not os.path.isfile(path):
        return "missing", {}
    size = os.path.getsize(path)
    if size != expected["size"]:
        return f"{size} bytes, expected {expected['size']}", {}
    kind = "sha256" if expected.get("sha256") else "blob_id" if expected.get("blob_id") else ""
    if not kind:
        return "no hash to check it against", {}
    found = hashes(path, (kind,))
    if expected[kind] != found[kind]:
        return f"{kind} {found[kind][:12]}..., expected {expected[kind][:12]}... (altered or corrupt)", found
    return "", found


def stat_of(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def stats(directory: str, names) -> dict[str, list[int]] | None:
    """{name: [size, mtime_ns, inode]} of each file, None when one is missing."""
    try:
        return {name: stat_of(os.path.join(directory, name)) for name in sorted(names)}
    except OSError:
        return None


def manifest_digest(manifest: dict) -> str:
    """The digest (plugins/module_utils/digests.py) the stamp records of a manifest."""
    return digest(manifest)


def stamp_in_older_layout(directory: str, manifest: dict) -> bool:
    """Whether the directory's stamp names this manifest by an older epforge's digest (rewrite it once)."""
    return is_older_layout((read_json(os.path.join(directory, STAMP)) or {}).get("manifest"), manifest)


def stamped(directory: str, manifest: dict | None = None) -> bool:
    """The probe: the directory's stamp names this manifest (default: the one in the directory) and every
    file still has the stats it had when its hash was checked. No file is read."""
    manifest = manifest if manifest is not None else read_json(os.path.join(directory, MANIFEST))
    stamp = read_json(os.path.join(directory, STAMP))
    if not manifest or not stamp or not digest_matches(stamp.get("manifest"), manifest):
        return False
    return stamp.get("stats") == stats(directory, manifest.get("files", {}))


def safetensors_problem(path: str) -> str:
    """'' when the file's header parses and its tensors end exactly at the end of the file."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) < 8:
                return "shorter than a safetensors header"
            (length,) = struct.unpack("<Q", raw)
            if length > min(MAX_HEADER, size - 8):
                return f"header length {length} does not fit the file ({size} bytes)"
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as exc:
        return f"unreadable safetensors header ({exc})"
    ends = [
        info["data_offsets"][1]
        for name, info in header.items()
        if name != "__metadata__" and isinstance(info, dict) and "data_offsets" in info
    ]
    expected = 8 + length + max(ends, default=0)
    if expected != size:
        return f"{size} bytes, but its header's tensors end at byte {expected} (truncated or padded)"
    return ""


def matches_any(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(os.path.basename(name), p) or fnmatch.fnmatch(name, p) for p in patterns)


INDEX_SUFFIX = ".safetensors.index.json"


def loadable_problems(names, allow_pickle: bool) -> list[str]:
    """Why a file list holds no weights SGLang loads: safetensors expected; pickle-only refused unless
    allowed."""
    names = list(names)
    if any(matches_any(n, SAFE_WEIGHTS) for n in names):
        return []
    pickled = [n for n in names if matches_any(n, PICKLE_WEIGHTS)]
    if pickled and allow_pickle:
        return []
    if pickled:
        return [
            f"only pickle-based weights ({', '.join(sorted(pickled)[:3])}): loading them runs code from the "
            "files; safetensors expected (set model_allow_pickle: true to accept them)"
        ]
    return ["no weights: no *.safetensors file"]


def index_names(names) -> list[str]:
    """The safetensors indexes among names, in order."""
    return sorted(n for n in names if n.endswith(INDEX_SUFFIX))


def index_problems(directory: str, index: str, names) -> list[str]:
    """What the safetensors index DIRECTORY/INDEX names that is not among names (the model's files): no
    shard at all, or shards that are not there. Module model_weights asks it as soon as the index is
    fetched, before any shard, so a repository whose index names a file it lacks moves no shard."""
    data = read_json(os.path.join(directory, index))
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    shards = (
        sorted({v for v in weight_map.values() if isinstance(v, str)}) if isinstance(weight_map, dict) else []
    )
    if not shards:
        return [f"{index} names no shard (no weight_map)"]
    names = set(names)
    missing = [s for s in shards if s not in names]
    if missing:
        return [f"{index} names shards that are not there: {', '.join(missing[:5])}"]
    return []


def completeness_problems(
    directory: str, names, needs_tokenizer: bool, allow_pickle: bool, indexes: bool = True
) -> list[str]:
    """config.json, the tokenizer (a main model; a draft model has none), loadable weights, and (indexes)
    every shard a safetensors index names. Without indexes it needs names only: module model_weights asks it
    of a repository's file list before any byte moves."""
    names = set(names)
    found = []
    if "config.json" not in names:
        found.append("no config.json")
    if needs_tokenizer and not names.intersection(TOKENIZER_FILES):
        found.append(f"no tokenizer file (one of {', '.join(TOKENIZER_FILES)})")
    found += loadable_problems(names, allow_pickle)
    for index in index_names(names) if indexes else []:
        found += index_problems(directory, index, names)
    return found


def local_files(directory: str) -> list[str]:
    """Every regular file under directory (relative names), epforge's own files and partial downloads
    left out."""
    out = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in (PARTIAL, ".cache", ".git"))
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if rel not in OWN_FILES and os.path.isfile(os.path.join(root, name)):
                out.append(rel)
    return sorted(out)
