"""Keep the AnsiballZ payloads ansible-core builds for this collection's modules from one run to the next.

ansible-core packs a module for the host (the module and every module_utils it imports, found by compiling
them) once per run, into the run's own temp dir (C.DEFAULT_LOCAL_TMP/ansiballz_cache/, one file per module
named <module fqn>-<compression>-<extensions>), and removes that dir when the run ends. A no-op rerun of
site.yml ships one module, the preflight, and paid about 0.24 s of its 4.4 s to pack it again (issue 41). So
(callback epforge.ep.payload_store calls these two, in ansible-playbook itself, before the first worker forks
and after the last task):

- `restore`: the payloads stored under the current key are checked and written into the run's cache dir,
  where ansible-core finds them as if packed earlier in the same run;
- `keep`: the payloads of this collection's modules the run packed (names starting with
  ansible_collections.epforge.ep.) are stored under that key.

The key is the digest (module_utils/digests.py) of ansible-core's version, the collection's path and the
content of every .py of its plugins/modules and plugins/module_utils: other code, another checkout or another
ansible-core is another key, so a payload is never reused for code it does not hold. The payload is a pickle
ansible-core loads and code a host runs, so each stored file carries its seal (plugins/module_utils/seal.py:
HMAC with the controller's key, over the key, the name and the payload's sha256); one that does not match is
removed, never used. The store is ~/.cache/epforge/payloads/<key[:16]>/ (0700); the newest KEYS_KEPT keys
stay. Every write is a temp file renamed into place: two runs at once each find a whole file or none.
"""

from __future__ import annotations

import hmac
import os
import shutil
import stat

from ansible_collections.epforge.ep.plugins.module_utils import seal
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import (
    bytes_sha256,
    file_sha256,
    tree_files,
)
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest

STORE = os.path.join(os.path.expanduser("~"), ".cache", "epforge", "payloads")
OURS = "ansible_collections.epforge.ep."
CODE_DIRS = ("plugins/modules", "plugins/module_utils")
KEYS_KEPT = 4


def code_key(collection_root: str, ansible_version: str) -> str:
    """The digest of ansible-core's version, the collection's path and every .py its modules can import."""
    code = {}
    for sub in CODE_DIRS:
        # plugins/modules of a checkout links to library/: a tree's walk starts at the link's target
        top = os.path.join(collection_root, sub)
        for name in tree_files(top):
            if name.endswith(".py"):
                code[f"{sub}/{name}"] = file_sha256(os.path.join(top, name))
    return digest({"ansible": ansible_version, "collection": collection_root, "code": code})


def _store_dir(store: str, key: str) -> str | None:
    """The key's folder, made 0700; None when the store is not this user's alone (then nothing is kept).
    Called after seal.controller_key, which makes ~/.cache/epforge 0700 first."""
    folder = os.path.join(store, key[:16])
    os.makedirs(store, mode=0o700, exist_ok=True)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    for path in (store, folder):
        info = os.lstat(path)
        if (
            not stat.S_ISDIR(info.st_mode)
            or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) & 0o022
        ):
            return None
    return folder


def _seal(secret: bytes, key: str, name: str, payload: bytes) -> bytes:
    """A stored file is this seal (hex), a newline, then the payload."""
    return seal.seal(secret, [key, name, bytes_sha256(payload)]).encode()


def _write_whole(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def restore(run_cache: str, key: str, store: str = STORE) -> list[str]:
    """Write the stored payloads of this key into the run's cache dir; the names restored. A file whose
    seal does not match is removed."""
    secret = seal.controller_key()
    folder = _store_dir(store, key)
    if folder is None:
        return []
    os.makedirs(run_cache, exist_ok=True)
    restored = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.startswith(OURS) or name.endswith(".part"):
            continue
        with open(path, "rb") as handle:
            found, _newline, payload = handle.read().partition(b"\n")
        if not hmac.compare_digest(found, _seal(secret, key, name, payload)):
            os.unlink(path)
            continue
        target = os.path.join(run_cache, name)
        if not os.path.exists(target):
            _write_whole(target, payload)
        restored.append(name)
    os.utime(folder)  # the newest keys are the ones kept
    return restored


def keep(run_cache: str, key: str, store: str = STORE) -> list[str]:
    """Store the run's payloads of this collection's modules that the key's folder lacks; the names kept.
    The oldest keys beyond KEYS_KEPT are removed."""
    if not os.path.isdir(run_cache):
        return []
    secret = seal.controller_key()
    folder = _store_dir(store, key)
    if folder is None:
        return []
    kept = []
    for name in sorted(os.listdir(run_cache)):
        target = os.path.join(folder, name)
        if not name.startswith(OURS) or name.endswith(("-part", ".lock")) or os.path.exists(target):
            continue
        with open(os.path.join(run_cache, name), "rb") as handle:
            payload = handle.read()
        _write_whole(target, _seal(secret, key, name, payload) + b"\n" + payload)
        kept.append(name)
    _prune(store)
    return kept


def _prune(store: str) -> None:
    folders = [os.path.join(store, name) for name in os.listdir(store)]
    folders = sorted((p for p in folders if os.path.isdir(p)), key=os.path.getmtime, reverse=True)
    for old in folders[KEYS_KEPT:]:
        shutil.rmtree(old, ignore_errors=True)
