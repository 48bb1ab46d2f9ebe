"""What the smg_gateway module runs: the gateway request checked once (before anything changes) and rendered
once into `smg launch` flags.

Rules, each with its reason:
- at least one worker, each an http(s)://HOST:PORT URL, no duplicates (smg would list one twice);
- a key is required as soon as anything listens beyond loopback: the gateway itself (its clients) or a
  worker (the gateway's requests cross the network, and SGLang without a key serves anyone);
- the flags the module owns (addresses, workers, policy, health checks, overload protection, metrics, keys)
  are refused in extra_args: a second value would silently win, and a key there would land on a command line;
- the health-check timeout is above what the workers' SGLang /health may take (rule in health.py);
- worker overload protection is always rendered, on or off: smg 1.13 switches it on when nothing is said (a
  worker with 8 waiting requests or 0.8 KV usage is left out of routing), and that decides where a fleet
  benchmark's requests go. Its thresholds follow smg's own limits (waiting >= 1, KV usage in (0, 1]).

The flag names are those of the pinned smg release (tests/unit/test_smg_gateway_defaults.py parses the
rendered flags with that release's own parser).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import flag_names
from ansible_collections.epforge.ep.plugins.module_utils.server_address import (
    BIND_ALL,
    connect_host,
    is_loopback,
    server_url,
)
from ansible_collections.epforge.ep.plugins.module_utils.smg_health import (
    gateway_timeout,
    timeout_problem,
)

# Every address smg's Prometheus endpoint binds: the metrics are the operator's, not the clients'.
METRICS_HOST = "127.0.0.1"
OWNED_FLAGS = (
    "--host",
    "--port",
    "--worker-urls",
    "--policy",
    "--health-check-interval-secs",
    "--health-failure-threshold",
    "--health-check-timeout-secs",
    "--worker-overload-protection",
    "--disable-worker-overload-protection",
    "--worker-overload-waiting-requests",
    "--worker-overload-token-usage",
    "--prometheus-host",
    "--prometheus-port",
    "--api-key",
    "--tenant-api-key",
    "--control-plane-api-keys",
)


class RequestError(ValueError):
    """A request the gateway cannot run; the message says what to change."""


def worker_host(url: str) -> str:
    """The host of a worker URL; RequestError when the URL is not http(s)://HOST:PORT."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise RequestError(f"worker {url!r} is not an http(s)://HOST:PORT URL")
    if parts.path not in ("", "/") or parts.query:
        raise RequestError(f"worker {url!r} must be a base URL (no path or query)")
    return parts.hostname


@dataclass(frozen=True)
class GatewayRequest:
    workers: tuple[str, ...]
    host: str
    port: int
    metrics_port: int
    policy: str
    health_check_interval: int
    health_failure_threshold: int
    # seconds; 0: derived from sglang_health_timeout (health.py)
    health_check_timeout: int
    # the longest /health wait of the workers' SGLang (None: not known, no derived value)
    sglang_health_timeout: int | None
    overload_protection: bool
    overload_waiting_requests: int
    overload_token_usage: float
    has_key: bool
    extra_args: tuple[str, ...]

    @classmethod
    def from_params(cls, params: dict) -> GatewayRequest:
        request = cls(
            workers=tuple(w.rstrip("/") for w in params["workers"]),
            host=params["host"],
            port=params["port"],
            metrics_port=params["metrics_port"],
            policy=params["policy"],
            health_check_interval=params["health_check_interval"],
            health_failure_threshold=params["health_failure_threshold"],
            health_check_timeout=params["health_check_timeout"],
            sglang_health_timeout=params["sglang_health_timeout"],
            overload_protection=params["overload_protection"],
            overload_waiting_requests=params["overload_waiting_requests"],
            overload_token_usage=params["overload_token_usage"],
            has_key=bool(params["api_key"]),
            extra_args=tuple(params["extra_args"]),
        )
        request.check()
        return request

    def check(self) -> None:
        if not self.workers:
            raise RequestError("workers is empty: the gateway needs at least one verified SGLang server")
        duplicates = sorted({w for w in self.workers if self.workers.count(w) > 1})
        if duplicates:
            raise RequestError(f"workers lists {', '.join(duplicates)} more than once")
        remote = [w for w in self.workers if not is_loopback(worker_host(w))]
        if remote and not self.has_key:
            raise RequestError(
                f"workers on a non-loopback address ({', '.join(remote)}) need an API key: without one the "
                "servers answer anyone on that network; set the servers' key (sglang_server_api_key), "
                "which the gateway holds to reach them"
            )
        if not is_loopback(self.host) and not self.has_key:
            what = "every interface" if self.host in BIND_ALL else self.host
            raise RequestError(f"the gateway binds {what} without an API key: set one, or bind 127.0.0.1")
        for name in ("port", "metrics_port"):
            if not 0 < getattr(self, name) < 65536:
                raise RequestError(f"{name} {getattr(self, name)} is not a TCP port")
        if self.port == self.metrics_port:
            raise RequestError(f"port and metrics_port are both {self.port}")
        for name in ("health_check_interval", "health_failure_threshold"):
            if getattr(self, name) < 1:
                raise RequestError(f"{name} must be at least 1")
        self.check_health_timeout()
        if self.overload_protection and self.overload_waiting_requests < 1:
            # smg compares at or above: 0 would leave every worker out
            raise RequestError(
                f"overload_waiting_requests {self.overload_waiting_requests} must be at least 1"
            )
        if self.overload_protection and not 0.0 < self.overload_token_usage <= 1.0:
            raise RequestError(f"overload_token_usage {self.overload_token_usage} must be in (0, 1]")
        owned = sorted(set(flag_names(self.extra_args)).intersection(OWNED_FLAGS))
        if owned:
            raise RequestError(
                f"extra_args may not set {', '.join(owned)}: the module's options own them "
                "(a key there would be on the command line)"
            )

    def check_health_timeout(self) -> None:
        if self.sglang_health_timeout is not None and self.sglang_health_timeout < 1:
            raise RequestError(f"sglang_health_timeout {self.sglang_health_timeout} must be at least 1")
        if self.health_check_timeout == 0:
            if self.sglang_health_timeout is None:
                raise RequestError(
                    "health_check_timeout 0 derives it from sglang_health_timeout (how long the workers' "
                    "SGLang /health may take), which is not given: give one of them"
                )
            return
        problem = timeout_problem(self.health_check_timeout, self.sglang_health_timeout)
        if problem:
            raise RequestError(problem)

    @property
    def health_timeout(self) -> int:
        """The --health-check-timeout-secs smg runs with: the user's, else derived."""
        return self.health_check_timeout or gateway_timeout(self.sglang_health_timeout)

    @property
    def overload(self) -> dict:
        """Worker overload protection as smg runs it (for the gateway's fact)."""
        if not self.overload_protection:
            return {"enabled": False}
        return {
            "enabled": True,
            "waiting_requests": self.overload_waiting_requests,
            "token_usage": self.overload_token_usage,
        }

    def overload_flags(self) -> list[str]:
        if not self.overload_protection:
            return ["--disable-worker-overload-protection"]
        return [
            "--worker-overload-waiting-requests",
            str(self.overload_waiting_requests),
            "--worker-overload-token-usage",
            str(self.overload_token_usage),
        ]

    @property
    def connect_host(self) -> str:
        return connect_host(self.host)

    @property
    def url(self) -> str:
        return server_url(self.connect_host, self.port)

    def flags(self) -> list[str]:
        """`smg launch` and its flags; the launcher appends the key from the environment."""
        return [
            "launch",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--worker-urls",
            *self.workers,
            "--policy",
            self.policy,
            "--health-check-interval-secs",
            str(self.health_check_interval),
            "--health-failure-threshold",
            str(self.health_failure_threshold),
            "--health-check-timeout-secs",
            str(self.health_timeout),
            *self.overload_flags(),
            "--prometheus-host",
            METRICS_HOST,
            "--prometheus-port",
            str(self.metrics_port),
            *self.extra_args,
        ]
