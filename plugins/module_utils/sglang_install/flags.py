"""module sglang_install's second job: SGLang's own parser on the server settings object's argv, once the
release is installed (plugins/module_utils/sglang_flags.py runs it, or answers from its verdicts file).

The first job, the install, is the module's; a no-op install still has its flags judged (from the verdict
when nothing they depend on changed: the argv, the release, the python and the install stamp's digest as
evidence). Tested through the module in tests/unit/test_sglang_install.py.
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.digests import stamp_digest
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_object import problems as object_problems
from ansible_collections.epforge.ep.plugins.module_utils.sglang_flags import check_flags


def flags_argv(module) -> list[str] | None:
    """The argv of the server settings object to judge (refused before anything changes when the object is
    malformed, edited or rendered for another release), or None."""
    params = module.params
    server = params["server_object"]
    if not (params["validate_flags"] and server):
        return None
    problems = object_problems(server, params["version"])
    if problems:
        module.fail_json(msg="server settings object refused before SGLang was asked: " + "; ".join(problems))
    if not server["settings"].get("model_path"):
        module.fail_json(msg="server settings object has no model_path: set epforge_server.model_path")
    return list(server["argv"])


def judge_flags(module, argv: list[str] | None, installed: dict, stamp: dict) -> dict:
    """SGLang's parser on the flags (or its remembered outcome); skipped in check mode before an install."""
    params = module.params
    if argv is None or (module.check_mode and installed["changed"]):
        return {"validated": False, "argv": []}
    outcome = check_flags(
        module,
        params["python"],
        argv,
        params["version"],
        timeout=params["flags_timeout"],
        cache_path=params["flags_cache_path"],
        evidence=stamp_digest(stamp),
        digest=params["server_object"]["digest"],
    )
    return {"validated": True, "argv": redact(argv), "digest": params["server_object"]["digest"], **outcome}
