"""The server's default address (plugins/module_utils/server_address.py): loopback by default, where a client
on the host connects to a server bound to every interface, and the URL it uses."""

from __future__ import annotations

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.server_address import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_URL,
    connect_host,
    server_url,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import with_defaults


def test_the_default_is_loopback_on_sglangs_port():
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 30000)
    assert DEFAULT_URL == "http://127.0.0.1:30000"
    # settings that name no address get this one
    assert with_defaults({"model_path": "/m"}) == {"model_path": "/m", "host": "127.0.0.1", "port": 30000}
    assert with_defaults({"host": "", "port": None})["host"] == DEFAULT_HOST
    assert with_defaults({"host": "10.0.0.5", "port": 31000}) == {"host": "10.0.0.5", "port": 31000}


@pytest.mark.parametrize(
    ("bind", "connect"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("::", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("10.0.0.5", "10.0.0.5"),
        ("::1", "::1"),
    ],
)
def test_a_client_on_the_host_reaches_a_server_bound_everywhere_on_loopback(bind, connect):
    assert connect_host(bind) == connect


def test_server_url_brackets_an_ipv6_address():
    assert server_url("127.0.0.1", 30000) == "http://127.0.0.1:30000"
    assert server_url("::1", "31000") == "http://[::1]:31000"
    assert server_url("[::1]", 31000) == "http://[::1]:31000"
    assert server_url("gpu-1.lan", 30000) == "http://gpu-1.lan:30000"
