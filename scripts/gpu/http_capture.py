"""Capture a running SGLang server's HTTP answers into files (by-hand fixture capture).

python http_capture.py http://127.0.0.1:30000 OUT_DIR TAG     # writes OUT_DIR/TAG-NAME.txt
"""

import json
import sys
import time
import urllib.error
import urllib.request

PROMPT = "The capital of France is"
CALLS = [
    ("health", "GET", "/health", None),
    ("health_generate", "GET", "/health_generate", None),
    ("get_server_info", "GET", "/get_server_info", None),
    ("server_info", "GET", "/server_info", None),
    ("get_model_info", "GET", "/get_model_info", None),
    ("model_info", "GET", "/model_info", None),
    ("v1_models", "GET", "/v1/models", None),
    (
        "generate",
        "POST",
        "/generate",
        {"text": PROMPT, "sampling_params": {"max_new_tokens": 16, "temperature": 0}},
    ),
    (
        "chat",
        "POST",
        "/v1/chat/completions",
        {
            "model": "default",
            "max_tokens": 16,
            "temperature": 0,
            "messages": [{"role": "user", "content": PROMPT}],
        },
    ),
    (
        "completions",
        "POST",
        "/v1/completions",
        {"model": "default", "max_tokens": 16, "temperature": 0, "prompt": PROMPT},
    ),
    ("generate_bad", "POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": -3}}),
]


def call(base: str, method: str, path: str, body=None, timeout: float = 60):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)  # noqa: S310
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http only, see main)
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except OSError as exc:
        status, text = -1, repr(exc)
    return status, text, time.monotonic() - t0


def main() -> int:
    base, out, tag = sys.argv[1], sys.argv[2], sys.argv[3]
    if not base.startswith("http://"):
        raise SystemExit(f"not an http URL: {base}")
    for name, method, path, body in CALLS:
        status, text, secs = call(base, method, path, body)
        with open(f"{out}/{tag}-{name}.txt", "w", encoding="utf-8") as handle:
            handle.write(f"HTTP {status} {secs:.4f}s\n{text}\n")
        print(name, status, f"{secs:.3f}s", text[:160].replace("\n", " "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
