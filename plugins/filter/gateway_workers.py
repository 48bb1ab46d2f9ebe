# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for fleets behind a gateway: where the gateway reaches each verified server, and whether a server
about to launch could be reached at all. The one rule:

- a server on the gateway's own host is reached as its host confirmed it (its url, loopback included);
- a server bound to a loopback address on another host cannot be reached: refused, before it launches;
- a server bound to every interface is reached at its host's address (gateway_worker_address, else
  ansible_host, else the inventory name);
- a server bound to one address is reached at that address.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.server_address import (
    BIND_ALL,
    is_loopback,
    server_url,
)


def unreachable_reason(bind: str, server_host: str, gateway_hosts, api_key_set: bool = True) -> str:
    """Why a gateway on another host of gateway_hosts cannot front a server bound to bind, or may not (no
    key on a server reached over the network); '' when it can."""
    others = [h for h in gateway_hosts or [] if h != server_host]
    if not others:
        return ""
    gateways = f"the gateway on {others[0]}" if len(others) == 1 else f"the gateways on {', '.join(others)}"
    if is_loopback(str(bind)):
        return (
            f"the SGLang server on {server_host} would bind {bind}, which only {server_host} itself reaches, "
            f"but {gateways} {'fronts' if len(others) == 1 else 'front'} it: set epforge_server.host to an "
            "address the gateway reaches (or 0.0.0.0) and give the servers an API key (sglang_server_api_key)"
        )
    if not api_key_set:
        return (
            f"the SGLang server on {server_host} would bind {bind} for {gateways} "
            "without an API key, so anyone on that network could use it: set sglang_server_api_key (the "
            "gateway holds the same key, gateway_api_key)"
        )
    return ""


def worker_url(host: str, endpoint: dict, gateway_host: str, address: str) -> str:
    bind = str(endpoint.get("bind") or "127.0.0.1")
    if host == gateway_host:
        return endpoint["url"]
    reason = unreachable_reason(bind, host, [gateway_host])
    if reason:
        raise AnsibleFilterError(reason)
    return server_url(address if bind in BIND_ALL else bind, endpoint["port"])


def gateway_workers(hostvars, hosts, gateway_host: str) -> list[dict]:
    """[{host, url, model, log_path, api_key_set}] for each host of hosts with a verified server
    (play fact sglang_server_endpoint); hosts without one are left out."""
    if isinstance(hosts, str):
        raise AnsibleFilterError("gateway_workers needs a list of hosts (groups[NAME]), not a string")
    workers = []
    for host in hosts or []:
        facts = hostvars[host]
        endpoint = facts.get("sglang_server_endpoint")
        if not endpoint:
            continue
        address = facts.get("gateway_worker_address") or facts.get("ansible_host") or host
        workers.append(
            {
                "host": host,
                "url": worker_url(host, endpoint, gateway_host, str(address)),
                "model": endpoint.get("model", ""),
                "log_path": endpoint.get("log_path", ""),
                "api_key_set": bool(endpoint.get("api_key_set")),
            }
        )
    return workers


class FilterModule:
    def filters(self):
        return {"gateway_workers": gateway_workers, "gateway_unreachable": unreachable_reason}
