"""Where the SGLang server listens by default, and where a client on its host reaches it: written once.

- DEFAULT_HOST, DEFAULT_PORT: the bind address and port of a server whose settings name none (loopback:
  nothing outside the host reaches a server nobody asked to expose).
- connect_host(): the address a client on the same host uses; a server bound to every interface (0.0.0.0,
  '::' or '') answers on DEFAULT_HOST.
- server_url(): http://HOST:PORT, an IPv6 address in brackets.
- is_loopback(): whether an address is reached only from its own host (a gateway elsewhere cannot).

The roles keep the literals where Ansible needs one (roles/sglang_benchmark/defaults/main.yml and
tasks/resolve.yml, the modules' DOCUMENTATION). Unit-tested in tests/unit/test_server_address.py.
"""

from __future__ import annotations

import ipaddress

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000
BIND_ALL = ("0.0.0.0", "::", "")  # noqa: S104 - compared with, never bound to


def connect_host(host: str) -> str:
    """The address a client on the server's host connects to: DEFAULT_HOST for a server bound to every
    interface, else the address it binds."""
    return DEFAULT_HOST if host in BIND_ALL else host


def server_url(host: str, port) -> str:
    """'http://127.0.0.1:30000'; an IPv6 address in brackets ('http://[::1]:30000')."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


DEFAULT_URL = server_url(DEFAULT_HOST, DEFAULT_PORT)


def is_loopback(host: str) -> bool:
    """'127.0.0.1', '::1', 'localhost' (all of 127/8): only the host itself reaches a server bound there."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
