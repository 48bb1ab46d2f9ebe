"""A module option passed under a task's `vars:` never reaches the module: Ansible hands a module only the
task's own arguments, and `vars:` only defines variables for templating. roles/tuner/tasks/plan.yml passed
tune_plan's max_candidates that way (issue 38), so tuner_max_candidates changed nothing.

Every task file of the project (roles/*/tasks, roles/*/handlers, playbooks, their blocks, rescues and
always sections) is scanned: for a task whose module is one of the collection's own (epforge.ep.NAME,
library/NAME.py), a key under the task's `vars:` (or an enclosing block's) that is also an option of that
module is a defect, reported as file:line. The options are the module's DOCUMENTATION (its doc fragments
included), which ansible-test's validate-modules holds equal to its argument_spec.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml
from conftest import ROOT

LIBRARY = ROOT / "library"
FRAGMENTS = ROOT / "plugins" / "doc_fragments"
PREFIX = "epforge.ep."
PLAY_TASK_LISTS = ("pre_tasks", "tasks", "post_tasks", "handlers")
BLOCK_LISTS = ("block", "rescue", "always")


def task_files(root: Path = ROOT) -> list[Path]:
    found = [*root.glob("roles/*/tasks/**/*.yml"), *root.glob("roles/*/handlers/**/*.yml")]
    found += [p for p in root.glob("playbooks/**/*.yml") if not p.name.endswith(".vars.yml")]
    return sorted(found)


def _string_constant(tree: ast.AST, name: str, owner: str | None = None) -> str | None:
    """The value of the string assignment `name = "..."` (inside class owner when given)."""
    scope = tree
    if owner:
        scope = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner)
    for node in ast.iter_child_nodes(scope):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _option_names(doc: dict) -> set[str]:
    names = set()
    for option, spec in (doc.get("options") or {}).items():
        names.add(option)
        names.update((spec or {}).get("aliases") or [])
    return names


def module_options(name: str) -> set[str] | None:
    """The options (and aliases) of library/NAME.py, its doc fragments' included; None for no such module."""
    path = LIBRARY / f"{name}.py"
    if not path.is_file():
        return None
    try:
        doc = yaml.safe_load(_string_constant(ast.parse(path.read_text()), "DOCUMENTATION"))
    except yaml.YAMLError as exc:
        problem = f"library/{name}.py: DOCUMENTATION is not YAML, its options unknown: {exc}"
        raise AssertionError(problem) from None
    names = _option_names(doc)
    for fragment in doc.get("extends_documentation_fragment") or []:
        if not fragment.startswith(PREFIX):
            continue  # ansible.builtin's attribute fragments hold no options
        parts = fragment.removeprefix(PREFIX).split(".")
        tree = ast.parse((FRAGMENTS / f"{parts[0]}.py").read_text())
        attribute = parts[1].upper() if len(parts) > 1 else "DOCUMENTATION"
        names |= _option_names(yaml.safe_load(_string_constant(tree, attribute, "ModuleDocFragment")))
    return names


def _value(mapping: yaml.MappingNode, key: str):
    return next((v for k, v in mapping.value if k.value == key), None)


def _tasks_of(node, inherited: list) -> list[tuple[yaml.MappingNode, list]]:
    """(task, the vars nodes of it and its enclosing blocks) for every task under a list node."""
    found = []
    if not isinstance(node, yaml.SequenceNode):
        return found
    for item in node.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        own = _value(item, "vars")
        scopes = inherited + ([own] if isinstance(own, yaml.MappingNode) else [])
        if any(_value(item, key) is not None for key in BLOCK_LISTS):
            for key in BLOCK_LISTS:
                found += _tasks_of(_value(item, key), scopes)
        else:
            found.append((item, scopes))
    return found


def defects(path: Path, root: Path = ROOT) -> list[str]:
    """'FILE:LINE: ...' for each option of one of the collection's modules passed under vars: in path."""
    document = yaml.compose(path.read_text())
    if not isinstance(document, yaml.SequenceNode):
        return []  # a vars file
    is_playbook = any(
        isinstance(i, yaml.MappingNode) and (_value(i, "hosts") or _value(i, "import_playbook"))
        for i in document.value
    )
    tasks = []
    if is_playbook:
        for play in document.value:
            play_vars = _value(play, "vars")
            scopes = [play_vars] if isinstance(play_vars, yaml.MappingNode) else []
            for key in PLAY_TASK_LISTS:
                tasks += _tasks_of(_value(play, key), scopes)
    else:
        tasks = _tasks_of(document, [])
    found = []
    for task, scopes in tasks:
        for key_node, _value_node in task.value:
            if not key_node.value.startswith(PREFIX):
                continue
            module = key_node.value.removeprefix(PREFIX)
            options = module_options(module) if scopes else None
            for scope in scopes if options else []:
                for var, _v in scope.value:
                    if var.value in options:
                        found.append(
                            f"{path.relative_to(root)}:{var.start_mark.line + 1}: option {var.value} of "
                            f"{PREFIX}{module} is under vars:, so the module never gets it: pass it as a "
                            "module argument"
                        )
    return found


def test_no_task_passes_a_module_option_under_vars():
    files = task_files()
    assert len(files) > 50  # the scan reads the tree it is meant to
    found = [defect for path in files for defect in defects(path)]
    assert found == [], "\n".join(found)


def test_the_scan_finds_an_option_under_a_tasks_or_an_enclosing_blocks_vars(tmp_path):
    """The scan itself: a written task file with the defect at known lines, and a variable that is no
    option of the module (allowed), and a block's vars over a task of another module (allowed)."""
    (tmp_path / "roles" / "demo" / "tasks").mkdir(parents=True)
    tasks = tmp_path / "roles" / "demo" / "tasks" / "main.yml"
    tasks.write_text(
        "---\n"
        "- name: Plan\n"
        "  epforge.ep.tune_plan:\n"
        "    server: {}\n"
        "  vars:\n"
        "    __helper: 1\n"
        "    max_candidates: 8\n"
        "- name: A block\n"
        "  vars:\n"
        "    directory: /tmp/x\n"
        "  block:\n"
        "    - name: Journal\n"
        "      epforge.ep.tune_journal:\n"
        "        plan: {}\n"
        "    - name: Debug\n"
        "      ansible.builtin.debug:\n"
        "        msg: hi\n"
    )
    assert [d.split(": option")[0] for d in defects(tasks, tmp_path)] == [
        "roles/demo/tasks/main.yml:7",
        "roles/demo/tasks/main.yml:10",
    ]
    assert module_options("tune_plan") >= {"max_candidates", "model_dir"}  # model_dir: its doc fragment's
