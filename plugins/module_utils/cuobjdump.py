"""cuobjdump on CUDA binaries: the one way a module runs it (argv, time limit, epforge_cuda's parser), for a
file on disk or for the binaries inside a wheel (read without unpacking the wheel into a lasting folder).

Which SASS/PTX covers which target arch: plugins/module_utils/arch.py. Used by library/cuda_binary_archs.py,
library/deepep_prebuilt.py and library/final_env_check.py; unit-tested in
tests/unit/test_cuda_binary_archs.py, tests/unit/test_deepep.py and tests/unit/test_final_env.py.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
import zipfile

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_cuobjdump_listing
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


class CuobjdumpError(RuntimeError):
    """cuobjdump could not read a binary: msg, the argv, its rc and the output's tail (fail_json's fields)."""

    def __init__(self, msg: str, cmd: list[str], rc: int, output: str) -> None:
        super().__init__(msg)
        self.msg = msg
        self.cmd = cmd
        self.rc = rc
        self.log_tail = tail(output)

    def fail_fields(self) -> dict:
        return {"msg": self.msg, "cmd": self.cmd, "rc": self.rc, "log_tail": self.log_tail}


def read_binary(cuobjdump: str, path: str, timeout: int) -> dict:
    """`cuobjdump -lelf -lptx PATH` parsed ({'sass', 'ptx', 'host_only', ...}), or CuobjdumpError."""
    # -lelf -lptx in one call: the short forms combine (the long forms together print the usage text).
    argv = [cuobjdump, "-lelf", "-lptx", path]
    proc = run_bounded(argv, timeout=timeout)
    if proc.timed_out:
        raise CuobjdumpError(f"cuobjdump ran past {timeout} s on {path}", argv, proc.rc, proc.output)
    parsed = parse_cuobjdump_listing(proc.output)
    if proc.rc != 0 and not parsed["host_only"]:
        raise CuobjdumpError(f"cuobjdump could not read {path}", argv, proc.rc, proc.output)
    return parsed


def read_wheel(cuobjdump: str, wheel: str, patterns: list[str], timeout: int) -> dict[str, dict]:
    """{member: read_binary listing} for the wheel's members whose base name matches a pattern.

    Each member is copied to a temporary folder that is removed afterwards (named by its index, so a member
    path cannot point outside it). zipfile.BadZipFile for a file that is no wheel."""
    listings: dict[str, dict] = {}
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory(prefix="epforge-wheel-") as tmp:
        members = sorted(
            name
            for name in archive.namelist()
            if not name.endswith("/") and any(fnmatch.fnmatch(os.path.basename(name), p) for p in patterns)
        )
        for index, name in enumerate(members):
            target = os.path.join(tmp, f"{index}-{os.path.basename(name)}")
            with archive.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            listings[name] = read_binary(cuobjdump, target, timeout)
            os.unlink(target)
    return listings
