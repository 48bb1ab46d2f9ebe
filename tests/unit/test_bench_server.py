"""Filter bench_server: what role sglang_benchmark measures and records (issue 40: out of its Jinja)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.filter.bench_server import bench_server


def test_the_object_s_settings_when_preflight_built_one():
    settings = {"model_path": "/m", "host": "0.0.0.0", "port": 31000, "tp_size": 2}
    assert bench_server({"settings": settings, "argv": ["x"]}, {"model_path": "/other"}) == settings


@pytest.mark.parametrize("missing", [{}, None, {"settings": {}}])
def test_else_the_request_over_the_default_address(missing):
    assert bench_server(missing, {"model_path": "/m", "port": 30001}) == {
        "host": "127.0.0.1",
        "port": 30001,
        "model_path": "/m",
    }
    assert bench_server(missing, {}) == {"host": "127.0.0.1", "port": 30000}


def test_a_request_that_is_not_a_mapping_fails():
    with pytest.raises(AnsibleFilterError, match="mapping"):
        bench_server({}, ["model_path"])
