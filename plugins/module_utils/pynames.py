"""Python distribution names: the one rule for the name a requirement names and for comparing names.

- normalize(): PEP 503 normalisation ('Flashinfer_Python' -> 'flashinfer-python'): runs of '-', '_' and '.'
  become one '-', lower case. Two names are the same distribution when their normalised forms are equal (a
  wheel file or .dist-info directory spells it with '_': compare those through normalize() too).
- requirement_name(): the distribution name a requirement starts with, as written (PEP 508's name: letters
  and digits, with '-', '_' or '.' inside): whatever follows it - extras, a version specifier, a URL after
  '@', a marker after ';', an old-style '(>=1.0)', spaces or none - is not part of it.
- requirement_key(): both, the name to compare a requirement with installed distributions by.

Versions (a version without its local label): plugins/module_utils/version.py. Unit-tested in
tests/unit/test_pynames.py.
"""

from __future__ import annotations

import re

_SEPARATORS = re.compile(r"[-_.]+")
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def normalize(name: str) -> str:
    """PEP 503 name normalisation ('Flashinfer_Python' -> 'flashinfer-python')."""
    return _SEPARATORS.sub("-", str(name)).lower()


def requirement_name(requirement: str) -> str:
    """The distribution name of a requirement, as written ('' when it does not start with one):
    'torch==2.14.1+cu130' -> 'torch', 'deep_ep @ file:///w/deep_ep.whl' -> 'deep_ep',
    'flashinfer_python[cu13]>=0.7; python_version >= "3.10"' -> 'flashinfer_python'."""
    match = _NAME.match(requirement or "")
    return match.group(1) if match else ""


def requirement_key(requirement: str) -> str:
    """The normalised distribution name of a requirement ('Deep_EP@file:///w/x.whl' -> 'deep-ep')."""
    return normalize(requirement_name(requirement))
