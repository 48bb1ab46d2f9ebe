#!/usr/bin/env python3
"""Write a copy of a wheel without some of its files, for a host that cannot receive the whole wheel.

Why: the lent GPU machine receives at most 64 MiB per call and has no package registry. sglang-kernel 0.4.5
is 383 MB, of which sgl_kernel/flash_ops.abi3.so (FlashAttention-3, only used by the fa3 attention backend;
its import is guarded) is 326 MB compressed; sm100/common_ops is loaded only on GPUs other than sm_90.
xgrammar 0.2.1 ships a 65 MB static library (xgrammar/lib/libxgrammar.a) that nothing imports.
The copy keeps name and version (SGLang checks the version) and drops the removed files from RECORD, whose
hashes are of the unpacked files, so pip installs it as usual. docs/gpu-runs.md says which runs used it.

    trim_wheel.py IN.whl OUT_DIR PATTERN [PATTERN ...]     # fnmatch patterns of archive members to drop
"""

from __future__ import annotations

import fnmatch
import os
import sys
import zipfile


def trim(src: str, out_dir: str, patterns: list[str], stored: bool = False) -> tuple[str, list[str]]:
    dropped: list[str] = []
    dest = os.path.join(out_dir, os.path.basename(src))
    compression = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest + ".tmp", "w", compression) as zout:
        for info in zin.infolist():
            name = info.filename
            if any(fnmatch.fnmatch(name, p) for p in patterns):
                dropped.append(name)
                continue
            data = zin.read(name)
            if name.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                kept = [
                    line
                    for line in lines
                    if not any(fnmatch.fnmatch(line.split(",")[0], p) for p in patterns)
                ]
                data = "".join(kept).encode()
            info.compress_type = compression
            zout.writestr(info, data)
    os.replace(dest + ".tmp", dest)
    return dest, dropped


def main() -> int:
    args = sys.argv[1:]
    stored = "--stored" in args
    args = [a for a in args if a != "--stored"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest, dropped = trim(args[0], args[1], args[2:], stored)
    for name in dropped:
        print(f"dropped {name}")
    print(f"wrote {dest} ({os.path.getsize(dest)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
