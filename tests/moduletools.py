"""Run the project's Ansible modules in tests: as a file, the way Ansible runs it (a JSON args file, the
result on the last line of stdout), or in process with exit_json/fail_json caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible.release import __version__ as ansible_version

from ansible_collections.epforge.ep.plugins.module_utils.server_object import build as build_server_object

ROOT = Path(__file__).resolve().parents[1]

# A module's invocation record (its arguments, no_log values masked): ansible-core 2.19 and 2.20 always add
# it and refuse this flag as an unknown argument; 2.21 adds it only when the controller asks (its
# INJECT_INVOCATION setting). Tests that read the record pass ASK_INVOCATION with the module's arguments.
ASK_INVOCATION = (
    {"_ansible_inject_invocation": True}
    if tuple(int(part) for part in ansible_version.split(".")[:2]) >= (2, 21)
    else {}
)
# The child Python finds the collection's module_utils through collections/, as with ansible.cfg's
# collections_path.
RUNNER = (
    f"import runpy, sys; sys.path.insert(0, {str(ROOT / 'collections')!r}); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def module_file(module: str | Path) -> Path:
    """A module name means library/<name>.py; a Path is the module file itself."""
    return module if isinstance(module, Path) else ROOT / "library" / f"{module}.py"


def module_argv(
    module: str | Path, args: dict, *, check: bool = False, diff: bool = False, args_dir: Path | None = None
) -> tuple[list[str], str]:
    """Write the JSON args file (in args_dir, else a temp file the caller removes); return (argv, path)."""
    text = json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check, "_ansible_diff": diff}})
    if args_dir is None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            handle.write(text)
        args_file = handle.name
    else:
        args_file = str(args_dir / f"args-{time.monotonic_ns()}.json")
        Path(args_file).write_text(text)
    return [sys.executable, "-c", RUNNER, str(module_file(module)), args_file], args_file


def run_module_proc(
    module: str | Path,
    args: dict,
    *,
    check: bool = False,
    diff: bool = False,
    timeout: float = 120,
    args_dir: Path | None = None,
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run a module file the way Ansible does; return (the finished process, its parsed result).

    The args file goes to args_dir and stays there, or to a temp file removed afterwards."""
    argv, args_file = module_argv(module, args, check=check, diff=diff, args_dir=args_dir)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        if args_dir is None:
            os.unlink(args_file)
    try:
        return proc, json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        pytest.fail(f"module printed no JSON (rc {proc.returncode}): {proc.stdout}\n{proc.stderr}")


def run_module(
    module: str | Path, args: dict, *, check: bool = False, diff: bool = False, timeout: float = 120
) -> tuple[int, dict]:
    """Run a module file the way Ansible does (a JSON args file); return (rc, parsed result)."""
    proc, result = run_module_proc(module, args, check=check, diff=diff, timeout=timeout)
    return proc.returncode, result


def run_module_in(
    tmp_path: Path,
    module: str | Path,
    args: dict,
    *,
    check: bool = False,
    diff: bool = False,
    timeout: float = 120,
) -> dict:
    """As run_module, the args file left in tmp_path; the result carries `_rc` and `_stdout`."""
    proc, result = run_module_proc(module, args, check=check, diff=diff, timeout=timeout, args_dir=tmp_path)
    result["_rc"] = proc.returncode
    result["_stdout"] = proc.stdout
    return result


class Exited(Exception):
    pass


class Failed(Exception):
    pass


def run_main(module: ModuleType, args: dict, *, capture_warnings: bool = False) -> tuple[str, dict]:
    """Call module.main() in process with these args; return ("exit" or "fail", the result).

    capture_warnings: module.warn() texts go to the exit result's `_warnings` instead of the module."""

    def exit_json(self, **kwargs):
        raise Exited(kwargs)

    def fail_json(self, **kwargs):
        raise Failed(kwargs)

    warnings: list[str] = []
    patches = {"exit_json": exit_json, "fail_json": fail_json}
    if capture_warnings:
        patches["warn"] = lambda self, text: warnings.append(text)
    with patch_module_args(args), mock.patch.multiple(basic.AnsibleModule, **patches):
        try:
            module.main()
        except Exited as done:
            return "exit", ({**done.args[0], "_warnings": warnings} if capture_warnings else done.args[0])
        except Failed as failed:
            return "fail", failed.args[0]
    raise AssertionError("the module returned without exit_json or fail_json")


def watched_states(paths) -> dict:
    """What the probe cache (plugins/action/probe_cache.py) compares for each path of a module's
    `watch` list: (size, mtime_ns, ctime_ns, inode), or None when the path is missing."""
    states = {}
    for path in paths:
        try:
            st = os.stat(path)
            states[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        except OSError:
            states[path] = None
    return states


def changed_paths(before: dict, paths=None) -> list[str]:
    """The watched paths whose state differs from `before` (watched_states of the same paths) now."""
    now = watched_states(before if paths is None else paths)
    return sorted(p for p in now if now[p] != before.get(p))


def clear_import_path_variables(monkeypatch) -> None:
    """A module's watch list is empty while PYTHONPATH & co. are set (plugins/module_utils/watch.py): tests of
    the list run the module without them, whatever the shell running pytest sets."""
    from ansible_collections.epforge.ep.plugins.module_utils.watch import IMPORT_PATH_VARIABLES  # noqa: PLC0415

    for name in IMPORT_PATH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def server_object(settings: dict, sglang_version: str, flag_table: dict | None = None) -> dict:
    """The server settings object role preflight would build for these settings on a host where no known
    issue adjusts them (plugins/module_utils/server_object.py; the API key is left out as there)."""
    verdict = {"adjusted_settings": settings, "findings": {"adjustments": []}}
    return build_server_object(verdict, sglang_version, flag_table)
