"""Payload: which distribution provides each module an env would import, and whether its files are the ones
the distribution's RECORD lists - without importing any of them (module final_env_check, through payload.py).

Runs as `python -c SOURCE NAMES_JSON VERIFY_ALL_JSON` in the env's python. For each import name in NAMES:
where it would load from (importlib's spec, which does not execute a top-level package), every distribution
whose RECORD claims it (importlib.metadata's packages_distributions, and the files of every distribution for
top-level extension modules), and per claimant the files that match their RECORD hash, changed or are
missing, whether it provides the module's origin file, and its binaries. The claimant whose RECORD matches
the origin file is the one the server imports. Every file is hashed only for the names in VERIFY_ALL
(DeepEP's, a few MB); for the others (torch, sgl_kernel: GBs) only the origin file. Prints one JSON line:
{"python": version, "modules": {name: {"origin", "claims": [...]}}}. Standard library only (the collection
cannot be imported there).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import sys

BLOCK = 1 << 20


def record_hash(path: str) -> str:
    """A file's hash as a RECORD writes it: sha256=urlsafe-base64 without padding."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def owners_of(wanted: set[str]) -> dict[str, set[str]]:
    """Import name -> the distributions whose files claim it."""
    owners = {name: set(dists) for name, dists in md.packages_distributions().items() if name in wanted}
    # packages_distributions infers top-level names from .py files only (Python 3.11) when a wheel has no
    # top_level.txt: a top-level extension module (deep_ep_cpp.cpython-311-x86_64-linux-gnu.so) is found here.
    for dist in md.distributions():
        for entry in dist.files or []:
            top = entry.parts[0] if len(entry.parts) > 1 else entry.parts[0].split(".", 1)[0]
            if top in wanted:
                owners.setdefault(top, set()).add(dist.metadata["Name"])
    return owners


def claim(dist_name: str, name: str, origin: str, verify_all: bool) -> dict:
    """What one distribution's RECORD says of the module name's files on disk."""
    dist = md.distribution(dist_name)
    binaries, matched, changed, missing, origin_ok = [], 0, 0, 0, False
    for entry in dist.files or []:
        first = entry.parts[0]
        if first != name and not first.startswith(name + "."):
            continue
        path = os.path.realpath(str(entry.locate()))
        if not os.path.exists(path):
            missing += 1
            continue
        ok = True
        hashed = entry.hash is not None and entry.hash.mode == "sha256"
        if hashed and (verify_all or path == origin):
            ok = record_hash(path) == "sha256=" + entry.hash.value
            matched += ok
            changed += not ok
        if path == origin:
            origin_ok = ok
        if path.endswith(".so") or ".so." in os.path.basename(path):
            binaries.append(path)
    return {
        "distribution": dist.metadata["Name"],
        "version": dist.version,
        "files_matched": matched,
        "files_changed": changed,
        "files_missing": missing,
        "provides_origin": origin_ok,
        "binaries": sorted(binaries),
    }


def inspect_env(wanted: set[str], verify_all: set[str]) -> dict:
    owners = owners_of(wanted)
    out = {"python": sys.version.split()[0], "modules": {}}
    for name in sorted(wanted):
        spec = importlib.util.find_spec(name)
        origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else ""
        claims = [claim(d, name, origin, name in verify_all) for d in sorted(owners.get(name, set()))]
        out["modules"][name] = {"origin": origin, "claims": claims}
    return out


def main(argv: list[str]) -> int:
    print(json.dumps(inspect_env(set(json.loads(argv[0])), set(json.loads(argv[1])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
