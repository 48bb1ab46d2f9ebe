# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: how a long-running service is kept up (plugins/module_utils/service_managers.py),
written once for sglang_server and smg_gateway; SERVICE_ARGUMENT_SPEC there is the matching argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  manager:
    description:
      - C(systemd) (a unit) or C(process) (a daemonized process with a pidfile, for hosts without systemd).
    type: str
    choices: [systemd, process]
    default: systemd
  launcher:
    description:
      - Path of epforge's launcher (C(epforge_sglang_launch.py), installed by the C(sglang_server) and
        C(gateway) roles), which takes the API key from the environment. Required to start.
    type: path
  user:
    description: Unprivileged user the service runs as. Required for O(manager=systemd); never root.
    type: str
  group:
    description: Group the service runs as (default the user's primary group).
    type: str
  env_file:
    description: Path of the root-only environment file (default C(/etc/epforge/NAME.env)).
    type: path
  unit_dir:
    description: Directory of the systemd unit.
    type: path
    default: /etc/systemd/system
  working_dir:
    description: Working directory of the service (default O(state_dir)).
    type: path
  enabled:
    description: Enable the systemd unit at boot.
    type: bool
    default: true
  restart_sec:
    description: systemd RestartSec (seconds before an automatic restart after a failure).
    type: int
    default: 10
  start_limit_burst:
    description: systemd StartLimitBurst (starts allowed per O(start_limit_interval)).
    type: int
    default: 3
  start_limit_interval:
    description: systemd StartLimitIntervalSec (seconds).
    type: int
    default: 600
  stop_timeout:
    description: Seconds a stop waits before killing the service.
    type: int
    default: 60
  limits:
    description:
      - "systemd resource limits, suffix to value. The default lifts the open-file limit and lets NCCL and
        DeepEP pin memory; C({}) writes none (containers that may not raise them)."
    type: dict
    default: {NOFILE: 65535, MEMLOCK: infinity}
  devices:
    description:
      - "Device nodes the service may open (O(manager=systemd); one C(DeviceAllow=) line each, with
        C(DevicePolicy=closed) every other device but the pseudo devices such as C(/dev/null) is refused).
        Each is a node (C(/dev/nvidia0)) or a device group of C(/proc/devices) (C(char-nvidia-uvm), globs
        allowed), optionally followed by a space and the access (C(r), C(rw)); C(rw) when none is given."
      - The C(sglang_server) role derives the list from preflight's GPU facts; empty on a host without GPU.
    type: list
    elements: str
    default: []
  read_write_paths:
    description:
      - Absolute paths the service may write besides its working directory (O(manager=systemd)); the unit
        mounts the rest of the file system read-only (C(ProtectSystem=strict)), home directories included
        (C(ProtectHome=read-only)), and gives the service a private C(/tmp). Each path must exist.
    type: list
    elements: path
    default: []
  unit_hardening:
    description:
      - "Overrides of the unit's sandbox (O(manager=systemd)), directive to value. A value replaces the
        default of that directive (C(plugins/module_utils/service_unit.py) HARDENING), null drops it,
        a directive
        the defaults lack is added; true and false become yes and no, a list its items space-separated.
        For example C({PrivateUsers: null}) on a GPU host where that one option breaks the service."
      - Names must look like systemd's (C(^[A-Z][A-Za-z]+$)) and values hold no newline. Directives the unit
        sets from other options (C(User), C(Exec*), C(Environment*), C(DeviceAllow), C(ReadWritePaths),
        C(Limit*)) are refused.
    type: dict
    default: {}
"""
