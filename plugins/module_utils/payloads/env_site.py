"""Payload: an env's site directories and the NVSHMEM wheel installed in it (its package directory and the
named distribution's version), the inputs of DeepEP's build plan.

Runs as `python -c SOURCE DISTRIBUTION` in the env's python (module deepep_plan, through payload.py). Prints
one JSON line: {site: [purelib, platlib], nvshmem_dir: the directory of package nvidia.nvshmem or "",
nvshmem_version: DISTRIBUTION's version or ""}. Standard library only (the collection cannot be imported
there); nothing of the package is imported (find_spec of a namespace package only).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import sysconfig


def env_site(distribution: str) -> dict:
    paths = sysconfig.get_paths()
    out = {"site": [paths["purelib"], paths["platlib"]], "nvshmem_dir": "", "nvshmem_version": ""}
    try:
        spec = importlib.util.find_spec("nvidia.nvshmem")
        if spec is not None and spec.submodule_search_locations:
            out["nvshmem_dir"] = next(iter(spec.submodule_search_locations))
    except Exception:  # noqa: S110 - no package nvidia, or a broken one: no wheel to use
        pass
    try:
        out["nvshmem_version"] = importlib.metadata.version(distribution)
    except Exception:  # noqa: S110 - not installed (or unreadable metadata): no version
        pass
    return out


def main(argv: list[str]) -> int:
    print(json.dumps(env_site(argv[0] if argv else "nvidia-nvshmem-cu13")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
