"""Rendering of a systemd service unit and its EnvironmentFile for a long-running server.

Pure functions (unit-tested in tests/unit/test_sglang_server.py and exercised by a real systemd in the
Molecule scenario sglang-server):

- ExecStart is rendered from an argv list, each item quoted by systemd's own rules, never a shell line.
- The EnvironmentFile holds the environment (NCCL_* and friends) and the secrets; it is written
  root-only (0600), and systemd reads it before dropping to the service user.
- mask_secrets() renders the same file with secret values replaced by a short fingerprint, so a diff
  shows that a secret changed without showing it.
- The unit is sandboxed (HARDENING, measured with `systemd-analyze security` in the Molecule scenario); a
  GPU server's needs decide what is left out (see HARDENING and docs/ARCHITECTURE.md, "Unit hardening").
"""

from __future__ import annotations

import re

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import bytes_sha256

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters an ExecStart word may hold without quoting.
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")
# Characters an EnvironmentFile value may hold without quoting.
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./:=,+@%-]*$")
HEADER = "# Managed by epforge ({what}). Changes made here are overwritten by the next run.\n"

# The sandbox of the server's unit: directive -> value, rendered in this order. `systemd-analyze security`
# rates it 1.8 ("OK") in the Molecule scenario sglang-server (9.0 "UNSAFE" with NoNewPrivileges alone).
# A GPU server decides what is left out; each of these would break it (docs/ARCHITECTURE.md,
# "Unit hardening"):
#   MemoryDenyWriteExecute  JIT: Triton, torch.compile (inductor) and ctypes/cffi closures map memory W+X.
#   PrivateDevices          a private /dev without /dev/nvidia*; DevicePolicy=closed + DeviceAllow instead.
#   PrivateNetwork, IPAddressDeny/IPAddressAllow
#                           the server serves clients, and NCCL's bootstrap connects to the host's own
#                           interface addresses (not loopback), even on one host.
#   ProcSubset=pid          torch, NCCL and psutil read /proc/meminfo, /proc/cpuinfo, /proc/sys and the
#                           driver's /proc/driver/nvidia.
#   ProtectHome=yes/tmpfs   an adopted env's python (or models) may live under /home or /root: read-only.
#   a SystemCallFilter without pidfd_getfd
#                           (it is in @debug): FlashInfer's and UCX's cuMem POSIX-fd exchange duplicate a
#                           peer process's file descriptor with it.
# /dev/shm (NCCL's and torch's shared memory) stays the host's and writable: ProtectSystem=strict leaves
# /dev alone and PrivateTmp covers /tmp and /var/tmp only.
HARDENING: dict[str, str] = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "read-only",
    "PrivateTmp": "yes",
    "PrivateMounts": "yes",
    "PrivateUsers": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "ProtectProc": "invisible",
    "RestrictNamespaces": "yes",
    "RestrictSUIDSGID": "yes",
    "RestrictRealtime": "yes",
    "LockPersonality": "yes",
    "RemoveIPC": "yes",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
    "SystemCallArchitectures": "native",
    "SystemCallFilter": "@system-service pidfd_getfd",
    # A refused call fails with EPERM (a Python exception, a logged error) instead of killing the process.
    "SystemCallErrorNumber": "EPERM",
    "UMask": "0027",
    "DevicePolicy": "closed",
}
_DIRECTIVE = re.compile(r"^[A-Z][A-Za-z]+$")
# Directives the unit writes from other inputs, or that would change who runs what with which environment:
# never set through the hardening mapping.
_NOT_HARDENING = frozenset(
    {
        "Description", "After", "Wants", "StartLimitIntervalSec", "StartLimitBurst", "Type", "User",
        "Group", "DynamicUser", "WorkingDirectory", "EnvironmentFile", "Environment", "PassEnvironment",
        "UnsetEnvironment", "Restart", "RestartSec", "TimeoutStopSec", "KillMode", "StandardOutput",
        "StandardError", "StandardInput", "WantedBy", "DeviceAllow", "ReadWritePaths",
    }
)  # fmt: skip
# A DeviceAllow= specifier: a node under /dev, or a char-/block- group of /proc/devices (globs allowed),
# optionally followed by the access (r, w, m); rw when none is given.
_DEVICE = re.compile(r"^(/dev/\S+|(char|block)-[A-Za-z0-9_.*?/-]+)( [rwm]{1,3})?$")


class UnitError(ValueError):
    """A value cannot be written into a unit or environment file."""


def quote_exec_word(word: str) -> str:
    """One argv item as a word of ExecStart (systemd.service "Command lines").

    Words with only safe characters stay bare; others are double-quoted with backslash escapes.
    Specifiers (%) are doubled and $ is doubled so systemd passes both through literally.
    """
    if not isinstance(word, str):
        raise UnitError(f"argv items must be strings, got {type(word).__name__}: {word!r}")
    if "\n" in word or "\r" in word or "\x00" in word:
        raise UnitError(f"argv item {word!r} holds a newline or NUL, which a unit file cannot carry")
    escaped = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN_WORD.match(word):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def render_exec_start(argv: list[str]) -> str:
    """ExecStart's value for an argv list (the program must be an absolute path)."""
    if not argv:
        raise UnitError("empty argv")
    if not argv[0].startswith("/"):
        raise UnitError(f"the program must be an absolute path, got {argv[0]!r}")
    return " ".join(quote_exec_word(word) for word in argv)


def quote_env_value(value: str) -> str:
    """One EnvironmentFile value: bare when safe, else double-quoted with backslash escapes."""
    value = str(value)
    if "\n" in value or "\r" in value or "\x00" in value:
        raise UnitError("environment values cannot hold newlines or NUL")
    if _PLAIN_VALUE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def render_env_file(env: dict, secrets: dict | None = None, *, what: str = "sglang_server") -> str:
    """The EnvironmentFile text: env then secrets, each sorted by name (stable, so reruns compare equal)."""
    lines = [HEADER.format(what=what)]
    for source in (env or {}), (secrets or {}):
        for name in sorted(source):
            if not ENV_NAME.match(str(name)):
                raise UnitError(f"{name!r} is not a valid environment variable name")
            value = source[name]
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            lines.append(f"{name}={quote_env_value(str(value))}\n")
    return "".join(lines)


def fingerprint(secret: str) -> str:
    """A short, non-reversible fingerprint of a secret (for diffs: 'changed' without the value)."""
    return "sha256:" + bytes_sha256(secret.encode())[:8]


def mask_secrets(text: str, secret_names: list[str] | tuple[str, ...]) -> str:
    """The env file text with the values of secret_names replaced by fingerprints of the raw line."""
    out = []
    for line in text.splitlines(keepends=True):
        name, sep, value = line.partition("=")
        if sep and name in secret_names:
            out.append(f"{name}=<secret {fingerprint(value.rstrip(chr(10)))}>\n")
        else:
            out.append(line)
    return "".join(out)


def hardening_directives(overrides: dict | None = None) -> dict[str, str]:
    """HARDENING with overrides applied: a directive's value replaces the default (an added directive comes
    after the defaults, sorted), None drops it; true/false become yes/no, a list its items space-separated.
    Names must look like systemd directives (^[A-Z][A-Za-z]+$) and be hardening ones; values one line."""
    directives = dict(HARDENING)
    for name in sorted(overrides or {}, key=str):
        value = overrides[name]
        if not isinstance(name, str) or not _DIRECTIVE.match(name):
            raise UnitError(f"hardening directive names look like systemd's (ProtectHome), got {name!r}")
        if name in _NOT_HARDENING or name.startswith(("Exec", "Limit")):
            raise UnitError(
                f"{name} is not a hardening directive: the unit sets it from its own options "
                "(devices for DeviceAllow, read_write_paths for ReadWritePaths, limits for Limit*)"
            )
        if value is None:
            directives.pop(name, None)
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, (list, tuple)):
            value = " ".join(str(item) for item in value)
        value = str(value)
        if "\n" in value or "\r" in value or "\x00" in value:
            raise UnitError(f"the value of {name} cannot hold a newline or NUL")
        directives[name] = value
    return directives


def check_unit_inputs(*, user: str, strings: dict, paths: list, devices) -> None:
    """Refuse what render_unit cannot write: root, newlines, relative paths, malformed device specifiers."""
    if not user or user == "root":
        raise UnitError("the server must run as an unprivileged user (user must be set and not root)")
    for name, value in strings.items():
        if "\n" in (value or "") or "\r" in (value or ""):
            raise UnitError(f"{name} cannot hold a newline")
    for name, path in paths:
        if path and (not isinstance(path, str) or not path.startswith("/") or re.search(r"\s", path)):
            raise UnitError(f"{name} must be an absolute path without whitespace, got {path!r}")
    for device in devices:
        if not isinstance(device, str) or not _DEVICE.match(device):
            raise UnitError(
                f"devices are DeviceAllow specifiers (/dev/NODE or char-GROUP, optionally followed by "
                f"the access r, w, m), got {device!r}"
            )


def render_unit(
    *,
    description: str,
    argv: list[str],
    user: str,
    group: str | None = None,
    env_file: str | None = None,
    log_path: str | None = None,
    working_dir: str | None = None,
    restart_sec: int = 10,
    start_limit_burst: int = 3,
    start_limit_interval: int = 600,
    stop_timeout: int = 60,
    limits: dict | None = None,
    hardening: dict | None = None,
    devices: list[str] | tuple[str, ...] = (),
    read_write_paths: list[str] | tuple[str, ...] = (),
    what: str = "sglang_server",
) -> str:
    """A systemd service unit for a server: unprivileged User=, EnvironmentFile, Restart=on-failure with
    start limits, output appended to log_path (None: the journal), sandboxed by HARDENING with the
    overrides of `hardening` (hardening_directives), DeviceAllow= for each of `devices` and ReadWritePaths=
    for working_dir and each of `read_write_paths` (the rest of the file system is read-only)."""
    check_unit_inputs(
        user=user,
        strings={
            "description": description,
            "user": user,
            "group": group,
            "env_file": env_file,
            "log_path": log_path,
            "working_dir": working_dir,
        },
        paths=[("env_file", env_file), ("log_path", log_path), ("working_dir", working_dir)]
        + [("read_write_paths", path) for path in read_write_paths],
        devices=devices,
    )
    directives = hardening_directives(hardening)
    lines = [
        HEADER.format(what=what),
        "[Unit]\n",
        f"Description={description}\n",
        "After=network-online.target\n",
        "Wants=network-online.target\n",
        # Restart=on-failure retries a crashing server at most start_limit_burst times per interval.
        f"StartLimitIntervalSec={int(start_limit_interval)}\n",
        f"StartLimitBurst={int(start_limit_burst)}\n",
        "\n",
        "[Service]\n",
        "Type=simple\n",
        f"User={user}\n",
    ]
    if group:
        lines.append(f"Group={group}\n")
    if working_dir:
        lines.append(f"WorkingDirectory={working_dir}\n")
    if env_file:
        lines.append(f"EnvironmentFile={env_file}\n")
    lines.append(f"ExecStart={render_exec_start(argv)}\n")
    lines += [
        "Restart=on-failure\n",
        f"RestartSec={int(restart_sec)}\n",
        f"TimeoutStopSec={int(stop_timeout)}\n",
        # mixed: SIGTERM to the launcher alone, which forwards it once to the server's process group;
        # the SIGKILL after TimeoutStopSec still reaches every process of the unit. control-group sent
        # the server a second SIGTERM (its own and the forwarded one) at the same instant.
        "KillMode=mixed\n",
    ]
    lines += [f"{name}={value}\n" for name, value in directives.items()]
    # The server writes its working directory (the role makes it the account's HOME, where the JIT caches of
    # Triton, FlashInfer, DeepGEMM and CUDA and the Hugging Face cache land), the read_write_paths and its
    # private /tmp; the log file is opened by systemd before the sandbox is set up.
    for path in dict.fromkeys([p for p in (working_dir, *read_write_paths) if p]):
        lines.append(f"ReadWritePaths={path}\n")
    for device in devices:
        lines.append(f"DeviceAllow={device if ' ' in device else device + ' rw'}\n")
    for name in sorted(limits or {}):
        if not re.match(r"^[A-Z]+$", str(name)):
            raise UnitError(f"limit names are systemd's Limit* suffixes (NOFILE, MEMLOCK), got {name!r}")
        lines.append(f"Limit{name}={limits[name]}\n")
    if log_path:
        lines.append(f"StandardOutput=append:{log_path}\n")
        lines.append("StandardError=inherit\n")
    else:
        lines.append("StandardOutput=journal\n")
        lines.append("StandardError=inherit\n")
    lines += ["\n", "[Install]\n", "WantedBy=multi-user.target\n"]
    return "".join(lines)


def split_exec_start(value: str) -> list[str]:
    """Inverse of render_exec_start for the quoting it produces (used to read back a unit in tests and to
    show the running argv): bare words and double-quoted words with \\\\ and \\" escapes, %% and $$."""
    words: list[str] = []
    i = 0
    n = len(value)
    while i < n:
        if value[i] == " ":
            i += 1
            continue
        if value[i] == '"':
            i += 1
            buf = []
            while i < n and value[i] != '"':
                if value[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(value[i])
                i += 1
            i += 1
            word = "".join(buf)
        else:
            j = value.find(" ", i)
            j = n if j < 0 else j
            word = value[i:j]
            i = j
        words.append(word.replace("%%", "%").replace("$$", "$"))
    return words
