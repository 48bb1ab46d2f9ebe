"""The form of a known-issues row's release claims (plugins/module_utils/release_claims.py), as the table's
validator (module_utils/known_issues.validate_table) reports it. The claims' truth is
tests/unit/test_release_claims.py's."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import (
    TableError,
    evaluate,
    validate_table,
)
from ansible_collections.epforge.ep.plugins.module_utils.release_claims import (
    expected_state,
    names_release,
    unclaimed,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
GOOD = {
    "package": "sglang",
    "kind": "file",
    "name": "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py",
    "state": "present",
    "from": "0.5.21",
}


def table_with(claims=None, unchecked=None, seen_on=None) -> dict:
    """The real table with its first row's claims replaced."""
    table = copy.deepcopy(TABLE)
    row = table["issues"][0]
    row.pop("claims", None)
    row.pop("claims_unchecked", None)
    if claims is not None:
        row["claims"] = claims
    if unchecked is not None:
        row["claims_unchecked"] = unchecked
    if seen_on is not None:
        row["seen_on"] = seen_on
    return table


def test_the_real_table_is_valid():
    assert validate_table(TABLE) == []


def test_a_well_formed_claim_passes():
    assert validate_table(table_with([GOOD])) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"package": "torch"}, "package 'torch' is not one of sglang, flashinfer"),
        ({"kind": "module"}, "kind 'module' is not one of file, flag, env, symbol, code, text"),
        ({"state": "unused"}, "state 'unused' is not one of present, absent"),
        ({"from": "soon"}, "'from' must be a release such as '0.5.21' (got 'soon')"),
        ({"from": None}, "missing from"),
        ({"through": "0.5.16"}, "'through' 0.5.16 is older than 'from' 0.5.21"),
        ({"since": "0.5.21"}, "unknown key(s) since"),
        (
            {"name": "/sglang/srt/environ.py"},
            "a file claim names a path inside the wheel, starting with 'sglang/'",
        ),
        ({"name": "flashinfer/comm/pcie_ipc_ar.py"}, "starting with 'sglang/'"),
        ({"kind": "flag", "name": "tp-size"}, "a flag claim names the option as typed"),
        ({"kind": "flag", "package": "flashinfer", "name": "--x"}, "flag claims are about SGLang's parser"),
        ({"kind": "env", "name": "sglang_enable_x"}, "an env claim names one variable in capitals"),
        ({"kind": "symbol", "name": "flashinfer.comm.X"}, "a dotted Python name starting with 'sglang.'"),
        ({"kind": "code", "name": "world_size >"}, "a code claim is one Python expression or statement"),
        ({"kind": "code", "name": "a = 1\nb = 2"}, "a code claim is one Python expression or statement"),
        (
            {"kind": "code", "name": "x > 2", "in": "torch.x"},
            "'in' names a dotted symbol starting with 'sglang.'",
        ),
        ({"in": "sglang.srt.environ"}, "file claims take no in"),
        ({"kind": "flag", "name": "--tp-size", "choice": 8}, "'choice' is one value of the flag, as text"),
        ({"kind": "env", "name": "SGLANG_X", "choice": "1"}, "env claims take no choice"),
    ],
)
def test_a_malformed_claim_is_named(change, message):
    claim = {**GOOD, **change}
    claim = {key: value for key, value in claim.items() if value is not None}
    problems = validate_table(table_with([claim]))
    first = TABLE["issues"][0]["id"]
    assert any(message in p and p.startswith(f"issue '{first}'.claims[0]:") for p in problems), problems


def test_claims_must_be_a_list_of_mappings():
    assert any("claims must be a list of claims" in p for p in validate_table(table_with(claims=GOOD)))
    assert any("claims[0]: a claim must be a mapping" in p for p in validate_table(table_with(["file"])))


def test_a_release_naming_row_needs_claims_or_a_reason():
    """unclaimed() names what test_release_claims.py refuses in the real table; the validator checks the
    form."""
    assert unclaimed({"seen_on": {"sglang": "0.5.23 (read)"}})
    assert not unclaimed({"seen_on": {"sglang": "0.5.23"}, "claims_unchecked": "a run on one H200"})
    assert not unclaimed({"seen_on": {"sglang": "0.5.23"}, "claims": [GOOD]})
    assert unclaimed({"seen_on": {"sglang": "0.5.23"}, "claims": [], "claims_unchecked": " "})
    # "not release-bound" rows (the PCIe fabric) need neither
    assert not unclaimed({"seen_on": {"any": "not release-bound (PCIe settings)"}})
    assert any("claims_unchecked must be a text" in p for p in validate_table(table_with(unchecked=" ")))


def test_evaluate_refuses_a_table_with_a_malformed_claim():
    with pytest.raises(TableError, match=r"claims\[0\]: state 'unused'"):
        evaluate(table_with([{**GOOD, "state": "unused"}]), {}, {}, {})


@pytest.mark.parametrize(
    ("seen_on", "names"),
    [
        ({"sglang": "the user's run (release not recorded)"}, True),  # a component key
        ({"any": "DeepEP 1.x (DeepEP#216)"}, True),
        ({"any": "SGLang 0.5.16 crash captured on an H200"}, True),
        ({"any": "not release-bound (PCIe, ACS and IOMMU settings under every NCCL release)"}, False),
    ],
)
def test_names_release(seen_on, names):
    assert names_release({"seen_on": seen_on}) is names


@pytest.mark.parametrize(
    ("claim", "release", "state"),
    [
        ({**GOOD, "from": "0.5.21"}, "0.5.16", "absent"),  # before from: the opposite
        ({**GOOD, "from": "0.5.21"}, "0.5.21", "present"),
        ({**GOOD, "from": "0.5.21"}, "0.5.23", "present"),
        ({**GOOD, "state": "absent", "from": "0.5.24"}, "0.5.23", "present"),
        ({**GOOD, "from": "0.5.10.post1", "through": "0.5.16"}, "0.5.16", "present"),
        ({**GOOD, "from": "0.5.10.post1", "through": "0.5.16"}, "0.5.23", None),  # after through: unsaid
    ],
)
def test_expected_state(claim, release, state):
    assert expected_state(claim, release) == state
