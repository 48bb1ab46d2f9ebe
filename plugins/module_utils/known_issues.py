"""Known dead ends as data: evaluate data/known_issues.yml against a host and the requested server settings.

The table (a YAML mapping) has two keys:

- ``server_defaults``: SGLang's defaults for the settings the rules read (a rule sees these where the
  inventory's ``epforge_server`` leaves a key out).
- ``issues``: one row per known dead end with ``id``, ``title``, ``severity`` (error | warning | adjust),
  ``condition``, ``consequence``, ``remedy``, ``source`` and, for adjust rows, ``adjust`` (the change);
  optionally ``shows``, a fact path whose value the finding names (``found``: the bridges, the GPUs), and
  ``claims`` / ``claims_unchecked``: what the row says about upstream releases, as data a test checks against
  the wheels (module_utils/release_claims.py says the form; a row whose seen_on names a release needs one).

A condition is a small declarative tree, never a template or code:

- ``{all: [COND, ...]}``, ``{any: [COND, ...]}``, ``{not: COND}``
- a leaf ``{fact: PATH, OP: VALUE}`` with exactly one operator, where PATH is a dotted path into the
  evaluation context (see ``build_context``): ``gpu.*``, ``target.*``, ``stack.*``, ``server.*``
  (``server.env.NAME`` for environment variables), ``fabric.*`` (the PCIe fabric between the GPUs).

Operators: equals, not_equals, in, not_in, truthy (true|false), present (true|false), gt, ge, lt, le
(numbers), version_lt, version_ge, any_in, all_in, any_not_in (list facts), matches (regular expression
search), eq_fact, ne_fact, gt_fact, lt_fact (compare with the value at another PATH). A leaf whose fact is
missing (or of the wrong kind for the operator) does not match, except ``present: false``. Scalars compare
as lower-case text, so 8 equals '8' and DeepEP equals deepep.

An adjust row's ``adjust`` maps server keys to new values; a value ``{from: PATH}`` copies another fact,
and a mapping value (``env``) is merged into the existing mapping. Adjustments apply until nothing changes,
then errors and warnings are taken from the adjusted settings, so a dead end an adjustment removes is
reported as that adjustment, not as an error.

Pure functions only: used by library/epforge_known_issues.py and unit-tested directly.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.epforge.ep.plugins.module_utils.arch import base_arch
from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import fabric_context
from ansible_collections.epforge.ep.plugins.module_utils.release_claims import row_claim_problems
from ansible_collections.epforge.ep.plugins.module_utils.releases import planned_releases
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import without_secrets
from ansible_collections.epforge.ep.plugins.module_utils.version import (
    version_tuple,  # also imported from here by modules
)

SEVERITIES = ("error", "warning", "adjust")
ROW_KEYS = ("id", "title", "severity", "seen_on", "condition", "consequence", "remedy", "source")
RELEASE_COMPONENTS = ("sglang", "flashinfer", "torch", "nccl")
FACT_ROOTS = ("gpu", "target", "stack", "server", "fabric", "installed")
SCALAR_OPS = (
    "equals",
    "not_equals",
    "in",
    "not_in",
    "truthy",
    "present",
    "gt",
    "ge",
    "lt",
    "le",
    "version_lt",
    "version_ge",
    "matches",
)
LIST_OPS = ("any_in", "all_in", "any_not_in")
FACT_OPS = ("eq_fact", "ne_fact", "gt_fact", "lt_fact")
OPERATORS = SCALAR_OPS + LIST_OPS + FACT_OPS
_MISSING = object()
_TRUE_TEXT = ("1", "true", "yes", "on")
_FALSE_TEXT = ("0", "false", "no", "off", "")


class TableError(ValueError):
    """The known-issues table is malformed."""


def to_bool(value) -> bool | None:
    """YAML/extra-vars booleans: True/False, 'true'/'yes'/'1'/'on' ...; None when not a boolean."""
    if isinstance(value, bool | list | tuple | dict):
        return bool(value)  # a list fact (fabric.acs_redirect) is true when it names something
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_TEXT:
            return True
        if text in _FALSE_TEXT:
            return False
    if value is None:
        return False
    return None


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def lookup(context: dict, path: str):
    """The value at a dotted path, or _MISSING."""
    node = context
    for part in str(path).split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _MISSING
    return node


def _norm(value):
    """Compare scalars as text so '8' (extra vars) equals 8 (YAML), and 'DeepEP' equals 'deepep'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().lower()


# ---------------------------------------------------------------- validation


def _is_fact_path(value) -> bool:
    return isinstance(value, str) and value.split(".")[0] in FACT_ROOTS


def _validate_group(cond: dict, where: str) -> list[str]:
    """{all: [...]} or {any: [...]}: the key stands alone over a non-empty list of conditions."""
    if len(cond) != 1:
        return [f"{where}: 'all'/'any' must stand alone, found keys {sorted(cond)}"]
    key = next(iter(cond))
    items = cond[key]
    if not isinstance(items, list) or not items:
        return [f"{where}.{key}: must be a non-empty list of conditions"]
    problems = []
    for index, item in enumerate(items):
        problems += validate_condition(item, f"{where}.{key}[{index}]")
    return problems


def _validate_not(cond: dict, where: str) -> list[str]:
    if len(cond) != 1:
        return [f"{where}: 'not' must stand alone, found keys {sorted(cond)}"]
    return validate_condition(cond["not"], f"{where}.not")


def _check_regex(value) -> str | None:
    try:
        re.compile(str(value))
    except re.error as exc:
        return f"'matches' pattern {value!r} is no regular expression ({exc})"
    return None


# What each operator's value must be: (operators, test of the value, what the problem says).
_OPERAND_RULES = (
    (("in", "not_in", *LIST_OPS), lambda v: isinstance(v, list), "'{op}' takes a list"),
    (("truthy", "present"), lambda v: isinstance(v, bool), "'{op}' takes true or false"),
    (("gt", "ge", "lt", "le"), lambda v: _number(v) is not None, "'{op}' takes a number"),
    (("version_lt", "version_ge"), lambda v: bool(version_tuple(v)), "'{op}' takes a version such as '12.9'"),
    (FACT_OPS, _is_fact_path, "'{op}' takes a fact path starting with one of " + ", ".join(FACT_ROOTS)),
)


def _validate_operand(op: str, value, where: str) -> list[str]:
    """Whether a leaf operator's value has the kind the operator compares with."""
    problems = [
        f"{where}: {message.format(op=op)}"
        for ops, is_valid, message in _OPERAND_RULES
        if op in ops and not is_valid(value)
    ]
    if op == "matches":
        regex_problem = _check_regex(value)
        if regex_problem:
            problems.append(f"{where}: {regex_problem}")
    return problems


def _validate_leaf(cond: dict, where: str) -> list[str]:
    """{fact: PATH, OP: VALUE}: a known fact root and exactly one known operator with a fitting value."""
    if "fact" not in cond:
        return [f"{where}: a leaf needs 'fact' (one of {', '.join(FACT_ROOTS)}.*) and one operator"]
    problems = []
    fact = cond["fact"]
    if not _is_fact_path(fact):
        problems.append(f"{where}: fact '{fact}' must start with one of {', '.join(FACT_ROOTS)}")
    ops = [key for key in cond if key != "fact"]
    unknown = [key for key in ops if key not in OPERATORS]
    if unknown:
        problems.append(f"{where}: unknown operator(s) {unknown}; known: {', '.join(OPERATORS)}")
    elif len(ops) != 1:
        problems.append(f"{where}: a leaf takes exactly one operator, found {sorted(ops)}")
    else:
        problems += _validate_operand(ops[0], cond[ops[0]], where)
    return problems


def validate_condition(cond, where: str) -> list[str]:
    """Every structural problem of a condition tree (an empty list means well formed)."""
    if not isinstance(cond, dict) or not cond:
        return [f"{where}: a condition must be a non-empty mapping"]
    if set(cond) & {"all", "any"}:
        return _validate_group(cond, where)
    if "not" in cond:
        return _validate_not(cond, where)
    return _validate_leaf(cond, where)


def _validate_adjust(row: dict, where: str) -> list[str]:
    """Only adjust rows carry 'adjust': a non-empty mapping whose {from: PATH} values name facts."""
    adjust = row.get("adjust")
    if row.get("severity") != "adjust":
        return [] if adjust is None else [f"{where}: only severity adjust rows may carry 'adjust'"]
    if not isinstance(adjust, dict) or not adjust:
        return [f"{where}: an adjust row needs 'adjust', a mapping of server settings to set"]
    return [
        f"{where}.adjust.{key}: 'from' takes a fact path"
        for key, value in adjust.items()
        if isinstance(value, dict) and "from" in value and not _is_fact_path(value["from"])
    ]


def _validate_releases(row: dict, where: str) -> list[str]:
    """seen_on: {component: text} (the releases the row was seen on); holds_through (optional):
    {component: version}, the newest release of each the row is known to hold for."""
    problems = []
    for key in ("seen_on", "holds_through"):
        value = row.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or not value:
            problems.append(f"{where}: {key} must be a mapping of {', '.join(RELEASE_COMPONENTS)} or 'any'")
            continue
        unknown = [c for c in value if c not in (*RELEASE_COMPONENTS, "any")]
        if unknown:
            problems.append(f"{where}.{key}: unknown component {', '.join(map(str, unknown))}")
    for component, version in (row.get("holds_through") or {}).items():
        if not version_tuple(version):
            problems.append(f"{where}.holds_through.{component}: '{version}' is not a version")
    return problems


def newer_than_known(row: dict, context: dict) -> list[str]:
    """The components whose installed release is newer than the newest the row is known to hold for (its
    holds_through): the row may no longer hold there. Unknown versions are not newer."""
    newer = []
    for component, known in (row.get("holds_through") or {}).items():
        have = (context.get("installed") or {}).get(component) or ""
        if have and version_tuple(have) > version_tuple(known):
            newer.append(f"{component} {have} (known through {known})")
    return newer


def _validate_row(row: dict, where: str, duplicate: bool) -> list[str]:
    """The problems of one row; duplicate: an earlier row has the same id."""
    problems = []
    missing = [key for key in ROW_KEYS if not row.get(key)]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
    if duplicate:
        problems.append(f"{where}: duplicate id")
    if row.get("severity") not in SEVERITIES:
        problems.append(f"{where}: severity '{row.get('severity')}' is not one of {', '.join(SEVERITIES)}")
    if row.get("condition"):
        problems += validate_condition(row["condition"], f"{where}.condition")
    problems += _validate_releases(row, where)
    problems += row_claim_problems(row, where)
    if "shows" in row and not _is_fact_path(row["shows"]):
        problems.append(f"{where}: shows must be a fact path starting with one of {', '.join(FACT_ROOTS)}")
    return problems + _validate_adjust(row, where)


def validate_table(table) -> list[str]:
    """Every problem of a known-issues table (an empty list means usable)."""
    if not isinstance(table, dict):
        return ["the known-issues table must be a mapping with keys server_defaults and issues"]
    problems = []
    if not isinstance(table.get("server_defaults", {}), dict):
        problems.append("server_defaults must be a mapping")
    issues = table.get("issues")
    if not isinstance(issues, list) or not issues:
        return [*problems, "issues must be a non-empty list of rows"]
    seen = set()
    for index, row in enumerate(issues):
        if not isinstance(row, dict):
            problems.append(f"issues[{index}]: a row must be a mapping")
            continue
        where = f"issue '{row.get('id', index)}'"
        problems += _validate_row(row, where, duplicate=row.get("id") in seen)
        seen.add(row.get("id"))
    return problems


# ---------------------------------------------------------------- context


def _gpu_archs(gpu_facts: dict) -> list[str]:
    archs = set()
    for gpu in gpu_facts.get("gpus") or []:
        if isinstance(gpu, dict):
            arch = base_arch(gpu.get("arch") or gpu.get("compute_capability") or "")
            if arch:
                archs.add(arch)
    for arch in gpu_facts.get("archs") or []:
        base = base_arch(arch)
        if base:
            archs.add(base)
    return sorted(archs, key=version_tuple)


def stack_summary(stack: dict) -> dict:
    """Accept a full stack spec (stacks/NAME.yml) or its summary; return the fields rules read."""
    stack = stack or {}
    cuda = stack.get("cuda")
    cuda_version = cuda.get("version") if isinstance(cuda, dict) else cuda
    driver = stack.get("driver")
    python = stack.get("python")
    arch_list = [str(a) for a in stack.get("arch_list") or []]
    return {
        "name": stack.get("name"),
        "cuda": None if cuda_version is None else str(cuda_version),
        "driver_min": str(driver.get("min_version"))
        if isinstance(driver, dict) and driver.get("min_version")
        else stack.get("driver_min"),
        "python_min": str(python.get("min_version"))
        if isinstance(python, dict) and python.get("min_version")
        else stack.get("python_min"),
        "arch_list": arch_list,
        "archs": sorted({b for b in (base_arch(a) for a in arch_list) if b}, key=version_tuple),
    }


def build_context(
    gpu_facts: dict,
    stack: dict,
    server: dict,
    server_defaults: dict | None = None,
    installed: dict | None = None,
) -> dict:
    """The facts conditions can read.

    gpu.available, gpu.count, gpu.archs (base archs of the GPUs found, e.g. ['12.0']), gpu.interconnect,
    gpu.driver_version, gpu.cuda_driver_version, gpu.peer_access (full | partial | none | single | unknown
    | no_gpu, from nvidia-smi topo -p2p r); target.archs (the GPUs' archs, or the stack's arch_list on
    a host without GPUs, so a build host still meets arch dead ends) and target.source (gpus | stack);
    stack.name, stack.cuda, stack.archs; server.* (server_defaults overlaid by the requested settings);
    fabric.* (pci_fabric.fabric_context); installed.sglang|flashinfer|torch|nccl|source (the env's
    releases when given, else the stack's planned ones, source 'stack').
    """
    gpu_facts = gpu_facts or {}
    archs = _gpu_archs(gpu_facts)
    summary = stack_summary(stack)
    available = bool(gpu_facts.get("available")) and bool(archs)
    merged = copy.deepcopy(server_defaults or {})
    for key, value in (server or {}).items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **copy.deepcopy(value)}
        else:
            merged[key] = copy.deepcopy(value)
    merged.setdefault("env", {})
    return {
        "gpu": {
            "available": available,
            "count": int(gpu_facts.get("gpu_count") or len(gpu_facts.get("gpus") or [])),
            "archs": archs,
            "interconnect": str(gpu_facts.get("interconnect") or ("unknown" if available else "none")),
            "driver_version": gpu_facts.get("driver_version"),
            "cuda_driver_version": gpu_facts.get("cuda_driver_version"),
            # full | partial | none | single | unknown | no_gpu (nvidia-smi topo -p2p r, nvidia_gpu_facts)
            "peer_access": str(
                (gpu_facts.get("peer_access") or {}).get("status") or ("unknown" if available else "no_gpu")
            ),
        },
        "target": {
            "archs": archs if available else summary["archs"],
            "source": "gpus" if available else "stack",
        },
        "stack": summary,
        "server": merged,
        # the PCIe fabric between the GPUs (pci_fabric.fabric_context: ACS, IOMMU, sockets, links, BAR1)
        "fabric": fabric_context(gpu_facts.get("fabric"), merged),
        # the releases: what the env holds once installed, else what the stack will install (releases.py)
        "installed": installed or planned_releases(stack),
    }


# ---------------------------------------------------------------- matching


def _truthy(value, expected) -> bool:
    flag = to_bool(value)
    return flag is not None and flag == expected


def _list_op(op: str):
    """any_in / all_in / any_not_in: compare a list fact with a list of wanted values."""

    def compare(value, expected) -> bool:
        if not isinstance(value, list):
            return False
        have = {_norm(v) for v in value}
        want = {_norm(v) for v in expected}
        if op == "any_in":
            return bool(have & want)
        if op == "all_in":
            return bool(have) and have <= want
        return bool(have - want)

    return compare


def _scalar_op(compare):
    """A comparison of one scalar fact: a list or mapping fact never matches."""
    return lambda value, expected: not isinstance(value, list | dict) and compare(value, expected)


def _numeric(compare):
    """A comparison of numbers: a fact that is no number never matches."""

    def check(value, expected) -> bool:
        number = _number(value)
        return number is not None and compare(number, _number(expected))

    return check


def _version(compare):
    """A comparison of versions: a fact that is no version never matches."""

    def check(value, expected) -> bool:
        have = version_tuple(value)
        return bool(have) and compare(have, version_tuple(expected))

    return check


def _fact_op(op: str, value, other) -> bool:
    """eq_fact / ne_fact / gt_fact / lt_fact: compare with the value at another path."""
    if op in ("gt_fact", "lt_fact"):
        left, right = _number(value), _number(other)
        if left is None or right is None:
            return False
        return left > right if op == "gt_fact" else left < right
    same = _norm(value) == _norm(other)
    return same if op == "eq_fact" else not same


# Operators that compare the fact's value with the row's value: op -> compare(value, expected).
_VALUE_OPS = {
    "truthy": _truthy,
    **{op: _list_op(op) for op in LIST_OPS},
    "equals": _scalar_op(lambda v, e: _norm(v) == _norm(e)),
    "not_equals": _scalar_op(lambda v, e: _norm(v) != _norm(e)),
    "in": _scalar_op(lambda v, e: _norm(v) in {_norm(x) for x in e}),
    "not_in": _scalar_op(lambda v, e: _norm(v) not in {_norm(x) for x in e}),
    "gt": _scalar_op(_numeric(lambda n, limit: n > limit)),
    "ge": _scalar_op(_numeric(lambda n, limit: n >= limit)),
    "lt": _scalar_op(_numeric(lambda n, limit: n < limit)),
    "le": _scalar_op(_numeric(lambda n, limit: n <= limit)),
    "version_lt": _scalar_op(_version(lambda have, want: have < want)),
    "version_ge": _scalar_op(_version(lambda have, want: have >= want)),
    "matches": _scalar_op(lambda v, e: re.search(str(e), str(v)) is not None),
}


def _leaf(cond: dict, context: dict) -> bool:
    op = next(key for key in cond if key != "fact")
    expected = cond[op]
    value = lookup(context, cond["fact"])
    if op == "present":
        return (value is not _MISSING and value is not None) == expected
    if value is _MISSING or value is None:
        return False
    if op in FACT_OPS:
        other = lookup(context, expected)
        return other is not _MISSING and other is not None and _fact_op(op, value, other)
    if op not in _VALUE_OPS:
        raise TableError(f"unknown operator {op}")
    return _VALUE_OPS[op](value, expected)


def matches(cond: dict, context: dict) -> bool:
    """Whether a (validated) condition holds in the context."""
    if "all" in cond:
        return all(matches(item, context) for item in cond["all"])
    if "any" in cond:
        return any(matches(item, context) for item in cond["any"])
    if "not" in cond:
        return not matches(cond["not"], context)
    return _leaf(cond, context)


# ---------------------------------------------------------------- evaluation


def _finding(row: dict, context: dict | None = None) -> dict:
    finding = {
        "id": row["id"],
        "title": row["title"],
        "severity": row["severity"],
        "consequence": " ".join(str(row["consequence"]).split()),
        "remedy": " ".join(str(row["remedy"]).split()),
        "source": row["source"],
    }
    if row.get("shows") and context is not None:
        # what on this host made the row match (the bridges, the GPUs), named in the finding
        found = lookup(context, row["shows"])
        finding["found"] = "" if found is _MISSING else found
    return finding


def _apply(row: dict, settings: dict, context: dict) -> dict:
    """Apply an adjust row to settings in place; return {key: {from, to}} for what actually changed."""
    changes = {}
    for key, wanted in row["adjust"].items():
        value = wanted
        if isinstance(wanted, dict) and "from" in wanted:
            value = lookup(context, wanted["from"])
            if value is _MISSING:
                continue
        before = settings.get(key, _MISSING)
        # What SGLang would use now: the requested value, else its default.
        effective = lookup(context, f"server.{key}")
        if isinstance(value, dict):
            base = before if isinstance(before, dict) else {}
            after = {**base, **value}
            diff = {k: v for k, v in value.items() if base.get(k, _MISSING) != v}
            if diff:
                settings[key] = after
                changes[key] = {"from": {k: base.get(k) for k in diff}, "to": diff}
        elif before is _MISSING or _norm(before) != _norm(value):
            settings[key] = copy.deepcopy(value)
            changes[key] = {
                "from": None if effective is _MISSING else effective,
                "to": value,
                "requested": before is not _MISSING,
            }
    return changes


def _next_adjustment(rows: list, settings: dict, context: dict, applied_ids: set) -> dict | None:
    """Apply the first matching adjust row not applied yet that changes something; return its finding."""
    for row in rows:
        if row["severity"] != "adjust" or row["id"] in applied_ids:
            continue
        if not matches(row["condition"], context):
            continue
        applied_ids.add(row["id"])
        changes = _apply(row, settings, context)
        if changes:
            return {**_finding(row), "changes": changes}
    return None


def _adjust(
    rows: list, gpu_facts: dict, stack: dict, settings: dict, defaults: dict, *, installed: dict | None
) -> list[dict]:
    """Apply adjust rows to settings in place until nothing changes; return the adjustments made. A row that
    releases newer than it is known for make doubtful does not adjust (evaluate reports it as a warning)."""
    adjustments = []
    applied_ids = set()
    # Each row adjusts at most once, so this ends; the context is re-read after every change.
    for _unused in range(len(rows) + 1):
        context = build_context(gpu_facts, stack, settings, defaults, installed)
        applied_ids |= {r["id"] for r in rows if newer_than_known(r, context)}
        adjustment = _next_adjustment(rows, settings, context, applied_ids)
        if adjustment is None:
            break
        adjustments.append(adjustment)
    return adjustments


def _settings_changes(adjustments: list[dict]) -> dict:
    """The net change of every adjusted key (mapping values merged)."""
    settings_changes = {}
    for adjustment in adjustments:
        for key, change in adjustment["changes"].items():
            if isinstance(change["to"], dict):
                settings_changes[key] = {**settings_changes.get(key, {}), **change["to"]}
            else:
                settings_changes[key] = change["to"]
    return settings_changes


def evaluate(table: dict, gpu_facts: dict, stack: dict, server: dict, installed: dict | None = None) -> dict:
    """Evaluate every row; return findings (errors, warnings, adjustments), matched ids and adjusted settings.

    installed: the env's releases (releases.installed_releases); None judges the stack's planned ones. A row
    whose condition matches on a host with a release newer than its holds_through is reported as a warning
    that it may no longer hold (never as an error or an adjustment): a rule that cannot say up to which
    release it holds must not refuse or change what a newer release may have fixed.

    Raises TableError when the table is malformed.
    """
    problems = validate_table(table)
    if problems:
        raise TableError("; ".join(problems))
    rows = table["issues"]
    defaults = table.get("server_defaults") or {}
    settings = copy.deepcopy(server or {})
    adjustments = _adjust(rows, gpu_facts, stack, settings, defaults, installed=installed)

    context = build_context(gpu_facts, stack, settings, defaults, installed)
    errors, warnings = [], []
    for row in rows:
        newer = newer_than_known(row, context)
        if (row["severity"] == "adjust" and not newer) or not matches(row["condition"], context):
            continue
        if newer:
            warnings.append(_doubtful(row, context, newer))
            continue
        (errors if row["severity"] == "error" else warnings).append(_finding(row, context))
    return {
        # Nested: Ansible takes a module's top-level "warnings" key as its own.
        "findings": {"errors": errors, "warnings": warnings, "adjustments": adjustments},
        "matched": [f["id"] for f in errors + warnings + adjustments],
        "adjusted_settings": without_secrets(settings),
        "settings_changes": without_secrets(_settings_changes(adjustments)),
        "context": {
            "gpu": context["gpu"],
            "target": context["target"],
            "stack": context["stack"],
            "installed": context["installed"],
        },
    }


def _doubtful(row: dict, context: dict, newer: list[str]) -> dict:
    """A matching row on releases newer than it is known for: a warning saying so, never its own verdict."""
    finding = _finding(row, context)
    finding["severity"] = "warning"
    finding["doubtful"] = {"was": row["severity"], "newer": newer}
    finding["consequence"] = (
        f"(known up to older releases; this host has {', '.join(newer)}, where it was not checked, so it is "
        f"reported, not {'applied' if row['severity'] == 'adjust' else 'enforced'}) {finding['consequence']}"
    )
    return finding


def format_finding(finding: dict) -> str:
    """One line: [id] title: consequence Found: what matched. Remedy: remedy (source)."""
    found = finding.get("found")
    shown = "; ".join(map(str, found)) if isinstance(found, list) else str(found or "")
    return (
        f"[{finding['id']}] {finding['title']}: {finding['consequence']} "
        + (f"Found: {shown}. " if shown else "")
        + f"Remedy: {finding['remedy']} (source: {finding['source']})"
    )


def format_adjustment(adjustment: dict) -> str:
    """One line naming what changed and why."""
    parts = []
    for key, change in adjustment["changes"].items():
        if isinstance(change["to"], dict):
            parts += [f"{key}.{k}={v}" for k, v in change["to"].items()]
        else:
            parts.append(f"{key}: {change['from']} -> {change['to']}")
    return f"[{adjustment['id']}] set {', '.join(parts)}: {adjustment['consequence']}"
