# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter server_api_key: the API key a role sends to (or launches) the SGLang server with - its own variable
when set, else the key written in epforge_server, else none. One rule for roles sglang_server,
sglang_benchmark and tuner (issue 40: it was Jinja three times). The key never enters the settings object:
the launcher reads it from its 0600 environment file."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def server_api_key(role_value, server=None) -> str:
    """role_value when it is a non-empty string, else server['api_key'] (a mapping's), else ''."""
    if role_value not in (None, "") and not isinstance(role_value, str):
        raise AnsibleFilterError("an API key must be a string")
    if role_value:
        return role_value
    written = server.get("api_key") if isinstance(server, Mapping) else None
    if written not in (None, "") and not isinstance(written, str):
        raise AnsibleFilterError("epforge_server.api_key must be a string")
    return written or ""


class FilterModule:
    def filters(self):
        return {"server_api_key": server_api_key}
