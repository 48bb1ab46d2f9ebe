"""plugins/plugin_utils/module_result.py: a module's result as the action plugins hand it on, on each tested
ansible-core - 2.19's _parse_returned_data gives a dict, 2.21's a UnifiedTaskResult (the controller test on
Debian 13 runs the real one); internal keys go by one rule."""

from __future__ import annotations

import json

from ansible_collections.epforge.ep.plugins.plugin_utils.module_result import (
    parsed_result,
    without_internal_keys,
)


def test_internal_keys_empty_notes_and_discovered_interpreters_go():
    result = {
        "changed": False,
        "_ansible_no_log": False,
        "_ansible_parsed": True,
        "add_host": {"host_name": "x"},
        "warnings": [],
        "deprecations": [{"msg": "kept"}],
        "ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3", "epforge_x": 1},
    }
    assert without_internal_keys(result) == {
        "changed": False,
        "_ansible_parsed": True,
        "deprecations": [{"msg": "kept"}],
        "ansible_facts": {"epforge_x": 1},
    }


class Dict219:
    """The 2.19 shape: _parse_returned_data returns the dict."""

    def _parse_returned_data(self, res, profile):
        assert profile == "legacy" and res["rc"] == 0
        return json.loads(res["stdout"])


class Result221:
    """The 2.21 shape (ansible._internal._task.UnifiedTaskResult): cleans itself, then becomes a dict."""

    def __init__(self, data):
        self.data, self.cleaned = data, False

    def remove_internal_keys(self):
        self.cleaned = True

    def as_result_dict(self, *, for_round_trip=False):
        assert self.cleaned and for_round_trip
        return dict(self.data)


class Object221(Dict219):
    def _parse_returned_data(self, res, profile):
        return Result221(super()._parse_returned_data(res, profile))


def test_both_shapes_give_the_same_dict():
    printed = json.dumps({"changed": True, "msg": "ok", "_ansible_verbose_always": True, "warnings": []})
    assert (
        parsed_result(Dict219(), printed)
        == parsed_result(Object221(), printed)
        == {"changed": True, "msg": "ok"}
    )
