"""Release claims of a known-issues row (data/known_issues.yml, key ``claims``): what the row says about an
upstream release, as data a test checks against that release's own wheel (tests/unit/test_release_claims.py).

A claim names a package (sglang | flashinfer), a kind, a name, a state (present | absent) and the releases:

- ``file``: a file of the wheel, by its path in the wheel (``sglang/srt/environ.py``);
- ``flag``: a server flag of SGLang's parser (``--tp-size``, an alias counts), optionally with one of its
  ``choice`` values; read from data/sglang_flags/VERSION.json, written from that release's own parser;
- ``env``: an environment variable the package reads by name: a field of a class (SGLang's typed table in
  sglang/srt/environ.py) or a string literal equal to the name, in any Python file of the wheel;
- ``symbol``: a Python name, dotted from the package (``flashinfer.comm.PcieIpcAllReduceWorkspace``): the
  longest prefix that is a module, then names defined (def, class, assignment, import) at its top level and,
  below a class, in the class body;
- ``code``: a Python expression or statement, compared after parsing (``world_size > 2 and not full_nvlink``),
  found in ``in`` (a symbol, as above: a module, function, class or assigned name) or anywhere in the wheel;
- ``text``: a string literal (or a literal part of an f-string) containing the text, in ``in`` or anywhere.

``from``: the first release in which the state holds. The claim also says that the pinned releases older
than ``from`` are in the opposite state, so a claim of something new says when it came ("present from 0.5.21":
0.5.16 lacks it). Where the first release is not known, ``from`` is the oldest pinned release that has it.
``through`` (optional): the newest release the state is known to hold in; nothing is said of later ones.

A row of data/known_issues.yml whose ``seen_on`` names a release (a component key, or a version in its text)
carries ``claims`` or, for what no cached wheel can check (torch, NCCL, DeepEP, a run), ``claims_unchecked``:
the reason (``unclaimed``; the test of the claims asserts it). Both may stand together: claims for what the
wheels show, the reason for the rest.

Pure functions only: validation here, used by module_utils/known_issues.py; the wheels are read by the test.
"""

from __future__ import annotations

import ast
import re

from ansible_collections.epforge.ep.plugins.module_utils.releases import DISTRIBUTIONS
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

PACKAGES = ("sglang", "flashinfer")
KINDS = ("file", "flag", "env", "symbol", "code", "text")
STATES = ("present", "absent")
REQUIRED = ("package", "kind", "name", "state", "from")
OPTIONAL = ("through", "in", "choice")
# Keys a kind takes beyond the common ones: `in` narrows code/text to one symbol, `choice` is a flag's value.
KIND_KEYS = {"code": ("in",), "text": ("in",), "flag": ("choice",)}
RELEASE_COMPONENTS = tuple(DISTRIBUTIONS)  # sglang, flashinfer, torch, nccl: what seen_on may name
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# A version in seen_on's text: 0.5.23, 12.8, 1.x (DeepEP 1.x).
_VERSION_TEXT = re.compile(r"\b\d+\.(\d+|x)\b")


def parse_code(text: str) -> ast.AST | None:
    """A code claim's node: the expression, else the single statement; None when it is neither."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        pass
    try:
        tree = ast.parse(text.strip())
    except SyntaxError:
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def _file_ok(name: str, package: str) -> bool:
    return not name.startswith("/") and ".." not in name.split("/") and name.startswith(f"{package}/")


def _symbol_ok(name: str, package: str) -> bool:
    return bool(_DOTTED.match(name)) and name.split(".", maxsplit=1)[0] == package


# What a claim's name must be, per kind: (test of the name given the package, what the problem says).
_NAME_RULES = {
    "file": (_file_ok, "a file claim names a path inside the wheel, starting with '{package}/'"),
    "flag": (
        lambda name, _p: name.startswith("--"),
        "a flag claim names the option as typed, e.g. --tp-size",
    ),
    "env": (
        lambda name, _p: bool(_ENV_NAME.match(name)),
        "an env claim names one variable in capitals, e.g. SGLANG_X",
    ),
    "symbol": (_symbol_ok, "a symbol claim names a dotted Python name starting with '{package}.'"),
    "code": (
        lambda name, _p: parse_code(name) is not None,
        "a code claim is one Python expression or statement",
    ),
}


def _name_problem(claim: dict) -> str | None:
    """What is wrong with a claim's name for its kind (None when nothing is)."""
    kind, name, package = claim.get("kind"), claim.get("name"), str(claim.get("package"))
    if not isinstance(name, str) or not name.strip():
        return "'name' must be a non-empty text"
    rule = _NAME_RULES.get(kind)
    if rule and not rule[0](name, package):
        return f"{rule[1].format(package=package)} ({name!r})"
    return None


def _range_problems(claim: dict) -> list[str]:
    problems = []
    start, end = claim.get("from"), claim.get("through")
    if not version_tuple(start):
        problems.append(f"'from' must be a release such as '0.5.21' (got {start!r})")
    if end is not None:
        if not version_tuple(end):
            problems.append(f"'through' must be a release such as '0.5.23' (got {end!r})")
        elif version_tuple(start) and version_tuple(end) < version_tuple(start):
            problems.append(f"'through' {end} is older than 'from' {start}")
    return problems


def claim_problems(claim, where: str) -> list[str]:
    """Every problem of one claim (an empty list means well formed)."""
    if not isinstance(claim, dict):
        return [f"{where}: a claim must be a mapping with {', '.join(REQUIRED)}"]
    problems = []
    missing = [key for key in REQUIRED if claim.get(key) in (None, "")]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(str(key) for key in claim if key not in (*REQUIRED, *OPTIONAL))
    if unknown:
        problems.append(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(REQUIRED + OPTIONAL)}"
        )
    if claim.get("package") not in PACKAGES:
        problems.append(f"{where}: package {claim.get('package')!r} is not one of {', '.join(PACKAGES)}")
    kind = claim.get("kind")
    if kind not in KINDS:
        return [*problems, f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}"]
    if claim.get("state") not in STATES:
        problems.append(f"{where}: state {claim.get('state')!r} is not one of {', '.join(STATES)}")
    misplaced = [key for key in ("in", "choice") if key in claim and key not in KIND_KEYS.get(kind, ())]
    if misplaced:
        problems.append(f"{where}: {kind} claims take no {', '.join(misplaced)}")
    if kind == "flag" and claim.get("package") != "sglang":
        problems.append(f"{where}: flag claims are about SGLang's parser (package sglang)")
    if "in" in claim and not (
        isinstance(claim["in"], str) and _symbol_ok(claim["in"], str(claim.get("package")))
    ):
        problems.append(f"{where}: 'in' names a dotted symbol starting with '{claim.get('package')}.'")
    if "choice" in claim and not isinstance(claim["choice"], str):
        problems.append(f"{where}: 'choice' is one value of the flag, as text")
    name_problem = _name_problem(claim)
    if name_problem:
        problems.append(f"{where}: {name_problem}")
    return problems + [f"{where}: {p}" for p in _range_problems(claim)]


def names_release(row: dict) -> bool:
    """Whether a row's seen_on names a release: a component's key, or a version in its text."""
    seen = row.get("seen_on")
    if not isinstance(seen, dict):
        return False
    return any(key in RELEASE_COMPONENTS for key in seen) or any(
        _VERSION_TEXT.search(str(text)) for text in seen.values()
    )


def row_claim_problems(row: dict, where: str) -> list[str]:
    """The problems of a row's claims / claims_unchecked (an empty list means well formed)."""
    problems = []
    claims = row.get("claims")
    unchecked = row.get("claims_unchecked")
    if claims is not None and not isinstance(claims, list):
        problems.append(f"{where}: claims must be a list of claims")
        claims = None
    if unchecked is not None and not (isinstance(unchecked, str) and unchecked.strip()):
        problems.append(f"{where}: claims_unchecked must be a text saying why no wheel can check the row")
    for index, claim in enumerate(claims or []):
        problems += claim_problems(claim, f"{where}.claims[{index}]")
    return problems


def unclaimed(row: dict) -> bool:
    """A row whose seen_on names a release but that carries neither claims nor claims_unchecked: what
    tests/unit/test_release_claims.py refuses in data/known_issues.yml (a table of other use, a test's own,
    need not say it)."""
    unchecked = row.get("claims_unchecked")
    return (
        names_release(row)
        and not row.get("claims")
        and not (isinstance(unchecked, str) and unchecked.strip())
    )


def expected_state(claim: dict, release: str) -> str | None:
    """The state a claim says `release` is in: its own state in [from, through], the opposite before from,
    None after through (nothing is said there)."""
    have = version_tuple(release)
    if have < version_tuple(claim["from"]):
        return "absent" if claim["state"] == "present" else "present"
    if claim.get("through") is not None and have > version_tuple(claim["through"]):
        return None
    return claim["state"]


def describe(claim: dict) -> str:
    """One line naming the claim, for a test's failure message."""
    what = claim["name"] + (f" choice {claim['choice']}" if claim.get("choice") else "")
    where = f" in {claim['in']}" if claim.get("in") else ""
    span = f"from {claim['from']}" + (f" through {claim['through']}" if claim.get("through") else "")
    return f"{claim['package']} {claim['kind']} {what!r}{where} {claim['state']} {span}"
