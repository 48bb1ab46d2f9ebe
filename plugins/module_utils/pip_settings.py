"""pip's settings for an install, and what uv needs to do the same (issue 41: uv installs the stack's torch in
a third of pip's time, but reads none of pip's settings).

Users point pip at their mirrors, wheelhouses, certificates and constraints through pip's own files
(/etc/pip.conf, the user's, the venv's) and PIP_* variables; epforge's wheelhouse is PIP_NO_INDEX +
PIP_FIND_LINKS. `python -m pip config list` shows all of them at once (files merged, `:env:` for the
variables). This module reads that listing with pip's precedence for `pip install` (variables over the
install section over global) and translates each setting into uv's flag or variable. A setting with no
translation here makes the answer "use pip", with the setting named: uv never installs from a source pip
would not have used. Pure functions: no I/O.
"""

from __future__ import annotations

import ast
import re

# Settings whose value is a list (whitespace-separated in files and variables), and the uv flag each becomes.
UV_LIST_FLAGS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraints",
    "requirement": "--requirements",
    "trusted-host": "--allow-insecure-host",
    "only-binary": "--only-binary",
    "no-binary": "--no-binary",
}
UV_VALUE_FLAGS = {"index-url": "--index-url"}
UV_SWITCHES = {
    "no-index": ["--no-index"],
    "pre": ["--prerelease", "allow"],
    "require-hashes": ["--require-hashes"],
    "no-build-isolation": ["--no-build-isolation"],
    "no-cache-dir": ["--no-cache"],
}
# Settings uv takes as environment variables (uv reads SSL_CERT_FILE and the proxy variables itself).
UV_VARIABLES = {
    "cert": ("SSL_CERT_FILE",),
    "proxy": ("HTTPS_PROXY", "HTTP_PROXY"),
    "default-timeout": ("UV_HTTP_TIMEOUT",),
    "timeout": ("UV_HTTP_TIMEOUT",),
    "retries": ("UV_HTTP_RETRIES",),
}
# Settings that change how pip talks or logs, never which files it installs (uv keeps its own cache: a
# pip cache-dir says nothing about it). config-file (PIP_CONFIG_FILE) names a file whose settings pip has
# already listed.
NO_EFFECT = frozenset(
    {
        "disable-pip-version-check",
        "no-input",
        "progress-bar",
        "no-color",
        "quiet",
        "verbose",
        "root-user-action",
        "no-warn-script-location",
        "no-warn-conflicts",
        "log",
        "exists-action",
        "cache-dir",
        "python",
        "config-file",
    }
)
TRUE = frozenset({"1", "true", "yes", "on", "y"})
FALSE = frozenset({"0", "false", "no", "off", "n", ""})
# pip's order for `pip install`: a later section wins.
SECTIONS = ("global", "install", ":env:")
LINE = re.compile(r"^(?P<section>[^.\s]+)\.(?P<key>[A-Za-z0-9_-]+)=(?P<value>.*)$")


def pip_settings(listing: str) -> dict[str, str]:
    """The settings `pip install` uses, from `pip config list` (one `section.key='value'` per line; sections
    other than global, install and the variables belong to other pip commands)."""
    found: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    for line in listing.splitlines():
        m = LINE.match(line.strip())
        if not m or m["section"] not in found:
            continue
        value = m["value"]
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        found[m["section"]][m["key"].replace("_", "-")] = str(value)
    merged: dict[str, str] = {}
    for section in SECTIONS:
        merged.update(found[section])
    return merged


def switch_value(key: str, value: str) -> bool:
    """pip's reading of a yes/no setting; anything else is refused rather than guessed."""
    lowered = value.strip().lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise ValueError(f"pip setting {key}={value!r} is neither true nor false")


class UvTranslation:
    """uv's flags and variables for pip's settings, or why uv cannot stand in for pip (refusal)."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.flags: list[str] = []
        self.variables: dict[str, str] = {}
        self.refusal = ""
        self.settings = settings
        for key in sorted(settings):
            if not self.refusal:
                self.add(key, settings[key])
        # pip takes the best version across every index and link; uv's default stops at the first index
        # that has the project. The same set needs pip's rule.
        self.flags += ["--index-strategy", "unsafe-best-match"]

    def add(self, key: str, value: str) -> None:
        if key in NO_EFFECT:
            return
        if key in UV_VALUE_FLAGS:
            self.flags += [UV_VALUE_FLAGS[key], value]
        elif key in UV_LIST_FLAGS:
            for item in value.split():
                self.flags += [UV_LIST_FLAGS[key], item]
        elif key in UV_SWITCHES:
            try:
                on = switch_value(key, value)
            except ValueError as exc:
                self.refusal = str(exc)
                return
            self.flags += UV_SWITCHES[key] if on else []
        elif key in UV_VARIABLES:
            for name in UV_VARIABLES[key]:
                self.variables[name] = value
        else:
            self.refusal = f"pip setting {key}={value!r} has no uv translation in epforge"

    def flags_for(self, index_url: str = "") -> list[str]:
        """The flags, less the settings' index when the install names its own (uv takes one --index-url)."""
        if not index_url or UV_VALUE_FLAGS["index-url"] not in self.flags:
            return list(self.flags)
        at = self.flags.index(UV_VALUE_FLAGS["index-url"])
        return self.flags[:at] + self.flags[at + 2 :]

    def used(self) -> list[str]:
        """The pip settings that shaped the uv run (their names; values may hold credentials)."""
        return sorted(k for k in self.settings if k not in NO_EFFECT)
