#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: check the ML env the SGLang server will import, as a whole, after every role ran."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: final_env_check
short_description: Check which distribution provides each module the server imports and its GPU archs
description:
  - Runs after every provisioning role. Inspects the env of O(python) without importing its GPU packages
    (importlib.metadata's packages_distributions and each distribution's RECORD, with sha256 of the files on
    disk). For each module the server imports (C(torch), C(sgl_kernel), C(flashinfer), C(deep_ep)) which
    distributions claim it and which one the import really loads (the one whose RECORD matches the module's
    origin file).
  - Lists the SASS and PTX inside each component's binaries with C(cuobjdump) (the rule of module
    cuda_binary_archs) against O(archs), and says which SGLang features have no kernels for them (for example
    C(attention_backend fa3) on sm_120, whose FlashAttention 3 binary C(sgl_kernel/flash_ops) is built for
    sm_90/sm_100 only).
  - Fails when a feature the requested server settings (O(settings), O(serving)) need lacks one of O(archs).
  - DeepEP. A full SGLang install brings C(sgl-deep-ep), whose import name C(deep_ep) is also the one a
    DeepEP v1.x source build installs; the package installed last owns it. With O(deepep_wheel) (the wheel
    role deepep verified), the distribution that owns C(deep_ep) must be that wheel's, with its files intact.
    When another one won, O(repair=true) uninstalls the other claimants and reinstalls the verified wheel
    (C(pip install --no-deps --force-reinstall)); O(repair=false) fails instead.
  - A rerun on an unchanged env is answered from O(stamp_path) without hashing anything; the stamp holds the
    last full check's verdict with the options it depended on and the path, size and mtime of the env's
    files it depended on (every distribution's RECORD in the site dirs - pip rewrites it on any install or
    uninstall - the site dirs, the python, cuobjdump, the verified wheel, the binaries listed). When any
    of them differs the full check runs again; RV(check) and the log say which path ran and why.
  - Writes the verdict to the local fact C(epforge_final_env) in O(facts_dir) (ok, archs, python, components,
    features, deep_ep with a repair shown as C(verified)) when its content changes (changed, with a diff).
  - Read-only otherwise, except for that repair (changed) and its bookkeeping - the listing cache
    O(cache_path), the stamp O(stamp_path) and a line of O(log_path) per run. These are this module's own
    caches (read by no one else, never edited by a user; deleting them only costs a full check) and its log,
    not managed state, so writing them is not reported as a change, and an unchanged rerun (which appends its
    log line) reports changed=false. Check mode writes none of them and reports the repair and the fact it
    would write; in check mode a missing O(python) (an env role ml_env has not created yet) returns
    RV(env_missing) instead of failing.
options:
  python:
    description: The python of the env the server runs in.
    type: path
    required: true
  archs:
    description: GPU archs the server's kernels must cover (V(12.0), V(9.0), ...), the hosts' GPUs or the
      stack's arch list on a host without GPU.
    type: list
    elements: str
    required: true
  settings_digest:
    description:
      - The digest of the server settings object the settings come from (C(preflight_server_object.digest));
        recorded in the fact, so the facts of sglang, final_env and sglang_server name the same launch.
    type: str
    default: ""
  settings:
    description: The server settings of the settings object (C(preflight_server_object.settings)); the keys
      C(attention_backend), C(prefill_attention_backend), C(decode_attention_backend), C(moe_a2a_backend)
      and the same flags in C(extra_args) decide which features are requested.
    type: dict
    default: {}
  serving:
    description: The env is meant to serve (a full SGLang install), so torch, sgl_kernel and flashinfer are
      needed by every launch. False for a parser-only env (only explicitly requested features count).
    type: bool
    default: true
  deepep_wheel:
    description: The DeepEP wheel role deepep verified (a path on the host); empty when DeepEP was not built
      or chosen by epforge.
    type: path
    default: ""
  repair:
    description: Reinstall O(deepep_wheel) when another distribution owns C(deep_ep) (else fail).
    type: bool
    default: true
  accept_ptx:
    description: Count PTX that the driver can JIT-compile for an arch (default SASS only).
    type: bool
    default: false
  cuobjdump:
    description: Path of C(cuobjdump) (role cuda_toolkit's fact C(cuda_toolkit_cuobjdump)).
    type: path
    required: true
  cache_path:
    description: JSON file remembering each binary's listing by path, size and modification time, so a rerun
      does not read gigabytes of unchanged binaries again. Empty disables it.
    type: path
    default: ""
  log_path:
    description: Log of the repair's pip runs, and one line per run saying which check ran and why.
    type: path
    required: true
  timeout:
    description: Seconds allowed for each cuobjdump and pip call.
    type: int
    default: 600
  serving_fact:
    description: A local fact (role sglang's C(epforge_sglang.fact)); when set, O(serving) is its
      C(can_serve), false when the file does not exist.
    type: path
    default: ""
  stamp_path:
    description: JSON file holding the last full check's verdict and what it depended on (see above). Empty
      disables the fast path.
    type: path
    default: ""
  components:
    description:
      - Components to check (default all). Role deepep checks only V(deep_ep), so that a DeepEP replaced by
        an earlier full SGLang install is put back before its own verification.
    type: list
    elements: str
    default: [torch, sgl_kernel, sgl_kernel.flash_ops, flashinfer, deep_ep]
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.facts_dir.OPTIONAL
attributes:
  check_mode:
    support: full
    details: >-
      Check mode repairs nothing and writes no fact, stamp, cache or log; it reports the repair and the fact
      it would write, the changes a real run reports (the stamp, cache and log are bookkeeping, not reported
      by a real run either).
  diff_mode:
    support: full
    details: The diff shows the owner of C(deep_ep) a repair changes and the fact in O(facts_dir).
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Check the env the server imports against the GPUs' archs
  epforge.ep.final_env_check:
    python: /opt/epforge/ml-env/bin/python
    archs: ["12.0"]
    settings: {moe_a2a_backend: deepep, extra_args: [--attention-backend, triton]}
    deepep_wheel: /var/lib/epforge/wheels/deep_ep/0123abcd/deep_ep-1.2.1-cp311-cp311-linux_x86_64.whl
    cuobjdump: /opt/epforge/cuda-13.0/bin/cuobjdump
    cache_path: /var/lib/epforge/final-env-listings.json
    stamp_path: /var/lib/epforge/final-env-stamp.json
    facts_dir: /etc/ansible/facts.d
    log_path: /var/log/epforge/final-env.log
  register: final_env
"""

RETURN = r"""
ok:
  description: Every requested feature has kernels for every arch.
  returned: always
  type: bool
archs:
  description: The archs checked.
  returned: always
  type: list
  elements: str
components:
  description: Per component (C(torch), C(sgl_kernel), C(sgl_kernel.flash_ops), C(flashinfer), C(deep_ep)),
    the distribution the import loads, its version, status (C(ok), C(missing_archs), C(jit), C(no_binaries),
    C(absent), C(unowned)), the SASS and PTX of its binaries, what covers each arch and what is missing.
  returned: always
  type: dict
  sample:
    deep_ep: {distribution: deep_ep, version: 1.2.1, status: ok, sass: [sm_120], ptx: [],
              covered: {"12.0": "sass sm_120 (deep_ep_cpp.cpython-311-x86_64-linux-gnu.so)"}, missing: [],
              claimants: [deep_ep], binaries: [/venv/lib/python3.11/site-packages/deep_ep_cpp.so]}
features:
  description: Per SGLang feature, its component, whether the settings request it and whether it has kernels.
  returned: always
  type: list
  elements: dict
  sample: [{feature: attention_backend fa3, component: sgl_kernel.flash_ops, requested: false, kernels: false,
            missing: ["12.0"]}]
deep_ep:
  description: Which DeepEP the env holds against the verified one (C(expected), C(owner), C(claimants),
    C(state) C(verified) | C(repaired) | C(would_repair) | C(not_verified_by_epforge) | C(absent)).
  returned: always
  type: dict
actions:
  description: What the repair did (empty when nothing changed).
  returned: always
  type: list
  elements: str
check:
  description: C(stamp) when the verdict came from O(stamp_path) (nothing hashed), C(full) when the env was
    inspected.
  returned: unless env_missing
  type: str
stamp_reason:
  description: Why the full check ran (C(no stamp), C(inputs changed), C(env files changed - PATHS)); empty
    on the fast path.
  returned: unless env_missing
  type: str
fact_changed:
  description: The fact in O(facts_dir) was (or in check mode would be) rewritten.
  returned: unless env_missing
  type: bool
watch:
  description:
    - For the probe cache (plugins/module_utils/watch.py), on a verdict answered from O(stamp_path) that
      changed nothing - the sorted paths it depends on - the stamp's files (O(python) as given and resolved,
      O(cuobjdump), O(deepep_wheel), the site dirs and every distribution's RECORD in them, the binaries
      listed), O(stamp_path), the fact file, O(serving_fact) and the directory of O(log_path).
    - Empty after a full check (the next run answers from the stamp), a change, or without O(stamp_path).
  returned: unless env_missing
  type: list
  elements: str
env_missing:
  description: Check mode only - O(python) does not exist yet; nothing was checked.
  returned: when true
  type: bool
"""

import contextlib
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import parse_arch
from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd
from ansible_collections.epforge.ep.plugins.module_utils.cuobjdump import CuobjdumpError, read_binary
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest, is_older_layout
from ansible_collections.epforge.ep.plugins.module_utils.files import (
    json_text,
    read_json,
    write_json_atomic,
)
from ansible_collections.epforge.ep.plugins.module_utils.final_env_check.deep_ep_owner import (
    DeepEPRepair,
    deep_ep_ownership,
)
from ansible_collections.epforge.ep.plugins.module_utils.final_env_check.final_env import (
    COMPONENTS,
    FEATURES,
    component_binaries,
    coverage,
    requested_features,
    stamp_difference,
    wheel_distribution,
)
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import env_owners, python_layout
from ansible_collections.epforge.ep.plugins.module_utils.watch import (
    binary_paths,
    file_states,
    record_files,
    watch_list,
)

FACT_NAME = "epforge_final_env"
# The options a verdict depends on (serving is added as resolved from serving_fact).
STAMPED_OPTIONS = (
    "python",
    "archs",
    "settings",
    "settings_digest",
    "deepep_wheel",
    "repair",
    "accept_ptx",
    "cuobjdump",
    "components",
)
# What a stored verdict does not keep: per-run outcomes.
STAMP_EXCLUDED = ("changed", "diff", "check", "stamp_reason", "ok", "warnings_lacking", "fact_changed")


def listed_binaries(result: dict) -> list[str]:
    """The binaries a verdict's components listed (their SASS is part of it)."""
    return [b for c in (result.get("components") or {}).values() for b in c.get("binaries", [])]


class FinalEnv:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.fact_file = fact_path(self.p["facts_dir"], FACT_NAME) if self.p["facts_dir"] else ""
        self.cache = (read_json(self.p["cache_path"]) or {}) if self.p["cache_path"] else {}
        self.cache_dirty = False

    # ------------------------------------------------------------------ reading the env
    def site(self) -> list[str]:
        """The env's site directories (real paths; none when its python does not answer)."""
        run = run_payload(self.p["python"], python_layout, timeout=self.p["timeout"])
        answer = run.answer if isinstance(run.answer, dict) else {}
        return [os.path.realpath(answer[k]) for k in ("purelib", "platlib") if answer.get(k)]

    def inspect(self) -> dict:
        chosen = [COMPONENTS[name] for name in self.p["components"]] + [COMPONENTS["deep_ep"]]
        names = sorted({c["module"] for c in chosen} | {m for c in chosen for m in c.get("also", [])})
        # every file of DeepEP's distributions is checked against its RECORD (the repair depends on it)
        deep = [COMPONENTS["deep_ep"]["module"], *COMPONENTS["deep_ep"]["also"]]
        run = run_payload(
            self.p["python"],
            env_owners,
            [json.dumps(names), json.dumps(deep)],
            timeout=self.p["timeout"],
            env_update={"PYTHONNOUSERSITE": "1"},
        )
        if run.rc != 0 or not isinstance(run.answer, dict):
            fail_cmd(
                self.module,
                f"cannot inspect the env of {self.p['python']}",
                run.argv,
                run.rc or 1,
                output=run.output,
            )
        data = run.answer
        data["site"] = self.site()
        return data

    def listing(self, path: str) -> dict:
        """cuobjdump's SASS/PTX of one binary (plugins/module_utils/cuobjdump.py), remembered by path,
        size and mtime."""
        stat = os.stat(path)
        key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
        if key in self.cache:
            return self.cache[key]
        try:
            parsed = read_binary(self.p["cuobjdump"], path, self.p["timeout"])
        except CuobjdumpError as exc:
            self.module.fail_json(**exc.fail_fields())
        result = {"sass": parsed["sass"], "ptx": parsed["ptx"], "host_only": parsed["host_only"]}
        self.cache[key] = result
        self.cache_dirty = True
        return result

    # ------------------------------------------------------------------ DeepEP ownership
    def deep_ep_state(self, env: dict) -> dict:
        return deep_ep_ownership(env["modules"], self.p["deepep_wheel"])

    def repair(self, state: dict) -> list[str]:
        return DeepEPRepair(self.module).run(state)

    # ------------------------------------------------------------------ components and features
    def components(self, env: dict, archs: list[str]) -> dict:
        out = {}
        for name, spec in COMPONENTS.items():
            if name not in self.p["components"]:
                continue
            module = env["modules"].get(spec["module"]) or {}
            owner, binaries = component_binaries(name, env["modules"], env["site"])
            entry = {
                "module": spec["module"],
                "claimants": sorted(c["distribution"] for c in module.get("claims", [])),
                "distribution": owner["distribution"] if owner else "",
                "version": owner["version"] if owner else "",
                "binaries": binaries,
                "sass": [],
                "ptx": [],
                "covered": {},
                "missing": list(archs),
            }
            if not module.get("origin"):
                entry["status"] = "absent"
            elif owner is None:
                entry["status"] = "unowned"
            elif not binaries:
                entry["status"] = "jit" if spec.get("jit") else "no_binaries"
                if spec.get("jit"):
                    entry["missing"] = []
            else:
                listings = {path: self.listing(path) for path in binaries}
                entry.update(coverage(listings, archs, self.p["accept_ptx"]))
                entry["status"] = "ok" if not entry["missing"] else "missing_archs"
            out[name] = entry
        return out

    def features(self, components: dict) -> list[dict]:
        requested = {f["feature"] for f in requested_features(self.p["settings"], self.serving())}
        return [
            {
                "feature": f["feature"],
                "component": f["component"],
                "requested": f["feature"] in requested,
                "kernels": not components[f["component"]]["missing"],
                "missing": components[f["component"]]["missing"],
                "status": components[f["component"]]["status"],
            }
            for f in FEATURES
            if f["component"] in components
        ]

    # ------------------------------------------------------------------ input
    def validate(self) -> bool:
        """Refuse bad input before anything changes; False when check mode finds no env yet."""
        p = self.p
        unknown = sorted(set(p["components"]) - set(COMPONENTS))
        if unknown:
            self.module.fail_json(msg=f"unknown components {unknown}: choose from {sorted(COMPONENTS)}")
        bad = [a for a in p["archs"] if parse_arch(a) is None]
        if bad or not p["archs"]:
            self.module.fail_json(msg=f"archs must be GPU archs such as 12.0 or 9.0, got {p['archs']}")
        if p["deepep_wheel"]:
            try:
                wheel_distribution(p["deepep_wheel"])
            except ValueError as exc:
                self.module.fail_json(msg=str(exc))
        if not os.access(p["python"], os.X_OK):
            if self.module.check_mode and not os.path.exists(p["python"]):
                return False
            self.module.fail_json(msg=f"python {p['python']} is not executable: run role ml_env first")
        if not os.access(p["cuobjdump"], os.X_OK):
            self.module.fail_json(msg=f"cuobjdump {p['cuobjdump']} is not executable: run role cuda_toolkit")
        return True

    def serving(self) -> bool:
        """O(serving), or O(serving_fact)'s can_serve when that option is set (false without the file)."""
        if not self.p["serving_fact"]:
            return self.p["serving"]
        return bool((read_json(self.p["serving_fact"]) or {}).get("can_serve", False))

    # ------------------------------------------------------------------ the stamp (fast path)
    def stamp_inputs(self) -> tuple[dict, list[str]]:
        """(the options, files whose state the verdict depends on, besides the listed binaries)."""
        p = self.p
        options = {k: p[k] for k in STAMPED_OPTIONS}
        options["serving"] = self.serving()
        site = self.site()
        fixed = [os.path.realpath(p["python"]), p["cuobjdump"]] + (
            [p["deepep_wheel"]] if p["deepep_wheel"] else []
        )
        return options, fixed + record_files(site)

    def from_stamp(self, options: dict, files: list[str]) -> tuple[dict | None, str]:
        """(the stored verdict, '') when nothing it depends on changed, else (None, why)."""
        stamp = read_json(self.p["stamp_path"]) if self.p["stamp_path"] else None
        binaries = listed_binaries((stamp or {}).get("result") or {})
        why = (
            stamp_difference(stamp, options, file_states(files + binaries))
            if self.p["stamp_path"]
            else "no stamp_path"
        )
        if why:
            return None, why
        if is_older_layout(stamp.get("key"), options) and not self.module.check_mode:
            # an older epforge's key for the same options: the verdict stands, its stamp is rewritten once
            self.store_stamp(options, files, stamp["result"])
        return stamp["result"], ""

    def store_stamp(self, options: dict, files: list[str], result: dict) -> None:
        binaries = listed_binaries(result)
        write_json_atomic(
            self.p["stamp_path"],
            {"key": digest(options), "files": file_states(files + binaries), "result": result},
        )

    # ------------------------------------------------------------------ the full check (slow path)
    def converge_deep_ep(self, env: dict) -> tuple[dict, dict, list[str]]:
        """(env, deep_ep state, repair actions): the verified DeepEP put back when another one won."""
        deep_ep = self.deep_ep_state(env)
        if deep_ep["state"] != "wrong_owner":
            return env, deep_ep, []
        actions = self.repair(deep_ep)
        if self.module.check_mode:
            return env, dict(deep_ep, state="would_repair"), actions
        env = self.inspect()
        after = self.deep_ep_state(env)
        if after["state"] != "verified":
            self.module.fail_json(
                msg=f"deep_ep is still not the verified {after['expected']} after the "
                f"repair (owner {after['owner']}, claimants {after['claimants']})",
                deep_ep=after,
                actions=actions,
            )
        return env, dict(after, state="repaired", replaced=deep_ep["owner"]), actions

    def full_check(self) -> dict:
        env, deep_ep, actions = self.converge_deep_ep(self.inspect())
        components = self.components(env, list(self.p["archs"]))
        if deep_ep["state"] == "would_repair":
            # check mode: a real run would put the verified wheel (whose SASS role deepep checked) in place
            components["deep_ep"].update(status="would_repair", missing=[])
        if self.cache_dirty and self.p["cache_path"] and not self.module.check_mode:
            write_json_atomic(self.p["cache_path"], self.cache)
        result = {
            "changed": bool(actions),
            "archs": list(self.p["archs"]),
            "components": components,
            "features": self.features(components),
            "deep_ep": deep_ep,
            "actions": actions,
            "python": env["python"],
        }
        if actions:
            result["diff"] = {
                "before": f"deep_ep: {deep_ep.get('replaced', deep_ep['owner'])}\n",
                "after": f"deep_ep: {deep_ep['expected']}\n",
            }
        return result

    # ------------------------------------------------------------------ verdict, fact, log
    def verdict(self, result: dict) -> list[dict]:
        """Set ok and the warnings; return the requested features that lack kernels."""
        features = result["features"]
        lacking = [f for f in features if f["requested"] and not f["kernels"]]
        result["ok"] = not lacking
        result["warnings_lacking"] = [
            f"{f['feature']}: no kernels for {', '.join(f['missing'])}" for f in features if not f["kernels"]
        ]
        return lacking

    def fail_lacking(self, result: dict, lacking: list[dict]) -> None:
        lines = []
        for f in lacking:
            comp = result["components"][f["component"]]
            found = ", ".join(comp["sass"]) or "none"
            lines.append(
                f"{f['feature']} needs {f['component']} ({comp['distribution'] or 'not installed'}"
                f"{' ' + comp['version'] if comp['version'] else ''}: status {comp['status']}, "
                f"SASS {found}), which lacks {', '.join(f['missing'])}"
            )
        self.module.fail_json(
            msg="the requested server settings need kernels this env does not have for "
            f"{', '.join(self.p['archs'])}: " + "; ".join(lines),
            **result,
        )

    def record_fact(self, result: dict) -> bool:
        """Write the fact when its content changes (check mode: say whether it would); True if it does. The
        one fact writer (local_facts.py) compares content, not layout (an older writer's indentation is no
        change)."""
        deep_ep = {k: v for k, v in result["deep_ep"].items() if k != "replaced"}
        if deep_ep["state"] == "repaired":
            deep_ep["state"] = "verified"
        fact = {
            "ok": result["ok"],
            "archs": result["archs"],
            "python": self.p["python"],
            "components": result["components"],
            "features": result["features"],
            "deep_ep": deep_ep,
            "settings_digest": self.p["settings_digest"],
        }
        # as JSON reads it back (tuples become lists), so that an unchanged verdict compares equal
        written = write_local_fact(
            self.p["facts_dir"], FACT_NAME, json.loads(json_text(fact)), self.module.check_mode
        )
        if not written["changed"]:
            return False
        if self.module._diff:
            before = result.get("diff") or {"before": "", "after": ""}
            result["diff"] = {
                "before": before["before"] + written["diff"]["before"],
                "after": before["after"] + written["diff"]["after"],
                "before_header": written["path"],
                "after_header": written["path"],
            }
        return True

    def watch(self, result: dict, files: list[str]) -> list[str]:
        """The probe cache's watch list: only for a verdict answered from the stamp that changed nothing (a
        full check stamps its verdict, so the next run answers differently: check=stamp). The stamp's own
        files (fixed ones, every RECORD, the listed binaries), the stamp, the fact compared, the sglang fact
        that decides serving, the binaries as given and the log dir that log() makes."""
        if result.get("check") != "stamp" or result["changed"]:
            return []
        p = self.p
        own = [p["stamp_path"], self.fact_file, p["serving_fact"], os.path.dirname(p["log_path"])]
        return watch_list(
            files, listed_binaries(result), binary_paths(p["python"]), binary_paths(p["cuobjdump"]), own
        )

    def log(self, line: str) -> None:
        if self.module.check_mode:
            return
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self.p["log_path"]) or ".", exist_ok=True)
            with open(self.p["log_path"], "a", encoding="utf-8") as handle:
                handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} final_env_check: {line}\n")

    def run(self) -> None:
        if not self.validate():
            self.module.exit_json(
                changed=False,
                env_missing=True,
                msg=f"check mode: {self.p['python']} does not exist yet (role ml_env creates it)",
            )
        options, files = self.stamp_inputs()
        result, why = self.from_stamp(options, files)
        if result is not None:
            result = dict(result, check="stamp", stamp_reason="")
            self.log(f"env unchanged since the stamp {self.p['stamp_path']}: verdict reused, nothing hashed")
        else:
            started = time.monotonic()
            result = dict(self.full_check(), check="full", stamp_reason=why)
            self.log(f"full check ({why}) in {time.monotonic() - started:.1f} s")
        lacking = self.verdict(result)
        if lacking and self.serving():
            # Only an env meant to serve fails: a parser-only env (a CPU build host) records what a server
            # there would lack.
            self.fail_lacking(result, lacking)
        if result["check"] == "full" and self.p["stamp_path"] and not self.module.check_mode:
            if result["actions"]:
                # the repair changed the env: the next run checks it in full and stamps what it finds
                with contextlib.suppress(OSError):
                    os.unlink(self.p["stamp_path"])
            else:
                self.store_stamp(options, files, {k: v for k, v in result.items() if k not in STAMP_EXCLUDED})
        result["fact_changed"] = bool(self.fact_file) and self.record_fact(result)
        result["changed"] = bool(result["actions"]) or result["fact_changed"]
        result["watch"] = self.watch(result, files)
        self.module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "archs": {"type": "list", "elements": "str", "required": True},
            "settings": {"type": "dict", "default": {}},
            "settings_digest": {"type": "str", "default": ""},
            "serving": {"type": "bool", "default": True},
            "deepep_wheel": {"type": "path", "default": ""},
            "repair": {"type": "bool", "default": True},
            "accept_ptx": {"type": "bool", "default": False},
            "cuobjdump": {"type": "path", "required": True},
            "cache_path": {"type": "path", "default": ""},
            "log_path": {"type": "path", "required": True},
            "timeout": {"type": "int", "default": 600},
            "components": {"type": "list", "elements": "str", "default": list(COMPONENTS)},
            "serving_fact": {"type": "path", "default": ""},
            "stamp_path": {"type": "path", "default": ""},
            "facts_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    FinalEnv(module).run()


if __name__ == "__main__":
    main()
