"""Versions (plugins/module_utils/version.py): a version without its local label, the rule 'same release'
comparisons of local builds (torch 2.14.1+cu130 is torch 2.14.1) go through."""

from __future__ import annotations

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.version import base_version


@pytest.mark.parametrize(
    ("version", "base"),
    [
        ("2.14.1+cu130", "2.14.1"),
        ("2.11.0+cu130.post1", "2.11.0"),
        ("1.2.1+9af0e0d", "1.2.1"),
        ("2.14.1", "2.14.1"),
        ("0.5.10.post1", "0.5.10.post1"),
        ("", ""),
        (None, ""),
    ],
)
def test_base_version_drops_the_local_label_only(version, base):
    assert base_version(version) == base


def test_local_builds_of_one_release_share_it():
    assert base_version("2.13.0+cpu") == base_version("2.13.0+cu130") == "2.13.0"
    assert base_version("2.13.0+cu130") != base_version("2.14.1+cu130")
