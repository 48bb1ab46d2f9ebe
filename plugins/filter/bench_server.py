# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter bench_server: the server settings role sglang_benchmark measures and records (its default of
sglang_benchmark_server; issue 40 moved the rule out of the role's Jinja).

The settings of the server settings object preflight built (play fact preflight_server_object) when there is
one; else the request as written (epforge_server) over the default address of a server whose settings name
none (module_utils/server_address.py: DEFAULT_HOST, DEFAULT_PORT), so a benchmark of a server launched
elsewhere still has a URL to reach.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.server_address import DEFAULT_HOST, DEFAULT_PORT


def bench_server(server_object, request=None) -> dict:
    """The object's settings, else {host, port} defaults with the request over them."""
    settings = server_object.get("settings") if isinstance(server_object, Mapping) else None
    if settings:
        return dict(settings)
    if request is not None and not isinstance(request, Mapping):
        raise AnsibleFilterError("epforge_server must be a mapping of server settings")
    return {"host": DEFAULT_HOST, "port": DEFAULT_PORT, **(request or {})}


class FilterModule:
    def filters(self):
        return {"bench_server": bench_server}
