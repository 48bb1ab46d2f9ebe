"""Local fact files (JSON under facts.d, read back by setup as ansible_local.<name>): the one writer.

A role's probe module can record its fact in the same call that found the host current, so a no-op rerun
needs no separate fact task; epforge_local_fact is the module form of the same function.
"""

from __future__ import annotations

import os
import re

from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, read_json, write_json_atomic

FACT_NAME = re.compile(r"[A-Za-z0-9_]+")


def fact_path(facts_dir: str, name: str) -> str:
    """The file of fact `name`; refuses a name setup could not read back."""
    if not FACT_NAME.fullmatch(name):
        raise ValueError(f"fact name '{name}' may hold only letters, digits and '_'")
    return os.path.join(facts_dir, f"{name}.fact")


def write_local_fact(facts_dir: str, name: str, content: dict, check_mode: bool = False) -> dict:
    """Write `content` as fact `name` only when it differs from the file; never writes in check mode.

    Returns {'changed': bool, 'path': str, 'diff': dict} where diff is empty when nothing changes (the shape
    Ansible's diff mode prints).
    """
    path = fact_path(facts_dir, name)
    before = read_json(path)
    changed = before != content
    diff = {}
    if changed:
        diff = {
            "before_header": path,
            "after_header": path,
            "before": json_text(before) if before is not None else "",
            "after": json_text(content),
        }
        if not check_mode:
            write_json_atomic(path, content)
    return {"changed": changed, "path": path, "diff": diff}
