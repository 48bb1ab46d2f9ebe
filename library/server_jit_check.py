#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the server's first JIT build, done in provision as the server will do it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_jit_check
short_description: Build the SGLang server's first FlashInfer JIT kernel as its account, with its environment
description:
  - A real SGLang server JIT-builds FlashInfer's rmsnorm module at its first forward pass (SGLang 0.5.16,
    C(sgl_kernel) -> C(flashinfer.norm) -> C(gen_norm_module().build_and_load())), which runs C(ninja),
    C(nvcc) and C(c++) by name from the server's C(PATH). A check run as root with root's C(PATH) cannot see a
    server that lacks them; this one runs as the service account with exactly the environment module
    C(sglang_server) gives the server (C(plugins/module_utils/server_env.py), the same function, so the env's
    C(bin/) and the toolkit's C(bin/) on C(PATH), C(CUDA_HOME), the account's C(HOME), the request's own
    variables), in the account's home, so FlashInfer's cache (C(HOME/.cache/flashinfer)) is the server's, and
    the first launch finds the kernel built.
  - Where the env holds no FlashInfer, it resolves the JIT tools (C(ninja); C(nvcc) when a toolkit is known)
    on that C(PATH) as the account instead.
  - On a host without GPU, FlashInfer has no device to read the arch from, so O(arch_list) is passed as
    C(FLASHINFER_CUDA_ARCH_LIST) (and RV(env_added) says so).
  - A stamp (O(stamp_path)) of the environment, the account, the python and the env's installed
    distributions makes an unchanged rerun a no-op without importing anything; the built kernel must
    still exist. The stamp is this module's own bookkeeping (root-only, read by nothing else), so writing it
    is not reported as a change; a run reports a change when it compiled the kernel (RV(built)).
  - Fails with the classification of the output (C(jit_tool_missing) for a tool not found), the command,
    its rc and the log tail.
options:
  user:
    description: The server's account (module C(sglang_server)'s O(epforge.ep.sglang_server#module:user)).
    type: str
    required: true
  cuda_home:
    description: As module C(sglang_server)'s O(epforge.ep.sglang_server#module:cuda_home).
    type: path
    default: ""
  toolkit_fact:
    description: As module C(sglang_server)'s O(epforge.ep.sglang_server#module:toolkit_fact).
    type: path
    default: /etc/ansible/facts.d/epforge_cuda_toolkit.fact
  env:
    description: The server's own variables (the settings object's C(env) merged with C(sglang_server_env)).
    type: dict
    default: {}
  gpu:
    description: Whether the host has a GPU the server will use (preflight's answer).
    type: bool
    required: true
  arch_list:
    description: C(FLASHINFER_CUDA_ARCH_LIST) for a host without GPU (the flashinfer role's rule).
    type: str
    default: ""
  stamp_path:
    description: Where the stamp of a passed check is kept (root-only).
    type: path
    required: true
  timeout:
    description: Seconds before the build is stopped with its process group.
    type: int
    default: 1200
extends_documentation_fragment:
  - epforge.ep.python
  - epforge.ep.log_path
  - epforge.ep.attributes
attributes:
  check_mode:
    support: partial
    details: >-
      Check mode runs nothing as the account, compiles nothing and writes no stamp. An unchanged rerun is
      answered from the stamp (RV(check) C(stamp), changed=false) exactly as a real run answers it. Otherwise
      it returns RV(check) C(run), changed=false and C(msg) saying the build would run; there a real run
      reports changed=true when FlashInfer compiles the kernel, which check mode does not predict - whether
      FlashInfer's JIT cache of the account (C(HOME/.cache/flashinfer)) is up to date is decided by
      FlashInfer's own build (ninja, with the installed release's sources and flags), only by running it.
      Where the env holds no FlashInfer a real run compiles nothing and also reports changed=false. Before
      the account exists (made by an earlier task of the same run) check mode returns changed=false too.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Build the server's first JIT kernel as its account
  epforge.ep.server_jit_check:
    python: /opt/epforge/ml-env/bin/python
    user: sglang
    cuda_home: /usr/local/cuda-13.0
    env: {HF_HUB_OFFLINE: "1"}
    gpu: true
    stamp_path: /var/lib/epforge/server-jit.json
    log_path: /var/log/epforge/server-jit.log
"""

RETURN = r"""
kernel:
  description: The built kernel's shared object, or empty where the env holds no FlashInfer.
  returned: success
  type: str
tools:
  description: Where the account's PATH resolves each JIT tool (null when it does not).
  returned: success
  type: dict
  sample: {ninja: /opt/epforge/ml-env/bin/ninja, nvcc: /usr/local/cuda-13.0/bin/nvcc}
env:
  description: The environment the check ran with (the server's, values of secret-looking names masked).
  returned: always
  type: dict
env_added:
  description: Variables the check set that the server will not have (C(FLASHINFER_CUDA_ARCH_LIST) on a
    host without GPU).
  returned: success
  type: dict
built:
  description: Whether this run compiled the kernel (false when FlashInfer's cache of the account had it).
  returned: success
  type: bool
seconds:
  description: Wall time of the check.
  returned: success
  type: float
check:
  description: C(stamp) (unchanged rerun, nothing run) or C(run).
  returned: success
  type: str
"""

import glob
import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail_file
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv
from ansible_collections.epforge.ep.plugins.module_utils.payloads import server_jit
from ansible_collections.epforge.ep.plugins.module_utils.payloads.server_jit import MARK
from ansible_collections.epforge.ep.plugins.module_utils.process import run_logged
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_env import (
    TOOLKIT_FACT,
    child_env,
    server_base_env,
    toolkit_home,
)
from ansible_collections.epforge.ep.plugins.module_utils.signatures import (
    describe,
    explain_failure,
)


class ServerJitCheck:
    """One check: the environment, the stamp, the run as the account, the answer."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.account = self.lookup_account()
        cuda_home = toolkit_home(self.p["cuda_home"], self.p["toolkit_fact"])
        base = {
            **server_base_env(self.p["python"], cuda_home),
            **{k: str(v) for k, v in self.p["env"].items()},
        }
        self.env = child_env(base, self.account) if self.account else base
        self.added = {} if self.p["gpu"] else {"FLASHINFER_CUDA_ARCH_LIST": self.p["arch_list"]}
        self.argv, self.shown_argv = payload_argv(self.p["python"], server_jit)

    def lookup_account(self):
        try:
            return pwd.getpwnam(self.p["user"])
        except KeyError:
            if self.module.check_mode:  # created by the task before this one in a real run
                return None
            self.module.fail_json(
                msg=f"the server's account {self.p['user']} does not exist: create it first"
            )
        return None

    def stamp_key(self) -> str:
        """What the outcome depends on: the environment, the account, the python and the env's installed
        distributions (their dist-info names carry the versions)."""
        env_dir = os.path.dirname(os.path.dirname(self.p["python"]))
        dists = sorted(
            os.path.basename(d) for d in glob.glob(f"{env_dir}/lib/python3*/site-packages/*.dist-info")
        )
        return digest([self.env, self.added, self.p["user"], self.p["python"], dists, self.argv[2]])

    def stamped(self, key: str) -> dict | None:
        stamp = read_json(self.p["stamp_path"]) or {}
        if stamp.get("key") != key:
            return None
        kernel = stamp.get("result", {}).get("kernel", "")
        return stamp["result"] if not kernel or os.path.exists(kernel) else None

    def run(self) -> None:
        shown = redact(self.env)
        if self.account is None:
            self.module.exit_json(
                changed=False, check="run", env=shown, msg="check mode: the account is created first"
            )
        key = self.stamp_key()
        done = self.stamped(key)
        if done is not None:
            self.module.exit_json(changed=False, check="stamp", env=shown, env_added=self.added, **done)
        if self.module.check_mode:
            self.module.exit_json(
                changed=False, check="run", env=shown, msg="check mode: the JIT build would run"
            )
        rc, seconds = run_logged(
            self.argv,
            self.p["log_path"],
            env={**self.env, **self.added},
            cwd=self.account.pw_dir,
            timeout=self.p["timeout"],
            header=f"the server's first JIT build, as {self.p['user']} with the server's environment",
            shown=self.shown_argv,
            user=self.account.pw_uid,
            group=self.account.pw_gid,
        )
        out = tail_file(self.p["log_path"], 200)
        answer = [line[len(MARK) :] for line in out.splitlines() if line.startswith(MARK)]
        if rc != 0 or not answer:
            self.module.fail_json(
                msg=f"the server's first JIT build failed as {self.p['user']} with the server's environment "
                f"(rc {rc}): {describe(explain_failure(out))}",
                cmd=self.shown_argv,
                rc=rc,
                log_tail=out,
                classification=explain_failure(out),
                env=shown,
            )
        result = {**json.loads(answer[-1]), "seconds": round(seconds, 1)}
        write_json_atomic(self.p["stamp_path"], {"key": key, "result": result}, mode=0o600)
        self.module.exit_json(
            changed=bool(result["built"]), check="run", env=shown, env_added=self.added, **result
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "user": {"type": "str", "required": True},
            "cuda_home": {"type": "path", "default": ""},
            "toolkit_fact": {"type": "path", "default": TOOLKIT_FACT},
            "env": {"type": "dict", "default": {}},
            "gpu": {"type": "bool", "required": True},
            "arch_list": {"type": "str", "default": ""},
            "stamp_path": {"type": "path", "required": True},
            "log_path": {"type": "path", "required": True},
            "timeout": {"type": "int", "default": 1200},
        },
        supports_check_mode=True,
    )
    ServerJitCheck(module).run()


if __name__ == "__main__":
    main()
