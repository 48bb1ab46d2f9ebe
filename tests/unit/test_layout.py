"""The code layout's rules (docs/ARCHITECTURE.md, "Code layout"), checked over the tree as it is.

- plugins/module_utils/NAME.py is shared: two or more plugins (modules in library/, action, lookup and filter
  plugins) use it, directly or through another helper.
- plugins/module_utils/MODULE/ holds what only the module MODULE (and its same-name action plugin) uses, or
  what only the filter plugin plugins/filter/MODULE.py uses.
- plugins/module_utils/payloads/ holds scripts that run in another Python (sent by payload.py): each is
  used by a plugin, and each imports nothing of the collection (it cannot there).
- Project code is imported by the names Ansible imports it by (ansible_collections.epforge.ep...): no
  ansible.module_utils.epforge_* names, no __path__ splices.
- Every plugin directory Ansible reads lives in the collection (roles carry no plugins).
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

PKG = "ansible_collections.epforge.ep.plugins.module_utils"
UTILS = ROOT / "plugins" / "module_utils"
# from PKG[.a] import b[, c] | from PKG[.a] import (b, c,) | import PKG.a.b
IMPORT = re.compile(
    rf"^[ \t]*(?:from[ \t]+{re.escape(PKG)}((?:\.\w+)*)[ \t]+import[ \t]+(?:\(([\w\s,]+)\)|([\w ,]+))"
    rf"|import[ \t]+{re.escape(PKG)}((?:\.\w+)+))",
    re.MULTILINE,
)


def util_name(path: Path) -> str:
    """'process' for plugins/module_utils/process.py, 'sglang_server.unit' for a private one."""
    return ".".join(path.relative_to(UTILS).with_suffix("").parts)


UTIL_NAMES = {util_name(p) for p in UTILS.rglob("*.py") if p.name != "__init__.py"}


def imported_utils(path: Path) -> set[str]:
    """The module_utils a file imports (from PKG.a.b import c names a.b.c when that is a file, else a.b)."""
    found = set()
    for match in IMPORT.finditer(path.read_text()):
        if match.group(4):
            found.add(match.group(4).lstrip("."))
            continue
        package = match.group(1).lstrip(".")
        for item in (match.group(2) or match.group(3)).replace("\n", " ").split(","):
            name = item.split(" as ")[0].strip()
            candidate = f"{package}.{name}" if package else name
            found.add(candidate if candidate in UTIL_NAMES else package)
    return found & UTIL_NAMES


def plugins() -> dict[str, Path]:
    """Every plugin Ansible loads, by the name that owns it (a module and its same-name action share one)."""
    found = {p.stem: p for p in (ROOT / "library").glob("*.py")}
    for kind in ("action", "lookup", "filter"):
        for path in (ROOT / "plugins" / kind).glob("*.py"):
            found.setdefault(f"{kind}:{path.stem}", path)
            if kind == "action" and path.stem in found and found[path.stem] != path:
                found[f"action:{path.stem}"] = path
    return found


def users_of_each_util() -> dict[str, set[str]]:
    """util -> the plugin owners that reach it (through other utils too)."""
    direct = {
        util: imported_utils(UTILS.joinpath(*util.split(".")).with_suffix(".py")) for util in UTIL_NAMES
    }
    users: dict[str, set[str]] = {util: set() for util in UTIL_NAMES}
    for name, path in plugins().items():
        owner = name.removeprefix("action:")  # a module's action plugin is the same owner
        todo, seen = list(imported_utils(path)), set()
        while todo:
            util = todo.pop()
            if util in seen:
                continue
            seen.add(util)
            users[util].add(owner)
            todo.extend(direct[util])
    return users


def test_the_import_graph_is_read():
    users = users_of_each_util()
    assert len(UTIL_NAMES) >= 30
    assert {"sglang_server", "sglang_bench"} <= users["process"]
    assert users["sglang_server.confirm"] == {"sglang_server"}
    assert {"sglang_server", "server_jit_check"} <= users["signatures"]


@pytest.mark.parametrize("util", sorted(u for u in UTIL_NAMES if "." not in u))
def test_a_top_level_helper_is_shared(util):
    users = users_of_each_util()[util]
    assert len(users) >= 2, (
        f"plugins/module_utils/{util}.py is used by {sorted(users) or 'nothing'}: move it to "
        f"plugins/module_utils/<module>/ when one module owns it (docs/ARCHITECTURE.md, Code layout)"
    )


PAYLOADS = "payloads"


@pytest.mark.parametrize("util", sorted(u for u in UTIL_NAMES if u.startswith(PAYLOADS + ".")))
def test_a_payload_is_used_and_stands_alone(util):
    """A payload runs in another interpreter, where the collection cannot be imported: stdlib only."""
    assert users_of_each_util()[util], f"plugins/module_utils/{util.replace('.', '/')}.py is used by nothing"
    source = (UTILS / (util.replace(".", "/") + ".py")).read_text()
    assert (
        "ansible_collections" not in source
        and "from ansible" not in source
        and "import ansible" not in source
    )


@pytest.mark.parametrize(
    "util", sorted(u for u in UTIL_NAMES if "." in u and not u.startswith(PAYLOADS + "."))
)
def test_a_private_helper_is_used_by_its_owner_only(util):
    owner = util.split(".")[0]
    # a module in library/, or a filter plugin (a filter has no module of its own to hold its rules)
    owners = {owner} if (ROOT / "library" / f"{owner}.py").is_file() else set()
    if (ROOT / "plugins" / "filter" / f"{owner}.py").is_file():
        owners.add(f"filter:{owner}")
    assert owners, f"sub-package {owner}/ names no module in library/ and no filter plugin"
    assert len(users_of_each_util()[util] & owners) == 1 and users_of_each_util()[util] <= owners


def tracked_python() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / n for n in names if not (ROOT / n).is_symlink()]


def test_project_code_is_imported_by_its_collection_name_only():
    this = Path(__file__).resolve()
    offenders = [
        str(p.relative_to(ROOT))
        for p in tracked_python()
        if p.resolve() != this
        and re.search(
            r"ansible\.module_utils\.epforge_|module_utils import epforge_|__path__\.(append|insert)",
            p.read_text(),
        )
    ]
    assert offenders == []


def test_roles_carry_no_plugins():
    """A role inside a collection cannot bring plugins: they live in the collection's plugins/."""
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "roles").glob("*/*_plugins")) == []
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "roles").glob("*/library")) == []


# Issue 40: code that runs in another Python lives in real files (payloads, roles/*/files), never in a task.
PY_SOURCE_IN_TASK = re.compile(r"\bpython[\d.]*\S*\s+-c\s")


def python_source_tasks(node, where: str) -> list[str]:
    """Where a task runs `PYTHON -c CODE`: an argv whose item after an interpreter is -c, or a command
    line that says so."""
    found = []
    if isinstance(node, list):
        for index, item in enumerate(node):
            found += python_source_tasks(item, f"{where}[{index}]")
    elif isinstance(node, dict):
        argv = node.get("argv")
        if isinstance(argv, list):
            items = [str(a) for a in argv]
            if any(a == "-c" and "python" in b for b, a in itertools.pairwise(items)):
                found.append(f"{where}: argv {items[:3]}")
        for key in ("cmd", "_raw_params"):
            if isinstance(node.get(key), str) and PY_SOURCE_IN_TASK.search(node[key]):
                found.append(f"{where}: {key} {node[key][:60]!r}")
        for key, value in node.items():
            if (
                isinstance(value, str)
                and key.endswith(("command", "shell"))
                and PY_SOURCE_IN_TASK.search(value)
            ):
                found.append(f"{where}: {key} {value[:60]!r}")
            found += python_source_tasks(value, f"{where}.{key}")
    return found


def test_no_task_runs_python_source():
    import yaml  # noqa: PLC0415

    files = sorted((ROOT / "roles").glob("*/tasks/*.yml")) + sorted((ROOT / "playbooks").rglob("*.yml"))
    assert len(files) > 50
    found = []
    for path in files:
        found += python_source_tasks(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)))
    assert found == []


def test_the_task_check_finds_each_shape():
    """What roles deepep and gateway had before module python_locate, and the one-line forms."""
    argv = [{"ansible.builtin.command": {"argv": ["{{ deepep_python }}", "-c", "import x"]}}]
    assert python_source_tasks(argv, "t") == [
        "t[0].ansible.builtin.command: argv ['{{ deepep_python }}', '-c', 'import x']"
    ]
    in_block = [{"block": [{"ansible.builtin.command": {"cmd": "/venv/bin/python3 -c 'import x'"}}]}]
    assert len(python_source_tasks(in_block, "t")) == 1
    assert len(python_source_tasks([{"ansible.builtin.shell": "python3.11 -c 'print(1)'"}], "t")) == 1
    assert python_source_tasks([{"ansible.builtin.command": {"argv": ["bash", "-c", "true"]}}], "t") == []
