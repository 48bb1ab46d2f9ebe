"""Connection `podman` for the Molecule scenarios: containers.podman's own connection with pipelining.

Why: a scenario's time is mostly per-task overhead (molecule/_podman/README.md). Without pipelining each
module is a temporary directory made, the module copied in, run and removed: three to four `podman` calls.
With it, one `podman exec -i` that reads the module on stdin. The collection's connection turns pipelining off
because its `exec` never passes `-i`, so stdin never reaches the container; this one passes `-i` whenever
there is input. Molecule's podman driver names the connection `podman`; Ansible finds this file first on the
connection plugin path that molecule/_podman/base.yml sets (test infrastructure only: not shipped in the
collection).
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.containers.podman.plugins.connection.podman import (
    DOCUMENTATION as _UPSTREAM_DOCUMENTATION,
)
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = _UPSTREAM_DOCUMENTATION


class Connection(PodmanConnection):
    transport = "podman"
    has_pipelining = True

    def exec_command(self, cmd, in_data=None, sudoable=False):
        """`podman exec` as the collection runs it, with `-i` when there is stdin to hand over."""
        if not in_data:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # the base class's bookkeeping (connect, display) without its exec
        if not self._connected:
            self._connect()
        args = ["exec", "-i"]
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
