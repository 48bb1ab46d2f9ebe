"""Pure-Python wheels made in a test (a wheelhouse of a few kilobytes for the installer tests): correct
METADATA, WHEEL and RECORD, nothing built."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

WHEEL = b"Wheel-Version: 1.0\nGenerator: epforge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def tiny_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel with a correct RECORD: a package `name` whose module says its version."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{dist}/METADATA": "".join(
            [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
            + [f"Requires-Dist: {r}\n" for r in requires]
        ).encode(),
        f"{dist}/WHEEL": WHEEL,
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
