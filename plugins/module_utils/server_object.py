"""The one server settings object: what a server will run, built once and read by every later step.

Built from the request (the user's settings with the node group's values) and the known-issues verdict on
it (plugins/module_utils/known_issues.py: the adjustments with their reasons), rendered once for one SGLang
release to the argv and environment of `python -m sglang.launch_server`. Its digest names exactly that
launch: role sglang has SGLang's parser judge the argv once per digest, role sglang_server launches the same
argv and records the same digest, final_env and the sweep read it. The API key is never part of it: the
launcher appends the key from its 0600 file, so it is in no digest, fact or log.

A consumer checks an object with problems() (shape, and that the digest still names its argv and
environment); none renders or adjusts the settings again.
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    accepted_digests,
    digest,
    digest_matches,
)
from ansible_collections.epforge.ep.plugins.module_utils.model_paths import DEFAULT_MODEL_DIR, localized
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import without_secrets
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    build_server_argv,
    build_server_env,
    with_defaults,
)

SCHEMA = 1
KEYS = ("schema", "sglang_version", "settings", "adjustments", "argv", "env", "digest")


def _launch(sglang_version: str, argv: list[str], env: dict) -> dict:
    """What a launch runs: the SGLang release, the flags and the environment (no key)."""
    return {"sglang_version": sglang_version, "argv": argv, "env": env}


def digest_of(sglang_version: str, argv: list[str], env: dict) -> str:
    """The digest (plugins/module_utils/digests.py) of what a launch runs."""
    return digest(_launch(sglang_version, argv, env))


def judged(obj: dict, judged_digests: set[str]) -> bool:
    """Whether a verdict was recorded for obj's launch: under its digest, or under the digest an older
    epforge took of the same launch (a verdicts file written before the canonical layout)."""
    launch = _launch(obj["sglang_version"], obj["argv"], obj["env"])
    return bool({obj["digest"], *accepted_digests(launch)} & judged_digests)


def _adjustment(finding: dict) -> dict:
    """An applied known-issue adjustment, as the object records it: what changed and why."""
    return {
        "id": finding.get("id", ""),
        "changes": finding.get("changes", {}),
        "reason": finding.get("consequence", ""),
        "source": finding.get("source", ""),
    }


def build(
    verdict: dict, sglang_version: str, flag_table: dict | None = None, model_dir: str = DEFAULT_MODEL_DIR
) -> dict:
    """The object for a known-issues verdict (epforge_known_issues.evaluate on the request).

    verdict["adjusted_settings"] holds the request with every adjustment applied (secrets left out).
    A model named by Hub repo ID runs from the directory role model fetches it to under model_dir (an
    adjustment says so; model_paths.py), and every launch has HF_HUB_OFFLINE=1: SGLang never downloads.
    Empty settings (no server requested) give {}. Raises ValueError when the settings cannot be rendered
    (validate_settings' problems).
    """
    if not verdict.get("adjusted_settings"):
        return {}
    settings, model_adjustments = localized(
        with_defaults(without_secrets(verdict.get("adjusted_settings") or {})), model_dir
    )
    argv = build_server_argv(settings, sglang_version=sglang_version, flag_table=flag_table)
    env = build_server_env(settings)
    return {
        "schema": SCHEMA,
        "sglang_version": sglang_version,
        "settings": settings,
        "adjustments": [_adjustment(a) for a in verdict.get("findings", {}).get("adjustments", [])]
        + model_adjustments,
        "argv": argv,
        "env": env,
        "digest": digest_of(sglang_version, argv, env),
    }


def problems(obj, sglang_version: str | None = None) -> list[str]:
    """Why obj cannot be launched or judged as it is (empty: it can): a missing key, another schema, a
    digest that no longer names its argv and environment (edited after it was built), a release other than
    sglang_version (the installed one)."""
    if not isinstance(obj, dict) or not obj:
        return ["no server settings object: role preflight builds it (preflight_server_object)"]
    missing = [key for key in KEYS if key not in obj]
    if missing:
        return [f"the server settings object lacks {', '.join(missing)}: build it with role preflight"]
    found = []
    if obj["schema"] != SCHEMA:
        found.append(f"the server settings object has schema {obj['schema']}, this epforge writes {SCHEMA}")
    if not digest_matches(obj["digest"], _launch(obj["sglang_version"], obj["argv"], obj["env"])):
        found.append(
            "the server settings object's argv or env no longer matches its digest (edited after role "
            "preflight built it): build it again instead of editing it"
        )
    if sglang_version and obj["sglang_version"] != sglang_version:
        found.append(
            f"the server settings object was rendered for SGLang {obj['sglang_version']}, but SGLang "
            f"{sglang_version} is the one installed: run role preflight with the stack of that release"
        )
    return found


def summary(obj: dict) -> dict:
    """What facts record of an object: its digest, release and adjustments (argv and settings where asked)."""
    return {
        "digest": obj["digest"],
        "sglang_version": obj["sglang_version"],
        "adjustments": [a["id"] for a in obj["adjustments"]],
    }
