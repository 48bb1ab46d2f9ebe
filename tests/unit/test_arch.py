"""The one arch parser and rule set (plugins/module_utils/arch.py): spellings (12.0 / 12.0a / 12.0f / sm_120
accepted, a bare "120" refused), the SASS name cuobjdump prints for a target, build-tool arch lists, and
which SASS/PTX covers which target. The same rules on real nvcc/cuobjdump output:
tests/unit/test_cuda_binary_archs.py (captured listings, including sm120f.o.txt and sm120a.o.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.arch import (
    ArchError,
    arch_list,
    base_arch,
    check_required,
    dotted,
    parse_arch,
    ptx_satisfies,
    require_arch,
    sass_name,
    sass_satisfies,
    sm_name,
    torch_arch_list,
)
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_cuobjdump_listing

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12.0", (12, 0, "")),
        ("12.0a", (12, 0, "a")),
        ("12.0f", (12, 0, "f")),
        ("sm_120", (12, 0, "")),
        ("sm_120a", (12, 0, "a")),
        ("compute_90", (9, 0, "")),
        ("sm_90a", (9, 0, "a")),
        ("10.3", (10, 3, "")),
        ("SM_100", (10, 0, "")),
        ("lto_120", (12, 0, "")),
    ],
)
def test_parse_arch_spellings(text, expected):
    assert parse_arch(text) == expected


@pytest.mark.parametrize("text", ["", "twelve", "12", "120", "sm_", "12.0x", "sm_120b", "1"])
def test_parse_arch_rejects(text):
    assert parse_arch(text) is None


def test_arch_names_round_trip():
    assert sm_name((12, 0, "a")) == "sm_120a"
    assert dotted((12, 0, "")) == "12.0"


def test_sass_rules():
    r120, r120a, r120f = parse_arch("12.0"), parse_arch("12.0a"), parse_arch("12.0f")
    # sm_120a runs on a 12.0 GPU: it covers a plain 12.0 requirement
    assert sass_satisfies(parse_arch("sm_120a"), r120)
    assert sass_satisfies(parse_arch("sm_120"), r120)
    assert not sass_satisfies(parse_arch("sm_90"), r120)
    assert not sass_satisfies(parse_arch("sm_121"), r120)
    # 12.0a wants arch-specific code
    assert not sass_satisfies(parse_arch("sm_120"), r120a)
    assert sass_satisfies(parse_arch("sm_120a"), r120a)
    # family: generic/family cubins (both printed sm_120), not the arch-specific one
    assert sass_satisfies(parse_arch("sm_120"), r120f)
    assert not sass_satisfies(parse_arch("sm_120a"), r120f)


def test_ptx_rules():
    assert ptx_satisfies(parse_arch("sm_90"), parse_arch("12.0"))  # JIT forward
    assert not ptx_satisfies(parse_arch("sm_120"), parse_arch("9.0"))  # never backward
    assert not ptx_satisfies(parse_arch("sm_90a"), parse_arch("12.0"))  # arch-specific PTX stays put
    assert ptx_satisfies(parse_arch("sm_120a"), parse_arch("12.0"))
    assert not ptx_satisfies(parse_arch("sm_90"), parse_arch("12.0a"))


def test_check_required_reports_and_ptx_switch():
    sass, ptx = ["sm_90"], ["sm_90"]
    assert check_required(sass, ptx, ["12.0"]) == {"missing": ["12.0"], "covered": {}}
    assert check_required(sass, ptx, ["12.0"], accept_ptx=True) == {
        "missing": [],
        "covered": {"12.0": "ptx sm_90"},
    }
    assert check_required(["sm_90", "sm_120a"], [], ["sm_120", "9.0"])["covered"] == {
        "sm_120": "sass sm_120a",
        "9.0": "sass sm_90",
    }
    with pytest.raises(ValueError, match="not a GPU arch"):
        check_required(sass, ptx, ["twelve"])


@pytest.mark.parametrize(
    ("text", "base"),
    [
        ("12.0", "12.0"),
        ("12.0a", "12.0"),
        ("12.0f", "12.0"),
        ("sm_120", "12.0"),
        ("120", None),
        ("9.0", "9.0"),
        ("sm_90a", "9.0"),
        ("10.3", "10.3"),
        ("gpu", None),
    ],
)
def test_base_arch(text, base):
    assert base_arch(text) == base


def test_bare_number_is_refused_with_the_spellings():
    with pytest.raises(ArchError) as err:
        require_arch("120")
    assert "'120' is not a GPU arch such as 9.0, 12.0, 12.0a, 12.0f or sm_120" in str(err.value)


@pytest.mark.parametrize(
    ("target", "sass"),
    [
        ("12.0", "sm_120"),
        ("12.0a", "sm_120a"),
        ("12.0f", "sm_120"),
        ("sm_120", "sm_120"),
        ("9.0", "sm_90"),
        ("10.0+PTX", "sm_100"),
    ],
)
def test_sass_name_is_what_cuobjdump_prints(target, sass):
    assert sass_name(target) == sass


def test_sass_name_agrees_with_captured_cuobjdump_listings():
    """nvcc -gencode arch=compute_120a,code=sm_120a lists sm_120a; compute_120f,code=sm_120f lists sm_120."""
    for fixture, target in (("sm120a.o.txt", "12.0a"), ("sm120f.o.txt", "12.0f"), ("sm90-only.o.txt", "9.0")):
        listing = parse_cuobjdump_listing((FIX / "cuobjdump" / fixture).read_text())
        assert listing["sass"] == [sass_name(target)]
        assert check_required(listing["sass"], [], [target])["missing"] == []


def test_arch_list_sorts_numerically_dedups_and_keeps_ptx():
    assert arch_list("12.0;9.0 10.0,9.0") == ["9.0", "10.0", "12.0"]
    assert arch_list(["12.0a", "12.0", " 12.0f "]) == ["12.0", "12.0a", "12.0f"]
    assert arch_list(["10.0+PTX", "9.0"]) == ["9.0", "10.0+PTX"]
    assert torch_arch_list(["12.0", "9.0"]) == "9.0;12.0"


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("sm_120", "'sm_120' is not an arch list entry such as 9.0, 12.0, 12.0a or 12.0f (write it 12.0)"),
        ("120", "'120' is not an arch list entry"),
        ("12", "'12' is not"),
        ("12.0x", "'12.0x' is not"),
        ("", "the arch list is empty"),
    ],
)
def test_arch_list_refuses_what_build_tools_do_not_read(bad, needle):
    with pytest.raises(ArchError) as err:
        arch_list([bad] if bad else [])
    assert needle in str(err.value)
