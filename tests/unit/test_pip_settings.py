"""pip's settings for an install read from `pip config list`, and their uv translation (issue 41): pip's
precedence, every list split, a setting uv cannot honour refused by name. The listing's lines are pip's
own format; test_installer.py runs the real `pip config list` and a real uv."""

from __future__ import annotations

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.pip_settings import UvTranslation, pip_settings

# The shape `pip config list` printed on this machine (pip 23.2.1, 2026-12-05) with PIP_NO_INDEX and
# PIP_FIND_LINKS set, as role wheelhouse sets them.
LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.find-links='/srv/install-section'
download.find-links='/srv/another-command'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/srv/wheelhouse /srv/more'
:env:.no-index='1'
"""


def test_variables_win_over_the_install_section_over_global_and_other_commands_are_left_out():
    settings = pip_settings(LISTING)
    assert settings["find-links"] == "/srv/wheelhouse /srv/more"
    assert pip_settings("global.find-links='/a'\ninstall.find-links='/b'\n")["find-links"] == "/b"
    assert pip_settings("download.find-links='/a'\n") == {}
    assert settings["no-index"] == "1" and settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"


def test_the_wheelhouse_and_the_machines_mirrors_become_uv_flags_and_variables():
    t = UvTranslation(pip_settings(LISTING))
    assert t.refusal == ""
    flags = t.flags
    assert flags.count("--find-links") == 2 and "/srv/wheelhouse" in flags and "/srv/more" in flags
    assert flags.count("--extra-index-url") == 2 and "file:///opt/pypi-more/simple" in flags
    assert "--no-index" in flags
    assert flags[flags.index("--constraints") + 1] == "/etc/xdg/pip/constraints.txt"
    # pip's rule for several sources, not uv's first-index default
    assert flags[-2:] == ["--index-strategy", "unsafe-best-match"]
    assert t.variables == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    assert t.used() == ["cert", "constraint", "default-timeout", "extra-index-url", "find-links", "no-index"]


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (":env:.user='1'", "user='1'"),
        ("global.target='/srv/t'", "target='/srv/t'"),
        (":env:.no-index='maybe'", "no-index='maybe'"),
    ],
)
def test_a_setting_uv_cannot_honour_is_refused_by_name(line, named):
    assert named in UvTranslation(pip_settings(line)).refusal


def test_a_switch_set_off_adds_nothing_and_the_installs_own_index_replaces_the_settings():
    t = UvTranslation(pip_settings(":env:.no-index='0'\nglobal.index-url='https://mirror.example/simple'\n"))
    assert "--no-index" not in t.flags
    assert t.flags_for("")[:2] == ["--index-url", "https://mirror.example/simple"]
    assert "https://mirror.example/simple" not in t.flags_for("https://download.pytorch.org/whl/cu130")
    assert "--index-url" not in t.flags_for("https://download.pytorch.org/whl/cu130")
