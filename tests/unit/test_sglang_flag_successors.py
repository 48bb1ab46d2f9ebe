"""data/sglang_flag_successors.json: what became of SGLang's retired flags (written by
scripts/sglang_flag_successors.py from the pinned releases' wheels and the flag tables data/sglang_flags/).

The committed file is regenerated from the wheels (downloaded once into .cache/sglang-wheels) and must come
out byte for byte; the fates of the flags issue 37 names are asserted, and every successor the data names is
checked against the naming release's own flag table.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml

from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "sglang_flag_successors.json"
FLAGS = ROOT / "data" / "sglang_flags"
WHEELS = ROOT / ".cache" / "sglang-wheels"
PINNED = sorted(
    {
        yaml.safe_load(path.read_text())["epforge_stack_spec"]["sglang"]["version"]
        for path in (ROOT / "stacks").glob("*.yml")
    },
    key=version_tuple,
)

sys.path.insert(0, str(ROOT / "scripts"))
_spec = importlib.util.spec_from_file_location(
    "sglang_flag_successors", ROOT / "scripts" / "sglang_flag_successors.py"
)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def data() -> dict:
    return json.loads(DATA.read_text())


def test_committed_data_is_what_the_wheels_give(capsys):
    wheels = [gen.flag_data.download_wheel(sys.executable, version, WHEELS) for version in PINNED]
    argv = [arg for wheel in wheels for arg in ("--wheel", str(wheel))]
    argv += ["--tables", str(FLAGS), "--out", str(DATA), "--check"]
    assert gen.main(argv) == 0, capsys.readouterr().out[-4000:]
    assert sorted(data()["source"]["wheels"], key=version_tuple) == PINNED


def test_the_flags_that_pointed_nowhere():
    flags = data()["flags"]
    assert flags["--elastic-ep-rejoin"] == {
        "dest": "elastic_ep_rejoin",
        "releases": ["0.5.16"],
        "removed_in": "0.5.23",
        "deprecated_in": ["0.5.16"],
        "successor": "--elastic-ep-join-mode recover",
        "successor_flags": [{"flag": "--elastic-ep-join-mode", "value": "recover"}],
        "successor_env": {},
        "named_in": "0.5.16",
    }
    assert flags["--keep-mm-feature-on-device"] == {
        "dest": "keep_mm_feature_on_device",
        "releases": ["0.5.10.post1", "0.5.16"],
        "removed_in": "0.5.23",
        "deprecated_in": ["0.5.16"],
        "successor": "--mm-feature-transport=cuda_ipc",
        "successor_flags": [{"flag": "--mm-feature-transport", "value": "cuda_ipc"}],
        "successor_env": {},
        "named_in": "0.5.16",
    }
    # removed without a successor named by any parser
    assert (
        flags["--torchao-config"]["removed_in"] == "0.5.23" and flags["--torchao-config"]["successor"] is None
    )


def test_every_named_successor_is_a_flag_of_the_naming_release_and_every_entry_agrees_with_the_tables():
    tables = {path.stem: json.loads(path.read_text()) for path in FLAGS.glob("*.json")}
    versions = sorted(tables, key=version_tuple)
    options = {version: gen.options_of(tables[version]) for version in versions}
    for option, entry in data()["flags"].items():
        assert entry["releases"] == [v for v in versions if option in options[v]], option
        if entry["removed_in"]:
            assert option not in options[entry["removed_in"]], option
        for item in entry["successor_flags"]:
            named = options[entry["named_in"]]
            assert item["flag"] in named, (option, item)
            choices = tables[entry["named_in"]]["flags"][named[item["flag"]]]["choices"]
            assert item["value"] is None or item["value"] in [str(c) for c in choices or []] or not choices


def parse(source: str) -> dict:
    return gen.deprecations({"sglang/srt/server_args.py": source.encode()})


def test_rules_on_small_sources():
    found = parse(
        """
class ServerArgs:
    old_switch: A[bool, "[Deprecated] Alias for --new-mode recover."] = False
    old_path: A[Optional[str], Arg(help="Deprecated. Use --new-path=auto for it.", cli_name="--old-p")] = None
    hidden: A[bool, Arg(help="Deprecated.", no_cli=True)] = False
    fine: A[bool, "Use --other instead of nothing."] = False
def add(parser):
    parser.add_argument("--a", "--a-alias", action=DeprecatedAliasStoreAction, new_flag="--b")
    parser.add_argument("--c", action=DeprecatedAction, help="Note: --c is deprecated now.")
    parser.add_argument("--d", action="store_true", help="[Deprecated] Use SGLANG_X=1 and SGLANG_Y=0 then.")
    parser.add_argument("--e", action="store_true", help="(Deprecated: use --f=auto) Enable it.")
"""
    )
    assert found == {
        "--old-switch": {"action": "field", "successor": "--new-mode recover", "named_by": "help"},
        "--old-p": {"action": "field", "successor": "--new-path=auto", "named_by": "help"},
        "--a": {"action": "DeprecatedAliasStoreAction", "successor": "--b", "named_by": "new_flag"},
        "--a-alias": {"action": "DeprecatedAliasStoreAction", "successor": "--b", "named_by": "new_flag"},
        "--c": {"action": "DeprecatedAction", "successor": None, "named_by": None},
        "--d": {"action": "store_true", "successor": "SGLANG_X=1 SGLANG_Y=0", "named_by": "help"},
        "--e": {"action": "store_true", "successor": "--f=auto", "named_by": "help"},
    }


def test_a_word_after_the_flag_is_a_value_only_when_the_table_says_so():
    table = {
        "flags": {
            "mode": {"flag": "--mode", "aliases": [], "kind": "str", "choices": ["scale", "recover"]},
            "ratio": {"flag": "--ratio", "aliases": [], "kind": "float", "choices": None},
            "on": {"flag": "--on", "aliases": [], "kind": "bool", "choices": None},
            "be": {"flag": "--be-decode", "aliases": [], "kind": "str", "choices": ["full", "disabled"]},
            "bp": {"flag": "--be-prefill", "aliases": [], "kind": "str", "choices": ["full", "disabled"]},
        }
    }
    assert gen.successor_flags("--mode recover", table) == [{"flag": "--mode", "value": "recover"}]
    assert gen.successor_flags("--ratio instead", table) == [{"flag": "--ratio", "value": None}]
    assert gen.successor_flags("--ratio=0.5", table) == [{"flag": "--ratio", "value": "0.5"}]
    assert gen.successor_flags("--on=x", table) == [{"flag": "--on", "value": None}]
    assert gen.successor_flags("--mode <mode>", table) == [{"flag": "--mode", "value": None}]
    assert gen.successor_flags("--be-{decode,prefill}=disabled", table) == [
        {"flag": "--be-decode", "value": "disabled"},
        {"flag": "--be-prefill", "value": "disabled"},
    ]
    assert gen.named_successor("Deprecated. Use --x-y=v1.2 instead.") == "--x-y=v1.2"
    assert gen.named_successor("Alias for --x recover.") == "--x recover"
    assert gen.named_successor("Token histograms are collected when --enable-metrics is set.") is None


def test_render_lists_removed_and_deprecated_options():
    tables = {
        "1.0": {"flags": {"a": {"flag": "--a", "aliases": []}, "b": {"flag": "--b", "aliases": []}}},
        "2.0": {"flags": {"b": {"flag": "--b", "aliases": []}, "c": {"flag": "--c", "aliases": []}}},
    }
    parsed = {"2.0": {"--b": {"action": "DeprecatedAction", "successor": "--c", "named_by": "help"}}}
    flags = gen.render(tables, parsed, {"2.0": {"wheel": "w", "sha256": "0"}})["flags"]
    assert flags["--a"]["removed_in"] == "2.0" and flags["--a"]["successor"] is None
    assert flags["--b"]["removed_in"] is None and flags["--b"]["successor_flags"] == [
        {"flag": "--c", "value": None}
    ]
    assert set(flags) == {"--a", "--b"}
