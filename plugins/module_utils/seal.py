"""Seals: what epforge keeps on a host and believes later is bound to the controller that wrote it.

One owner for the controller's sealing secret and the seal itself, used by the probe cache's records
(plugins/action/probe_cache.py: sealed and checked on the controller) and the tuner's journal
(library/tune_journal.py with its action plugin: sealed and checked in the module with a key derived for that
journal alone).

- The secret: ~/.cache/epforge/probe-cache.key on the controller (the name is historic: it seals more than
  probe records), 64 hex digits, made at first use and written whole (a temp file linked into place, so no
  reader ever sees it empty or half written), mode 0600 in a 0700 folder. A key that others can read, or that
  another user owns, is refused with the remedy (anyone who reads it can forge what epforge believes); an
  empty or malformed one is refused saying how to recover (remove it: the next run makes a new one, and every
  sealed file is then a miss once).
- The seal: HMAC-SHA256 over the canonical JSON of what a file answers for.
- A derived key (HMAC of the secret over a purpose): what a module on a host gets to seal one file (a tuning
  plan's journal), never the secret itself.

Controller-side only: controller_key (it reads the controller's home). The rest is plain Python, either side.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat

KEY_PATH = os.path.join(os.path.expanduser("~"), ".cache", "epforge", "probe-cache.key")
_KEY_TEXT = re.compile(rb"^[0-9a-f]{64}$")


class SealKeyError(Exception):
    """The controller's sealing secret cannot be used; the message says why and what to do."""


def _make_key(path: str) -> None:
    """A new secret, linked into place whole (os.link fails when another worker made one first)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(32).encode())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def controller_key(path: str | None = None) -> bytes:
    """The controller's sealing secret, made at first use; refused (SealKeyError) when others can read it,
    another user owns it, or it is empty or malformed."""
    path = path or KEY_PATH
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if not os.path.lexists(path):
        _make_key(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SealKeyError(
            f"the controller's sealing key {path} cannot be read ({exc.strerror}): it must be a plain file "
            f"of yours, mode 0600; remove it (rm {path}) and the next run makes a new one (every sealed "
            "record and journal then counts as unsealed once)"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        key = handle.read().strip()
    if info.st_uid != os.geteuid():
        raise SealKeyError(
            f"the controller's sealing key {path} belongs to uid {info.st_uid}, not to you (uid "
            f"{os.geteuid()}): whoever owns it can forge what epforge believes; remove it (rm {path}) and "
            "the next run makes a new one of yours"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise SealKeyError(
            f"the controller's sealing key {path} is readable or writable by others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}): anyone who reads it can forge probe records and tuning "
            f"journals. Make a new one: rm {path} (the next run writes a new key, 0600; every record and "
            f"journal sealed with the old one is then a miss once). Only when no one else could have read "
            f"it: chmod 600 {path}"
        )
    if not _KEY_TEXT.match(key):
        raise SealKeyError(
            f"the controller's sealing key {path} is {'empty' if not key else 'malformed'} (a write cut off, "
            f"or edited): remove it (rm {path}) and the next run makes a new one; every record and journal "
            "sealed with the old one is then a miss once"
        )
    return key


def seal(key: bytes, material: object) -> str:
    """HMAC-SHA256 (hex) over the canonical JSON of material."""
    text = json.dumps(material, sort_keys=True, default=str).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def sealed(key: bytes, material: object, found: object) -> bool:
    """Whether found is the seal of material (constant time)."""
    return hmac.compare_digest(str(found or ""), seal(key, material))


def derived_key(key: bytes, purpose: str) -> str:
    """A key for one purpose (hex), from which the secret cannot be recovered: what a host is given."""
    return hmac.new(key, purpose.encode(), hashlib.sha256).hexdigest()
