# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The releases a known-issue row can name (installed.*): SGLang, FlashInfer, torch and NCCL.

Two sources, one shape ({sglang, flashinfer, torch, nccl, source}):
- planned: the stack's versions, before anything is installed (preflight; NCCL comes with torch's wheel, so
  the stack does not name it: unknown then);
- env: what an env holds, read from its distributions' dist-info directory names (no import: the ML env's
  torch takes seconds to import and needs its GPU libraries).
"""

from __future__ import annotations

import glob
import os

from ansible_collections.epforge.ep.plugins.module_utils.pynames import dist_info_name_version

# Distribution name (normalized) -> component, in order of preference where several provide one.
DISTRIBUTIONS = {
    "sglang": ("sglang",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "torch": ("torch",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl"),
}


def site_versions(site_dirs: list[str]) -> dict[str, str]:
    """{normalized distribution name: version} of every *.dist-info directory in site_dirs."""
    found: dict[str, str] = {}
    for site in site_dirs:
        for path in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
            named = dist_info_name_version(path)
            if named:
                found.setdefault(*named)
    return found


def env_site_dirs(env: str) -> list[str]:
    """The site-packages directories of a venv (ENV/lib/python3*/site-packages)."""
    return sorted(glob.glob(os.path.join(env, "lib", "python3*", "site-packages")))


def installed_releases(site_dirs: list[str]) -> dict:
    versions = site_versions(site_dirs)
    releases = {"source": "env"}
    for component, names in DISTRIBUTIONS.items():
        releases[component] = next((versions[n] for n in names if n in versions), "")
    return releases


def planned_releases(stack: dict) -> dict:
    """The releases the stack will install (the known-issue rows' view before the install)."""
    stack = stack or {}
    return {
        "source": "stack",
        "sglang": str((stack.get("sglang") or {}).get("version") or ""),
        "flashinfer": str((stack.get("flashinfer") or {}).get("version") or ""),
        "torch": str((stack.get("torch") or {}).get("version") or ""),
        "nccl": "",
    }
