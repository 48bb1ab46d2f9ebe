"""module model_weights' way of showing what it reports: a manifest as it may be written and returned (the
mirror's URL without its credentials) and a size in binary units (the log, the messages). Used by its jobs
(request.py, directory.py, local.py, controller.py, hub.py, fetch.py, report.py)."""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact_url


def shown(manifest: dict) -> dict:
    """A manifest as it may be written and returned: the mirror's URL without its credentials."""
    if not manifest.get("endpoint"):
        return manifest
    return {**manifest, "endpoint": redact_url(manifest["endpoint"])}


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
