"""The one secret rule (module_utils/secret_scrub.py): which names are secret (checked against the keys
of a real SGLang 0.5.16 /get_server_info answer, tests/fixtures/sglang_h200/), and how values are hidden in
results (redact), in settings a caller may apply (without_secrets) and in Ansible's records
(secret_values)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import (
    REDACTED,
    is_secret_name,
    redact,
    redact_url,
    secret_values,
    url_secrets,
    without_secrets,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SERVER_INFO = FIX / "sglang_h200" / "tp1-graph-get_server_info.json"


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "admin_api_key",
        "ssl_keyfile_password",
        "hf_token",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "client_secret",
        "--api-key",
        "--ssl-keyfile-password",
        "EPFORGE_SGLANG_API_KEY",
        "db_passwd",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "tokenizer_path",
        "max_total_tokens",
        "speculative_num_draft_tokens",
        "token_capacity",
        "ssl_keyfile",
        "cache_key",
        "NCCL_P2P_LEVEL",
        "--port",
        "skip_tokenizer_init",
    ],
)
def test_names_that_only_contain_a_secret_word_are_not_secret(name):
    assert not is_secret_name(name)


def test_real_server_info_keeps_its_figures_and_hides_its_keys():
    info = json.loads(SERVER_INFO.read_text())
    info["api_key"], info["ssl_keyfile_password"] = "k3y", "pw"
    out = redact(info)
    assert out["api_key"] == REDACTED and out["ssl_keyfile_password"] == REDACTED
    changed = sorted(k for k in info if out[k] != info[k])
    assert changed == ["api_key", "ssl_keyfile_password"]  # nothing else of 300+ settings is touched


def test_redact_hides_keys_flags_and_values():
    info = {
        "api_key": "k3y",
        "tp_size": 8,
        "launch_command": "python -m sglang.launch_server --api-key k3y",
        "argv": ["--api-key", "k3y", "--port", "1"],
        "nested": [{"admin_api_key": None}],
        "x": "--api-key=k3y",
        "env": {"HF_TOKEN": "hf_x", "NCCL_P2P_LEVEL": "SYS"},
    }
    out = redact(info, ["k3y"])
    assert "k3y" not in repr(out) and "hf_x" not in repr(out)
    assert out["api_key"] == REDACTED and out["tp_size"] == 8
    assert out["argv"] == ["--api-key", REDACTED, "--port", "1"]
    assert redact(["--api-key=abc", "--port", "1"]) == [f"--api-key={REDACTED}", "--port", "1"]
    assert out["nested"] == [{"admin_api_key": None}]
    assert out["env"] == {"HF_TOKEN": REDACTED, "NCCL_P2P_LEVEL": "SYS"}
    assert info["api_key"] == "k3y"  # the input is not changed


def test_without_secrets_and_secret_values_agree():
    server = {"tp_size": 8, "api_key": "sk-1", "env": {"HF_TOKEN": "hf_x", "NCCL_P2P_LEVEL": "SYS"}}
    assert without_secrets(server) == {"tp_size": 8, "env": {"NCCL_P2P_LEVEL": "SYS"}}
    assert sorted(secret_values(server)) == ["hf_x", "sk-1"]
    assert server["api_key"] == "sk-1"


def test_a_url_s_credentials_are_secrets_and_redacted_but_an_account_name_is_not():
    """Issue 35 item 3: the user:password part of any URL, or a bare user on http(s) (a token), is a secret;
    ssh's git@ is an account."""
    assert url_secrets("http://user:p%40ss@mirror:8090") == ["p%40ss", "p@ss", "user:p%40ss", "user:p@ss"]
    assert url_secrets("https://hf_TOKEN@mirror/x") == ["hf_TOKEN"]
    assert url_secrets("ssh://git@github.com/a/b") == [] and url_secrets("http://mirror:8090") == []
    text = "404 for url: http://user:TOKEN@mirror:8090/api/models/a/b and ssh://git@github.com/a"
    assert (
        redact_url(text)
        == "404 for url: http://<redacted>@mirror:8090/api/models/a/b and ssh://git@github.com/a"
    )
    assert redact({"msg": text})["msg"] == redact_url(text)
