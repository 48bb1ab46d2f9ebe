"""What the smg_gateway module runs: the gateway request checked once (before anything changes) and rendered
once into `smg launch` flags.

Rules, each with its reason:
- at least one worker, each an http(s)://HOST:PORT URL, no duplicates (smg would list one twice);
- a key is required as soon as anything listens beyond loopback: the gateway itself (its clients) or a
  worker (the gateway's requests cross the network, and SGLang without a key serves anyone);
- the flags the module owns (addresses, workers, policy, health checks, metrics, keys) are refused in
  extra_args: a second value would silently win, and a key there would land on a command line.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from ansible_collections.epforge.ep.plugins.module_utils.server_address import (
    BIND_ALL,
    connect_host,
    is_loopback,
    server_url,
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


def owned_flag(arg: str) -> str | None:
    name = arg.split("=", 1)[0]
    return name if name in OWNED_FLAGS else None


@dataclass(frozen=True)
class GatewayRequest:
    workers: tuple[str, ...]
    host: str
    port: int
    metrics_port: int
    policy: str
    health_check_interval: int
    health_failure_threshold: int
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
        owned = sorted({flag for arg in self.extra_args if (flag := owned_flag(arg))})
        if owned:
            raise RequestError(
                f"extra_args may not set {', '.join(owned)}: the module's options own them "
                "(a key there would be on the command line)"
            )

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
            "--prometheus-host",
            METRICS_HOST,
            "--prometheus-port",
            str(self.metrics_port),
            *self.extra_args,
        ]
