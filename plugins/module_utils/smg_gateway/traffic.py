"""What the smg_gateway module asks over HTTP: whether a worker answers from the gateway's host, whether it
answers as an SGLang server with the model (before the running gateway is touched), smg's own worker list
(GET /workers) and the verdict on it, and a generation through the gateway."""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.parse

from ansible_collections.epforge.ep.plugins.module_utils.server_http import get_json, post_json, request


def unreachable_workers(workers, timeout: float = 3.0) -> list[tuple[str, str]]:
    """(url, why) for each worker whose /health gets no HTTP answer at all from this host; an answer of any
    status (503 while loading, 401) means the address is reachable."""
    found = []
    for url in workers:
        status, _unused, error = request("GET", url + "/health", timeout=timeout)
        if status == 0:
            found.append((url, error or "no answer"))
    return found


def local_addresses(host: str) -> set[str]:
    """The addresses host resolves to that belong to this machine (an address this host can bind is its
    own); empty when it resolves to none."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, proto=socket.IPPROTO_TCP)
    except OSError:
        return set()
    own = set()
    for family, _unused, _unused, _unused, sockaddr in infos:
        addr = sockaddr[0]
        if ipaddress.ip_address(addr.split("%")[0]).is_loopback:
            own.add(addr)
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((addr, 0))
            own.add(addr)
        except OSError:
            pass
    return own


def is_own_url(worker: str, host: str, port: int) -> bool:
    """Whether worker is the gateway's own address: its port, on an address of this machine that the
    gateway's bind (host; every interface for 0.0.0.0 or ::) covers. smg would route to itself."""
    parts = urllib.parse.urlsplit(worker)
    if parts.port != port or not parts.hostname:
        return False
    mine = local_addresses(parts.hostname)
    if not mine:
        return False
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 - compared with, never bound to
        return True
    bound = local_addresses(host)
    loopback = {a for a in mine if ipaddress.ip_address(a.split("%")[0]).is_loopback}
    return bool(mine & bound) or bool(
        loopback and bound and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in bound)
    )


def sglang_problem(url: str, headers: dict, model: str, timeout: float = 5.0) -> tuple[str, str]:
    """Whether url answers as an SGLang server serving model: ("", "") when it does, else (kind, why) with
    kind "starting" (HTTP 503: SGLang still loading, worth waiting for) or "refused" (not SGLang, the key
    refused, another model). SGLang's /get_model_info is a JSON object with model_path and is_generation;
    the model is its served_model_name (/v1/models ids) or its model_path."""
    status, info, error = get_json(url + "/get_model_info", headers=headers, timeout=timeout)
    if status == 503:
        return "starting", "still starting (GET /get_model_info: HTTP 503)"
    if status in (401, 403):
        return "refused", f"refuses the gateway's API key (GET /get_model_info: HTTP {status})"
    if (
        status != 200
        or not isinstance(info, dict)
        or not isinstance(info.get("model_path"), str)
        or ("is_generation" not in info)
    ):
        answer = f"HTTP {status}" if status else (error or "no answer")
        if status == 200:
            answer += ", not SGLang's model info"
        return "refused", f"does not answer as an SGLang server (GET /get_model_info: {answer})"
    if not model:
        return "", ""
    served = {info["model_path"]}
    status, listing, _unused = get_json(url + "/v1/models", headers=headers, timeout=timeout)
    if status == 200 and isinstance(listing, dict):
        served |= {str(m.get("id")) for m in listing.get("data") or [] if isinstance(m, dict) and m.get("id")}
    if model not in served:
        return "refused", f"serves {', '.join(repr(m) for m in sorted(served))}, not {model!r}"
    return "", ""


def listed_workers(url: str, headers: dict) -> list[dict]:
    """smg's worker list, one dict per worker: url, healthy, model_id, runtime_type."""
    status, body, _unused = get_json(url + "/workers", headers=headers, timeout=5.0)
    if status != 200 or not isinstance(body, dict):
        return []
    return [
        {
            "url": str(w.get("url", "")).rstrip("/"),
            "healthy": w.get("is_healthy") is True,
            "model_id": w.get("model_id"),
            "runtime_type": w.get("runtime_type"),
        }
        for w in body.get("workers") or []
        if isinstance(w, dict)
    ]


def worker_verdict(listed: list[dict], expected, model: str) -> list[str]:
    """What keeps the gateway from being ready (empty: every expected worker listed, healthy, serving
    model, as an SGLang worker)."""
    by_url = {w["url"]: w for w in listed}
    problems = []
    for url in expected:
        worker = by_url.get(url)
        if worker is None:
            problems.append(f"{url} is not in smg's worker list")
        elif not worker["healthy"]:
            problems.append(f"{url} is listed but not healthy")
        elif model and worker["model_id"] != model:
            problems.append(f"{url} serves {worker['model_id']!r}, not {model!r}")
        elif worker["runtime_type"] not in (None, "sglang"):
            problems.append(f"{url} is a {worker['runtime_type']} worker, not SGLang")
    return problems


def generate(url: str, headers: dict, text: str, max_new_tokens: int = 8) -> dict:
    """One /generate through the gateway: status, text, completion_tokens, seconds, error."""
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    status, answer, error, seconds = post_json(url + "/generate", body, headers=headers, timeout=120.0)
    out = {"status": status, "seconds": round(seconds, 4)}
    if status == 200 and isinstance(answer, dict):
        out["text"] = answer.get("text", "")
        out["completion_tokens"] = (answer.get("meta_info") or {}).get("completion_tokens")
    else:
        out["error"] = error or json.dumps(answer)[:300]
    return out
