"""Every project module's DOCUMENTATION / EXAMPLES / RETURN renders with ansible-doc, as users read them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"


def test_there_are_modules_to_check():
    assert "nvidia_gpu_facts" in MODULES and len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_DOC), f"epforge.ep.{name}"],  # by FQCN, through the checkout's collections path
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert f"epforge.ep.{name}" in text.splitlines()[0]
    for section in ("OPTIONS", "ATTRIBUTES", "EXAMPLES", "RETURN VALUES"):
        assert section in text, f"{name}: ansible-doc shows no {section}"
    assert "[WARNING]" not in proc.stderr, proc.stderr[-2000:]


def example_tasks(tasks) -> list[dict]:
    """Every task of an EXAMPLES document, the ones inside block/rescue/always included."""
    found = []
    for task in tasks or []:
        if isinstance(task, dict):
            found.append(task)
            for key in ("block", "rescue", "always"):
                found += example_tasks(task.get(key))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_examples_call_the_collection_s_modules_by_fqcn(name):
    """Issue 40: users copy EXAMPLES into their playbooks, where a short name only resolves by luck."""
    import yaml  # noqa: PLC0415

    source = (ROOT / "library" / f"{name}.py").read_text()
    start = source.index("EXAMPLES = ")
    examples = source[source.index('"""', start) + 3 : source.index('"""', source.index('"""', start) + 3)]
    short = [
        key
        for task in example_tasks(yaml.safe_load(examples))
        for key in task
        if key in MODULES and not key.startswith("epforge.ep.")
    ]
    assert short == [], f"{name}: EXAMPLES call {short} by short name (write epforge.ep.NAME)"


# Issue 40: every module declares check_mode, diff_mode and platform (fragment epforge.ep.attributes), and
# the levels it declares are its code's: read statically from the module and the collection's module_utils
# it imports.
ATTRIBUTES_FRAGMENT = "epforge.ep.attributes"
SUPPORT_LEVELS = ("full", "partial", "none")
MODULE_UTILS = ROOT / "plugins" / "module_utils"
UTILS_PACKAGE = "ansible_collections.epforge.ep.plugins.module_utils"


def documentation(tree: ast.Module) -> dict:
    import yaml  # noqa: PLC0415

    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "DOCUMENTATION" for t in node.targets
        ):
            return yaml.safe_load(ast.literal_eval(node.value))
    return {}


def check_mode_declared(tree: ast.Module) -> list[bool]:
    """For each AnsibleModule(...) call: whether it passes supports_check_mode=True."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "AnsibleModule"
    ]
    return [
        any(
            k.arg == "supports_check_mode" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )
        for call in calls
    ]


def has_diff_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "diff" for k in node.keys
    )


def diff_returning(tree: ast.Module) -> set[str]:
    """A helper's functions that return a dict literal with a `diff` key (local_facts.write_local_fact)."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(r, ast.Return) and has_diff_key(r.value) for r in ast.walk(node))
    }


def called(node: ast.AST) -> str | None:
    """The name a call calls (f(...) or x.f(...)), else None."""
    if isinstance(node, ast.Call):
        return getattr(node.func, "id", getattr(node.func, "attr", None))
    return None


def sets_diff(tree: ast.Module, helper: bool = False, returning: frozenset[str] = frozenset()) -> bool:
    """Whether the code puts a `diff` key into a module result: exit_json(diff=...), X["diff"] = ..., or,
    in the module itself, a dict literal with the key or the whole answer of a helper of `returning` splatted
    into exit_json (exit_json(**written)). A helper's dict literal is a return value (local_facts gives its
    caller a diff): the caller must put it into its result (model_weights drops it), so it does not count for
    the helper."""
    splatted = {
        k.value.id
        for node in ast.walk(tree)
        if called(node) == "exit_json"
        for k in node.keywords
        if k.arg is None and isinstance(k.value, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(k.arg == "diff" for k in node.keywords):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "diff"
            for t in node.targets
        ):
            return True
        if helper:
            continue
        if has_diff_key(node):
            return True
        if (
            isinstance(node, ast.Assign)
            and called(node.value) in returning
            and any(isinstance(t, ast.Name) and t.id in splatted for t in node.targets)
        ):
            return True
    return False


def imported_utils(tree: ast.Module) -> list[Path]:
    """The collection's module_utils files the code imports from (a package's submodules by name)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(UTILS_PACKAGE + "."):
            continue
        base = MODULE_UTILS.joinpath(*node.module.removeprefix(UTILS_PACKAGE + ".").split("."))
        candidates = [base.with_suffix(".py"), base / "__init__.py"]
        candidates += [base / f"{alias.name}.py" for alias in node.names]
        found += [path for path in candidates if path.is_file()]
    return found


def fragment_documentation(name: str) -> dict:
    """The YAML of doc fragment epforge.ep.FILE or epforge.ep.FILE.VARIABLE (plugins/doc_fragments/FILE.py,
    class ModuleDocFragment, DOCUMENTATION or the upper-cased VARIABLE)."""
    import yaml  # noqa: PLC0415

    file_name, _dot, variable = name.removeprefix("epforge.ep.").partition(".")
    tree = ast.parse((ROOT / "plugins" / "doc_fragments" / f"{file_name}.py").read_text())
    (fragment,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModuleDocFragment"]
    wanted = (variable or "documentation").upper()
    for node in fragment.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == wanted for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    raise KeyError(f"doc fragment {name}: no {wanted} in plugins/doc_fragments/{file_name}.py")


def merged_attributes(doc: dict) -> dict:
    """The module's attributes with its epforge.ep fragments' merged in as Ansible merges them
    (ansible.utils.plugin_docs.add_fragments: per attribute, a key already there wins)."""
    attributes = {key: dict(value) for key, value in (doc.get("attributes") or {}).items()}
    for name in doc.get("extends_documentation_fragment") or []:
        if name.startswith("epforge.ep."):
            for key, value in (fragment_documentation(name).get("attributes") or {}).items():
                attributes[key] = {**value, **attributes.get(key, {})}
    return attributes


def attribute_problems(source: str) -> list[str]:
    """What a module's declared attributes get wrong about its code ([] when they are true)."""
    tree = ast.parse(source)
    doc = documentation(tree)
    problems = []
    if ATTRIBUTES_FRAGMENT not in (doc.get("extends_documentation_fragment") or []):
        problems.append(f"extends_documentation_fragment lacks {ATTRIBUTES_FRAGMENT}")
    attributes = merged_attributes(doc)
    for name in ("check_mode", "diff_mode", "platform"):
        if not isinstance(attributes.get(name), dict):
            problems.append(f"attributes declare no {name}")
    if problems:
        return problems
    for name in ("check_mode", "diff_mode"):
        support = attributes[name].get("support")
        if support not in SUPPORT_LEVELS:
            problems.append(f"{name} support {support!r} is none of {SUPPORT_LEVELS}")
        if support == "partial" and not attributes[name].get("details"):
            problems.append(f"{name} support partial says no details (what is and is not supported)")
    if attributes["platform"].get("platforms") not in ("posix", ["posix"]):
        problems.append(f"platform platforms is {attributes['platform'].get('platforms')!r}, not posix")

    declared = check_mode_declared(tree)
    if len(declared) != 1:
        problems.append(f"{len(declared)} AnsibleModule(...) calls: cannot tell its check mode")
    elif (attributes["check_mode"].get("support") == "none") == declared[0]:
        built = "with" if declared[0] else "without"
        problems.append(
            f"check_mode support {attributes['check_mode'].get('support')!r}, yet AnsibleModule is built "
            f"{built} supports_check_mode=True (none exactly when it is not)"
        )
    helpers = [ast.parse(path.read_text()) for path in imported_utils(tree)]
    returning = frozenset(name for util in helpers for name in diff_returning(util))
    diff = sets_diff(tree, returning=returning) or any(sets_diff(util, helper=True) for util in helpers)
    if (attributes["diff_mode"].get("support") == "none") == diff:
        does = "returns" if diff else "never returns"
        problems.append(
            f"diff_mode support {attributes['diff_mode'].get('support')!r}, yet the module (with the "
            f"module_utils it imports) {does} a diff key (none exactly when it never does)"
        )
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_attributes_declare_what_the_code_does(name):
    problems = attribute_problems((ROOT / "library" / f"{name}.py").read_text())
    assert problems == [], f"library/{name}.py: " + "; ".join(problems)


FAKE_MODULE = '''
DOCUMENTATION = r"""
module: fake
extends_documentation_fragment: [epforge.ep.attributes]
attributes:
  check_mode: {support: CHECK}
  diff_mode: {support: DIFF}
  platform: {platforms: posix}
"""
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import write_local_fact


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=SUPPORTS)
    written = write_local_fact("/tmp", "fake", {}, check_mode=module.check_mode)
    module.exit_json(changed=written["changed"]EXTRA)
'''


def fake_module(check: str, diff: str, supports: bool, extra: str = "") -> str:
    return (
        FAKE_MODULE.replace("CHECK", check)
        .replace("DIFF", diff)
        .replace("SUPPORTS", str(supports))
        .replace("EXTRA", extra)
    )


def test_attribute_check_refuses_claims_the_code_does_not_back():
    """The check bites: diff full on a module that drops its helper's diff (as model_weights does), none on
    one that returns a diff, check mode full on one built without supports_check_mode, none on one built
    with it, partial without details, no fragment."""

    def complaints(check, diff, supports=True, extra="", splat=False) -> str:
        source = fake_module(check, diff, supports, extra)
        if splat:  # the writer's whole answer, its diff included (epforge_local_fact)
            source = source.replace('changed=written["changed"]', "**written")
        return " | ".join(attribute_problems(source))

    assert complaints("full", "none") == ""
    assert complaints("full", "full", extra=', diff=written["diff"]') == ""
    assert complaints("full", "full", splat=True) == ""
    assert complaints("none", "none", supports=False) == ""
    assert "diff_mode support 'full'" in complaints("full", "full")
    assert "diff_mode support 'partial'" in complaints("full", "partial")
    assert "diff_mode support 'none'" in complaints("full", "none", extra=", diff={}")
    assert "diff_mode support 'none'" in complaints("full", "none", splat=True)
    assert "check_mode support 'full'" in complaints("full", "none", supports=False)
    assert "check_mode support 'partial'" in complaints("partial", "none", supports=False)
    assert "check_mode support 'none'" in complaints("none", "none")
    assert "partial says no details" in complaints("partial", "none")
    assert "support 'most'" in complaints("most", "none")
    unfragmented = fake_module("full", "none", True).replace("epforge.ep.attributes", "x.y.z")
    assert attribute_problems(unfragmented) == ["extends_documentation_fragment lacks epforge.ep.attributes"]


def test_the_read_only_fragment_declares_the_levels_a_module_may_override():
    """A module that only reads names epforge.ep.attributes.read_only and declares nothing itself: the
    fragment's levels are its own and judged against its code (a diff returned is caught); a level the
    module declares wins over the fragment's, as in Ansible's merge."""
    plain = fake_module("full", "none", True)
    start, end = plain.index("attributes:\n  check_mode"), plain.index('"""\nfrom')
    read_only = (
        plain[:start].replace(
            "[epforge.ep.attributes]", "[epforge.ep.attributes, epforge.ep.attributes.read_only]"
        )
        + plain[end:]
    )
    assert "attributes:\n" not in read_only.split("extends_documentation_fragment")[1].split('"""')[0]
    assert attribute_problems(read_only) == []
    assert "diff_mode support 'none'" in " | ".join(
        attribute_problems(read_only.replace('changed=written["changed"]', "**written"))
    )
    merged = merged_attributes(documentation(ast.parse(read_only)))
    assert merged["check_mode"]["support"] == "full" and merged["check_mode"]["description"]
    overridden = read_only.replace('"""\nfrom', 'attributes:\n  diff_mode: {support: full}\n"""\nfrom', 1)
    assert merged_attributes(documentation(ast.parse(overridden)))["diff_mode"]["support"] == "full"


# Result keys ansible-core gives a meaning of its own: 2.21 turns their values into bools (a module's
# `failed` list of checks became true, the tune journal's `finished` list of candidates false, and the tuner's
# resume broke). A module returns them as bools or not at all.
BOOL_RESULT_KEYS = ("changed", "failed", "skipped", "unreachable", "finished")


def returned(name: str) -> dict:
    import yaml  # noqa: PLC0415

    tree = ast.parse((ROOT / "library" / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RETURN" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value)) or {}
    return {}


def test_no_module_returns_a_key_ansible_reads_as_a_bool_with_another_type():
    wrong = [
        f"{name}: {key} is {spec.get('type')}"
        for name in MODULES
        for key, spec in returned(name).items()
        if key in BOOL_RESULT_KEYS and spec.get("type") != "bool"
    ]
    assert wrong == []


def test_the_bool_result_keys_are_the_controllers():
    """Where ansible-core declares its task result's fields (2.21 on; the Debian 13 leg of
    tests/test_controller_pythons.py runs this there), its bool keys are BOOL_RESULT_KEYS: a key a new release
    adds shows here."""
    from ansible._internal import _task  # noqa: PLC0415
    from ansible.release import __version__  # noqa: PLC0415

    if tuple(int(part) for part in __version__.split(".")[:2]) < (2, 21):
        assert not hasattr(_task, "UnifiedTaskResult")  # 2.19 and 2.20 read the keys by name only
        return
    fields = _task.UnifiedTaskResult.get_result_key_to_resolved_field_mapping(source_is_module=True)
    bools = {key for key, field in fields.items() if field.type is bool and not key.startswith("_")}
    assert bools == set(BOOL_RESULT_KEYS)
