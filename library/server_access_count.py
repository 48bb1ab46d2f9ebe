#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: count the requests an SGLang server's log shows since a mark (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_access_count
short_description: Count the requests an SGLang server logged since a mark, per client address
description:
  - >-
    SGLang's HTTP server (uvicorn) logs one access line per request by default, for example
    C(INFO:     10.0.0.5:41222 - "POST /generate HTTP/1.1" 200 OK). This reads the server's log from
    O(since) (a byte offset an earlier call returned as RV(size)) and counts the lines for O(path), per
    client address and status.
  - The gateway role marks every worker's log, sends generations through the gateway, then counts here,
    so the evidence that requests reached each worker comes from the workers themselves.
  - Read-only; never changes anything (check mode runs it too).
options:
  log_path:
    description: The server's log file.
    type: path
    required: true
  since:
    description: Byte offset to count from (a log shorter than it was rotated, and is read whole).
    type: int
    default: 0
  path:
    description: Request path prefix to count.
    type: str
    default: /generate
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Mark the worker's log
  epforge.ep.server_access_count:
    log_path: /var/log/epforge/sglang-server.log
  register: mark

- name: Count what reached it since
  epforge.ep.server_access_count:
    log_path: /var/log/epforge/sglang-server.log
    since: "{{ mark.size }}"
"""

RETURN = r"""
size:
  description: The log's size now (the next call's O(since)).
  returned: always
  type: int
requests:
  description: Lines for O(path) since the mark.
  returned: always
  type: int
ok:
  description: Of those, the ones answered 200.
  returned: always
  type: int
by_client:
  description: Requests per client address (without the port).
  returned: always
  type: dict
  sample: {"10.0.0.5": 12}
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

# uvicorn's access line: 'INFO:     HOST:PORT - "METHOD PATH HTTP/x" STATUS PHRASE' (IPv6 hosts in brackets).
ACCESS = re.compile(r'INFO:\s+(\[[^\]]*\]|[^\s:]+):\d+ - "[A-Z]+ (\S+) HTTP/[\d.]+" (\d{3})')


def count(text: str, prefix: str) -> dict:
    by_client: dict[str, int] = {}
    requests = ok = 0
    for match in ACCESS.finditer(text):
        client, path, status = match.groups()
        if not path.startswith(prefix):
            continue
        requests += 1
        ok += status == "200"
        by_client[client.strip("[]")] = by_client.get(client.strip("[]"), 0) + 1
    return {"requests": requests, "ok": ok, "by_client": by_client}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "log_path": {"type": "path", "required": True},
            "since": {"type": "int", "default": 0},
            "path": {"type": "str", "default": "/generate"},
        },
        supports_check_mode=True,
    )
    path = module.params["log_path"]
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            since = module.params["since"]
            handle.seek(since if 0 <= since <= size else 0)
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        module.fail_json(msg=f"cannot read the server log {path}: {exc.strerror or exc}")
    module.exit_json(changed=False, size=size, **count(text, module.params["path"]))


if __name__ == "__main__":
    main()
