#!/usr/bin/python
"""Ansible module: run an SGLang server as a systemd unit (or a daemonized process), wait until it is
ready, and prove that it runs the requested settings."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Start, stop or remove an SGLang server and wait, bounded, until it is ready
description:
  - Renders the argv of C(python -m sglang.launch_server) from structured settings
    (C(module_utils/epforge_sglang_args.py); never a shell string) and runs it through epforge's launcher
    (shipped by the C(sglang_server) role), which takes the API key from the environment, so the key is in
    no unit file, no command line and no log line.
  - With O(manager=systemd) it writes a unit (C(User=) an unprivileged user, C(EnvironmentFile=) a
    root-only 0600 file holding the environment such as C(NCCL_*) and the key, C(Restart=on-failure) with
    start limits, output appended to O(log_path) or the journal), reloads systemd and starts or restarts
    the unit. With O(manager=process) (hosts without systemd) it starts a daemonized process with a
    pidfile and the same log file.
  - "Then it polls O(health_path) at a bounded rate until it answers 200, at most O(timeout) seconds. A
    server that exits, fails or enters an automatic restart ends the wait within one poll interval, with
    the log tail and, when the log matches a known failure signature
    (C(module_utils/epforge_signatures.py)), its classification and remedy; a log that matches none is
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
    type: str
    choices: [started, stopped, restarted, absent]
    default: started
  manager:
    description:
      - C(systemd) (a unit) or C(process) (a daemonized process with a pidfile, for hosts without systemd).
    type: str
    choices: [systemd, process]
    default: systemd
  settings:
    description:
      - Server settings (the keys of C(epforge_server), see C(module_utils/epforge_sglang_args.py)), for
        example C(model_path), C(tp_size), C(ep_size), C(moe_a2a_backend), C(speculative_algorithm),
        C(host), C(port), C(extra_args), C(env).
      - C(host) defaults to 127.0.0.1. An C(api_key) key here is refused; use O(api_key).
    type: dict
    default: {}
  sglang_version:
    description: Installed SGLang version; picks flag names that moved between releases.
    type: str
  python:
    description: The Python of the environment that has SGLang (absolute path). Required to start.
    type: path
  launcher:
    description:
      - Path of epforge's launcher (C(epforge_sglang_launch.py), installed by the role). Required to start.
    type: path
  user:
    description: Unprivileged user the server runs as. Required for O(manager=systemd); never root.
    type: str
  group:
    description: Group the server runs as (default the user's primary group).
    type: str
  api_key:
    description: API key the server requires (Bearer token). Kept in the 0600 environment file only.
    type: str
  env:
    description: Extra environment variables (merged over C(settings.env)).
    type: dict
    default: {}
  env_file:
    description: Path of the root-only environment file (default C(/etc/epforge/NAME.env)).
    type: path
  unit_dir:
    description: Directory of the systemd unit.
    type: path
    default: /etc/systemd/system
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
  working_dir:
    description: Working directory of the server (default O(state_dir)).
    type: path
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
  enabled:
    description: Enable the systemd unit at boot.
    type: bool
    default: true
  restart_sec:
    description: systemd RestartSec (seconds before an automatic restart after a failure).
    type: int
    default: 10
  start_limit_burst:
    description: systemd StartLimitBurst (starts allowed per O(start_limit_interval)).
    type: int
    default: 3
  start_limit_interval:
    description: systemd StartLimitIntervalSec (seconds).
    type: int
    default: 600
  stop_timeout:
    description: Seconds a stop waits before killing the server.
    type: int
    default: 60
  limits:
    description:
      - "systemd resource limits, suffix to value (for example C({NOFILE: 65535, MEMLOCK: infinity}))."
    type: dict
    default: {}
  stop_on_failure:
    description:
      - Stop the server when it fails to become ready, so a crash loop or a hung load does not hold the GPUs.
    type: bool
    default: true
  log_tail_lines:
    description: Lines of the server log returned on failure.
    type: int
    default: 40
author: epforge developers
"""

EXAMPLES = r"""
- name: Serve Kimi with expert parallelism on 8 GPUs
  sglang_server:
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
  sglang_server:
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
server_info:
  description: The server's own /get_server_info answer, secrets redacted.
  returned: when started and not in check mode
  type: dict
classification:
  description: >-
    Known failure signatures found in the log (id, summary, remedy, source, line), primary first; when none
    matches, one entry with id C(unclassified) whose line is the log's final exception line.
  returned: on failure
  type: list
  elements: dict
log_tail:
  description: Last lines of the server log since this start.
  returned: on failure
  type: str
log_path:
  description: The server's log file (empty for the journal).
  returned: always
  type: str
"""

import grp
import hashlib
import json
import os
import pwd
import signal
import socket
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import tail
from ansible.module_utils.epforge_files import write_atomic
from ansible.module_utils.epforge_http import get_json, request, wait_until
from ansible.module_utils.epforge_process import Completed, run_bounded
from ansible.module_utils.epforge_secrets import redact
from ansible.module_utils.epforge_server_confirm import confirm_settings, describe_entry, unconfirmed_critical
from ansible.module_utils.epforge_sglang_args import (
    build_server_argv,
    build_server_env,
    validate_settings,
    with_defaults,
)
from ansible.module_utils.epforge_signatures import describe, explain_failure
from ansible.module_utils.epforge_unit import (
    UnitError,
    mask_secrets,
    render_env_file,
    render_unit,
)

KEY_VAR = "EPFORGE_SGLANG_API_KEY"

# ----------------------------------------------------------------------------------------------- helpers


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def file_size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def read_from(path: str, offset: int, max_bytes: int = 512 * 1024) -> str:
    """The text a log gained since offset (at most max_bytes from its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = offset if offset <= size else 0
            start = max(start, size - max_bytes)
            handle.seek(start)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class Server:
    """Shared logic of both managers; subclasses implement the lifecycle primitives."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.name = self.p["name"]
        self.api_key = self.p["api_key"] or ""
        self.log_path = self.p["log_path"] or ""
        self.state_dir = self.p["state_dir"]
        self.result: dict = {
            "changed": False,
            "log_path": self.log_path,
            "poll_interval": max(0.05, float(self.p["poll_interval"])),
        }
        self.diffs: list[dict] = []
        self.settings = with_defaults(self.p["settings"] or {})
        self.log_offset = 0

    # -- request
    def prepare(self) -> None:
        module = self.module
        settings = self.p["settings"] or {}
        if "api_key" in settings:
            module.fail_json(
                msg="settings.api_key is refused: pass the key as the module's api_key option "
                "(no_log), so it lands only in the root-only environment file"
            )
        problems = validate_settings(settings, require_model=True)
        if problems:
            module.fail_json(msg="invalid server settings: " + "; ".join(problems), problems=problems)
        for option in ("python", "launcher"):
            path = self.p[option]
            if not path:
                module.fail_json(msg=f"{option} is required to start the server")
            if not os.path.isabs(path):
                module.fail_json(msg=f"{option} must be an absolute path, got {path!r}")
            if not module.check_mode and not os.path.exists(path):
                module.fail_json(
                    msg=f"{option} {path} does not exist (the sglang role installs the env, "
                    "the sglang_server role the launcher)"
                )
        try:
            flags = build_server_argv(settings, sglang_version=self.p["sglang_version"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        self.argv = [self.p["python"], self.p["launcher"], *flags]
        env = build_server_env(settings)
        env.update(
            {
                str(k): (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in (self.p["env"] or {}).items()
            }
        )
        if KEY_VAR in env:
            module.fail_json(msg=f"{KEY_VAR} is reserved for the api_key option")
        self.env = env
        self.secrets = {KEY_VAR: self.api_key} if self.api_key else {}
        host = self.settings["host"]
        connect = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - a bind-all address
        if ":" in connect and not connect.startswith("["):
            connect = f"[{connect}]"
        self.url = f"http://{connect}:{self.settings['port']}"
        self.result.update(url=self.url, argv=self.argv)
        self.uid, self.gid = self.resolve_user()

    def resolve_user(self) -> tuple[int, int]:
        user = self.p["user"]
        if not user:
            return os.geteuid(), os.getegid()
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            if self.module.check_mode:
                return -1, -1
            self.module.fail_json(msg=f"user {user!r} does not exist (the sglang_server role creates it)")
        gid = entry.pw_gid
        if self.p["group"]:
            try:
                gid = grp.getgrnam(self.p["group"]).gr_gid
            except KeyError:
                self.module.fail_json(msg=f"group {self.p['group']!r} does not exist")
        return entry.pw_uid, gid

    def refuse_taken_port(self) -> None:
        """Before a start: another process answering on the port would pass the readiness probe."""
        host = self.url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
        try:
            with socket.create_connection((host, int(self.settings["port"])), timeout=1.0):
                pass
        except OSError:
            return
        self.module.fail_json(
            msg=f"port {self.settings['port']} on {host} is already taken by another "
            f"process, not {self.name}: stop it (or choose another port) before "
            "starting this server",
            **self.public_result(),
        )

    # -- readiness
    def probe(self) -> bool:
        status, _, _ = request("GET", self.url + self.p["health_path"], timeout=2.0)
        return status == 200

    def prepare_log(self) -> None:
        if not self.log_path:
            return
        os.makedirs(os.path.dirname(self.log_path), mode=0o755, exist_ok=True)
        if not os.path.exists(self.log_path):
            fd = os.open(self.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o640)
            os.close(fd)
        if os.geteuid() == 0 and self.uid >= 0:
            os.chown(self.log_path, self.uid, self.gid)
        self.log_offset = file_size(self.log_path)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(
                f"=== {stamp} epforge sglang_server: starting {self.name}: "
                f"{' '.join(redact(self.argv, [self.api_key]))}\n"
            )
        self.log_offset = file_size(self.log_path)

    def log_text(self) -> str:
        if self.log_path:
            return read_from(self.log_path, self.log_offset)
        return ""

    def wait_ready(self) -> None:
        outcome = wait_until(
            self.probe, timeout=self.p["timeout"], interval=self.p["poll_interval"], alive=self.death
        )
        self.result.update(
            ready_s=round(outcome["waited_s"], 3), polls=outcome["polls"], poll_interval=outcome["interval"]
        )
        if outcome["ready"]:
            self.result["ready_at"] = round(time.time(), 3)
            return
        text = self.log_text()
        classes = explain_failure(text)
        log_tail = tail(redact(text, [self.api_key]), self.p["log_tail_lines"])
        if outcome["reason"] == "died":
            msg = f"SGLang server {self.name} stopped while starting ({outcome['detail']})"
        else:
            msg = (
                f"SGLang server {self.name} did not answer 200 on {self.p['health_path']} within "
                f"{self.p['timeout']:g} s ({outcome['polls']} probes every {outcome['interval']:g} s)"
            )
        stopped = ""
        if self.p["stop_on_failure"]:
            self.stop_server()
            stopped = "; the server was stopped (stop_on_failure)"
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

    def public_result(self) -> dict:
        out = dict(self.result)
        out.pop("changed", None)
        return redact(out, [self.api_key])

    def verify_settings(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        info = None
        for path in ("/get_server_info", "/server_info"):
            status, body, error = get_json(self.url + path, headers=headers, timeout=10.0)
            if status == 200 and isinstance(body, dict):
                info = body
                break
        if info is None:
            self.module.fail_json(
                msg=f"{self.url} is ready but neither /get_server_info nor /server_info "
                f"answered (last: HTTP {status} {error})",
                **self.public_result(),
            )
        info = redact(info, [self.api_key])
        report = confirm_settings(self.settings, info, self.p["sglang_version"])
        mismatches = report["mismatched"]
        running = dict(report["running"], version=info.get("version"))
        states = info.get("internal_states") or []
        if states and isinstance(states[0], dict) and "avg_spec_accept_length" in states[0]:
            running["avg_spec_accept_length"] = states[0]["avg_spec_accept_length"]
        confirmation = {k: report[k] for k in ("confirmed", "mismatched", "unconfirmed")}
        self.result.update(
            server_info=info,
            running=running,
            settings_mismatch=mismatches,
            settings_confirmation=confirmation,
        )
        if self.p["settings_check"] == "strict":
            critical = unconfirmed_critical(report)
            if mismatches or critical:
                lines = "; ".join(describe_entry(e) for e in mismatches + critical)
                self.module.fail_json(
                    msg=f"SGLang server {self.name} runs other settings than requested, or cannot show "
                    f"that it runs them: {lines} (SGLang may have adjusted or ignored them; set the "
                    "value SGLang uses, or settings_check: warn)",
                    **self.public_result(),
                )
        if mismatches:
            self.module.warn(
                "running settings differ from the requested ones: "
                + "; ".join(describe_entry(e) for e in mismatches)
            )
        if report["unconfirmed"]:
            self.module.warn(
                "settings the running server does not confirm: "
                + "; ".join(describe_entry(e) for e in report["unconfirmed"])
            )

    def finish_started(self) -> None:
        if self.module.check_mode:
            self.exit()
        self.wait_ready()
        self.verify_settings()
        self.result["pid"] = self.main_pid()
        self.exit()

    def exit(self) -> None:
        result = redact(self.result, [self.api_key])
        if self.module._diff and self.diffs:
            result["diff"] = self.diffs
        result["state"] = self.p["state"]
        self.module.exit_json(**result)

    # -- run
    def run(self) -> None:
        state = self.p["state"]
        if state in ("started", "restarted"):
            self.prepare()
            self.ensure_started(force_restart=state == "restarted")
        elif state == "stopped":
            if self.is_running():
                self.result["changed"] = True
                if not self.module.check_mode:
                    self.stop_server()
            self.exit()
        else:
            self.remove()
            self.exit()


# --------------------------------------------------------------------------------------------- systemd


class SystemdServer(Server):
    def __init__(self, module: AnsibleModule) -> None:
        super().__init__(module)
        self.unit = f"{self.name}.service"
        self.unit_path = os.path.join(self.p["unit_dir"], self.unit)
        self.env_file = self.p["env_file"] or f"/etc/epforge/{self.name}.env"
        self.result.update(unit_path=self.unit_path, env_file=self.env_file)
        if not module.check_mode or os.path.isdir("/run/systemd/system"):
            if not os.path.isdir("/run/systemd/system"):
                module.fail_json(
                    msg="systemd is not running on this host (no /run/systemd/system): use manager: process"
                )

    def systemctl(self, *args: str, check: bool = True) -> Completed:
        argv = ["systemctl", *args]
        proc = run_bounded(argv, timeout=120)
        if check and proc.rc != 0:
            self.module.fail_json(
                msg=f"systemctl {' '.join(args)} failed",
                cmd=argv,
                rc=proc.rc,
                log_tail=tail(proc.output),
                **self.public_result(),
            )
        return proc

    def show(self) -> dict:
        proc = self.systemctl(
            "show",
            self.unit,
            "--property=ActiveState,SubState,NRestarts,MainPID,"
            "ExecMainStatus,Result,InvocationID,UnitFileState,LoadState",
            check=False,
        )
        props = {}
        for line in proc.out.splitlines():
            key, _, value = line.partition("=")
            props[key] = value
        return props

    def is_running(self) -> bool:
        return self.show().get("ActiveState") in ("active", "activating", "reloading")

    def main_pid(self) -> int:
        try:
            return int(self.show().get("MainPID") or 0)
        except ValueError:
            return 0

    def death(self) -> str | None:
        props = self.show()
        active, sub = props.get("ActiveState"), props.get("SubState")
        if sub == "auto-restart" or active in ("failed", "inactive", "deactivating"):
            return (
                f"unit {self.unit} is {active}/{sub}, result {props.get('Result')}, "
                f"exit status {props.get('ExecMainStatus')}"
            )
        restarts = int(props.get("NRestarts") or 0)
        if restarts > self.restarts0:
            return f"unit {self.unit} restarted {restarts - self.restarts0} time(s) while starting"
        return None

    def log_text(self) -> str:
        if self.log_path:
            return super().log_text()
        return run_bounded(
            [
                "journalctl",
                "-u",
                self.unit,
                f"_SYSTEMD_INVOCATION_ID={self.invocation}",
                "-o",
                "cat",
                "--no-pager",
                "-n",
                "400",
            ],
            timeout=60,
        ).out

    def stop_server(self) -> None:
        self.systemctl("stop", self.unit, check=False)

    def render(self) -> tuple[str, str]:
        try:
            unit = render_unit(
                description=f"SGLang server {self.name} (epforge)",
                argv=self.argv,
                user=self.p["user"] or "",
                group=self.p["group"],
                env_file=self.env_file,
                log_path=self.log_path or None,
                working_dir=self.p["working_dir"] or self.state_dir,
                restart_sec=self.p["restart_sec"],
                start_limit_burst=self.p["start_limit_burst"],
                start_limit_interval=self.p["start_limit_interval"],
                stop_timeout=self.p["stop_timeout"],
                limits=self.p["limits"],
            )
            env_text = render_env_file(self.env, self.secrets)
        except UnitError as exc:
            self.module.fail_json(msg=f"cannot render the unit: {exc}")
        return unit, env_text

    def ensure_started(self, force_restart: bool) -> None:
        if not self.p["user"] or self.p["user"] == "root":
            self.module.fail_json(
                msg="user is required with manager systemd and must not be root: the "
                "server runs as an unprivileged user (the sglang_server role "
                "creates it)"
            )
        unit_text, env_text = self.render()
        old_unit = read_text(self.unit_path)
        old_env = read_text(self.env_file)
        unit_changed = old_unit != unit_text
        env_changed = old_env != env_text
        secret_names = [KEY_VAR]
        if unit_changed:
            self.diffs.append(
                {
                    "before_header": self.unit_path,
                    "after_header": self.unit_path,
                    "before": old_unit or "",
                    "after": unit_text,
                }
            )
        if env_changed:
            self.diffs.append(
                {
                    "before_header": self.env_file,
                    "after_header": self.env_file,
                    "before": mask_secrets(old_env or "", secret_names),
                    "after": mask_secrets(env_text, secret_names),
                }
            )
        props = self.show() if os.path.isdir("/run/systemd/system") else {}
        active = props.get("ActiveState") in ("active", "activating", "reloading")
        enabled_now = props.get("UnitFileState") == "enabled"
        need_enable = self.p["enabled"] and not enabled_now
        need_start = force_restart or unit_changed or env_changed or not active
        self.result["changed"] = bool(need_start or need_enable)
        self.result["restarted"] = bool(active and need_start)
        if self.module.check_mode:
            self.exit()
        os.makedirs(self.state_dir, exist_ok=True)
        if os.geteuid() == 0 and self.uid >= 0:
            os.chown(self.state_dir, self.uid, self.gid)
        if env_changed:
            env_dir = os.path.dirname(self.env_file)
            if not os.path.isdir(env_dir):
                os.makedirs(env_dir, mode=0o700)
            write_atomic(self.env_file, env_text, 0o600)
        if unit_changed:
            write_atomic(self.unit_path, unit_text, 0o644)
            self.systemctl("daemon-reload")
        if need_enable:
            self.systemctl("enable", self.unit)
        elif not self.p["enabled"] and enabled_now:
            self.systemctl("disable", self.unit)
            self.result["changed"] = True
        if need_start:
            if not active:
                self.refuse_taken_port()
            self.prepare_log()
            self.systemctl("reset-failed", self.unit, check=False)
            self.restarts0 = 0
            self.systemctl("restart" if active else "start", self.unit)
            props = self.show()
            self.restarts0 = int(props.get("NRestarts") or 0)
            self.invocation = props.get("InvocationID", "")
        else:
            self.log_offset = max(0, file_size(self.log_path) - 256 * 1024)
            props = self.show()
            self.restarts0 = int(props.get("NRestarts") or 0)
            self.invocation = props.get("InvocationID", "")
        self.finish_started()

    def remove(self) -> None:
        exists = os.path.exists(self.unit_path) or os.path.exists(self.env_file)
        running = os.path.isdir("/run/systemd/system") and self.is_running()
        if exists or running:
            self.result["changed"] = True
            old_unit = read_text(self.unit_path)
            if old_unit is not None:
                self.diffs.append(
                    {
                        "before_header": self.unit_path,
                        "after_header": "(absent)",
                        "before": old_unit,
                        "after": "",
                    }
                )
        if self.module.check_mode or not (exists or running):
            return
        self.systemctl("disable", "--now", self.unit, check=False)
        for path in (self.unit_path, self.env_file):
            if os.path.exists(path):
                os.unlink(path)
        self.systemctl("daemon-reload")
        self.systemctl("reset-failed", self.unit, check=False)


# --------------------------------------------------------------------------------------------- process


class ProcessServer(Server):
    def __init__(self, module: AnsibleModule) -> None:
        super().__init__(module)
        self.pidfile = os.path.join(self.state_dir, f"{self.name}.pid")
        self.stamp_path = os.path.join(self.state_dir, f"{self.name}.json")
        self.proc: subprocess.Popen | None = None
        self.result.update(pidfile=self.pidfile)

    def read_pid(self) -> int:
        try:
            return int((read_text(self.pidfile) or "0").strip() or 0)
        except ValueError:
            return 0

    def pid_alive(self, pid: int) -> bool:
        if pid <= 0:
            return False
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                stat = handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().split(b"\0")
        except OSError:
            return False
        if stat.rpartition(")")[2].split()[0] == "Z":
            return False
        launcher = (self.p["launcher"] or "epforge_sglang_launch.py").encode()
        return any(part.endswith(os.path.basename(launcher)) for part in cmdline)

    def is_running(self) -> bool:
        return self.pid_alive(self.read_pid())

    def main_pid(self) -> int:
        return self.read_pid()

    def death(self) -> str | None:
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is not None:
                return f"process {self.proc.pid} exited with status {rc}"
            return None
        if not self.is_running():
            return f"process {self.read_pid()} is gone"
        return None

    def fingerprint(self) -> str:
        blob = json.dumps(
            {
                "argv": self.argv,
                "env": render_env_file(self.env, self.secrets),
                "user": self.p["user"],
                "group": self.p["group"],
                "log": self.log_path,
                "cwd": self.p["working_dir"],
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def stop_server(self) -> None:
        pid = self.proc.pid if self.proc is not None else self.read_pid()
        if self.pid_alive(pid) or (self.proc is not None and self.proc.poll() is None):
            try:
                os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + self.p["stop_timeout"]
            while time.monotonic() < deadline:
                if self.proc is not None:
                    if self.proc.poll() is not None:
                        break
                elif not self.pid_alive(pid):
                    break
                time.sleep(0.05)
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if self.proc is not None:
                    self.proc.wait(timeout=10)
        for path in (self.pidfile,):
            if os.path.exists(path):
                os.unlink(path)

    def ensure_started(self, force_restart: bool) -> None:
        if self.p["user"] == "root":
            self.module.fail_json(msg="the server must not run as root: set user to an unprivileged user")
        if self.p["user"] and os.geteuid() != 0:
            self.module.fail_json(msg="switching to another user needs root (become: true)")
        stamp = {"fingerprint": self.fingerprint(), "argv": self.argv}
        old = read_text(self.stamp_path)
        try:
            old_stamp = json.loads(old) if old else {}
        except ValueError:
            old_stamp = {}
        changed_settings = old_stamp.get("fingerprint") != stamp["fingerprint"]
        running = self.is_running()
        need_start = force_restart or changed_settings or not running
        self.result["changed"] = bool(need_start)
        self.result["restarted"] = bool(running and need_start)
        if changed_settings:
            self.diffs.append(
                {
                    "before_header": self.stamp_path,
                    "after_header": self.stamp_path,
                    "before": "\n".join(old_stamp.get("argv") or []) + "\n" if old_stamp else "",
                    "after": "\n".join(self.argv) + "\n",
                }
            )
        if self.module.check_mode:
            self.exit()
        if not need_start:
            self.log_offset = max(0, file_size(self.log_path) - 256 * 1024)
            self.finish_started()
        if running:
            self.stop_server()
        else:
            self.refuse_taken_port()
        os.makedirs(self.state_dir, exist_ok=True)
        self.prepare_log()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(self.env)
        env.update(self.secrets)
        cwd = self.p["working_dir"] or self.state_dir
        kwargs = {}
        if self.p["user"]:
            kwargs.update(user=self.uid, group=self.gid, extra_groups=[])
            env["HOME"] = pwd.getpwuid(self.uid).pw_dir
            env["USER"] = env["LOGNAME"] = self.p["user"]
        log = open(self.log_path or os.devnull, "ab")  # handed to the child, closed below
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
                **kwargs,
            )
        except OSError as exc:
            self.module.fail_json(msg=f"cannot start {self.argv[0]}: {exc}", cmd=self.argv, rc=127)
        finally:
            log.close()
        write_atomic(self.pidfile, f"{self.proc.pid}\n", 0o644)
        write_atomic(self.stamp_path, json.dumps(stamp, indent=1, sort_keys=True) + "\n", 0o600)
        self.finish_started()

    def remove(self) -> None:
        running = self.is_running()
        exists = os.path.exists(self.stamp_path) or os.path.exists(self.pidfile)
        self.result["changed"] = bool(running or exists)
        if self.module.check_mode:
            return
        if running:
            self.stop_server()
        for path in (self.pidfile, self.stamp_path):
            if os.path.exists(path):
                os.unlink(path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "sglang-server"},
            "state": {
                "type": "str",
                "default": "started",
                "choices": ["started", "stopped", "restarted", "absent"],
            },
            "manager": {"type": "str", "default": "systemd", "choices": ["systemd", "process"]},
            "settings": {"type": "dict", "default": {}},
            "sglang_version": {"type": "str"},
            "python": {"type": "path"},
            "launcher": {"type": "path"},
            "user": {"type": "str"},
            "group": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "env": {"type": "dict", "default": {}},
            "env_file": {"type": "path"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_path": {"type": "str", "default": "/var/log/epforge/sglang-server.log"},
            "state_dir": {"type": "path", "default": "/var/lib/epforge/sglang"},
            "working_dir": {"type": "path"},
            "timeout": {"type": "float", "default": 1800},
            "poll_interval": {"type": "float", "default": 0.25},
            "health_path": {"type": "str", "default": "/health"},
            "settings_check": {"type": "str", "default": "strict", "choices": ["strict", "warn", "off"]},
            "enabled": {"type": "bool", "default": True},
            "restart_sec": {"type": "int", "default": 10},
            "start_limit_burst": {"type": "int", "default": 3},
            "start_limit_interval": {"type": "int", "default": 600},
            "stop_timeout": {"type": "int", "default": 60},
            "limits": {"type": "dict", "default": {}},
            "stop_on_failure": {"type": "bool", "default": True},
            "log_tail_lines": {"type": "int", "default": 40},
        },
        supports_check_mode=True,
    )
    name = module.params["name"]
    if not name or "/" in name or name.startswith(".") or any(c.isspace() for c in name):
        module.fail_json(msg=f"name {name!r} must be a plain unit name (no slash, no whitespace)")
    if module.params["log_path"] and not os.path.isabs(module.params["log_path"]):
        module.fail_json(msg="log_path must be an absolute path (or empty for the journal)")
    if module.params["manager"] == "process" and not module.params["log_path"]:
        module.fail_json(msg="manager process needs a log_path (there is no journal for it)")
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout must be positive (seconds)")
    server = SystemdServer(module) if module.params["manager"] == "systemd" else ProcessServer(module)
    server.run()


if __name__ == "__main__":
    main()
