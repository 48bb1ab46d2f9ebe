"""module final_env_check's second job: DeepEP's ownership in the final env, and its repair.

A later pip run (a full SGLang install pulls sgl-deep-ep) can leave another distribution owning `deep_ep`
than the wheel role deepep verified; the server would import that one. deep_ep_ownership() says who owns it
(from payload env_owners' answer); DeepEPRepair puts the verified wheel back when the module may repair.
Unit-tested through the module in tests/unit/test_final_env.py and tests/unit/test_final_env_stamp.py.
"""

from __future__ import annotations

import os

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd
from ansible_collections.epforge.ep.plugins.module_utils.final_env_check.final_env import wheel_distribution
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import NO_VERSION_CHECK, pip_argv
from ansible_collections.epforge.ep.plugins.module_utils.process import run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import normalize


def deep_ep_ownership(modules: dict, deepep_wheel: str) -> dict:
    """Who provides deep_ep in the env (payload env_owners' modules): its claimants, the one whose files the
    import loads, and - when role deepep verified a wheel (deepep_wheel) - whether that wheel is the owner,
    intact and alone (state verified), or another won (wrong_owner)."""
    claims: dict[str, dict] = {}
    for module_name in ("deep_ep", "deep_ep_cpp"):
        for claim in (modules.get(module_name) or {}).get("claims", []):
            agg = claims.setdefault(
                normalize(claim["distribution"]),
                {"version": claim["version"], "files_changed": 0, "files_missing": 0},
            )
            agg["files_changed"] += claim["files_changed"]
            agg["files_missing"] += claim["files_missing"]
    owners = [c for c in (modules.get("deep_ep") or {}).get("claims", []) if c["provides_origin"]]
    owner = normalize(owners[0]["distribution"]) if len(owners) == 1 else ""
    state = {
        "claimants": sorted(claims),
        "owner": owner,
        "owner_version": claims[owner]["version"] if owner else "",
        "expected": "",
        "state": "",
    }
    if not deepep_wheel:
        state["state"] = "absent" if not claims else "not_verified_by_epforge"
        return state
    name, version = wheel_distribution(deepep_wheel)
    state["expected"] = f"{name}=={version}"
    mine = claims.get(name) or {}
    intact = (
        mine.get("version") == version and mine.get("files_changed") == 0 and mine.get("files_missing") == 0
    )
    state["intruders"] = [c for c in sorted(claims) if c != name]
    state["state"] = "verified" if intact and owner == name and not state["intruders"] else "wrong_owner"
    return state


class DeepEPRepair:
    """The verified DeepEP wheel reinstalled over the distribution that won deep_ep."""

    def __init__(self, module) -> None:
        self.module = module
        self.p = module.params

    def run(self, state: dict) -> list[str]:
        """Put the verified wheel back (refused unless the module's repair option allows it): the intruders
        uninstalled first, then the wheel reinstalled; the actions as a reader would type them."""
        wheel = self.p["deepep_wheel"]
        what = (
            f"deep_ep is owned by {state['owner'] or 'no distribution'} ({state['owner_version'] or '-'}), "
            f"claimed by {', '.join(state['claimants']) or 'none'}; the verified one is {state['expected']}"
        )
        if not self.p["repair"]:
            self.module.fail_json(
                msg=f"{what}. The server would import a DeepEP that role deepep did not "
                "verify. Set final_env_repair: true to reinstall the verified wheel.",
                deep_ep=state,
            )
        if not os.path.isfile(wheel):
            self.module.fail_json(
                msg=f"{what}, and the verified wheel {wheel} is gone: rerun role deepep", deep_ep=state
            )
        # Uninstall first: a claimant's uninstall deletes every file its RECORD lists, including files the
        # verified wheel shares with it (deep_ep/__init__.py), so the verified wheel goes in last.
        steps = []
        if state["intruders"]:
            steps.append(pip_argv(self.p["python"], "uninstall", "-y", *state["intruders"]))
        steps.append(pip_argv(self.p["python"], "install", "--no-deps", "--force-reinstall", wheel))
        # what it runs, as a reader would type it (the interpreter and pip's version-check flag left out)
        actions = [
            f"{what}: "
            + " then ".join(" ".join(a for a in argv[2:] if a != NO_VERSION_CHECK) for argv in steps)
        ]
        if self.module.check_mode:
            return actions
        env = dict(os.environ, PIP_NO_INPUT="1")
        for argv in steps:
            rc, _seconds = run_logged(
                argv, self.p["log_path"], env=env, timeout=self.p["timeout"], header="final_env_check repair"
            )
            if rc != 0:
                fail_cmd(
                    self.module,
                    f"repair of deep_ep failed; see {self.p['log_path']}",
                    argv,
                    rc,
                    log_path=self.p["log_path"],
                )
        return actions
