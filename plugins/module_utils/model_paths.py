"""Where a model the server settings name lives on a host: the one owner of "repo ID or local path".

A settings value such as model_path is either an absolute directory already on the host (source `local`)
or a Hugging Face repo ID (`org/name`), which role model fetches to `<epforge_model_dir>/org/name`. The
server settings object carries that local path (server_object.build maps it, recording an adjustment), so
SGLang starts from the directory role model verified, never from the Hub.
"""

from __future__ import annotations

import os
import re

# The settings that name a model directory SGLang loads.
MODEL_KEYS = ("model_path", "speculative_draft_model_path")
# Hub repo IDs: one owner and one name, each of letters, digits, '-', '_', '.' (not starting with '.').
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_ID = re.compile(rf"{_PART}/{_PART}")
DEFAULT_MODEL_DIR = "/var/lib/epforge/models"
ADJUSTMENT_ID = "model-fetched-by-role-model"


def is_repo_id(value) -> bool:
    """True for 'org/name' (a Hub repo ID), False for an absolute path or anything else."""
    return isinstance(value, str) and not value.startswith("/") and REPO_ID.fullmatch(value) is not None


def model_path_problems(settings) -> list[str]:
    """Why the model settings of a request cannot name a model (empty: they can). The one rule, checked in
    preflight (module epforge_server_settings, its first task) before anything is recorded or installed:
    each of MODEL_KEYS is a Hub repo ID (org/name) or an absolute directory on the host. A relative path
    ('m', './m', '../m') is refused: relative to what? Ansible, the module and the server each run in
    another working directory."""
    problems = []
    for key in MODEL_KEYS:
        value = (settings or {}).get(key) if isinstance(settings, dict) else None
        if not isinstance(value, str) or not value.strip() or is_repo_id(value) or value.startswith("/"):
            continue
        dotted = ".." in value.split("/")
        problems.append(
            f"{key} {value!r} is a relative path{' going up (..)' if dotted else ''}: give the model's "
            "absolute directory on the host (e.g. /var/lib/epforge/models/org/name) or a Hugging Face "
            "repo ID (org/name) that role model fetches"
        )
    return problems


def local_path(repo_id: str, model_dir: str = DEFAULT_MODEL_DIR) -> str:
    """The directory role model fetches repo_id to."""
    if not is_repo_id(repo_id):
        raise ValueError(f"{repo_id!r} is not a Hub repo ID (org/name)")
    if ".." in repo_id.split("/"):
        raise ValueError(f"{repo_id!r} is not a Hub repo ID (org/name)")
    return os.path.join(model_dir or DEFAULT_MODEL_DIR, *repo_id.split("/"))


def localized(settings: dict, model_dir: str = DEFAULT_MODEL_DIR) -> tuple[dict, list[dict]]:
    """settings with every repo ID among MODEL_KEYS replaced by its local path, and one adjustment per
    replacement ({id, changes, reason, source}: the shape server_object records)."""
    out = dict(settings or {})
    adjustments = []
    for key in MODEL_KEYS:
        value = out.get(key)
        if not is_repo_id(value):
            continue
        out[key] = local_path(value, model_dir)
        adjustments.append(
            {
                "id": ADJUSTMENT_ID,
                "changes": {key: out[key]},
                "reason": f"{key} {value} is fetched and verified by role model into {out[key]}; the server "
                "starts from that directory with HF_HUB_OFFLINE=1 and never downloads at launch",
                "source": value,
            }
        )
    return out, adjustments


def fetched_repos(obj: dict) -> dict[str, str]:
    """{local path: repo ID} for the models a server settings object names that role model must fetch."""
    return {
        a["changes"][key]: a["source"]
        for a in (obj or {}).get("adjustments", [])
        if a.get("id") == ADJUSTMENT_ID
        for key in a.get("changes", {})
    }


def models_of(obj: dict) -> list[dict]:
    """The models a server settings object names, as role model handles them: [{name, path, repo, draft}] -
    repo is the Hub repo ID role model fetches to path, empty for a local directory (verified in place)."""
    settings = (obj or {}).get("settings") or {}
    repos = fetched_repos(obj)
    return [
        {
            "name": key,
            "path": settings[key],
            "repo": repos.get(settings[key], ""),
            "draft": key != "model_path",
        }
        for key in MODEL_KEYS
        if settings.get(key)
    ]
