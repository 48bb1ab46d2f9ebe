"""Payload: prove an SGLang install - the package and its server-args module import (no GPU needed) - and
say the version it imports as.

Runs as `python -c SOURCE` in the env's python (module sglang_install, through payload.py's payload_argv),
with HF_HUB_OFFLINE=1. Prints, after whatever the imports printed, one line `EPFORGE_SGLANG_VERIFY
{"version": sglang.__version__}`. Standard library and SGLang only (the collection cannot be imported there).
"""

from __future__ import annotations

import json
import sys

MARK = "EPFORGE_SGLANG_VERIFY "


def imported_version() -> str:
    import sglang  # noqa: PLC0415 - the import is the proof
    import sglang.srt.server_args  # noqa: PLC0415

    return sglang.__version__


def main() -> int:
    print(MARK + json.dumps({"version": imported_version()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
