"""Small HTTP helpers for talking to an SGLang server from a module: bounded requests and a bounded-rate
readiness wait. Secrets in what the server echoes back: plugins/module_utils/secret_scrub.py.

Standard library only (urllib), so modules run on any managed host without extra packages.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

# The wait never polls faster than this (seconds between probes), whatever the caller asks.
MIN_POLL_INTERVAL = 0.05
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_DEFAULT = urllib.request.build_opener()


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The Authorization header SGLang expects (Bearer token), or none."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def request(
    method: str, url: str, *, body: dict | None = None, headers: dict | None = None, timeout: float = 5.0
) -> tuple[int, bytes, str]:
    """One HTTP request. Returns (status, body, error): status 0 with an error text when no answer came
    (refused, reset, timed out); HTTP errors return their status and body."""
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)  # noqa: S310
    # A proxy from the environment (http_proxy) must never see a request to the host's own server.
    opener = _DIRECT if urllib.parse.urlsplit(url).hostname in LOOPBACK else _DEFAULT
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.read(), ""
    except urllib.error.HTTPError as exc:
        try:
            payload = exc.read()
        except OSError:
            payload = b""
        return exc.code, payload, str(exc)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return 0, b"", f"{type(exc).__name__}: {reason}"


def get_json(url: str, *, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, object, str]:
    """GET and decode JSON. Returns (status, decoded-or-None, error)."""
    status, payload, error = request("GET", url, headers=headers, timeout=timeout)
    return status, _decode(payload), error


def post_json(
    url: str, body: dict, *, headers: dict | None = None, timeout: float = 60.0
) -> tuple[int, object, str, float]:
    """POST JSON and decode the answer. Returns (status, decoded-or-None, error, seconds)."""
    started = time.monotonic()
    status, payload, error = request("POST", url, body=body, headers=headers, timeout=timeout)
    return status, _decode(payload), error, time.monotonic() - started


def _decode(payload: bytes) -> object:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None


def wait_until(
    probe: Callable[[], bool],
    *,
    timeout: float,
    interval: float,
    alive: Callable[[], str | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Call probe() on a fixed cadence until it returns True, alive() reports a death, or timeout passes.

    - interval is clamped to at least MIN_POLL_INTERVAL: the wait never hammers the server.
    - Probes run at start + k * interval (no drift from slow probes; a slow probe skips missed slots).
    - alive() returns None while the server lives, else a reason text; it is checked before each probe,
      so a crashed server ends the wait within one interval.

    Returns {ready, reason ('ready'|'died'|'timeout'), polls, waited_s, interval, detail}.
    """
    interval = max(float(interval), MIN_POLL_INTERVAL)
    start = clock()
    deadline = start + max(0.0, float(timeout))
    polls = 0
    k = 0

    def outcome(reason: str, waited_s: float, detail: str) -> dict:
        return {
            "ready": reason == "ready",
            "reason": reason,
            "polls": polls,
            "waited_s": waited_s,
            "interval": interval,
            "detail": detail,
        }

    while True:
        death = alive() if alive is not None else None
        if death:
            return outcome("died", clock() - start, death)
        polls += 1
        if probe():
            return outcome("ready", clock() - start, "")
        now = clock()
        if now >= deadline:
            return outcome("timeout", now - start, f"not ready after {timeout:g} s")
        k = max(k + 1, int((now - start) / interval) + 1)
        sleep(max(0.0, min(start + k * interval, deadline) - now))
