"""Refuse a pip plan that would replace a kept distribution (the ML env's torch, an adopted image's first).

Passing `torch==X` to pip (sglang_keep) makes pip fail when another torch is required; this guard also says,
before anything is installed, exactly what would be replaced: it asks pip for the plan
(`pip install --dry-run --report FILE ...`, same argv, same environment) and compares the plan's install
list with the versions installed now. Also catches what a version pin lets through (the same version
reinstalled from another build, e.g. 2.11.0+cu130 -> 2.11.0+cu128, or a forced reinstall).
"""

from __future__ import annotations

import os
import re
import tempfile

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import (
    installed_versions as installed_versions_payload,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.pynames import normalize, requirement_key


def replacements(report: dict, installed: dict[str, str], keep: list[str]) -> list[str]:
    """'torch 2.11.0+cu130 -> 2.14.1' for every kept distribution the plan would install over the one there.

    installed: normalized name -> version as installed now. A kept distribution not installed yet is no
    replacement (the first install of the stack's torch is the plan's job)."""
    kept = {requirement_key(req) for req in keep}
    found = []
    for entry in report.get("install", []):
        meta = entry.get("metadata", {})
        name = normalize(meta.get("name", ""))
        if name in kept and name in installed:
            found.append(f"{name} {installed[name]} -> {meta.get('version')}")
    return sorted(found)


def dry_run_argv(install_argv: list[str], report_path: str) -> list[str]:
    """The same pip install argv, asking only for the plan."""
    at = install_argv.index("install") + 1
    # Not --quiet: pip names the conflict ("X depends on torch==Y") at info level.
    return [*install_argv[:at], "--dry-run", "--report", report_path, *install_argv[at:]]


def installed_versions(python: str, names: list[str], env: dict | None = None) -> dict[str, str]:
    """{normalized name: version} of the named distributions installed for python (absent ones left out)."""
    run = run_payload(python, installed_versions_payload, names, timeout=120, env=env)
    if not isinstance(run.answer, dict):
        return {}
    return {normalize(k): v for k, v in run.answer.items() if v is not None}


def conflict_lines(pip_output: str, limit: int = 6) -> str:
    """The lines of a pip resolution failure that name the conflict (else the output's tail)."""
    lines = [
        line.strip()
        for line in pip_output.splitlines()
        if re.search(r"The user requested|depends on|Cannot install|No matching distribution", line)
    ]
    return " | ".join(lines[:limit]) if lines else tail(pip_output, limit).strip()


def refuse_replacing(
    module,
    python: str,
    install_argv: list[str],
    keep: list[str],
    *,
    env: dict | None = None,
    timeout: int = 1800,
    result: dict | None = None,
) -> None:
    """fail_json, before pip installs anything, when INSTALL_ARGV's plan would replace a kept distribution.

    A plan pip cannot make at all (a conflict with the keep pins) fails too, with pip's own words."""
    if not keep:
        return
    result = result or {}
    installed = installed_versions(python, sorted({requirement_key(req) for req in keep}), env)
    fd, report_path = tempfile.mkstemp(prefix="epforge-pip-plan-", suffix=".json")
    os.close(fd)
    argv = dry_run_argv(install_argv, report_path)
    try:
        proc = run_bounded(argv, timeout=timeout, env=env)
        report = {} if proc.timed_out else (read_json(report_path) or {})
    finally:
        os.unlink(report_path)
    if proc.timed_out:
        module.fail_json(msg=f"pip's plan (dry run) took more than {timeout} s", cmd=argv, rc=124, **result)
    if proc.rc != 0:
        module.fail_json(
            msg=(
                "pip cannot make a plan that keeps " + ", ".join(keep) + " (the ML env's torch "
                "stays as it is); nothing was installed. pip says: "
                + conflict_lines(proc.err + "\n" + proc.out)
            ),
            cmd=argv,
            rc=proc.rc,
            log_tail=tail(proc.err or proc.out),
            **result,
        )
    replaced = replacements(report, installed, keep)
    if replaced:
        module.fail_json(
            msg=(
                "refusing: this pip run would replace "
                + "; ".join(replaced)
                + " in "
                + python
                + ", which must stay as it is (kept: "
                + ", ".join(keep)
                + "). Nothing was "
                "installed. Choose requirements that fit the installed torch (or a stack whose "
                "torch they need)."
            ),
            cmd=argv,
            rc=0,
            **result,
        )
