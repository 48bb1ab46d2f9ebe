"""How long the gateway waits for a worker's health check: longer than SGLang's /health may take.

SGLang's GET /health generates one token and waits for it, up to SGLANG_HEALTH_CHECK_TIMEOUT seconds
(sglang/srt/entrypoints/http_server.py: int(os.getenv(...)); the default per release is data, in
data/sglang_env/<version>.json), checking once a second, so its answer may come a second after that. smg gives
up on a check after --health-check-timeout-secs (1.13: 5 s) and counts it as failed: a worker that is busy but
healthy goes unhealthy, and one whose /health is slower than that at registration is never listed (measured
with the stand-in: a /health of 7 s, smg 1.13.0 with its default never listed the worker; with 25 s, at once).

The rule, one owner: the gateway's timeout is the longest /health wait of the servers it fronts plus
MARGIN_S; a value the user sets wins but must be above that wait.
"""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.sglang_env import reading

VARIABLE = "SGLANG_HEALTH_CHECK_TIMEOUT"
# SGLang's poll runs once a second (an answer up to 1 s past its timeout), plus the lag of a busy server's
# event loop and of the request itself.
MARGIN_S = 5


class HealthError(ValueError):
    """A health-check setting the gateway cannot work with; the message says what to change."""


def release_default(table: dict, version: str) -> int:
    """SGLang's own SGLANG_HEALTH_CHECK_TIMEOUT of a release, from its variable table (typed in environ.py, or
    a literal read with one default)."""
    found = reading(VARIABLE, table) or {}
    if "typed" in found:
        default = found["typed"].get("default")
    else:
        defaults = (found.get("literal") or {}).get("defaults") or []
        default = defaults[0] if len(set(map(str, defaults))) == 1 else None
    if isinstance(default, bool) or not isinstance(default, int):
        raise HealthError(
            f"SGLang {version}'s variable table names no single integer default of {VARIABLE} "
            f"(found {found or 'nothing'}), so how long its /health may take is not known"
        )
    return default


def server_wait(env: dict, default: int, where: str) -> int:
    """Seconds a server's /health may take: its environment's SGLANG_HEALTH_CHECK_TIMEOUT, else its
    release's."""
    value = (env or {}).get(VARIABLE)
    if value is None:
        return default
    try:
        seconds = int(str(value).strip())
    except ValueError:
        raise HealthError(
            f"{where}: {VARIABLE}={value!r} is not an integer (SGLang reads it with int() and stops)"
        ) from None
    if seconds < 1:
        raise HealthError(f"{where}: {VARIABLE}={value!r}: SGLang's /health would answer 503 at once")
    return seconds


def gateway_timeout(sglang_wait: int) -> int:
    """The derived --health-check-timeout-secs."""
    return sglang_wait + MARGIN_S


def timeout_problem(value: int, sglang_wait: int | None) -> str | None:
    """Why a health-check timeout the user set cannot be used; None when it can."""
    if value < 1:
        return f"health_check_timeout {value} must be at least 1 (smg refuses less; 0 derives it)"
    if sglang_wait is not None and value <= sglang_wait:
        return (
            f"health_check_timeout {value} s is not above the {sglang_wait} s SGLang's /health may take "
            f"({VARIABLE}): smg would count a busy, healthy worker as failed; leave it 0 (derived: "
            f"{gateway_timeout(sglang_wait)} s), or lower {VARIABLE} in the servers' environment"
        )
    return None
