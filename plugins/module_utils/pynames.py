"""Python distribution names: the one rule for the name a requirement names and for comparing names.

- normalize(): PEP 503 normalisation ('Flashinfer_Python' -> 'flashinfer-python'): runs of '-', '_' and '.'
  become one '-', lower case. Two names are the same distribution when their normalised forms are equal (a
  wheel file or .dist-info directory spells it with '_': compare those through normalize() too).
- requirement_name(): the distribution name a requirement starts with, as written (PEP 508's name: letters
  and digits, with '-', '_' or '.' inside): whatever follows it - extras, a version specifier, a URL after
  '@', a marker after ';', an old-style '(>=1.0)', spaces or none - is not part of it.
- requirement_key(): both, the name to compare a requirement with installed distributions by.
- wheel_name_version() and dist_info_name_version(): the (normalised name, version) a wheel file name or an
  installed distribution's .dist-info directory name spells (the only readers of those names).

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


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """'fastapi-0.115.0-py3-none-any.whl' (a path too) -> ('fastapi', '0.115.0'); None for a file that is no
    wheel (NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl)."""
    base = str(filename).rsplit("/", 1)[-1]
    if not base.endswith(".whl"):
        return None
    parts = base[: -len(".whl")].split("-")
    if len(parts) < 5:
        return None
    return normalize(parts[0]), parts[1]


def dist_info_name_version(dirname: str) -> tuple[str, str] | None:
    """'Flashinfer_Python-0.7.2.dist-info' (a path too) -> ('flashinfer-python', '0.7.2'); None for another
    name (an installed distribution's directory is NAME-VERSION.dist-info, the name with '_' for '-')."""
    base = str(dirname).rstrip("/").rsplit("/", 1)[-1]
    if not base.endswith(".dist-info"):
        return None
    name, _unused, version = base[: -len(".dist-info")].partition("-")
    return (normalize(name), version) if name and version else None
