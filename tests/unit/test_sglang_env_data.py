"""data/sglang_env/<version>.json: the environment variables each pinned SGLang release reads, by name
(written by scripts/sglang_env_data.py from the release's wheel with zipfile + ast).

Each committed file is regenerated from its wheel (downloaded once into .cache/sglang-wheels by the helper
of scripts/sglang_flag_data.py) and must come out byte for byte; a few facts of the releases are asserted
on top, and the extraction rules are run on small sources of their own.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "sglang_env"
WHEELS = ROOT / ".cache" / "sglang-wheels"
PINNED = sorted(
    {
        yaml.safe_load(path.read_text())["epforge_stack_spec"]["sglang"]["version"]
        for path in (ROOT / "stacks").glob("*.yml")
    },
    key=version_tuple,
)


def load(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load("sglang_env_data")


def table(version: str) -> dict:
    return json.loads((DATA / f"{version}.json").read_text())


def wheel(version: str) -> Path:
    return gen.flag_data.download_wheel(sys.executable, version, WHEELS)


# ---------------------------------------------------------------------- regenerated from the wheels


@pytest.mark.parametrize("version", PINNED)
def test_committed_data_is_what_the_release_wheel_gives(version, capsys):
    out = DATA / f"{version}.json"
    assert out.is_file(), f"run scripts/sglang_env_data.py --version {version} --out {out}"
    assert gen.main(["--wheel", str(wheel(version)), "--out", str(out), "--check"]) == 0, capsys.readouterr()


def test_check_mode_exits_1_with_a_diff_on_a_tampered_copy(tmp_path, capsys):
    small = tmp_path / "sglang-9.9-py3-none-any.whl"
    with zipfile.ZipFile(small, "w") as archive:
        archive.writestr("sglang/srt/environ.py", ENVIRON)
        archive.writestr("sglang/x.py", MODULE)
    out = tmp_path / "9.9.json"
    assert gen.main(["--wheel", str(small), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["source"]["sha256"] == gen.flag_data.sha256_of(small)
    assert gen.main(["--wheel", str(small), "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    out.write_text(out.read_text().replace('"SGLANG_T"', '"SGLANG_TT"'))
    assert gen.main(["--wheel", str(small), "--out", str(out), "--check"]) == 1
    changed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("-  ", "+  "))]
    assert changed == ['-  "SGLANG_TT": {', '+  "SGLANG_T": {']


# ------------------------------------------------------------------------------- facts of releases


def test_pcie_ipc_all_reduce_variables_are_typed_in_0_5_23_and_absent_from_0_5_16():
    new, old = table("0.5.23"), table("0.5.16")
    assert new["typed"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == {"type": "EnvBool", "default": False}
    assert new["typed"]["SGLANG_PCIE_IPC_MAX_NUMEL"] == {"type": "EnvInt", "default": 0}
    for name in ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "SGLANG_PCIE_IPC_MAX_NUMEL"):
        assert name not in old["typed"] and name not in old["literals"]


@pytest.mark.parametrize("version", PINNED)
def test_health_check_timeout_is_read_outside_environ_py_as_an_int_defaulting_to_20(version):
    # Not in environ.py's table: http_server.py reads it with int(os.getenv(..., 20)), so a bad value raises.
    data = table(version)
    assert "SGLANG_HEALTH_CHECK_TIMEOUT" not in data["typed"]
    assert data["literals"]["SGLANG_HEALTH_CHECK_TIMEOUT"] == {
        "file": "sglang/srt/entrypoints/http_server.py",
        "defaults": [20],
        "parse": ["int"],
    }


@pytest.mark.parametrize("version", PINNED)
def test_each_release_reads_its_descriptor_types_and_the_legacy_prefix(version):
    data = table(version)
    assert data["types"]["EnvBool"] == {
        "parse": "bool",
        "true": ["true", "1", "yes", "y"],
        "false": ["false", "0", "no", "n"],
        "lowercased": True,
    }
    assert data["types"]["EnvInt"] == {"parse": "int"} and data["types"]["EnvFloat"] == {"parse": "float"}
    assert data["types"]["EnvStr"] == {"parse": "str"}
    assert data["legacy_prefixes"] == {"SGL_": "SGLANG_"}
    assert {entry["type"] for entry in data["typed"].values()} <= set(data["types"])
    # A *WithAlias descriptor reads like the type it extends.
    for name, spec in data["types"].items():
        if name.endswith("WithAlias"):
            assert spec == data["types"][name.removesuffix("WithAlias")], name


def test_figures_per_release():
    figures = {version: gen.counts(table(version)) for version in PINNED}
    assert {v: (f["typed"], f["only_elsewhere"]) for v, f in figures.items()} == {
        "0.5.10.post1": (232, 160),
        "0.5.16": (495, 272),
        "0.5.23": (770, 326),
    }


# ------------------------------------------------------------------------- the rules, on small sources

ENVIRON = b"""
class EnvField:
    def parse(self, value):
        raise NotImplementedError()
class EnvBool(EnvField):
    def parse(self, value):
        if value in ["on", "1"]:
            return True
        if value in ["off", "0"]:
            return False
        raise ValueError(value)
class EnvInt(EnvField):
    def parse(self, value):
        return int(value)
class _Fallback:
    pass
class EnvIntWithAlias(_Fallback, EnvInt):
    pass
class Envs:
    SGLANG_A = EnvBool(True)
    SGLANG_B = EnvIntWithAlias(-3, deprecated_name="SGLANG_OLD_B")
    SGLANG_C = EnvInt(lambda: 4)
    OTHER = EnvBool(False)
    helper = 5
for key in []:
    key.replace("SGL_", "SGLANG_", 1)
"""
MODULE = b"""
import os
T = int(os.getenv("SGLANG_T", 20))
U = os.environ.get("SGLANG_U", default="x")
V = float(os.environ.get("SGLANG_T", "2.5"))
name = f"SGLANG_PFX_{key}"
start = "SGLANG_TEST_"
message = "set SGLANG_NOT_A_NAME=1 to ..."
other = os.getenv("NCCL_P2P_LEVEL")
"""


def test_rules_on_small_sources():
    data = gen.render(
        {"sglang/srt/environ.py": ENVIRON, "sglang/x.py": MODULE, "sglang/none.py": b"print(1)\n"},
        "9.9",
        "sglang-9.9-py3-none-any.whl",
        "0" * 64,
    )
    assert data["types"] == {
        "EnvBool": {"parse": "bool", "true": ["on", "1"], "false": ["off", "0"], "lowercased": False},
        "EnvInt": {"parse": "int"},
        "EnvIntWithAlias": {"parse": "int"},
    }
    assert data["typed"] == {
        "SGLANG_A": {"type": "EnvBool", "default": True},
        "SGLANG_B": {"type": "EnvIntWithAlias", "default": -3, "alias": "SGLANG_OLD_B"},
        "SGLANG_C": {"type": "EnvInt"},
        "OTHER": {"type": "EnvBool", "default": False},
    }
    assert data["legacy_prefixes"] == {"SGL_": "SGLANG_"}
    assert data["literals"] == {
        "SGLANG_T": {"file": "sglang/x.py", "defaults": ["2.5", 20], "parse": ["float", "int"]},
        "SGLANG_U": {"file": "sglang/x.py", "defaults": ["x"]},
        "SGLANG_OLD_B": {"file": "sglang/srt/environ.py"},
    }
    assert data["prefixes"] == {"SGLANG_PFX_": "sglang/x.py", "SGLANG_TEST_": "sglang/x.py"}


def test_a_name_s_file_is_where_it_is_parsed_first():
    first = b'import os\nx = os.getenv("SGLANG_Z")\n'
    second = b'import os\nx = int(os.getenv("SGLANG_Z", "1"))\n'
    found, _prefixes = gen.literal_names(
        {"sglang/a.py": b'N = "SGLANG_Z"\n', "sglang/b.py": first, "sglang/c.py": second}
    )
    assert found["SGLANG_Z"] == {"file": "sglang/c.py", "defaults": ["1"], "parse": ["int"]}


def test_literal_defaults_only():
    call = ast.parse("f(1.5, (1, 2), g(), -2)").body[0].value
    assert [gen._json_value(arg) for arg in call.args] == [
        (True, 1.5),
        (True, [1, 2]),
        (False, None),
        (True, -2),
    ]
