#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: run an SGLang server as a systemd unit (or a daemonized process), wait until it is
ready, and prove that it runs the requested settings."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Start, stop or remove an SGLang server and wait, bounded, until it is ready
description:
  - Renders the argv of C(python -m sglang.launch_server) from structured settings
    (C(plugins/module_utils/sglang_args.py); never a shell string) and runs it through epforge's launcher
    (shipped by the C(sglang_server) role), which takes the API key from the environment, so the key is in
    no unit file, no command line and no log line.
  - With O(manager=systemd) it writes a unit (C(User=) an unprivileged user, C(EnvironmentFile=) a
    root-only 0600 file holding the environment such as C(NCCL_*) and the key, C(Restart=on-failure) with
    start limits, C(KillMode=mixed) so a stop's SIGTERM reaches the launcher, which forwards it once to the
    server's process group, output appended to O(log_path) or the journal), reloads systemd and starts or
    restarts the unit. With O(manager=process) (hosts without systemd) it starts a daemonized process with a
    pidfile and the same log file.
  - "Then it polls O(health_path) at a bounded rate until it answers 200, at most O(timeout) seconds. A
    server that exits, fails or enters an automatic restart ends the wait within one poll interval, with
    the log tail and, when the log matches a known failure signature
    (C(plugins/module_utils/signatures.py)), its classification and remedy; a log that matches
    none is
    reported as C(unclassified) with its final exception line (for example
    C(ModuleNotFoundError: No module named 'flashinfer'))."
  - Finally it reads C(/get_server_info) (falling back to C(/server_info)) and compares the running
    settings with the requested ones (O(settings_check)).
  - Idempotent. Same settings and a healthy server report C(changed=false); changed settings restart the
    server. Check mode and diff mode show the unit and environment file changes (secrets as fingerprints).
options:
  name:
    description: Server name; the systemd unit is C(NAME.service), the pidfile C(NAME.pid).
    type: str
    default: sglang-server
  state:
    description:
      - C(started) makes sure the server runs with these settings and is ready; C(restarted) always
        restarts it; C(stopped) stops it (the unit stays); C(absent) stops it and removes its unit and
        environment file.
      - C(probed) changes nothing and says whether the process that became ready at the last verified
        launch still runs (RV(ended), RV(ended_at)), and what its log since that launch names as the cause
        (RV(classification), RV(log_tail)). The role asks every rank of a multi-node group before a launch,
        so a group where one rank ended is stopped whole, naming the rank that ended first; the tuner and
        the sweep ask after a failed measurement, so a failure is classified from the server's log first
        and the client's symptom second.
    type: str
    choices: [started, stopped, restarted, absent, probed]
    default: started
  settings:
    description:
      - Server settings (the keys of C(epforge_server), see C(plugins/module_utils/sglang_args.py)), for
        example C(model_path), C(tp_size), C(ep_size), C(moe_a2a_backend), C(speculative_algorithm),
        C(host), C(port), C(extra_args), C(env).
      - C(host) defaults to 127.0.0.1. An C(api_key) key here is refused; use O(api_key).
    type: dict
    default: {}
  sglang_version:
    description:
      - Installed SGLang version; picks flag names that moved between releases (O(settings)), and is the
        release a O(server_object) must have been rendered for.
    type: str
  server_object:
    description:
      - The server settings object role C(preflight) built (C(preflight_server_object);
        C(plugins/module_utils/server_object.py)). Its C(argv) and C(env) are launched exactly as they are
        (the launcher appends the API key from the environment file), its C(settings) are confirmed after
        launch, its C(digest) is returned as C(settings_digest). Refused before anything changes when it is
        malformed, edited after it was built, or rendered for another release than O(sglang_version), or
        when a model it names by repo ID (an adjustment C(model-fetched-by-role-model)) has no copy role
        C(model) fetched and verified (its stamp) - the server never downloads at launch.
      - Mutually exclusive with O(settings), which is for direct use of this module (rendered here by the
        same function).
    type: dict
  verdicts_path:
    description:
      - The verdicts of SGLang's parser (role C(sglang)'s flags cache, C(sglang_install)
        O(epforge.ep.sglang_install#module:flags_cache_path)).
        When set, a O(server_object) whose digest has no verdict there is refused before anything changes;
        only an argv SGLang's parser accepted is launched.
    type: path
  python:
    description: The Python of the environment that has SGLang (absolute path). Required to start.
    type: path
  api_key:
    description: API key the server requires (Bearer token). Kept in the 0600 environment file only.
    type: str
  env:
    description: Extra environment variables (merged over C(settings.env)).
    type: dict
    default: {}
  cuda_home:
    description:
      - The CUDA toolkit the server's JIT builds use (C(CUDA_HOME), its C(bin/) on C(PATH)). Empty takes the
        toolkit recorded in O(toolkit_fact); none there gives no C(CUDA_HOME).
      - Every server's C(PATH) starts with the directory of O(python) (the env's C(bin/), where C(ninja)
        lives), then this toolkit's C(bin/), then a service C(PATH) (C(plugins/module_utils/server_env.py)).
        The request's C(env) goes over these.
    type: path
    default: ""
  toolkit_fact:
    description: The local fact role C(cuda_toolkit) writes (its C(home) key); read when O(cuda_home) is
      empty.
    type: path
    default: /etc/ansible/facts.d/epforge_cuda_toolkit.fact
  log_path:
    description:
      - File the server's output is appended to (created for the service user).
      - Empty with O(manager=systemd) sends the output to the journal.
    type: str
    default: /var/log/epforge/sglang-server.log
  state_dir:
    description: Directory of the pidfile and the settings stamp of O(manager=process).
    type: path
    default: /var/lib/epforge/sglang
  timeout:
    description: Seconds to wait for the server to become ready before failing (a model load takes minutes).
    type: float
    default: 1800
  poll_interval:
    description: Seconds between readiness probes (at least 0.05; the wait never hammers the server).
    type: float
    default: 0.25
  health_path:
    description: Readiness endpoint (C(/health), or C(/health_generate) to also run one generation).
    type: str
    default: /health
  settings_check:
    description:
      - Every requested setting is confirmed from the server info, found different, or listed as
        unconfirmed with the reason (not reported, reported as null, an environment variable, a secret);
        keys SGLang reports under another name are mapped (C(cuda_graph_max_bs) is reported as
        C(cuda_graph_max_bs_decode) since 0.5.16). Pass-through C(extra_args) flags are compared too.
      - C(strict) fails when a running setting differs from the requested one, or when C(tp_size),
        C(ep_size), C(moe_a2a_backend) or C(deepep_mode) was requested and cannot be confirmed; C(warn)
        reports both as warnings; C(off) skips the comparison.
    type: str
    choices: [strict, warn, "off"]
    default: strict
  stop_on_failure:
    description:
      - Stop the server when it fails to become ready, so a crash loop or a hung load does not hold the GPUs.
    type: bool
    default: true
  log_tail_lines:
    description: Lines of the server log returned on failure.
    type: int
    default: 40
extends_documentation_fragment:
  - epforge.ep.service
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode writes no file and starts or stops nothing; the readiness wait and the comparison of the
      running settings are left out.
  diff_mode:
    support: partial
    details: >-
      The diff shows the unit and environment files (O(manager=systemd), secrets as fingerprints) or the
      launch's argv (O(manager=process)); a start, restart or stop that changes no file is a change without a
      diff.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Serve Kimi with expert parallelism on 8 GPUs
  epforge.ep.sglang_server:
    name: sglang-server
    settings:
      model_path: /models/Kimi-K2.5
      tp_size: 8
      ep_size: 8
      moe_a2a_backend: deepep
      deepep_mode: low_latency
      env: {NCCL_P2P_LEVEL: SYS}
    python: /opt/epforge/venv/bin/python
    launcher: /usr/local/lib/epforge/epforge_sglang_launch.py
    user: sglang
    api_key: "{{ vault_sglang_api_key }}"
    log_path: /var/log/epforge/sglang-server.log
    timeout: 2400

- name: Stop it
  epforge.ep.sglang_server:
    name: sglang-server
    state: stopped
"""

RETURN = r"""
state:
  description: The state reached.
  returned: always
  type: str
  sample: started
url:
  description: Base URL of the server.
  returned: when started
  type: str
  sample: http://127.0.0.1:30000
argv:
  description: The launch command (the API key is never in it).
  returned: when started
  type: list
  elements: str
settings_digest:
  description: The digest of the launched server settings object (empty when started from O(settings)).
  returned: when started
  type: str
unit_path:
  description: The systemd unit written (manager systemd).
  returned: manager systemd
  type: str
env_file:
  description: The root-only environment file (manager systemd).
  returned: manager systemd
  type: str
pid:
  description: Main process id of the server.
  returned: when started and not in check mode
  type: int
process_groups:
  description:
    - Every live process group of the launch (C(pgid), C(pids)), found by the identity the stamp recorded at
      the launch (session id, the launcher's start time, boot id, uid), never by a process name; empty once
      stopped.
  returned: manager process
  type: list
  elements: dict
stopped_leftovers:
  description:
    - The process groups a launch whose launcher was gone (killed) still ran, which this run stopped before
      starting, stopping or removing the server.
  returned: manager process, when there were any
  type: list
  elements: dict
ready_at:
  description: Epoch seconds at which the health endpoint first answered 200 (for lag measurements).
  returned: when started and not in check mode
  type: float
ready_s:
  description: Seconds the readiness wait took (0 when the server already answered).
  returned: when started and not in check mode
  type: float
polls:
  description: Readiness probes made.
  returned: when started and not in check mode
  type: int
poll_interval:
  description: Seconds between probes actually used.
  returned: when started
  type: float
running:
  description: Running values of the compared settings as the server reports them, plus its version.
  returned: when started and not in check mode
  type: dict
settings_confirmation:
  description: >-
    Every requested setting, in one of three lists - confirmed (key, requested, running, reported_as when
    the server names it differently), mismatched (the same keys) and unconfirmed (key, requested, reason).
  returned: when started and not in check mode
  type: dict
  sample:
    confirmed: [{key: tp_size, requested: 2, running: 2},
                {key: cuda_graph_max_bs, requested: 32, running: 32, reported_as: cuda_graph_max_bs_decode}]
    mismatched: []
    unconfirmed: [{key: env.NCCL_P2P_LEVEL, requested: SYS, reason: "an environment variable ..."}]
settings_mismatch:
  description: Settings whose running value differs from the requested one (key, requested, running).
  returned: when started and not in check mode
  type: list
  elements: dict
ended:
  description: Whether the process that became ready at the last verified launch no longer runs.
  returned: state probed
  type: bool
ended_at:
  description: >-
    When it ended (epoch seconds: systemd's "Main process exited" journal entry after the launch became
    ready; null where unknown).
  returned: state probed
  type: float
ready_pid:
  description: The main pid recorded at the last verified launch (0 when none was recorded).
  returned: state probed
  type: int
alive:
  description: Whether a server runs now.
  returned: state probed
  type: bool
group:
  description: >-
    One model across nodes (nnodes > 1): nnodes, node_rank, dist_init_addr and joined. Ready means joined -
    SGLang 0.5.23 answers /health on a rank only after the group met at dist_init_addr (on rank >= 1 it
    serves nothing else: launch_dummy_health_check_server, so its settings are confirmed on rank 0). Empty
    for a one-node server.
  returned: when started and not in check mode
  type: dict
server_info:
  description: The server's own /get_server_info answer, secrets redacted.
  returned: when started and not in check mode
  type: dict
classification:
  description: >-
    Known failure signatures found in the log (id, summary, remedy, source, line), primary first; when none
    matches, one entry with id C(unclassified) whose line is the log's final exception line. With
    O(state=probed), those found in the log since the last verified launch (the C(unclassified) entry only
    when that process ended; empty without a log file).
  returned: on failure, and with O(state=probed)
  type: list
  elements: dict
log_tail:
  description: Last lines of the server log since this start (O(state=probed), since the last verified one).
  returned: on failure, and with O(state=probed)
  type: str
log_path:
  description: The server's log file (empty for the journal).
  returned: always
  type: str
server_running:
  description: >-
    After a failed start, whether a server runs now (the previous launch brought back). A relaunch that
    fails is followed by a start of the last launch that became ready, waited for like any start.
  returned: when a start failed and stop_on_failure is true
  type: bool
rolled_back:
  description: Whether the previous launch was started again and answered after this start failed.
  returned: when a start failed and stop_on_failure is true
  type: bool
running_argv:
  description: The launch command that runs after the fall-back.
  returned: when rolled_back
  type: list
  elements: str
running_settings_digest:
  description: The settings digest of the launch that runs after the fall-back (empty when from settings).
  returned: when rolled_back
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.model_files import stamped
from ansible_collections.epforge.ep.plugins.module_utils.model_paths import fetched_repos
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_address import (
    BIND_ALL,
    DEFAULT_HOST,
    connect_host,
    server_url,
)
from ansible_collections.epforge.ep.plugins.module_utils.server_env import (
    TOOLKIT_FACT,
    server_base_env,
    toolkit_home,
)
from ansible_collections.epforge.ep.plugins.module_utils.server_http import get_json, request, wait_until
from ansible_collections.epforge.ep.plugins.module_utils.server_object import judged
from ansible_collections.epforge.ep.plugins.module_utils.server_object import problems as object_problems
from ansible_collections.epforge.ep.plugins.module_utils.service_managers import (
    KEY_VAR,
    MANAGERS,
    SERVICE_ARGUMENT_SPEC,
    public_result,
    refuse_bad_service_request,
    resolve_account,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    build_server_argv,
    build_server_env,
    validate_settings,
    with_defaults,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_flags import judged_digests
from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.confirm import (
    follower_rank,
    follower_verdict,
    group_of,
    settings_verdict,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.rollback import read as read_last_ready
from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.rollback import (
    remove as forget_last_ready,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.rollback import (
    write as record_last_ready,
)
from ansible_collections.epforge.ep.plugins.module_utils.signatures import (
    describe,
    explain_failure,
)


class Server:
    """The request (validated settings, argv, environment), the bounded wait for readiness and the settings
    check; the manager (plugins/module_utils/service_managers.py) starts, stops and watches the
    server."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.name = self.p["name"]
        self.api_key = self.p["api_key"] or ""
        self.result: dict = {
            "changed": False,
            "log_path": self.p["log_path"] or "",
            "poll_interval": max(0.05, float(self.p["poll_interval"])),
        }
        self.diffs: list[dict] = []
        self.object = self.p["server_object"] or {}
        self.settings = with_defaults(self.object.get("settings") or self.p["settings"] or {})
        self.manager = MANAGERS[self.p["manager"]](module, self.result, self.diffs)

    # -- request
    def refuse_bad_request(self, settings: dict) -> None:
        if "api_key" in settings:
            self.module.fail_json(
                msg="settings.api_key is refused: pass the key as the module's api_key option "
                "(no_log), so it lands only in the root-only environment file"
            )
        problems = validate_settings(settings, require_model=True)
        if problems:
            self.module.fail_json(msg="invalid server settings: " + "; ".join(problems), problems=problems)
        for option in ("python", "launcher"):
            self.refuse_bad_path(option)

    def refuse_bad_path(self, option: str) -> None:
        path = self.p[option]
        if not path:
            self.module.fail_json(msg=f"{option} is required to start the server")
        if not os.path.isabs(path):
            self.module.fail_json(msg=f"{option} must be an absolute path, got {path!r}")
        if not self.module.check_mode and not os.path.exists(path):
            self.module.fail_json(
                msg=f"{option} {path} does not exist (the sglang role installs the env, "
                "the sglang_server role the launcher)"
            )

    def refuse_bad_object(self) -> None:
        """The object must be whole, unedited, for the installed release and (with verdicts_path) judged."""
        found = object_problems(self.object, self.p["sglang_version"])
        verdicts = self.p["verdicts_path"]
        unjudged = not found and verdicts and not judged(self.object, judged_digests(verdicts))
        if unjudged and self.module.check_mode:
            # check mode records no verdict (the judge changes nothing): say so instead of refusing
            self.module.warn("check mode: SGLang's parser has not judged this argv yet")
        elif unjudged:
            found.append(
                f"SGLang's parser has not judged this argv (digest {self.object['digest'][:12]}, no "
                f"verdict in {verdicts}): run role sglang (it judges preflight_server_object), or the "
                "sweep's judge step"
            )
        if not found and not self.object["settings"].get("model_path"):
            found.append("the server settings object has no model_path: set epforge_server.model_path")
        found += self.unfetched_models()
        if found:
            self.module.fail_json(msg="server settings object refused: " + "; ".join(found), problems=found)
        for option in ("python", "launcher"):
            self.refuse_bad_path(option)

    def unfetched_models(self) -> list[str]:
        """A model the request named by repo ID launches only from the directory role model verified: SGLang
        runs with HF_HUB_OFFLINE=1 and would otherwise fail (or, without it, download inside the wait)."""
        found = [
            f"{repo} was requested by repo ID, but {path} holds no copy role model fetched and verified "
            "(no stamp, or its files changed since): run role model (playbooks/provision.yml or site.yml) "
            "first - the server never downloads at launch"
            for path, repo in sorted(fetched_repos(self.object).items())
            if not stamped(path)
        ]
        if found and self.module.check_mode:
            for problem in found:
                self.module.warn(f"check mode: {problem}")
            return []
        return found

    def flags_and_env(self) -> tuple[list[str], dict]:
        """The flags and environment to launch: the object's as they are, else rendered from settings."""
        if self.object:
            self.refuse_bad_object()
            self.result["settings_digest"] = self.object["digest"]
            return list(self.object["argv"]), self.server_env(self.object["env"])
        settings = self.p["settings"] or {}
        self.refuse_bad_request(settings)
        try:
            flags = build_server_argv(settings, sglang_version=self.p["sglang_version"])
        except ValueError as exc:
            self.module.fail_json(msg=str(exc))
        self.result["settings_digest"] = ""
        return flags, self.server_env(build_server_env(settings))

    def server_env(self, base: dict) -> dict:
        """PATH and CUDA_HOME of this env and toolkit (server_env.py), the base environment over them, then
        the env option (booleans as true/false); the key var is reserved."""
        cuda_home = toolkit_home(self.p["cuda_home"], self.p["toolkit_fact"])
        env = {**server_base_env(self.p["python"] or "", cuda_home), **base}
        env.update(
            {
                str(k): (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in (self.p["env"] or {}).items()
            }
        )
        if KEY_VAR in env:
            self.module.fail_json(msg=f"{KEY_VAR} is reserved for the api_key option")
        return env

    def prepare(self) -> None:
        flags, env = self.flags_and_env()
        self.argv = [self.p["python"], self.p["launcher"], *flags]
        host = self.settings["host"]
        if host in BIND_ALL and not self.api_key:
            self.module.warn(
                f"the server binds every interface (host {host!r}) without an API key: anyone who reaches "
                f"this host can use it; set an API key (sglang_server_api_key) or bind {DEFAULT_HOST}"
            )
        connect = connect_host(host)  # a server bound to every interface is reached on the loopback
        self.url = server_url(connect, self.settings["port"])
        self.result.update(url=self.url, argv=self.argv)
        self.uid, self.gid = self.resolve_user()
        self.launch = {
            "argv": self.argv,
            "env": env,
            "host": connect,
            "port": self.settings["port"],
            "url": self.url,
            "settings_digest": self.result["settings_digest"],
        }
        self.manager.request(
            self.argv, env, host=connect, port=self.settings["port"], uid=self.uid, gid=self.gid
        )

    def resolve_user(self) -> tuple[int, int]:
        return resolve_account(self.module, "sglang_server")

    # -- readiness
    def probe(self) -> bool:
        status, _unused, _unused = request("GET", self.url + self.p["health_path"], timeout=2.0)
        return status == 200

    def public_result(self) -> dict:
        return public_result(self.result, self.api_key)

    def wait_ready(self) -> None:
        outcome = wait_until(
            self.probe, timeout=self.p["timeout"], interval=self.p["poll_interval"], alive=self.manager.death
        )
        self.result.update(
            ready_s=round(outcome["waited_s"], 3), polls=outcome["polls"], poll_interval=outcome["interval"]
        )
        if outcome["ready"]:
            self.result["ready_at"] = round(time.time(), 3)
            return
        self.fail_not_ready(outcome)

    def fail_not_ready(self, outcome: dict) -> None:
        """The server died or did not answer in time: why (classified from its log), its log tail."""
        text = self.manager.log_text()
        classes = explain_failure(text)
        log_tail = tail(redact(text, [self.api_key]), self.p["log_tail_lines"])
        rank = follower_rank(self.settings)
        name = (
            self.name
            if not self.settings.get("nnodes") or int(self.settings["nnodes"]) <= 1
            else (
                f"{self.name} (node_rank {rank or 0} of {self.settings['nnodes']}, dist_init_addr "
                f"{self.settings.get('dist_init_addr')})"
            )
        )
        if outcome["reason"] == "died":
            msg = f"SGLang server {name} stopped while starting ({outcome['detail']})"
        else:
            msg = (
                f"SGLang server {name} did not answer 200 on {self.p['health_path']} within "
                f"{self.p['timeout']:g} s ({outcome['polls']} probes every {outcome['interval']:g} s)"
            )
        stopped = ""
        if self.p["stop_on_failure"]:
            self.manager.stop_server()
            stopped = "; the server was stopped (stop_on_failure)" + self.fall_back()
        if classes:
            msg += ". " + describe(classes)
        self.result["changed"] = True
        self.module.fail_json(
            msg=msg + stopped,
            rc=1,
            cmd=self.argv,
            log_tail=log_tail,
            classification=classes,
            reason=outcome["reason"],
            **self.public_result(),
        )

    # -- fall back to the launch that ran before
    def fall_back(self) -> str:
        """After a failed relaunch: start the last launch that became ready again and wait for it (bounded
        by the same timeout). Sets server_running and rolled_back; returns what to add to the message."""
        previous = read_last_ready(self.p["state_dir"], self.name)
        replaced = bool(self.result.get("restarted"))
        self.result.update(rolled_back=False, server_running=False)
        same = previous is not None and (previous["argv"], previous["env"]) == (self.argv, self.launch["env"])
        if not replaced or previous is None or same:
            return "; no server runs" + ("" if replaced else " (none ran before this start)")
        failed = dict(self.result)
        self.manager.request(
            previous["argv"],
            previous["env"],
            host=previous["host"],
            port=previous["port"],
            uid=self.uid,
            gid=self.gid,
        )
        self.url = previous["url"]
        self.manager.ensure_started(force_restart=False)
        outcome = wait_until(
            self.probe, timeout=self.p["timeout"], interval=self.p["poll_interval"], alive=self.manager.death
        )
        self.result.clear()
        self.result.update(failed)
        if outcome["ready"]:
            self.result.update(
                rolled_back=True,
                server_running=True,
                running_settings_digest=previous["settings_digest"],
                running_argv=previous["argv"],
                pid=self.manager.main_pid(),
            )
            digest = previous["settings_digest"][:12] or "from settings"
            return (
                f"; the previous settings (digest {digest}) were relaunched and answer on {previous['url']} "
                f"after {outcome['waited_s']:.1f} s"
            )
        self.manager.stop_server()
        return (
            f"; relaunching the previous settings failed too ({outcome['reason']}: "
            f"{outcome.get('detail') or 'no answer'}): no server runs"
        )

    # -- settings
    def server_info(self) -> dict:
        """/get_server_info, or /server_info on releases that only have that (redacted)."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        for path in ("/get_server_info", "/server_info"):
            status, body, error = get_json(self.url + path, headers=headers, timeout=10.0)
            if status == 200 and isinstance(body, dict):
                return redact(body, [self.api_key])
        self.module.fail_json(
            msg=f"{self.url} is ready but neither /get_server_info nor /server_info "
            f"answered (last: HTTP {status} {error})",
            **self.public_result(),
        )
        return {}

    def verify_settings(self) -> None:
        if follower_rank(self.settings) is not None:
            # a rank >= 1 answers /health only once it joined its group; it has no server info to compare
            self.result.update(**follower_verdict(self.settings)["result"])
            return
        info = self.server_info()
        strict = self.p["settings_check"] == "strict"
        verdict = settings_verdict(self.settings, info, self.p["sglang_version"], self.name, strict)
        self.result.update(server_info=info, group=group_of(self.settings), **verdict["result"])
        if verdict["failure"]:
            self.module.fail_json(msg=verdict["failure"], **self.public_result())
        for warning in verdict["warnings"]:
            self.module.warn(warning)

    def finish_started(self) -> None:
        if self.module.check_mode:
            self.exit()
        self.wait_ready()
        self.verify_settings()
        self.result["pid"] = self.manager.main_pid()
        # the process of the recorded launch (a no-op rerun): its ready time stays, the record unchanged
        previous = read_last_ready(self.p["state_dir"], self.name) or {}
        same = previous.get("pid") == self.result["pid"] and previous.get("ready_at")
        ready = {
            "pid": self.result["pid"],
            "ready_at": previous["ready_at"] if same else self.result["ready_at"],
            # where this launch's output starts in the log (state probed classifies from there)
            "log_offset": previous.get("log_offset", 0) if same else self.manager.log_offset,
        }
        record_last_ready(self.p["state_dir"], self.name, {**self.launch, **ready})
        self.exit()

    def probe_since_ready(self) -> None:
        """state probed (read-only): whether the process that became ready at the last verified launch still
        runs, and when it ended (systemd's ExecMainExitTimestamp, microseconds, UTC; None where unknown)."""
        record = read_last_ready(self.p["state_dir"], self.name) or {}
        alive = self.manager.is_running()
        pid = self.manager.main_pid() if alive else 0
        ready_pid = int(record.get("pid") or 0)
        ended = bool(ready_pid) and pid != ready_pid
        self.result.update(
            alive=alive,
            pid=pid,
            ready_pid=ready_pid,
            ended=ended,
            ended_at=self.manager.ended_at(float(record.get("ready_at") or 0)) if ended else None,
            **self.cause_since_ready(record, ended),
        )
        self.exit()

    def cause_since_ready(self, record: dict, ended: bool) -> dict:
        """What the log says since the recorded launch: its known failure signatures (a process that ended
        also gets the unclassified entry naming the final exception line) and its last lines."""
        if not self.p["log_path"]:
            return {"classification": [], "log_tail": ""}
        if isinstance(record.get("log_offset"), int):
            self.manager.log_offset = record["log_offset"]
        else:
            self.manager.follow_recent_log()
        text = self.manager.log_text()
        found = [c for c in explain_failure(text) if ended or c["id"] != "unclassified"]
        shown = tail(redact(text, [self.api_key]), self.p["log_tail_lines"])
        return {"classification": found, "log_tail": shown}

    def exit(self) -> None:
        self.manager.exit()

    # -- run
    def run(self) -> None:
        state = self.p["state"]
        if state in ("started", "restarted"):
            self.prepare()
            self.manager.ensure_started(force_restart=state == "restarted")
            self.finish_started()
        elif state == "stopped":
            self.manager.ensure_stopped()
            self.exit()
        elif state == "probed":
            self.probe_since_ready()
        else:
            self.manager.remove()
            if not self.module.check_mode:
                forget_last_ready(self.p["state_dir"], self.name)
            self.exit()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "sglang-server"},
            "state": {
                "type": "str",
                "default": "started",
                "choices": ["started", "stopped", "restarted", "absent", "probed"],
            },
            "settings": {"type": "dict", "default": {}},
            "server_object": {"type": "dict"},
            "verdicts_path": {"type": "path"},
            "sglang_version": {"type": "str"},
            "python": {"type": "path"},
            "api_key": {"type": "str", "no_log": True},
            "env": {"type": "dict", "default": {}},
            "cuda_home": {"type": "path", "default": ""},
            "toolkit_fact": {"type": "path", "default": TOOLKIT_FACT},
            "log_path": {"type": "str", "default": "/var/log/epforge/sglang-server.log"},
            "state_dir": {"type": "path", "default": "/var/lib/epforge/sglang"},
            "timeout": {"type": "float", "default": 1800},
            "poll_interval": {"type": "float", "default": 0.25},
            "health_path": {"type": "str", "default": "/health"},
            "settings_check": {"type": "str", "default": "strict", "choices": ["strict", "warn", "off"]},
            "stop_on_failure": {"type": "bool", "default": True},
            "log_tail_lines": {"type": "int", "default": 40},
            **SERVICE_ARGUMENT_SPEC,
        },
        mutually_exclusive=[("settings", "server_object")],
        supports_check_mode=True,
    )
    refuse_bad_service_request(module)
    Server(module).run()


if __name__ == "__main__":
    main()
