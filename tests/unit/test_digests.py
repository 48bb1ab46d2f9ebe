"""The one digest of inputs and the input stamp (plugins/module_utils/digests.py): canonical JSON whatever the
key order, the digests already on disk (build cache keys, wheelhouse manifest names, CUDA toolkit stamps)
unchanged, and stamps an older epforge wrote - spaced JSON, the key "sha256" - still read."""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath

from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    accepted_digests,
    canonical_json,
    digest,
    digest_matches,
    is_older_layout,
    read_stamp,
    stamp_digest,
    stamp_holds,
    stamp_of,
    stamp_rewrite,
    write_stamp,
)

INPUTS = {"version": "0.5.23", "keep": ["torch==2.14.1"], "pip_args": [], "schema": 1}


def spaced(data) -> str:
    """How SGLang's install stamp, the collective probe and the final env check hashed before."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def test_canonical_json_sorts_keys_and_drops_whitespace():
    assert canonical_json({"b": [1, {"d": 2, "c": 3}], "a": "x"}) == '{"a":"x","b":[1,{"c":3,"d":2}]}'
    # A value JSON cannot hold is hashed as its str() (a pathlib.Path), never refused.
    assert canonical_json({"path": PurePosixPath("/p")}) == '{"path":"/p"}'


def test_digest_is_sha256_of_the_canonical_json_whatever_the_key_order():
    assert digest(INPUTS) == hashlib.sha256(canonical_json(INPUTS).encode()).hexdigest()
    assert digest(INPUTS) == digest(dict(reversed(INPUTS.items())))
    assert digest(INPUTS) != digest({**INPUTS, "version": "0.5.24"})
    assert len(digest(INPUTS)) == 64


def test_digests_already_on_disk_are_unchanged():
    """The recipes merged here that named files or cache entries (build keys, wheelhouse manifests, the CUDA
    toolkit stamp) were already canonical: the same bytes, the same digest."""
    compact = hashlib.sha256(json.dumps(INPUTS, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert digest(INPUTS) == compact
    assert digest({"a": 1}) == "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"


def test_digest_matches_the_canonical_and_the_older_spaced_layout_only():
    assert digest_matches(digest(INPUTS), INPUTS)
    assert digest_matches(spaced(INPUTS), INPUTS)
    assert spaced(INPUTS) != digest(INPUTS)
    assert accepted_digests(INPUTS) == (digest(INPUTS), spaced(INPUTS))
    assert not digest_matches(digest({**INPUTS, "schema": 2}), INPUTS)
    for recorded in ("", None, 0, ["x"]):
        assert not digest_matches(recorded, INPUTS)
    # only a digest of the same data in the older layout is to be rewritten
    assert is_older_layout(spaced(INPUTS), INPUTS)
    assert not is_older_layout(digest(INPUTS), INPUTS)
    assert not is_older_layout(spaced({**INPUTS, "schema": 2}), INPUTS)


def test_a_stamp_records_inputs_and_their_digest():
    stamp = stamp_of(INPUTS)
    assert stamp == {"inputs": INPUTS, "digest": digest(INPUTS)}
    assert stamp_digest(stamp) == digest(INPUTS)
    assert stamp_holds(stamp, INPUTS) and not stamp_holds(stamp, {**INPUTS, "keep": []})


def test_a_stamp_an_older_epforge_wrote_still_holds_and_is_rewritten_once():
    for old in ({"inputs": INPUTS, "sha256": spaced(INPUTS)}, {"inputs": INPUTS, "digest": spaced(INPUTS)}):
        assert stamp_digest(old) == spaced(INPUTS)
        assert stamp_holds(old, INPUTS)
        assert stamp_rewrite(old, INPUTS)  # the caller writes stamp_of(INPUTS) in its place
        assert not stamp_rewrite(stamp_of(INPUTS), INPUTS)
    other = {"inputs": INPUTS, "sha256": spaced({**INPUTS, "version": "0.5.1"})}
    assert not stamp_holds(other, INPUTS) and not stamp_rewrite(other, INPUTS)
    # "digest" wins over the older key when both are there; no digest, no stamp.
    assert stamp_digest({"digest": "new", "sha256": "old"}) == "new"
    for broken in (None, {}, {"inputs": INPUTS}, {"digest": ""}, {"digest": 5}):
        assert stamp_digest(broken) == "" and not stamp_holds(broken, INPUTS)
        assert not stamp_rewrite(broken, INPUTS)


def test_stamps_round_trip_through_files(tmp_path):
    path = tmp_path / "state" / "stamp.json"
    assert read_stamp(str(path)) is None
    assert write_stamp(str(path), stamp_of(INPUTS)) is True
    assert write_stamp(str(path), stamp_of(INPUTS)) is False  # same content: not rewritten
    assert read_stamp(str(path)) == stamp_of(INPUTS)
    assert path.read_text() == json.dumps(stamp_of(INPUTS), indent=2, sort_keys=True) + "\n"
    for broken in ("{truncated", "[1, 2]", ""):
        path.write_text(broken)
        assert read_stamp(str(path)) is None
