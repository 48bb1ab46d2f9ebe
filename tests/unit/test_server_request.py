"""Filter server_request: one host's requested settings, epforge_server over its node group's addressing
(issue 40: the rule left role epforge's defaults, where it was Jinja). The pure rule, then role epforge's
default epforge_server_request rendered by ansible-playbook for each host of a two-node inventory."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.filter.server_request import server_request
from playbooks import JSON_CALLBACK, json_report, run_playbook

SERVER = {"model_path": "/models/m", "tp_size": 2}


def test_without_a_node_group_the_request_is_epforge_server_as_written():
    assert server_request(SERVER, [], "a") == SERVER


def test_each_host_gets_its_rank_and_the_first_host_s_address():
    hostvars = {"a": {"ansible_host": "10.0.0.1"}, "b": {}}
    ranks = [server_request(SERVER, ["a", "b"], h, hostvars, port=25000) for h in ("a", "b")]
    assert [r["node_rank"] for r in ranks] == [0, 1]
    assert {r["nnodes"] for r in ranks} == {2} and {r["dist_init_addr"] for r in ranks} == {"10.0.0.1:25000"}


def test_the_first_host_s_name_without_ansible_host_and_the_given_address_first():
    assert server_request(SERVER, ["a", "b"], "b", {"a": {}}, port=26000)["dist_init_addr"] == "a:26000"
    given = server_request(
        SERVER, ["a", "b"], "b", {"a": {"ansible_host": "10.0.0.1"}}, dist_init_host="192.168.1.5"
    )
    assert given["dist_init_addr"] == "192.168.1.5:25000"


def test_values_written_in_epforge_server_win():
    written = {**SERVER, "node_rank": 7, "dist_init_addr": "x:1"}
    got = server_request(written, ["a", "b"], "b", {"a": {}})
    assert (got["node_rank"], got["dist_init_addr"], got["nnodes"]) == (7, "x:1", 2)


@pytest.mark.parametrize("value", ["not a mapping", {}, None, ["a"]])
def test_a_value_that_is_not_a_mapping_passes_for_preflight_to_refuse(value):
    assert server_request(value, ["a", "b"], "a") == value


def test_a_host_outside_its_node_group_and_a_string_of_hosts_fail():
    with pytest.raises(AnsibleFilterError, match="not in its node group"):
        server_request(SERVER, ["a", "b"], "c", {"a": {}})
    with pytest.raises(AnsibleFilterError, match="as a list"):
        server_request(SERVER, "ab", "a")


def test_role_epforge_s_default_renders_the_rule_for_each_host_of_a_node_group(tmp_path):
    """The default itself (roles/epforge/defaults/main.yml) on two hosts of group `nodes`, the first with an
    ansible_host, the second without; a third host outside any node group."""
    defaults = yaml.safe_load((ROOT / "roles" / "epforge" / "defaults" / "main.yml").read_text())
    inventory = tmp_path / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"epforge_node_group": ""},
                    "children": {
                        "nodes": {
                            "hosts": {"n0": {**local, "ansible_host": "10.1.2.3"}, "n1": dict(local)},
                            "vars": {"epforge_node_group": "nodes"},
                        },
                        "single": {"hosts": {"s0": dict(local)}},
                    },
                }
            }
        )
    )
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render epforge_server_request",
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": {
                        "epforge_server": SERVER,
                        "epforge_dist_init_host": defaults["epforge_dist_init_host"],
                        "epforge_dist_init_port": defaults["epforge_dist_init_port"],
                        "epforge_server_request": defaults["epforge_server_request"],
                    },
                    "tasks": [{"name": "Show", "ansible.builtin.debug": {"var": "epforge_server_request"}}],
                }
            ]
        )
    )
    proc = run_playbook(playbook, inventories=(inventory,), env=JSON_CALLBACK)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = json_report(proc)["plays"][0]["tasks"][0]["hosts"]
    got = {name: result["epforge_server_request"] for name, result in hosts.items()}
    assert got["n0"] == {**SERVER, "nnodes": 2, "node_rank": 0, "dist_init_addr": "10.1.2.3:25000"}
    assert got["n1"] == {**SERVER, "nnodes": 2, "node_rank": 1, "dist_init_addr": "10.1.2.3:25000"}
    assert got["s0"] == SERVER, json.dumps(got)
