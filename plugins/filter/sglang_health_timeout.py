# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter sglang_health_timeout: the longest a fleet's SGLang /health may take, from what each verified
server runs with (play fact sglang_server_endpoint: its release and the SGLANG_ variables of its environment)
and each release's variable table (data/sglang_env/<version>.json). Role gateway derives smg's health-check
timeout from it (rule: module_utils/smg_health.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.smg_health import (
    HealthError,
    release_default,
    server_wait,
)


def sglang_health_timeout(hostvars, hosts, tables_dir: str) -> int:
    """Seconds: the largest /health wait among the hosts' verified servers (0 when none is verified)."""
    if isinstance(hosts, str):
        raise AnsibleFilterError("sglang_health_timeout needs a list of hosts, not a string")
    defaults: dict[str, int] = {}
    waits = [0]
    for host in hosts or []:
        endpoint = hostvars[host].get("sglang_server_endpoint")
        if not endpoint:
            continue
        version = str(endpoint.get("sglang_version") or "")
        table_path = Path(tables_dir) / f"{version}.json"
        try:
            if version not in defaults:
                if not version or not table_path.is_file():
                    raise HealthError(
                        f"no variable table of the SGLang release the server on {host} runs "
                        f"({version or '?'}): {table_path} is missing (scripts/sglang_env_data.py writes it "
                        "from the release's wheel), so how long its /health may take is not known"
                    )
                defaults[version] = release_default(json.loads(table_path.read_text()), version)
            waits.append(
                server_wait(endpoint.get("sglang_env") or {}, defaults[version], f"the server on {host}")
            )
        except HealthError as exc:
            raise AnsibleFilterError(str(exc)) from None
    return max(waits)


class FilterModule:
    def filters(self):
        return {"sglang_health_timeout": sglang_health_timeout}
