"""Payload: import one module in the interpreter that is checked, and say how it went.

Runs as `python -c SOURCE IMPORT_NAME [DISTRIBUTION]` (module python_import_check, through payload.py's
payload_argv). Prints, after whatever the import itself printed, one line `EPFORGE_IMPORT_CHECK {json}`:
python_version, ok, error, error_type, missing_name, traceback_tail, file, version (the distribution's
metadata version when one is named, else the module's __version__), and gpu (whether /dev/nvidiactl exists;
after a failed import, what torch says about CUDA). Any exception, SystemExit too, is reported, never
raised. Standard library only (the collection cannot be imported there).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

MARK = "EPFORGE_IMPORT_CHECK "


def check(name: str, dist: str) -> dict:
    out = {
        "python_version": ".".join(str(part) for part in sys.version_info[:3]),
        "error": "",
        "error_type": "",
        "missing_name": "",
        "traceback_tail": "",
        "file": "",
        "version": "",
    }
    try:
        mod = importlib.import_module(name)
        out["ok"] = True
        out["file"] = getattr(mod, "__file__", "") or ""
        out["version"] = str(getattr(mod, "__version__", "") or "")
    except BaseException as exc:  # SystemExit and friends too: report, never crash the probe
        out["ok"] = False
        out["error_type"] = type(exc).__name__
        out["error"] = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ModuleNotFoundError):
            out["missing_name"] = exc.name or ""
        out["traceback_tail"] = "".join(traceback.format_exc().splitlines(True)[-15:])
    if dist:
        try:
            import importlib.metadata as md  # noqa: PLC0415 - only when a distribution is named

            out["version"] = md.version(dist)
        except Exception:  # noqa: S110 - no metadata: the module's own __version__ stays
            pass
    gpu: dict = {"dev_nvidiactl": os.path.exists("/dev/nvidiactl")}
    if not out["ok"]:
        try:
            import torch  # noqa: PLC0415 - only to explain a failed import

            gpu["torch_cuda_available"] = bool(torch.cuda.is_available())
            gpu["device_count"] = int(torch.cuda.device_count())
        except BaseException as exc:
            gpu["torch_error"] = f"{type(exc).__name__}: {exc}"
    out["gpu"] = gpu
    return out


def answer_of(stdout: str) -> dict | None:
    """The check's JSON line in an interpreter's output (the caller's side), or None when the interpreter
    died before writing it."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return None


def main(argv: list[str]) -> int:
    name, dist = argv[0], (argv[1] if len(argv) > 1 else "")
    sys.stdout.write("\n" + MARK + json.dumps(check(name, dist)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
