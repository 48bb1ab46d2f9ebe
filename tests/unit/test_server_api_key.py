"""Filter server_api_key: one rule for the key roles sglang_server, sglang_benchmark and tuner use (issue 40:
it was Jinja three times, the tuner's a little different)."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.filter.server_api_key import server_api_key


@pytest.mark.parametrize(
    ("role_value", "server", "key"),
    [
        ("sk-role", {"api_key": "sk-server"}, "sk-role"),  # the role's variable wins
        ("", {"api_key": "sk-server"}, "sk-server"),  # else the key written in epforge_server
        (
            None,
            {"api_key": "sk-server"},
            "sk-server",
        ),  # a null variable is unset (the tuner's default('', true))
        ("", {"model_path": "/m"}, ""),
        ("", {}, ""),
        ("", None, ""),  # epforge_server undefined or null
        ("", "not a mapping", ""),  # preflight refuses such a server; the key is simply absent here
        ("", {"api_key": None}, ""),
    ],
)
def test_the_role_s_key_else_the_server_s_else_none(role_value, server, key):
    assert server_api_key(role_value, server) == key


def test_a_key_that_is_not_a_string_fails_without_showing_it():
    with pytest.raises(AnsibleFilterError, match="must be a string") as raised:
        server_api_key(12345678, {})
    assert "12345678" not in str(raised.value)
    with pytest.raises(AnsibleFilterError, match=r"epforge_server\.api_key must be a string"):
        server_api_key("", {"api_key": ["sk-x"]})


def test_every_role_that_takes_the_key_takes_it_by_the_filter():
    """No role composes the fallback in Jinja again; each of the three calls the filter once."""
    texts = {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for p in (ROOT / "roles").glob("*/*/*.yml")
        if p.parent.name in {"tasks", "vars", "defaults"}
    }
    # the old fallbacks: `(epforge_server...).api_key | default('')` in each role
    fallback = re.compile(r"\.api_key\s*\|\s*default\(")
    assert [name for name, text in texts.items() if fallback.search(text)] == []
    callers = sorted(name for name, text in texts.items() if "epforge.ep.server_api_key(" in text)
    assert callers == [
        "roles/sglang_benchmark/tasks/resolve.yml",
        "roles/sglang_server/tasks/resolve.yml",
        "roles/tuner/vars/main.yml",
    ]
