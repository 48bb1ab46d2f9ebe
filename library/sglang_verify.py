#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: prove that a running SGLang server generates text, through its native and its
OpenAI-compatible API, and report latency and the speculative accept length."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_verify
short_description: Send real generation requests to an SGLang server and check the answers
description:
  - Sends one request to the native C(POST /generate) and one to the OpenAI-compatible
    C(POST /v1/chat/completions) (or C(/v1/completions)) and checks that each answer is well formed and
    not empty (HTTP 200, a non-empty text, at least O(min_tokens) completion tokens).
  - Reports the latency of each request and, when the server runs speculative decoding, the accept length
    (C(internal_states[i].avg_spec_accept_length) of C(/get_server_info), falling back to C(/server_info)).
  - Returns the results as the fact C(epforge_sglang_verify). Changes nothing, so it runs the same in
    check mode.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: API key of the server (sent as a Bearer token).
    type: str
  prompt:
    description: Prompt of both requests.
    type: str
    default: The capital of France is
  max_new_tokens:
    description: Tokens to generate per request.
    type: int
    default: 16
  openai_api:
    description: Which OpenAI-compatible endpoint to call (C(none) skips it).
    type: str
    choices: [chat, completions, none]
    default: chat
  model:
    description: Model name for the OpenAI request (default the first of C(/v1/models)).
    type: str
  min_tokens:
    description: Fewest completion tokens an answer must have.
    type: int
    default: 1
  timeout:
    description: Seconds each request may take.
    type: float
    default: 120
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Sends its requests and changes nothing; the same run in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Prove the server answers
  epforge.ep.sglang_verify:
    url: http://127.0.0.1:30000
    api_key: "{{ vault_sglang_api_key }}"
  register: verify

- name: Show the latency
  ansible.builtin.debug:
    msg: "{{ ansible_facts['epforge_sglang_verify']['generate']['latency_s'] }}"
"""

RETURN = r"""
ansible_facts:
  description: The fact C(epforge_sglang_verify).
  returned: success
  type: dict
  contains:
    epforge_sglang_verify:
      description: url, model, speculative, accept_length, generate and openai (each ok, endpoint, latency_s,
        completion_tokens, prompt_tokens, finish_reason, text).
      type: dict
      returned: success
      sample:
        url: http://127.0.0.1:30000
        model: /models/Kimi-K2.5
        speculative: true
        accept_length: 2.61
        generate: {ok: true, endpoint: /generate, latency_s: 0.41, completion_tokens: 16, text: " Paris."}
        openai: {ok: true, endpoint: /v1/chat/completions, latency_s: 0.44, completion_tokens: 16}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_address import DEFAULT_URL
from ansible_collections.epforge.ep.plugins.module_utils.server_http import auth_headers, get_json, post_json

TEXT_SHOWN = 200


def server_info(url: str, headers: dict, timeout: float) -> dict:
    for path in ("/get_server_info", "/server_info"):
        status, body, _unused = get_json(url + path, headers=headers, timeout=timeout)
        if status == 200 and isinstance(body, dict):
            return body
    return {}


def accept_length(info: dict) -> float | None:
    """Mean avg_spec_accept_length over the server's internal states (one per DP rank)."""
    values = [
        state.get("avg_spec_accept_length")
        for state in info.get("internal_states") or []
        if isinstance(state, dict)
    ]
    values = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return round(sum(values) / len(values), 4) if values else None


def check_generate(body: object, min_tokens: int) -> tuple[dict, str]:
    """(facts, problem) for a native /generate answer."""
    if not isinstance(body, dict):
        return {}, "the answer is not a JSON object"
    text = body.get("text")
    meta = body.get("meta_info") or {}
    tokens = meta.get("completion_tokens")
    facts = {
        "completion_tokens": tokens,
        "prompt_tokens": meta.get("prompt_tokens"),
        "finish_reason": (meta.get("finish_reason") or {}).get("type")
        if isinstance(meta.get("finish_reason"), dict)
        else meta.get("finish_reason"),
        "text": text[:TEXT_SHOWN] if isinstance(text, str) else None,
    }
    if meta.get("spec_accept_length") is not None:
        facts["spec_accept_length"] = meta["spec_accept_length"]
    if not isinstance(text, str) or not text.strip():
        return facts, "the answer has no text"
    if not isinstance(tokens, int) or tokens < min_tokens:
        return facts, f"meta_info.completion_tokens is {tokens!r}, expected at least {min_tokens}"
    return facts, ""


def check_openai(body: object, chat: bool, min_tokens: int) -> tuple[dict, str]:
    """(facts, problem) for an OpenAI-compatible answer."""
    if not isinstance(body, dict):
        return {}, "the answer is not a JSON object"
    choices = body.get("choices") or []
    usage = body.get("usage") or {}
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    text = (first.get("message") or {}).get("content") if chat else first.get("text")
    tokens = usage.get("completion_tokens")
    facts = {
        "completion_tokens": tokens,
        "prompt_tokens": usage.get("prompt_tokens"),
        "finish_reason": first.get("finish_reason"),
        "model": body.get("model"),
        "text": text[:TEXT_SHOWN] if isinstance(text, str) else None,
    }
    if not choices:
        return facts, "the answer has no choices"
    if not isinstance(text, str) or not text.strip():
        return facts, "the first choice has no text"
    if not isinstance(tokens, int) or tokens < min_tokens:
        return facts, f"usage.completion_tokens is {tokens!r}, expected at least {min_tokens}"
    return facts, ""


def openai_request(prompt: str, model: str | None, max_tokens: int, chat: bool) -> tuple[str, dict]:
    """The OpenAI-compatible endpoint and request body for one greedy answer."""
    request = {"model": model or "default", "max_tokens": max_tokens, "temperature": 0}
    if chat:
        request["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", request
    request["prompt"] = prompt
    return "/v1/completions", request


class Verifier:
    """The requests that prove a server answers; facts gathered as they go, every failure with them."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.url = self.p["url"].rstrip("/")
        self.key = self.p["api_key"] or ""
        self.headers = auth_headers(self.key)
        self.timeout = self.p["timeout"]
        self.facts: dict = {"url": self.url}

    def refuse_bad_input(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            self.module.fail_json(msg=f"url must start with http:// or https://, got {self.url!r}")
        if self.p["max_new_tokens"] < 1 or self.p["min_tokens"] < 0:
            self.module.fail_json(msg="max_new_tokens must be at least 1 and min_tokens at least 0")

    def fail(self, msg: str, **extra) -> None:
        self.module.fail_json(msg=msg, **redact({"epforge_sglang_verify": self.facts, **extra}, [self.key]))

    def server_info(self) -> dict:
        return server_info(self.url, self.headers, min(self.timeout, 30))

    def ask(self, fact: str, endpoint: str, request: dict, check) -> None:
        """POST request to endpoint; facts[fact] records status, latency and check(body)'s facts; a non-200
        answer or a problem check finds fails the module."""
        status, body, error, seconds = post_json(
            self.url + endpoint, request, headers=self.headers, timeout=self.timeout
        )
        answer = {"endpoint": endpoint, "status": status, "latency_s": round(seconds, 4)}
        self.facts[fact] = answer
        if status != 200:
            answer["ok"] = False
            self.fail(
                f"POST {self.url}{endpoint} answered HTTP {status or 'nothing'} {error}".strip(),
                body=str(body)[:500] if body is not None else None,
            )
        checked, problem = check(body)
        answer.update(checked, ok=not problem)
        if problem:
            self.fail(f"POST {self.url}{endpoint}: {problem}", body=str(body)[:500])

    def ask_generate(self) -> None:
        p = self.p
        request = {
            "text": p["prompt"],
            "sampling_params": {"max_new_tokens": p["max_new_tokens"], "temperature": 0},
        }
        self.ask("generate", "/generate", request, lambda body: check_generate(body, p["min_tokens"]))

    def served_model(self) -> str | None:
        """The model option, else the first model /v1/models lists."""
        if self.p["model"]:
            return self.p["model"]
        _unused, models, _unused = get_json(
            self.url + "/v1/models", headers=self.headers, timeout=min(self.timeout, 30)
        )
        data = (models or {}).get("data") if isinstance(models, dict) else None
        return data[0].get("id") if data and isinstance(data[0], dict) else None

    def ask_openai(self) -> None:
        p = self.p
        model = self.served_model()
        self.facts["model"] = model
        chat = p["openai_api"] == "chat"
        endpoint, request = openai_request(p["prompt"], model, p["max_new_tokens"], chat)
        self.ask("openai", endpoint, request, lambda body: check_openai(body, chat, p["min_tokens"]))

    def read_accept_length(self) -> None:
        if not self.facts["speculative"]:
            self.facts["accept_length"] = None
            return
        # Read after the requests, so the server has verified at least one speculative step.
        self.facts["accept_length"] = accept_length(self.server_info())
        if self.facts["accept_length"] is None:
            self.facts["accept_length"] = self.facts["generate"].get("spec_accept_length")

    def run(self) -> None:
        self.refuse_bad_input()
        info = self.server_info()
        self.facts["speculative"] = bool(info.get("speculative_algorithm"))
        self.facts["speculative_algorithm"] = info.get("speculative_algorithm")
        self.facts["server_version"] = info.get("version")
        self.ask_generate()
        if self.p["openai_api"] != "none":
            self.ask_openai()
        self.read_accept_length()
        self.module.exit_json(
            changed=False, ansible_facts={"epforge_sglang_verify": redact(self.facts, [self.key])}
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": DEFAULT_URL},
            "api_key": {"type": "str", "no_log": True},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_new_tokens": {"type": "int", "default": 16, "no_log": False},
            "openai_api": {"type": "str", "default": "chat", "choices": ["chat", "completions", "none"]},
            "model": {"type": "str"},
            "min_tokens": {"type": "int", "default": 1, "no_log": False},
            "timeout": {"type": "float", "default": 120},
        },
        supports_check_mode=True,
    )
    Verifier(module).run()


if __name__ == "__main__":
    main()
