# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter server_request: the requested server settings of one host, epforge_server over what its node group
says (role epforge's default of epforge_server_request; issue 40 moved this rule out of Jinja).

Multi-node addressing, the rule: with a node group, nnodes is the group's size, node_rank this host's position
in it and dist_init_addr HOST:PORT, HOST being epforge_dist_init_host when given, else the group's first
host's ansible_host, else its inventory name; a value written in epforge_server wins over each. Without a node
group the request is epforge_server as written. A value that is not a mapping passes through unchanged, for
role preflight to refuse with its own message.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def node_settings(node_hosts: list, this_host: str, first_address: str, port) -> dict:
    """{nnodes, node_rank, dist_init_addr} of this_host in its node group (the hosts in inventory order)."""
    if this_host not in node_hosts:
        raise AnsibleFilterError(f"host {this_host} is not in its node group ({', '.join(node_hosts)})")
    return {
        "nnodes": len(node_hosts),
        "node_rank": node_hosts.index(this_host),
        "dist_init_addr": f"{first_address}:{port}",
    }


def server_request(server, node_hosts, this_host, hostvars=None, *, dist_init_host="", port=25000):
    """epforge_server over this host's node settings (node_hosts empty: no node group)."""
    if not isinstance(server, Mapping) or not server:
        return server
    if isinstance(node_hosts, str):
        raise AnsibleFilterError("server_request needs the node group's hosts as a list, not a string")
    hosts = list(node_hosts or [])
    if not hosts:
        return dict(server)
    first = hosts[0]
    address = str(dist_init_host or "")
    if not address:
        address = str((hostvars[first] if hostvars is not None else {}).get("ansible_host") or first)
    return {**node_settings(hosts, this_host, address, port), **server}


class FilterModule:
    def filters(self):
        return {"server_request": server_request}
