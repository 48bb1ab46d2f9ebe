"""Filter group_break: which ranks of a multi-node group ended since its last launch, first first (role
sglang_server's rule, out of Jinja since issue 40). The multinode Molecule scenario kills a rank on podman
hosts and checks the message the role prints; these are the rule's cases."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.filter.group_break import group_break


def rank(node_rank, ended=False, ended_at=None):
    return {
        "__sglang_server_probe": {"ended": ended, "ended_at": ended_at},
        "__sglang_server_settings": {"node_rank": node_rank},
    }


def test_no_rank_ended_says_nothing():
    hostvars = {"r0": rank(0), "r1": rank(1)}
    assert group_break(hostvars, ["r0", "r1"], ["r0", "r1"], "10.0.0.1:25000") == ""


def test_the_ranks_that_ended_are_named_in_the_order_they_ended():
    hostvars = {"r0": rank(0, True, 1764800000.5), "r1": rank(1, True, 1764800000.25)}
    message = group_break(hostvars, ["r0", "r1"], ["r0", "r1"], "10.0.0.1:25000")
    assert message == (
        "the group at 10.0.0.1:25000 broke since its last launch: node_rank 1 on r1, then node_rank 0 on r0 "
        "(the first ended at 1764800000.250000 epoch s); every rank is stopped and the group is launched "
        "again whole"
    )


def test_ranks_without_an_exit_time_come_last_and_alone_leave_the_order_unknown():
    hostvars = {"r0": rank(0, True, None), "r1": rank(1, True, 12.0), "r2": rank(2, True, None)}
    both = group_break(hostvars, ["r0", "r1", "r2"], [], "a:1")
    assert "node_rank 1 on r1, then node_rank 0 on r0, then node_rank 2 on r2" in both
    alone = group_break({"r0": rank(0, True, None)}, ["r0"], [], "a:1")
    assert "(order unknown: daemonized processes leave no exit time)" in alone


def test_only_the_node_group_s_hosts_count_and_a_missing_probe_is_no_end():
    hostvars = {"r0": rank(0), "gw": rank(0, True, 5.0), "r1": {}}
    assert group_break(hostvars, ["r0", "gw", "r1"], ["r0", "r1"], "a:1") == ""
    assert "node_rank 0 on gw" in group_break(hostvars, ["r0", "gw", "r1"], [], "a:1")


def test_strings_for_host_lists_fail():
    with pytest.raises(AnsibleFilterError, match="lists of hosts"):
        group_break({}, "r0", [])
