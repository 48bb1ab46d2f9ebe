"""The digest of a module's inputs, and the input stamp that records it: the one recipe in epforge.

The rule: inputs are hashed as canonical JSON (sorted keys, no whitespace, a value JSON cannot hold as its
str()) with sha256. Equal inputs give equal digests whatever their key order, so a digest says whether work
done before was done for the same inputs. A stamp is the JSON object {"inputs": ..., "digest": ...} a module
writes once its work is done and reads on the next run.

Every digest of JSON data in epforge is taken here (tests/unit/test_one_owner.py refuses json.dumps feeding
a hash anywhere else). What was written before this rule is only read, never written again:
  - digests written with sorted JSON *with* whitespace (json.dumps(..., sort_keys=True): SGLang's install
    stamp, the collective probe's record, the final env check's stamp, the server settings object's digest
    and the flag verdicts keyed by it, the model files' stamp, the process manager's launch fingerprint, the
    torch files' state digest) match through digest_matches() / accepted_digests(), which accept that older
    layout's digest of the same inputs too;
  - SGLang's install stamp kept its digest under "sha256"; stamp_digest() reads that key when "digest" is
    absent.
A record that holds its inputs only in an older layout is rewritten once in this one by the module that
reads it (stamp_rewrite() says when), so the older layout leaves the disk on the first run that finds it.

Used by the ml_env, cuda_extension, cuda_toolkit, wheelhouse, sglang, collective_probe, final_env and deepep
modules and the probe_cache action plugin; unit-tested in tests/unit/test_digests.py.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, write_json_atomic

# Where a stamp keeps its digest; the older key is only read.
STAMP_KEY = "digest"
OLD_STAMP_KEYS = ("sha256",)


def canonical_json(data) -> str:
    """JSON with sorted keys and no whitespace: equal data gives equal text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def digest(data) -> str:
    """sha256 (hex) of the canonical JSON of data."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def _spaced_digest(data) -> str:
    """The digest stamps written before the canonical layout hold: sorted JSON with ', ' and ': '."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def accepted_digests(data) -> tuple[str, str]:
    """The digests a record of data may hold: this recipe's first, then the older spaced layout's (read
    only: a lookup by digest in a file an older epforge wrote)."""
    return digest(data), _spaced_digest(data)


def digest_matches(recorded, data) -> bool:
    """Whether a digest read from disk was taken of data (by this recipe or the older spaced layout)."""
    if not isinstance(recorded, str) or not recorded:
        return False
    return recorded in accepted_digests(data)


def is_older_layout(recorded, data) -> bool:
    """Whether a digest read from disk records data, but in the older layout (to be rewritten once)."""
    return digest_matches(recorded, data) and recorded != digest(data)


def stamp_of(inputs) -> dict:
    """A new stamp of inputs: {'inputs': inputs, 'digest': digest(inputs)}."""
    return {"inputs": inputs, STAMP_KEY: digest(inputs)}


def stamp_digest(stamp: dict | None) -> str:
    """The digest a stamp records ('' when none): under 'digest', or the older key 'sha256'."""
    for key in (STAMP_KEY, *OLD_STAMP_KEYS):
        value = (stamp or {}).get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def stamp_holds(stamp: dict | None, inputs) -> bool:
    """Whether a stamp read from disk records these inputs (whichever key and layout wrote it)."""
    return digest_matches(stamp_digest(stamp), inputs)


def stamp_rewrite(stamp: dict | None, inputs) -> bool:
    """Whether a stamp read from disk records these inputs in an older layout (spaced JSON, or the key
    "sha256"): the caller rewrites it once as stamp_of(inputs), which is then the stamp in force."""
    return stamp_holds(stamp, inputs) and stamp != stamp_of(inputs)


def read_stamp(path: str) -> dict | None:
    """The stamp at path, or None when it is missing, unreadable or not a JSON object (a broken stamp is no
    stamp)."""
    return read_json(path)


def write_stamp(path: str, stamp: dict) -> bool:
    """Write a stamp atomically (sorted keys, indent 2); False when the file already holds it."""
    return write_json_atomic(path, stamp)
