"""Reuse a probe module's answer while nothing it depends on has changed.

A no-op rerun of the provision is made of probes: each role asks the host once whether its work is done.
Shipping a module costs ~0.8 s on a 2-core controller whatever the module does (the AnsiballZ payload is
built once per module per run on the controller, then the host starts Python, compiles the payload's
module_utils and imports ansible.module_utils.basic), and a probe that found its role current last time will
find it current again as long as its inputs and the files it read are unchanged. So, for a module that opts in
(`action_plugin: epforge.ep.probe_cache` under its name in meta/runtime.yml):

  - the key is sha256 over the module's name, the task's arguments and environment, the content of the
    module's file and of the project's module_utils, and the ansible-core version;
  - ONE low-level command on the host (a short `python -I -S -c` script, no payload) reads the record
    <epforge_state_dir>/probe-cache/<module>-<key[:16]>.json and compares the state (size, mtime_ns,
    ctime_ns, inode; or missing) of every path the record watches with what it was when the module ran;
  - same key, same states: the recorded result is the answer (changed false) and the module does not run;
  - the record is sealed: an HMAC over its key, result and watch list with a secret that never leaves the
    controller (~/.cache/epforge/probe-cache.key, 0600; plugins/module_utils/seal.py owns it and refuses one
    that others can read, or an empty one, with the remedy). A record whose result was edited on the host, or
    one written by another controller, is a miss: the module runs;
  - otherwise the module runs as it always did. When its result is unchanged (not failed, not changed, not in
    check mode) and names the paths its verdict depends on (its `watch` return), the record is (re)written.

The module stays the only owner of its verdict: what to watch is its answer (documented in its RETURN), and
a record only ever replays a result that module produced. A task that is no_log or delegated, a host without a
known Python, or `epforge_probe_cache: false` runs the module every time. Every result says what happened in
`probe_cache` (hit, the reason of a miss, the record's path; `pruned` when a write removed the module's oldest
records beyond RECORDS_KEPT_PER_MODULE, removed so that keys no longer asked for do not pile up).
"""

from __future__ import annotations

import base64
import copy
import hmac
import inspect
import json
import shlex
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.executor.module_common import _get_shebang
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import module_loader
from ansible.release import __version__ as ansible_version

from ansible_collections.epforge.ep.plugins.module_utils import seal
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.payloads import probe_record
from ansible_collections.epforge.ep.plugins.plugin_utils.module_result import without_internal_keys

# The host's side (payload probe_record: read a record, write one), sent as `python -I -S -c SOURCE ...`.
RECORD_SCRIPT = inspect.getsource(probe_record)
RECORDS_KEPT_PER_MODULE = probe_record.RECORDS_KEPT_PER_MODULE

# The longest record passed as an argument (the shell command holding it is one argument of sh -c, and the
# kernel's limit for one argument is 128 KiB); a longer one goes on stdin or in a file.
ARG_LIMIT = 96 * 1024


# The module_utils every probe module imports from: this collection's (plugins/action ->
# plugins/module_utils).
MODULE_UTILS = Path(__file__).resolve().parents[1] / "module_utils"


def code_digest(module_path: str) -> str:
    """The digest of the module file's hash and every .py of this collection's module_utils by name."""
    utils = {
        str(path.relative_to(MODULE_UTILS)): file_sha256(str(path)) for path in MODULE_UTILS.rglob("*.py")
    }
    return digest({"module": file_sha256(module_path), "module_utils": utils})


def probe_key(name: str, module_path: str, args: dict, environment: str) -> str:
    material = {
        "module": name,
        "args": args,
        "environment": environment,
        "code": code_digest(module_path),
        "ansible": ansible_version,
    }
    return digest(material)


def seal_of(key: str, result: dict, watch: list[str]) -> str:
    """HMAC-SHA256 over what a record answers for: its key, its result, the paths it watched, with the
    controller's secret (plugins/module_utils/seal.py: a key others can read, or an empty one, fails the task
    with the remedy)."""
    try:
        secret = seal.controller_key()
    except seal.SealKeyError as exc:
        raise AnsibleError(str(exc)) from None
    return seal.seal(secret, [key, result, sorted(watch)])


def recordable(result: dict, check_mode: bool) -> bool:
    """Only an unchanged answer that names what it depends on is kept, and never from a check-mode run."""
    return (
        not check_mode
        and not result.get("failed")
        and not result.get("changed")
        and isinstance(result.get("watch"), list)
        and len(result["watch"]) > 0
    )


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # the module's own supports_check_mode decides on a miss
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        name = self._task.action
        args = dict(self._task.args)
        plan, why_off = self.plan(name, args, task_vars)
        if plan is None:
            answer = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
            return dict(result, **answer, probe_cache={"hit": False, "reason": why_off, "record": ""})
        record, key = plan
        interpreter = self.host_python(task_vars)
        found = (
            self.host_json(interpreter, RECORD_SCRIPT, ["read", record, key])
            if interpreter
            else {"hit": False, "reason": "host Python not known yet"}
        )
        if found.get("hit") and not hmac.compare_digest(
            str(found.get("seal", "")), seal_of(key, found["result"], found.get("watch", []))
        ):
            found = {"hit": False, "reason": "record not sealed by this controller (edited, or another's)"}
        if found.get("hit"):
            result.update(found["result"])
            result.update(changed=False, probe_cache={"hit": True, "reason": "", "record": record})
            return result
        answer = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        # the first module call on a host discovers its Python: the record can be written with it
        interpreter = interpreter or (answer.get("ansible_facts") or {}).get(
            "discovered_interpreter_python", ""
        )
        cache = {"hit": False, "reason": found.get("reason") or found.get("error", ""), "record": record}
        if interpreter and recordable(answer, self._task.check_mode):
            pruned = self.store(interpreter, record, key, name, answer)
            if pruned:
                cache["pruned"] = pruned
        return dict(result, **answer, probe_cache=cache)

    def store(self, interpreter: str, record: str, key: str, name: str, answer: dict) -> list:
        """Write the record on the host; the paths of the module's old records that went."""
        # a copy: without_internal_keys edits nested dicts, and the task's own result stays whole; it also
        # drops a discovered interpreter, a fact of this run, not of the answer
        kept = without_internal_keys(copy.deepcopy(answer))
        kept.pop("invocation", None)
        if not kept.get("ansible_facts", True):
            del kept["ansible_facts"]
        payload = {"key": key, "module": name, "watch": sorted(set(answer["watch"])), "result": kept}
        payload = json.loads(json.dumps(payload, default=str))  # sealed as the host will read it back
        payload["seal"] = seal_of(key, payload["result"], payload["watch"])
        encoded = base64.b64encode(json.dumps(payload, default=str).encode()).decode()
        if len(encoded) <= ARG_LIMIT:
            return self.host_json(interpreter, RECORD_SCRIPT, ["write", record, encoded]).get("pruned", [])
        if getattr(self._connection, "has_pipelining", False):  # its stdin reaches the host's command
            answer = self.host_json(interpreter, RECORD_SCRIPT, ["write", record, "-"], encoded.encode())
            return answer.get("pruned", [])
        # no stdin through this connection (podman exec has no -i): a file in the task's temp dir on the host
        tmp = self._make_tmp_path()
        try:
            path = self._connection._shell.join_path(tmp, "probe-cache-record")
            self._transfer_data(path, encoded)
            return self.host_json(interpreter, RECORD_SCRIPT, ["write", record, "@" + path]).get("pruned", [])
        finally:
            self._remove_tmp_path(tmp)

    def why_off(self, task_vars: dict) -> str:
        """Why the cache does not apply to this task ('' when it does)."""
        # -e epforge_probe_cache=false arrives as text: read it as Ansible reads a boolean
        if not boolean(self._templar.template(task_vars.get("epforge_probe_cache", True)), strict=False):
            return "off (epforge_probe_cache: false)"
        if self._task.no_log:
            return "off (no_log task)"
        if self._task.delegate_to:
            return "off (delegated task)"
        if not task_vars.get("epforge_state_dir"):
            return "off (no epforge_state_dir)"
        return ""

    def host_python(self, task_vars: dict) -> str:
        """The interpreter the module would run with ('' while discovery has not run for this host)."""
        is_local = bool(getattr(self._connection, "_remote_is_local", False))
        try:
            return (
                _get_shebang("/usr/bin/python", task_vars, self._templar, remote_is_local=is_local)[1] or ""
            )
        except Exception:  # interpreter discovery not done yet: the module's run will do it
            return ""

    def plan(self, name: str, args: dict, task_vars: dict):
        """((record path, key), '') when the cache applies to this task, else (None, why not)."""
        module_path = module_loader.find_plugin(name)
        why = self.why_off(task_vars) or (f"off (no module file for {name})" if module_path is None else "")
        if why:
            return None, why
        key = probe_key(name, module_path, args, self._compute_environment_string())
        state_dir = self._templar.template(task_vars["epforge_state_dir"])
        return (f"{state_dir}/probe-cache/{name.rsplit('.', 1)[-1]}-{key[:16]}.json", key), ""

    def host_json(self, interpreter: str, script: str, argv: list[str], in_data: bytes | None = None) -> dict:
        """Run a short script with the host's Python (no site, isolated) and return its JSON answer.

        A failure is not the task's failure: the record cannot be used
        (the module then runs)."""
        cmd = shlex.join([interpreter, "-I", "-S", "-c", script, *argv])
        try:
            out = self._low_level_execute_command(cmd, sudoable=True, in_data=in_data)
        except (AnsibleError, OSError) as exc:  # OSError: e.g. E2BIG from the local connection's exec
            return {"hit": False, "error": f"probe cache not usable: {exc}"}
        stdout = to_text(out.get("stdout", ""))
        try:
            return json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (to_text(out.get("stderr", "")) or stdout)[-300:]
            return {"hit": False, "error": f"probe cache script rc {out.get('rc')}: {tail}"}
