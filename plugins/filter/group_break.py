# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter group_break: whether a multi-node group broke since its last verified launch, and which rank ended
first (role sglang_server, tasks/group.yml; issue 40 moved the rule out of Jinja).

Every rank of the play that belongs to the node group has asked module sglang_server (state probed) whether
the process of the group's last verified launch still runs (play variable __sglang_server_probe: ended,
ended_at). The ranks that ended are named in the order they ended - systemd's exit times, earliest first;
a daemonized process leaves no exit time, so those come last, in play order - and the message says that
every rank is stopped and the group launched again whole. No rank ended: an empty string.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

PROBE = "__sglang_server_probe"
SETTINGS = "__sglang_server_settings"


def ended_ranks(hostvars, hosts, group_hosts) -> list[dict]:
    """[{host, node_rank, ended_at}] of the hosts (of the group, when one is named) whose rank ended, in the
    order they ended (those without an exit time last, in the hosts' order)."""
    ended = []
    for host in hosts or []:
        if group_hosts and host not in group_hosts:
            continue
        values = hostvars[host]
        probe = values.get(PROBE) or {}
        if not probe.get("ended"):
            continue
        settings = values.get(SETTINGS) or {}
        ended.append(
            {"host": host, "node_rank": settings.get("node_rank", 0), "ended_at": probe.get("ended_at")}
        )
    timed = sorted((e for e in ended if e["ended_at"]), key=lambda e: float(e["ended_at"]))
    return timed + [e for e in ended if not e["ended_at"]]


def group_break(hostvars, hosts, group_hosts=None, dist_init_addr="?") -> str:
    """The message naming the ranks that ended, first first ('' when none did)."""
    if isinstance(hosts, str) or isinstance(group_hosts, str):
        raise AnsibleFilterError("group_break needs lists of hosts, not strings")
    ordered = ended_ranks(hostvars, hosts, list(group_hosts or []))
    if not ordered:
        return ""
    named = ", then ".join(f"node_rank {e['node_rank']} on {e['host']}" for e in ordered)
    first = ordered[0]["ended_at"]
    when = (
        f" (the first ended at {float(first):.6f} epoch s)"
        if first
        else " (order unknown: daemonized processes leave no exit time)"
    )
    return (
        f"the group at {dist_init_addr or '?'} broke since its last launch: {named}{when}; "
        "every rank is stopped and the group is launched again whole"
    )


class FilterModule:
    def filters(self):
        return {"group_break": group_break}
