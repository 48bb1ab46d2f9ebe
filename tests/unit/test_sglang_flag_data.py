"""data/sglang_flags/<version>.json: every launch_server flag of each pinned SGLang release, as the release's
own parser defines it (written by scripts/sglang_flag_data.py).

The pure tests read the committed files and the generator's rendering (no SGLang). The build test
regenerates each file from the release's wheel (downloaded once into .cache/sglang-wheels) with the shared
parser venv of tests/sglang_parser_env.py and asserts the committed file is exactly what comes out.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_parser_env
import yaml
from sglang_parser_env import parser_python

from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    FLAG_ORDER,
    FLAG_RENAMES,
    SETTINGS_KINDS,
    flag_name,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "sglang_flags"
SCRIPT = ROOT / "scripts" / "sglang_flag_data.py"
WHEELS = ROOT / ".cache" / "sglang-wheels"
PINNED = sorted(
    {
        yaml.safe_load(path.read_text())["epforge_stack_spec"]["sglang"]["version"]
        for path in (ROOT / "stacks").glob("*.yml")
    },
    key=version_tuple,
)
# Imports of a release's server_args that the role's measured parser deps lack (measured here, 2026-12-01,
# by running the generator): 0.5.16 gets the role's fallback list (0.5.10.post1's), and needs xgrammar too.
ALSO_NEEDED = {"0.5.16": ("xgrammar",)}

# The cached parser venv's session fixture (tests/sglang_parser_env.py): pytest finds it by this name.
sglang_env = sglang_parser_env.sglang_env


def load_generator():
    spec = importlib.util.spec_from_file_location("sglang_flag_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def table(version: str) -> dict:
    return json.loads((DATA / f"{version}.json").read_text())


def options(version: str) -> dict[str, str]:
    """Every option string of the release -> its dest."""
    return {
        option: dest for dest, entry in table(version)["flags"].items() for option in gen.options_of(entry)
    }


# ------------------------------------------------------------------------------- committed data


def test_every_pinned_release_has_a_data_file():
    assert PINNED, "no stack pins an SGLang release"
    missing = [version for version in PINNED if not (DATA / f"{version}.json").is_file()]
    assert missing == [], f"run scripts/sglang_flag_data.py for {missing}"


@pytest.mark.parametrize("version", PINNED)
def test_data_file_shape(version):
    path = DATA / f"{version}.json"
    data = json.loads(path.read_text())
    # Deterministic text: what the generator writes, byte for byte.
    assert path.read_text() == json.dumps(data, indent=1, sort_keys=True) + "\n"
    assert data["schema"] == 1
    assert data["sglang_version"] == version
    assert data["source"]["generator"] == "scripts/sglang_flag_data.py"
    assert data["source"]["wheel"].startswith(f"sglang-{version}-") and data["source"]["wheel"].endswith(
        ".whl"
    )
    assert len(data["source"]["sha256"]) == 64
    assert len(data["flags"]) > 100
    assert "help" not in data["flags"]
    for dest, entry in data["flags"].items():
        assert set(entry) == {
            "flag", "aliases", "kind", "action", "type", "nargs", "choices", "default", "deprecated", "help"
        }, dest  # fmt: skip
        assert entry["flag"].startswith("--"), dest
        assert entry["kind"] in ("bool", "int", "float", "str", "list", "other"), dest
        assert len(entry["help"]) <= 200, dest
    # Keys are never stored with a value (their defaults are None).
    assert data["flags"]["api_key"]["default"] is None


@pytest.mark.parametrize("version", PINNED)
def test_every_flag_epforge_renders_is_a_flag_of_the_release(version):
    known = options(version)
    rendered = {key: flag_name(key, version) for key in FLAG_ORDER}
    missing = {key: flag for key, flag in rendered.items() if flag not in known}
    assert missing == {}, f"SGLang {version} has no flag for {missing}"


@pytest.mark.parametrize("version", PINNED)
def test_schema_kinds_agree_with_the_release(version):
    # epforge's kind of each rendered setting is what the release's parser takes (a number, a switch, ...).
    flags, known = table(version)["flags"], options(version)
    kinds = {key: flags[known[flag_name(key, version)]]["kind"] for key in FLAG_ORDER}
    differ = {key: (SETTINGS_KINDS[key], kind) for key, kind in kinds.items() if SETTINGS_KINDS[key] != kind}
    assert differ == {}


@pytest.mark.parametrize("version", PINNED)
def test_known_flags(version):
    flags = table(version)["flags"]
    assert flags["chunked_prefill_size"]["kind"] == "int"
    assert flags["chunked_prefill_size"]["flag"] == "--chunked-prefill-size"
    assert set(flags["deepep_mode"]["choices"]) == {"auto", "normal", "low_latency"}
    assert "deepep" in flags["moe_a2a_backend"]["choices"]


def test_flag_renames_of_the_flag_model_match_the_data():
    # FLAG_RENAMES says which releases still take the old spelling: the data of each pinned release agrees.
    for key, (since, new_name) in FLAG_RENAMES.items():
        old_name = "--" + key.replace("_", "-")
        for version in PINNED:
            known = options(version)
            if version_tuple(version) >= version_tuple(since):
                assert old_name not in known and new_name in known, version
            else:
                assert old_name in known, version


def test_renames_between_pinned_releases_are_reported():
    found = gen.renames(table("0.5.16"), table("0.5.23"))
    assert ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", False) in found
    # The dest was renamed in 0.5.16, where the old spelling stays a (deprecated) alias.
    found = gen.renames(table("0.5.10.post1"), table("0.5.16"))
    assert ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", True) in found
    lines = gen.report_renames(DATA)
    assert (
        "--cuda-graph-max-bs (0.5.16) -> --cuda-graph-max-bs-decode (0.5.23): the old spelling is gone"
        in lines
    )


# ------------------------------------------------------------------------------ generator, no SGLang


def record(dest: str, *options: str, **over) -> dict:
    """One parser action as the generator's child process reports it."""
    base = {
        "dest": dest,
        "option_strings": list(options) or ["--" + dest.replace("_", "-")],
        "action": "store",
        "base": "store",
        "type": None,
        "nargs": None,
        "choices": None,
        "default": {"value": None},
        "deprecated": False,
        "help": None,
    }
    return {**base, **over}


@pytest.mark.parametrize(
    "over, kind",
    [
        ({"action": "store_true", "base": "store_true", "nargs": 0, "default": {"value": False}}, "bool"),
        ({"action": "DeprecatedStoreTrueAction", "base": "store_true", "nargs": 0}, "bool"),
        (
            {"action": "DeprecatedStoreTrueAction", "base": None, "nargs": 0, "default": {"value": False}},
            "bool",
        ),
        ({"action": "BooleanOptionalAction", "base": None, "nargs": 0}, "bool"),
        ({"type": "int", "nargs": "+"}, "list"),
        ({"type": "int", "nargs": 2}, "list"),
        ({"action": "append", "base": "append"}, "list"),
        ({"type": "int"}, "int"),
        ({"type": "float"}, "float"),
        ({"type": "str"}, "str"),
        ({}, "str"),
        ({"type": "human_readable_int"}, "other"),
        ({"action": "DeprecatedAction", "base": None, "nargs": 0}, "other"),
    ],
)
def test_kind_rule(over, kind):
    assert gen.kind_of(record("x", **over)) == kind


def test_entry_rendering():
    flags = gen.render_flags(
        [
            record(
                "tp_size",
                "--tensor-parallel-size",
                "--tp-size",
                type="int",
                default={"value": 1},
                help="The tensor parallelism size (e.g. 8 on one node).  More text here.",
            ),
            record("tp_size", "--tp", action="DeprecatedAliasAction", base=None, help="Deprecated."),
            record("hook", default={"repr": "<function f>"}, choices=[{"value": "a"}, {"repr": "Mode.B"}]),
            record("old", help="Use --new instead. More " + "x" * 300, deprecated=True),
        ]
    )
    assert flags["tp_size"] == {
        "flag": "--tensor-parallel-size",
        "aliases": ["--tp-size", "--tp"],
        "kind": "int",
        "action": "store",
        "type": "int",
        "nargs": None,
        "choices": None,
        "default": 1,
        "deprecated": False,
        "help": "The tensor parallelism size (e.g. 8 on one node).",
    }
    assert flags["hook"]["default"] == "<function f>" and flags["hook"]["choices"] == ["a", "Mode.B"]
    assert flags["old"]["deprecated"] is True and flags["old"]["help"] == "Use --new instead."
    assert len(gen.first_sentence("y" * 300)) == 200


def test_render_is_deterministic_and_check_finds_a_tampered_file(tmp_path):
    actions = [record("port", type="int", default={"value": 30000}), record("host", default={"value": "x"})]
    text = gen.render_json(actions, "9.9.9", "sglang-9.9.9-py3-none-any.whl", "0" * 64)
    assert text == gen.render_json(
        list(reversed(actions)), "9.9.9", "sglang-9.9.9-py3-none-any.whl", "0" * 64
    )
    path = tmp_path / "9.9.9.json"
    path.write_text(text)
    assert gen.compare(path, text) == ""
    path.write_text(text.replace('"default": 30000', '"default": 30001'))
    diff = gen.compare(path, text).splitlines()
    assert [line for line in diff if line.startswith(("-", "+")) and "default" in line] == [
        '-   "default": 30001,',
        '+   "default": 30000,',
    ]


def test_check_mode_exits_1_with_a_diff_on_a_tampered_copy(tmp_path, monkeypatch, capsys):
    # The committed 0.5.23 data, regenerated from records that hold the same values, through main().
    data = table("0.5.23")
    wheel = tmp_path / data["source"]["wheel"]
    wheel.write_bytes(b"a stand-in wheel")
    actions = [
        record(
            dest,
            entry["flag"],
            *entry["aliases"],
            action=entry["action"],
            base=None,
            type=entry["type"],
            nargs=entry["nargs"],
            choices=None if entry["choices"] is None else [{"value": c} for c in entry["choices"]],
            default={"value": entry["default"]},
            help=entry["help"],
        )
        for dest, entry in data["flags"].items()
    ]
    monkeypatch.setattr(gen, "extract_actions", lambda python, path: actions)
    out = tmp_path / "0.5.23.json"
    argv = ["--python", "unused", "--wheel", str(wheel), "--out", str(out)]
    assert gen.main(argv) == 0
    written = json.loads(out.read_text())
    assert written["source"]["sha256"] == gen.sha256_of(wheel)
    assert set(written["flags"]) == set(data["flags"])
    assert gen.main([*argv, "--check"]) == 0
    capsys.readouterr()

    out.write_text(out.read_text().replace('"--chunked-prefill-size"', '"--chunked-prefil-size"'))
    assert gen.main([*argv, "--check"]) == 1
    changed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("-", "+"))]
    assert changed[2:] == ['-   "flag": "--chunked-prefil-size",', '+   "flag": "--chunked-prefill-size",']


def test_download_argv_pins_one_target():
    argv = gen.download_argv("/py", "0.5.23", Path("/w"))
    assert argv[:3] == ["/py", "-m", "pip"]
    assert "--no-deps" in argv and "--only-binary=:all:" in argv and "sglang==0.5.23" in argv
    assert argv[argv.index("--python-version") + 1] == gen.TARGET_PYTHON
    assert argv[argv.index("--platform") + 1] == gen.TARGET_PLATFORM


# ---------------------------------------------------------------------- regenerated from the wheels


@pytest.mark.build
@pytest.mark.parametrize("version", PINNED)
def test_committed_data_is_what_the_release_parser_gives(version, sglang_env):
    wheel = gen.download_wheel(sys.executable, version, WHEELS)
    python = parser_python(version, sglang_env["python"], wheel, also=ALSO_NEEDED.get(version, ()))
    argv = [sys.executable, str(SCRIPT), "--python", python, "--wheel", str(wheel), "--check"]
    argv += ["--out", str(DATA / f"{version}.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout[-6000:], proc.stderr[-3000:])
    assert "up to date" in proc.stdout
