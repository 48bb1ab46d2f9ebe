"""The release claims of data/known_issues.yml (key `claims`, form in plugins/module_utils/release_claims.py),
checked against the pinned releases' own wheels.

The pinned releases are the ones stacks/*.yml name. SGLang's wheels come from .cache/sglang-wheels
(downloaded once by the helper of scripts/sglang_flag_data.py, as tests/unit/test_signatures_upstream.py
does); FlashInfer's (flashinfer-python, a pure-Python wheel) are downloaded once with `pip download
--no-deps` into .cache/flashinfer-wheels. A wheel is opened with zipfile and its Python files parsed with
ast; flags are read from data/sglang_flags/VERSION.json, which scripts/sglang_flag_data.py wrote from that
very wheel's parser (the sha256 it records is checked here against the cached wheel).

Each claim is checked in every pinned release of its package it speaks of: its state from `from` (through
`through`), the opposite state before `from`. The checkers themselves are tested on a small wheel written
here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.release_claims import (
    describe,
    expected_state,
    names_release,
    parse_code,
    unclaimed,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

ROOT = Path(__file__).resolve().parents[2]
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
WHEEL_DIRS = {
    "sglang": ROOT / ".cache" / "sglang-wheels",
    "flashinfer": ROOT / ".cache" / "flashinfer-wheels",
}
FLAGS = ROOT / "data" / "sglang_flags"
DOWNLOAD_TIMEOUT = 900


def pinned_releases() -> dict[str, list[str]]:
    """{package: [release, ...]} as stacks/*.yml pin them, oldest first."""
    found: dict[str, set[str]] = {"sglang": set(), "flashinfer": set()}
    for path in sorted((ROOT / "stacks").glob("*.yml")):
        spec = yaml.safe_load(path.read_text())["epforge_stack_spec"]
        for package, versions in found.items():
            version = (spec.get(package) or {}).get("version")
            if version:
                versions.add(str(version))
    return {package: sorted(versions, key=version_tuple) for package, versions in found.items()}


PINNED = pinned_releases()


# ----------------------------------------------------------------------------------------------- the wheels


@functools.cache
def flag_data_script():
    spec = importlib.util.spec_from_file_location(
        "sglang_flag_data", ROOT / "scripts" / "sglang_flag_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flashinfer_wheel(release: str, folder: Path) -> Path:
    """flashinfer-python's wheel of release in folder, downloaded with pip unless it is there already."""
    name = f"flashinfer_python-{release}-py3-none-any.whl"
    if not (folder / name).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps"]
        argv += ["--only-binary=:all:", f"flashinfer-python=={release}", "-d", str(folder)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT, check=False)
        assert proc.returncode == 0 and (folder / name).is_file(), proc.stderr[-3000:]
    return folder / name


@functools.cache
def wheel_file(package: str, release: str) -> Path:
    if package == "sglang":
        return flag_data_script().download_wheel(sys.executable, release, WHEEL_DIRS["sglang"])
    return flashinfer_wheel(release, WHEEL_DIRS["flashinfer"])


class Wheel:
    """A wheel's file names and its Python sources (read once), each parsed on first use."""

    def __init__(self, path: Path):
        with zipfile.ZipFile(path) as archive:
            self.names = set(archive.namelist())
            self.sources = {name: archive.read(name) for name in self.names if name.endswith(".py")}
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, name: str) -> ast.Module | None:
        if name not in self._trees:
            try:
                self._trees[name] = ast.parse(self.sources[name])
            except (SyntaxError, ValueError):
                self._trees[name] = None  # a template or Python-2 file shipped as data
        return self._trees[name]

    def trees_with(self, words: list[str]):
        """The parsed modules whose source holds every word (a cheap filter before ast)."""
        needles = [word.encode() for word in words]
        for name, source in self.sources.items():
            if all(needle in source for needle in needles):
                tree = self.tree(name)
                if tree is not None:
                    yield tree


@functools.lru_cache(maxsize=2)  # the params run release by release, so two wheels in memory at most
def wheel(package: str, release: str) -> Wheel:
    return Wheel(wheel_file(package, release))


@functools.cache
def flag_table(release: str) -> dict:
    path = FLAGS / f"{release}.json"
    assert path.is_file(), (
        f"no {path.relative_to(ROOT)}: run scripts/sglang_flag_data.py for SGLang {release}"
    )
    return json.loads(path.read_text())


# --------------------------------------------------------------------------------------------- the checkers


def _bindings(body: list[ast.stmt]):
    """(name, node) of each name a module or class body defines, through if/try/with blocks."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt.name, stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        yield node.id, stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                yield (alias.asname or alias.name.split(".")[0]), stmt
        for block in ("body", "orelse", "finalbody", "handlers"):
            if isinstance(stmt, (ast.If, ast.Try, ast.With)) and hasattr(stmt, block):
                inner = getattr(stmt, block)
                if block == "handlers":
                    inner = [s for handler in inner for s in handler.body]
                yield from _bindings(inner)


def resolve(whl: Wheel, dotted: str) -> ast.AST | None:
    """The node a dotted name stands for: the longest prefix that is a module, then names defined in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = "/".join(parts[:cut])
        module = next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in whl.sources), None)
        if module is None:
            continue
        node = whl.tree(module)
        for name in parts[cut:]:
            if not isinstance(node, (ast.Module, ast.ClassDef)):
                return None
            node = next((found for bound, found in _bindings(node.body) if bound == name), None)
        return node
    return None


def scopes(whl: Wheel, claim: dict, words: list[str]):
    """Where a code/text claim looks: its `in` symbol, else every module holding the words."""
    if claim.get("in"):
        node = resolve(whl, claim["in"])
        return [] if node is None else [node]
    return list(whl.trees_with(words))


def has_env(whl: Wheel, name: str) -> bool:
    """A class field named so (SGLang's typed table) or a string literal equal to the name."""
    for tree in whl.trees_with([name]):
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == name:
                return True
            if isinstance(node, ast.ClassDef) and any(bound == name for bound, _ in _bindings(node.body)):
                return True
    return False


def has_code(whl: Wheel, claim: dict) -> bool:
    wanted = parse_code(claim["name"])
    shape = ast.dump(wanted)
    words = [w for w in re.findall(r"[A-Za-z_]\w+", claim["name"])]
    return any(
        isinstance(node, type(wanted)) and ast.dump(node) == shape
        for scope in scopes(whl, claim, words)
        for node in ast.walk(scope)
    )


def has_text(whl: Wheel, claim: dict) -> bool:
    text = claim["name"]
    return any(
        isinstance(node, ast.Constant) and isinstance(node.value, str) and text in node.value
        for scope in scopes(whl, claim, re.findall(r"\w+", text))
        for node in ast.walk(scope)
    )


def has_flag(release: str, claim: dict) -> bool:
    for entry in flag_table(release)["flags"].values():
        if claim["name"] in [entry["flag"], *entry["aliases"]]:
            return "choice" not in claim or claim["choice"] in [str(c) for c in entry["choices"] or []]
    return False


def is_present(claim: dict, release: str) -> bool:
    """Whether the thing a claim names is in that release of its package."""
    if claim["kind"] == "flag":
        return has_flag(release, claim)
    whl = wheel(claim["package"], release)
    kind = claim["kind"]
    if kind == "file":
        return claim["name"] in whl.names
    if kind == "env":
        return has_env(whl, claim["name"])
    if kind == "symbol":
        return resolve(whl, claim["name"]) is not None
    return has_code(whl, claim) if kind == "code" else has_text(whl, claim)


# ------------------------------------------------------------------------------------------------ the table


def all_claims() -> list[tuple[str, int, dict]]:
    return [
        (row["id"], i, claim) for row in TABLE["issues"] for i, claim in enumerate(row.get("claims") or [])
    ]


def checks() -> list:
    """One case per (claim, pinned release it speaks of), grouped by release so wheels load one at a time."""
    cases = []
    for package, releases in PINNED.items():
        for release in releases:
            for row_id, index, claim in all_claims():
                state = expected_state(claim, release) if claim["package"] == package else None
                if state is not None:
                    case_id = f"{row_id}[{index}]-{claim['kind']}-{package}-{release}"
                    cases.append(pytest.param(row_id, claim, release, state, id=case_id))
    return cases


@pytest.mark.parametrize(("row_id", "claim", "release", "state"), checks())
def test_claim_holds_in_pinned_release(row_id, claim, release, state):
    present = is_present(claim, release)
    assert present == (state == "present"), (
        f"row {row_id}: claim '{describe(claim)}' is false for {claim['package']} {release}: "
        f"the wheel {'has' if present else 'lacks'} it"
    )


def test_every_claim_speaks_of_a_pinned_release():
    """A claim whose range holds no pinned release would check nothing."""
    idle = [
        f"{row_id}[{index}]: {describe(claim)}"
        for row_id, index, claim in all_claims()
        if not any(expected_state(claim, r) == claim["state"] for r in PINNED[claim["package"]])
    ]
    assert idle == [], f"claims no pinned release can check: {idle}"


def test_every_absent_claim_names_something_a_pinned_release_has():
    """An absence check of a misspelt name (or scope) would pass for ever: each absent thing is present in
    some pinned release, where the same checker finds it."""
    blind = []
    for row_id, index, claim in all_claims():
        if claim["state"] != "absent":
            continue
        witness = {**claim, "state": "present"}
        if not any(is_present(witness, r) for r in PINNED[claim["package"]]):
            blind.append(f"{row_id}[{index}]: {describe(claim)}")
    assert blind == [], f"absence claims no pinned release can contradict: {blind}"


def test_every_release_naming_row_has_claims_or_a_reason():
    rows = [row for row in TABLE["issues"] if names_release(row)]
    assert len(rows) >= 15  # the rows of issue 37 that name SGLang, FlashInfer, DeepEP or NCCL releases
    assert [row["id"] for row in rows if unclaimed(row)] == []


@pytest.mark.parametrize("release", PINNED["sglang"])
def test_flag_data_was_written_from_the_pinned_wheel(release):
    """The flag claims read data/sglang_flags/VERSION.json: it must be the parser of the wheel checked
    here."""
    recorded = flag_table(release)["source"]
    with open(wheel_file("sglang", release), "rb") as handle:
        assert hashlib.file_digest(handle, "sha256").hexdigest() == recorded["sha256"], recorded


# ---------------------------------------------------------------------------------- the checkers can fail

MODULE = """
import os
from .impl import Workspace as Workspace
ENV_SEEN = os.environ.get("PKG_SEEN")
SIZES = (2, 4, 8)

class Envs:
    PKG_TYPED = 1

def gate(world_size, full_nvlink):
    if world_size > 2 and not full_nvlink:
        raise ValueError(f"not supported on more than {world_size} PCIe-only GPUs")
    return "PKG_IN_TEXT=1 turns it on"
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Wheel:
    path = tmp_path_factory.mktemp("wheel") / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", MODULE)
        archive.writestr("pkg/impl.py", "class Workspace:\n    def all_reduce(self):\n        pass\n")
    return Wheel(path)


def claim(kind: str, name: str, **more) -> dict:
    return {"package": "pkg", "kind": kind, "name": name, "state": "present", "from": "1.0", **more}


@pytest.mark.parametrize(
    ("kind", "name", "more", "found"),
    [
        ("env", "PKG_SEEN", {}, True),  # os.environ.get("...")
        ("env", "PKG_TYPED", {}, True),  # a typed table's field
        ("env", "PKG_IN_TEXT", {}, False),  # named inside a message only
        ("env", "PKG_OTHER", {}, False),
        ("symbol", "pkg.mod.Workspace", {}, True),  # re-exported by an import
        ("symbol", "pkg.impl.Workspace.all_reduce", {}, True),
        ("symbol", "pkg.mod.gate", {}, True),
        ("symbol", "pkg.mod.Envs.PKG_TYPED", {}, True),
        ("symbol", "pkg.mod.Missing", {}, False),
        ("symbol", "pkg.impl.Workspace.tune", {}, False),
        ("code", "world_size > 2 and not full_nvlink", {"in": "pkg.mod.gate"}, True),
        ("code", "world_size  >  2 and (not full_nvlink)", {}, True),  # compared parsed, not as text
        ("code", "world_size > 4 and not full_nvlink", {"in": "pkg.mod.gate"}, False),
        ("code", "(2, 4, 8)", {"in": "pkg.mod.SIZES"}, True),
        ("code", "(2, 4)", {"in": "pkg.mod.SIZES"}, False),
        ("code", "world_size > 2 and not full_nvlink", {"in": "pkg.mod.Envs"}, False),
        ("text", "PCIe-only GPUs", {"in": "pkg.mod.gate"}, True),  # a literal part of an f-string
        ("text", "PCIe-only GPUs", {}, True),
        ("text", "NVLink-only GPUs", {}, False),
    ],
)
def test_checkers_find_what_is_there_and_only_that(toy, kind, name, more, found):
    item = claim(kind, name, **more)
    checker = {
        "env": lambda: has_env(toy, name),
        "symbol": lambda: resolve(toy, name) is not None,
        "code": lambda: has_code(toy, item),
        "text": lambda: has_text(toy, item),
    }[kind]
    assert checker() is found


def test_flag_checker_reads_aliases_and_choices():
    release = PINNED["sglang"][-1]
    assert has_flag(release, claim("flag", "--tp-size"))
    assert has_flag(release, claim("flag", "--moe-a2a-backend", choice="deepep"))
    assert not has_flag(release, claim("flag", "--moe-a2a-backend", choice="no-such-backend"))
    assert not has_flag(release, claim("flag", "--no-such-flag"))
