#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: run the Shepherd Model Gateway (smg) in front of verified SGLang servers, wait until it
lists every worker healthy with the expected model, and prove it with real generations through it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: smg_gateway
short_description: Run the Shepherd Model Gateway (smg) in front of SGLang servers and verify it
description:
  - Renders the argv of C(smg launch) (never a shell string) and keeps it running with the same service
    managers as M(epforge.ep.sglang_server) (a systemd unit under an unprivileged user, or a daemonized
    process with a pidfile) through epforge's launcher, so the API key is in no unit file, command line or
    log line.
  - "Before anything changes: every worker URL must answer C(/health) from this host (a server bound to
    127.0.0.1 on another host cannot be fronted, and is named), a worker on a non-loopback address needs
    O(api_key), and O(extra_args) may not carry a flag the module owns."
  - "Before the running gateway is touched, every worker must answer as an SGLang server with the model:
    C(GET /get_model_info) with the key is SGLang's model info (C(model_path), C(is_generation)), and
    O(model) is its C(model_path) or a C(/v1/models) id (its C(served_model_name)); a worker that answers
    C(503) (still loading) is waited for up to O(timeout). A worker that is the gateway's own address (its
    port on an address of this host that the gateway binds) is refused: smg would route to itself. The
    refusal names each bad worker and why; the running gateway keeps serving."
  - "smg 1.13 checks the client's C(Authorization) on its serving path with C(--api-key) and passes the
    client's header on to the worker (measured: a C(--tenant-api-key) client gets 401 from a worker that
    has a key), so the gateway's clients and its workers share one key: O(api_key)."
  - Ready means smg's own C(GET /workers) lists every worker, healthy, with the O(model) it serves; bounded
    by O(timeout). A gateway that is not ready by then is stopped, and the failure names each worker's
    problem with the gateway's log tail. When the start replaced a running gateway, its previous
    configuration is started again (C(rolled_back)) and waited for. Then one real generation goes through
    the gateway (C(/generate)), and O(verify_requests) more with distinct prompts, so the workers' access
    logs show that requests reached each of them (the gateway role counts them on each worker's host).
  - Idempotent. The same request and a running gateway report C(changed=false) (the verification requests
    change nothing); a changed worker list, policy or key restarts it. Workers are on the command line, so
    a restarted gateway keeps them. Check mode and diff mode show the unit and environment file changes.
options:
  name:
    description: Gateway name; the systemd unit is C(NAME.service), the pidfile C(NAME.pid).
    type: str
    default: epforge-gateway
  state:
    description:
      - C(started) makes sure the gateway runs with these settings and is verified; C(restarted) always
        restarts it; C(stopped) stops it; C(absent) stops it and removes its unit and environment file.
    type: str
    choices: [started, stopped, restarted, absent]
    default: started
  python:
    description: The Python of the environment that has smg (absolute path). Required to start.
    type: path
  workers:
    description:
      - Base URLs of the SGLang servers the gateway fronts (C(http://HOST:PORT)), as their hosts confirmed
        them. Required to start; no duplicates.
    type: list
    elements: str
    default: []
  model:
    description:
      - "The model every worker must report (C(model_id) in smg's worker list: SGLang's C(served_model_name),
        by default its C(model_path)). Empty accepts any."
    type: str
    default: ""
  host:
    description: Address the gateway binds (127.0.0.1 unless told; C(0.0.0.0) needs O(api_key)).
    type: str
    default: 127.0.0.1
  port:
    description: Port the gateway serves on.
    type: int
    default: 30080
  metrics_port:
    description: Port of smg's Prometheus endpoint, always bound to 127.0.0.1.
    type: int
    default: 29000
  policy:
    description: smg's routing policy.
    type: str
    choices: [cache_aware, round_robin, random, power_of_two]
    default: cache_aware
  health_check_interval:
    description: Seconds between smg's health checks of each worker.
    type: int
    default: 10
  health_failure_threshold:
    description: Failed health checks in a row before smg stops routing to a worker.
    type: int
    default: 3
  health_check_timeout:
    description:
      - "Seconds smg waits for a worker's C(/health) (C(--health-check-timeout-secs)). C(0) derives it:
        O(sglang_health_timeout) plus 5 s. SGLang's C(/health) generates a token and may take up to its
        C(SGLANG_HEALTH_CHECK_TIMEOUT); smg's own default is shorter (5 s in 1.13), so a busy, healthy worker
        would count as failed. A value given must be above O(sglang_health_timeout), else it is refused
        before anything changes."
    type: int
    default: 0
  sglang_health_timeout:
    description:
      - "The longest the workers' SGLang C(/health) may take, in seconds: their C(SGLANG_HEALTH_CHECK_TIMEOUT)
        (role gateway: filter C(epforge.ep.sglang_health_timeout) reads it from the servers' environment, else
        the release's default from C(data/sglang_env/VERSION.json)). Required when O(health_check_timeout)
        is C(0)."
    type: int
  overload_protection:
    description:
      - "smg's worker overload protection: a worker at or above O(overload_waiting_requests) queued requests
        or O(overload_token_usage) KV usage is left out of routing while another is under both. smg 1.13
        switches it on when told nothing; this module always says which (C(false):
        C(--disable-worker-overload-protection)), because it decides where a fleet benchmark's requests
        go: off, the routing O(policy) alone decides and the benchmark measures the fleet, not the
        gateway's load shedding."
    type: bool
    default: false
  overload_waiting_requests:
    description: With O(overload_protection), the queued requests at which a worker is left out (at least 1).
    type: int
    default: 8
  overload_token_usage:
    description: With O(overload_protection), the KV-cache usage at which a worker is left out (in (0, 1]).
    type: float
    default: 0.8
  api_key:
    description:
      - The key clients present to the gateway, passed on to the workers (the SGLang servers' API key).
        Kept in the 0600 environment file only. Required when a worker or the gateway listens on a
        non-loopback address.
    type: str
  extra_args:
    description: Further C(smg launch) flags, as argv items; the flags the module sets are refused here.
    type: list
    elements: str
    default: []
  log_path:
    description:
      - File the gateway's output is appended to (created for the service user). Empty with
        O(manager=systemd) sends the output to the journal.
    type: str
    default: /var/log/epforge/gateway.log
  state_dir:
    description: Directory of the pidfile and the launch stamp of O(manager=process).
    type: path
    default: /var/lib/epforge/gateway
  timeout:
    description: Seconds to wait until smg lists every worker healthy.
    type: float
    default: 120
  poll_interval:
    description: Seconds between readiness probes (at least 0.05).
    type: float
    default: 0.5
  verify_requests:
    description:
      - Generations sent through the gateway after the first one, each with a distinct prompt, so that
        every worker's access log shows gateway traffic. C(-1) sends four per worker.
    type: int
    default: -1
  log_tail_lines:
    description: Lines of the gateway log returned on failure.
    type: int
    default: 40
extends_documentation_fragment:
  - epforge.ep.service
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode writes no file and starts or stops nothing; the readiness wait and the routing proof are left
      out.
  diff_mode:
    support: partial
    details: >-
      The diff shows the unit and environment files (O(manager=systemd)) or the launch's argv
      (O(manager=process)); a start, restart or stop that changes no file is a change without a diff.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Run smg in front of two SGLang servers
  epforge.ep.smg_gateway:
    python: /opt/epforge/gateway-venv/bin/python
    launcher: /usr/local/libexec/epforge/epforge_sglang_launch.py
    user: epforge-gateway
    workers: [http://10.0.0.11:30000, http://10.0.0.12:30000]
    model: /models/Qwen3-30B-A3B
    sglang_health_timeout: 20  # health_check_timeout 0: 25 s
    api_key: "{{ vault_sglang_api_key }}"
    policy: cache_aware
  register: gateway
"""

RETURN = r"""
url:
  description: Base URL of the gateway.
  returned: when started
  type: str
  sample: http://127.0.0.1:30080
argv:
  description: The launch command (the API key is never in it).
  returned: when started
  type: list
  elements: str
health_check_timeout:
  description: The C(--health-check-timeout-secs) smg runs with (O(health_check_timeout), else derived).
  returned: when started
  type: int
  sample: 25
overload_protection:
  description: Worker overload protection as smg runs it (C(enabled); with it, the two thresholds).
  returned: when started
  type: dict
  sample: {enabled: false}
version:
  description: smg's version (C(smg --version)).
  returned: when started
  type: str
  sample: smg 1.13.0
workers:
  description: smg's worker list after the wait (url, healthy, model_id, runtime_type).
  returned: when started and not in check mode
  type: list
  elements: dict
generation:
  description: The first generation through the gateway (HTTP status, text, completion tokens, seconds).
  returned: when started and not in check mode
  type: dict
requests_sent:
  description: Generations sent through the gateway by this run (the first one included).
  returned: when started and not in check mode
  type: int
ready_s:
  description: Seconds until smg listed every worker healthy.
  returned: when started and not in check mode
  type: float
unit_path:
  description: The systemd unit written (manager systemd).
  returned: manager systemd
  type: str
env_file:
  description: The root-only environment file (manager systemd).
  returned: manager systemd
  type: str
log_tail:
  description: Last lines of the gateway log since this start.
  returned: on failure
  type: str
rolled_back:
  description: >-
    Whether a failed new configuration was replaced by the previous one (the gateway that ran before this
    start; manager process: its command line with the current key; manager systemd: its unit and
    environment file as they were).
  returned: when a start that replaced a running gateway failed
  type: bool
rollback_workers:
  description: smg's worker list after the previous configuration was brought back.
  returned: when rolled_back
  type: list
  elements: dict
bad_workers:
  description: The workers refused before anything changed, each with why (url, why).
  returned: when workers were refused as not SGLang, another model or the gateway itself
  type: list
  elements: dict
unreachable_workers:
  description: >-
    The workers this host got no HTTP answer from (named so; a key C(unreachable) would make Ansible call the
    gateway's host unreachable).
  returned: when workers were refused as unreachable
  type: list
  elements: str
"""

import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_http import auth_headers, wait_until
from ansible_collections.epforge.ep.plugins.module_utils.service_managers import (
    MANAGERS,
    SERVICE_ARGUMENT_SPEC,
    refuse_bad_service_request,
    resolve_account,
)
from ansible_collections.epforge.ep.plugins.module_utils.smg_gateway.request import (
    GatewayRequest,
    RequestError,
)
from ansible_collections.epforge.ep.plugins.module_utils.smg_gateway.traffic import (
    generate,
    is_own_url,
    listed_workers,
    sglang_problem,
    unreachable_workers,
    worker_verdict,
)

MODULE_VAR = "EPFORGE_SGLANG_MODULE"  # the launcher runs this module in-process (smg is Python + Rust)


class Gateway:
    """The request (argv from GatewayRequest), the bounded wait until smg lists every worker healthy, and
    the generations that prove it routes; the manager (service_managers) starts, stops and watches it."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.api_key = self.p["api_key"] or ""
        self.result: dict = {"changed": False, "log_path": self.p["log_path"] or ""}
        self.diffs: list[dict] = []
        self.previous = None
        self.manager = MANAGERS[self.p["manager"]](
            module, self.result, self.diffs, what="smg gateway", owner="smg_gateway"
        )

    def fail(self, msg: str, **fields) -> None:
        self.module.fail_json(msg=msg, **fields, **redact(self.public(), [self.api_key]))

    def public(self) -> dict:
        out = dict(self.result)
        out.pop("changed", None)
        return out

    # -- request
    def prepare(self) -> None:
        try:
            request = GatewayRequest.from_params(self.p)
        except RequestError as exc:
            self.module.fail_json(msg=str(exc))
        for option in ("python", "launcher"):
            path = self.p[option]
            if not self.module.check_mode and not os.path.exists(path):
                self.module.fail_json(msg=f"{option} {path} does not exist (the gateway role installs it)")
        own = [w for w in request.workers if is_own_url(w, request.host, request.port)]
        if own:
            self.module.fail_json(
                msg="these workers are the gateway's own address, so smg would route to itself: "
                + ", ".join(own)
                + f" (the gateway serves on port {request.port} of this host), so the gateway was left as it "
                "was; list SGLang servers only",
                bad_workers=[{"url": w, "why": "the gateway's own address"} for w in own],
            )
        unreachable = unreachable_workers(request.workers)
        if unreachable:
            self.module.fail_json(
                msg="the gateway cannot reach these workers from this host, so it would route to nothing: "
                + "; ".join(f"{url} ({why})" for url, why in unreachable)
                + ". A server the gateway fronts must listen on an address this host reaches (not "
                "127.0.0.1 on another host): set its host and give the servers an API key",
                unreachable_workers=[url for url, _unused in unreachable],
            )
        self.refuse_bad_workers(request)
        self.request = request
        self.argv = [self.p["python"], self.p["launcher"], *request.flags()]
        self.url = request.url
        self.result.update(
            url=self.url,
            argv=self.argv,
            workers_requested=request.workers,
            health_check_timeout=request.health_timeout,
            overload_protection=request.overload,
        )
        uid, gid = resolve_account(self.module, "gateway")
        self.manager.request(
            self.argv, {MODULE_VAR: "smg"}, host=request.connect_host, port=request.port, uid=uid, gid=gid
        )

    def refuse_bad_workers(self, request: GatewayRequest) -> None:
        """Every worker answers as an SGLang server with the model, before the running gateway is touched;
        one still loading (HTTP 503) is asked again until timeout."""
        headers = auth_headers(self.api_key)
        deadline = time.monotonic() + self.p["timeout"]
        pending = list(request.workers)
        bad: list[tuple[str, str]] = []
        while pending:
            verdicts = [(url, *sglang_problem(url, headers, self.p["model"])) for url in pending]
            bad += [(url, why) for url, kind, why in verdicts if kind == "refused"]
            starting = [(url, why) for url, kind, why in verdicts if kind == "starting"]
            if not starting or time.monotonic() >= deadline:
                bad += starting
                break
            pending = [url for url, _unused in starting]
            time.sleep(max(0.05, self.p["poll_interval"]))
        if bad:
            self.module.fail_json(
                msg="these workers are not SGLang servers serving "
                + (repr(self.p["model"]) if self.p["model"] else "a model")
                + ", so the gateway was left as it was: "
                + "; ".join(f"{url} {why}" for url, why in bad),
                bad_workers=[{"url": url, "why": why} for url, why in bad],
            )

    def version(self) -> str:
        argv = [self.p["python"], "-m", "smg", "--version"]
        proc = run_bounded(argv, timeout=60)
        if proc.rc != 0:
            self.fail("smg --version failed", cmd=argv, rc=proc.rc, log_tail=tail(proc.output))
        return proc.out.strip().splitlines()[0] if proc.out.strip() else ""

    # -- readiness and proof
    def wait_ready(self) -> None:
        headers = auth_headers(self.api_key)
        seen: dict = {"workers": []}

        def probe() -> bool:
            seen["workers"] = listed_workers(self.url, headers)
            return worker_verdict(seen["workers"], self.request.workers, self.p["model"]) == []

        outcome = wait_until(
            probe, timeout=self.p["timeout"], interval=self.p["poll_interval"], alive=self.manager.death
        )
        self.result.update(ready_s=round(outcome["waited_s"], 3), workers=seen["workers"])
        if outcome["ready"]:
            return
        problems = worker_verdict(seen["workers"], self.request.workers, self.p["model"])
        if outcome["reason"] == "died":
            msg = f"smg gateway {self.p['name']} stopped while starting ({outcome['detail']})"
        else:
            msg = (
                f"smg gateway {self.p['name']} did not list every worker healthy within "
                f"{self.p['timeout']:g} s: " + "; ".join(problems)
            )
        self.give_up(msg, problems=problems)

    def give_up(self, msg: str, **fields) -> None:
        """The new configuration failed: stop it (a gateway that is not ready would route to workers that are
        not either) and, when it replaced a running gateway, bring the previous configuration back."""
        log_tail = self.log_tail()
        self.manager.stop_server()
        self.result["changed"] = True
        if self.previous:
            msg += self.roll_back()
        else:
            msg += "; the gateway was stopped"
        self.fail(msg, rc=1, cmd=self.argv, log_tail=log_tail, **fields)

    def roll_back(self) -> str:
        """Start the previous configuration again and wait until smg lists its workers healthy; the clause
        the failure message ends with."""
        self.manager.restore(self.previous)
        self.result["rolled_back"] = True
        seen: dict = {"workers": []}

        def probe() -> bool:
            seen["workers"] = listed_workers(self.url, auth_headers(self.api_key))
            return bool(seen["workers"]) and all(w["healthy"] for w in seen["workers"])

        outcome = wait_until(
            probe, timeout=self.p["timeout"], interval=self.p["poll_interval"], alive=self.manager.death
        )
        self.result["rollback_workers"] = seen["workers"]
        if outcome["ready"]:
            self.result["pid"] = self.manager.main_pid()
            return (
                "; the previous configuration was brought back and lists its workers healthy "
                f"({', '.join(w['url'] for w in seen['workers'])})"
            )
        self.manager.stop_server()
        return (
            "; the previous configuration was started again but did not list its workers healthy "
            f"({outcome['reason']}), so the gateway was stopped"
        )

    def log_tail(self) -> str:
        return tail(redact(self.manager.log_text(), [self.api_key]), self.p["log_tail_lines"])

    def prove_routing(self) -> None:
        """One real generation through the gateway, then distinct prompts for every worker's access log."""
        headers = auth_headers(self.api_key)
        first = generate(self.url, headers, "epforge gateway check")
        self.result["generation"] = first
        if first["status"] != 200 or not first.get("text"):
            self.routing_failed(
                f"a generation through the gateway failed (HTTP {first['status']}: {first.get('error')})"
            )
        extra = self.p["verify_requests"]
        extra = 4 * len(self.request.workers) if extra < 0 else extra
        failed = [
            answer
            for i in range(extra)
            # a prompt of its own from the first character: cache-aware routing sends a shared prefix to the
            # worker that holds it, and then one worker would get them all
            if (answer := generate(self.url, headers, f"{uuid.uuid4().hex} epforge route {i}"))["status"]
            != 200
        ]
        self.result["requests_sent"] = 1 + extra
        if failed:
            self.routing_failed(
                f"{len(failed)} of {extra} generations through the gateway failed "
                f"(first: HTTP {failed[0]['status']}: {failed[0].get('error')})"
            )

    def routing_failed(self, msg: str) -> None:
        """A new configuration that replaced a running gateway is given up (the previous one comes back);
        a gateway this run did not restart is left as it runs."""
        if self.previous:
            self.give_up(msg)
        self.fail(msg, rc=1, cmd=self.argv, log_tail=self.log_tail())

    def run(self) -> None:
        state = self.p["state"]
        if state in ("started", "restarted"):
            self.prepare()
            if os.path.exists(self.p["python"]):  # check mode before the env exists: no version yet
                self.result["version"] = self.version()
            previous = None if self.module.check_mode else self.manager.snapshot()
            self.manager.ensure_started(force_restart=state == "restarted")
            # only a start that replaced a running gateway has a previous configuration to bring back
            self.previous = previous if self.result.get("restarted") else None
            if not self.module.check_mode:
                self.wait_ready()
                self.prove_routing()
                self.result["pid"] = self.manager.main_pid()
        elif state == "stopped":
            self.manager.ensure_stopped()
        else:
            self.manager.remove()
        self.manager.exit()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "epforge-gateway"},
            "state": {
                "type": "str",
                "default": "started",
                "choices": ["started", "stopped", "restarted", "absent"],
            },
            "python": {"type": "path"},
            "workers": {"type": "list", "elements": "str", "default": []},
            "model": {"type": "str", "default": ""},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "default": 30080},
            "metrics_port": {"type": "int", "default": 29000},
            "policy": {
                "type": "str",
                "default": "cache_aware",
                "choices": ["cache_aware", "round_robin", "random", "power_of_two"],
            },
            "health_check_interval": {"type": "int", "default": 10},
            "health_failure_threshold": {"type": "int", "default": 3},
            "health_check_timeout": {"type": "int", "default": 0},
            "sglang_health_timeout": {"type": "int"},
            "overload_protection": {"type": "bool", "default": False},
            "overload_waiting_requests": {"type": "int", "default": 8},
            # a KV cache share, not a secret (validate-modules reads "token" as one)
            "overload_token_usage": {"type": "float", "default": 0.8, "no_log": False},
            "api_key": {"type": "str", "no_log": True},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "log_path": {"type": "str", "default": "/var/log/epforge/gateway.log"},
            "state_dir": {"type": "path", "default": "/var/lib/epforge/gateway"},
            "timeout": {"type": "float", "default": 120},
            "poll_interval": {"type": "float", "default": 0.5},
            "verify_requests": {"type": "int", "default": -1},
            "log_tail_lines": {"type": "int", "default": 40},
            **SERVICE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    refuse_bad_service_request(module)
    Gateway(module).run()


if __name__ == "__main__":
    main()
