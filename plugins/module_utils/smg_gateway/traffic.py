"""What the smg_gateway module asks over HTTP: whether a worker answers from the gateway's host, smg's own
worker list (GET /workers) and the verdict on it, and a generation through the gateway."""

from __future__ import annotations

import json

from ansible_collections.epforge.ep.plugins.module_utils.http import get_json, post_json, request


def unreachable_workers(workers, timeout: float = 3.0) -> list[tuple[str, str]]:
    """(url, why) for each worker whose /health gets no HTTP answer at all from this host; an answer of any
    status (503 while loading, 401) means the address is reachable."""
    found = []
    for url in workers:
        status, _, error = request("GET", url + "/health", timeout=timeout)
        if status == 0:
            found.append((url, error or "no answer"))
    return found


def listed_workers(url: str, headers: dict) -> list[dict]:
    """smg's worker list, one dict per worker: url, healthy, model_id, runtime_type."""
    status, body, _ = get_json(url + "/workers", headers=headers, timeout=5.0)
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
