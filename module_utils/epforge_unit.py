"""Rendering of a systemd service unit and its EnvironmentFile for a long-running server.

Pure functions (unit-tested in tests/unit/test_sglang_server.py and exercised by a real systemd in the
Molecule scenario sglang-server):

- ExecStart is rendered from an argv list, each item quoted by systemd's own rules, never a shell line.
- The EnvironmentFile holds the environment (NCCL_* and friends) and the secrets; it is written
  root-only (0600), and systemd reads it before dropping to the service user.
- mask_secrets() renders the same file with secret values replaced by a short fingerprint, so a diff
  shows that a secret changed without showing it.
"""

from __future__ import annotations

import hashlib
import re

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters an ExecStart word may hold without quoting.
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")
# Characters an EnvironmentFile value may hold without quoting.
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./:=,+@%-]*$")
HEADER = "# Managed by epforge ({what}). Changes made here are overwritten by the next run.\n"


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
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:8]


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
    what: str = "sglang_server",
) -> str:
    """A systemd service unit for a server: unprivileged User=, EnvironmentFile, Restart=on-failure with
    start limits, output appended to log_path (None: the journal)."""
    if not user or user == "root":
        raise UnitError("the server must run as an unprivileged user (user must be set and not root)")
    for name, value in (
        ("description", description),
        ("user", user),
        ("group", group or ""),
        ("env_file", env_file or ""),
        ("log_path", log_path or ""),
        ("working_dir", working_dir or ""),
    ):
        if "\n" in value or "\r" in value:
            raise UnitError(f"{name} cannot hold a newline")
    for name, path in (("env_file", env_file), ("log_path", log_path), ("working_dir", working_dir)):
        if path and (not path.startswith("/") or re.search(r"\s", path)):
            raise UnitError(f"{name} must be an absolute path without whitespace, got {path!r}")
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
        "NoNewPrivileges=true\n",
    ]
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
