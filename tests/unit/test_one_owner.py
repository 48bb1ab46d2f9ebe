"""One owner per hashing rule, held over the tree as it is (issue 40).

- The digest of JSON data is plugins/module_utils/digests.py's: nowhere else may json.dumps (or the owner's
  canonical_json) feed a hash, directly or within one function.
- The hash of content (bytes, a file, a source tree) is plugins/module_utils/content_hashes.py's: nowhere
  else in the collection is hashlib called, except where a line below says why it must be.

A second recipe is how two digests of the same inputs drifted apart before (eight layouts in three shapes);
this test names the file and function of any new one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

OWNERS = {"plugins/module_utils/digests.py", "plugins/module_utils/content_hashes.py"}
# (file, function) -> why hashlib is called there and not through an owner.
HASHLIB_ALLOWED = {
    ("plugins/module_utils/model_files.py", "hashes"): (
        "sha256 and the Hub's git blob id (sha1 of a 'blob SIZE' header and the bytes) of a multi-GB weight "
        "file in one read"
    ),
    ("plugins/module_utils/smoke_model/model.py", "_bf16_random"): (
        "seeds numpy's PCG64 from sha256(seed:name) in the writer half, which runs in the ML env's python "
        "and cannot import the collection"
    ),
    ("plugins/module_utils/smoke_model/model.py", "_file_sha256"): (
        "the writer half's file hash, in the ML env's python (it cannot import the collection)"
    ),
    ("plugins/module_utils/payloads/env_owners.py", "record_hash"): (
        "a RECORD's own hash format (urlsafe base64 of the sha256 digest), in the env's python, which cannot "
        "import the collection"
    ),
    ("plugins/filter/prompt_file.py", "prompt_file"): (
        "sha1 is the checksum ansible.builtin.copy compares on the host: the staged file's identity in "
        "copy's own terms"
    ),
}
# Calls that serialise JSON for a hash: what the owner does once.
SERIALISERS = {"json.dumps", "canonical_json"}
HASHES = {"bytes_sha256", "digest"}


def collection_files() -> list[Path]:
    return sorted(
        p for d in ("plugins", "library") for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts
    )


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def calls(node: ast.AST) -> list[tuple[str, ast.Call]]:
    return [(dotted(n.func), n) for n in ast.walk(node) if isinstance(n, ast.Call)]


def is_hash_call(name: str) -> bool:
    return name.startswith("hashlib.") or name in HASHES


def functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def findings(path: Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    if rel in OWNERS:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for func in functions(tree):
        names = [name for name, _call in calls(func)]
        for name, call in calls(func):
            if name.startswith("hashlib.") and (rel, func.name) not in HASHLIB_ALLOWED:
                found.append(f"{rel}:{call.lineno} {func.name}() calls {name}: use content_hashes or digests")
        if any(is_hash_call(n) for n in names) and any(n in SERIALISERS for n in names):
            found.append(
                f"{rel}:{func.lineno} {func.name}() serialises JSON and hashes it: use digests.digest"
            )
    # module-level code is not in a function: a hash call there is refused outright
    top = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in top:
        for name, call in calls(node):
            if name.startswith("hashlib."):
                found.append(f"{rel}:{call.lineno} module-level {name}: use content_hashes or digests")
    return found


def test_no_second_recipe_for_a_digest_or_a_content_hash():
    found = [line for path in collection_files() for line in findings(path)]
    assert found == []


def test_every_exception_names_a_function_that_still_hashes():
    """An allowance outlives its reason silently otherwise."""
    for (rel, name), reason in HASHLIB_ALLOWED.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        func = next((f for f in functions(tree) if f.name == name), None)
        assert func is not None, f"{rel} has no function {name}"
        assert any(n.startswith("hashlib.") for n, _call in calls(func)), (
            f"{rel}:{name} no longer calls hashlib"
        )
        assert len(reason) > 40


@pytest.mark.parametrize(
    "source",
    [
        "import hashlib, json\ndef key(d):\n    return hashlib.sha256(json.dumps(d).encode())\n",
        "import json\ndef key(d):\n    text = json.dumps(d)\n    return bytes_sha256(text.encode())\n",
        "import hashlib\ndef h(p):\n    return hashlib.sha256(open(p, 'rb').read()).hexdigest()\n",
        "import hashlib\nKEY = hashlib.sha256(b'x').hexdigest()\n",
    ],
)
def test_the_rule_finds_a_second_recipe(tmp_path, monkeypatch, source):
    """The check itself: each shape a second recipe has taken in this tree is found."""
    path = ROOT / "plugins" / "module_utils" / "_probe_second_recipe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    assert findings(path)
