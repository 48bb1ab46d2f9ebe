"""CUDA graphs turned off together with a graph batch size (issue 34): SGLang accepts
`--cuda-graph-max-bs 16 --disable-cuda-graph` and runs without graphs, so the size does nothing. The one rule
is sglang_args.validate_settings; these tests prove it holds on every way in: preflight's check of the user's
own epforge_server (module epforge_server_settings), the object builder (server_object.build: preflight's
host call, the sweep through epforge_known_issues, the tuner) and a tuner candidate (test_tune_plan.py).

The spellings are the releases' own (data/sglang_flags/VERSION.json, read from each release's parser)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import epforge_known_issues
import epforge_server_settings
import pytest
import yaml
from gpu_fact_samples import gpu_facts
from moduletools import run_main

from ansible_collections.epforge.ep.plugins.module_utils import server_object
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    GRAPH_BACKEND_OFF,
    GRAPH_KEYS,
    GRAPH_OFF_KEYS,
    GRAPH_SIZE_KEYS,
    SETTINGS_SCHEMA,
    flag_name,
    table_flags,
    table_spec,
    validate_settings,
)

ROOT = Path(__file__).resolve().parents[2]
FLAG_FILES = sorted((ROOT / "data" / "sglang_flags").glob("*.json"))
TABLES = {path.stem: json.loads(path.read_text()) for path in FLAG_FILES}
# The stack of the H200 where the tuner rendered `--cuda-graph-max-bs 16 --disable-cuda-graph`.
STACK = yaml.safe_load((ROOT / "stacks" / "cu130-torch211.yml").read_text())["epforge_stack_spec"]
VERSION = STACK["sglang"]["version"]
FLAG_FILE = ROOT / "data" / "sglang_flags" / f"{VERSION}.json"
KNOWN_ISSUES = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
BOTH = {"model_path": "/models/m", "disable_cuda_graph": True, "cuda_graph_max_bs": 16}


def off_value(key: str):
    return GRAPH_BACKEND_OFF if key == "cuda_graph_backend_decode" else True


def known(key: str, table: dict) -> dict | None:
    """The key's spec in a release: a schema setting, or a flag of the release's table (renamed dests too)."""
    if key in SETTINGS_SCHEMA:
        return {"flag": flag_name(key, table["sglang_version"])}
    return table_spec(key, table_flags(table))


def pairs():
    for version, table in TABLES.items():
        for off, size in itertools.product(GRAPH_OFF_KEYS, GRAPH_SIZE_KEYS):
            if known(off, table) and known(size, table):
                yield pytest.param(version, off, size, id=f"{version}-{off}-{size}")


def test_every_graph_key_is_a_setting_or_a_flag_of_a_pinned_release():
    for key in GRAPH_KEYS:
        assert key in SETTINGS_SCHEMA or any(known(key, t) for t in TABLES.values()), key
    # the backend's "disabled" is a choice wherever the release has the flag
    backends = [
        t["flags"]["cuda_graph_backend_decode"]
        for t in TABLES.values()
        if t["flags"].get("cuda_graph_backend_decode")
    ]
    assert backends and all(GRAPH_BACKEND_OFF in spec["choices"] for spec in backends)


@pytest.mark.parametrize(("version", "off", "size"), list(pairs()))
def test_graphs_off_with_a_graph_batch_size_is_refused_naming_both_and_what_to_do(version, off, size):
    table = TABLES[version]
    spec = table_spec(size, table_flags(table)) or {}
    value = [1, 2, 4, 8, 16] if spec.get("kind") == "list" else 16
    settings = {"model_path": "/models/m", off: off_value(off), size: value}
    problems = validate_settings(settings, flag_table=table)
    [problem] = [p for p in problems if "turns CUDA graphs off" in p]
    assert problem.startswith(f"{off}: ") and f"but {size}: " in problem
    assert known(off, table)["flag"] in problem and known(size, table)["flag"] in problem
    assert f"remove {size} to run without CUDA graphs, or remove {off} to capture graphs" in problem
    with pytest.raises(ValueError, match="turns CUDA graphs off"):
        server_object.build({"adjusted_settings": settings, "findings": {}}, version, table)


def test_the_spelling_in_extra_args_is_found_too():
    old, new = TABLES["0.5.10.post1"], TABLES["0.5.16"]
    cases = [
        (
            {"disable_cuda_graph": True, "extra_args": ["--cuda-graph-bs", "1", "2"]},
            old,
            "extra_args' --cuda-graph-bs",
        ),
        ({"cuda_graph_max_bs": 8, "extra_args": ["--cuda-graph-backend-decode=disabled"]}, new, "disabled"),
        # 0.5.16's alias of --cuda-graph-bs-decode
        (
            {"disable_decode_cuda_graph": True, "extra_args": ["--cuda-graph-bs", "8"]},
            new,
            "--cuda-graph-bs from",
        ),
    ]
    for settings, table, expect in cases:
        problems = validate_settings({"model_path": "/m", **settings}, flag_table=table)
        assert any("turns CUDA graphs off" in p and expect in p for p in problems), problems


@pytest.mark.parametrize(
    "settings",
    [
        {"disable_cuda_graph": True},
        {"cuda_graph_max_bs": 16},
        {"disable_cuda_graph": False, "cuda_graph_max_bs": 16},
        {"cuda_graph_backend_decode": "full", "cuda_graph_bs": [1, 2, 4]},
        {"disable_prefill_cuda_graph": True, "cuda_graph_max_bs": 16},  # the prefill phase only
    ],
)
def test_graphs_off_alone_or_a_batch_size_alone_passes(settings):
    assert validate_settings({"model_path": "/m", **settings}, flag_table=TABLES["0.5.16"]) == []


def test_preflight_refuses_the_users_own_epforge_server_before_anything_changes():
    kind, result = run_main(
        epforge_server_settings, {"settings": BOTH, "require_model": True, "flag_table_path": str(FLAG_FILE)}
    )
    assert kind == "fail"
    assert result["msg"].startswith("epforge_server is refused before anything changes: (1) ")
    assert (
        "disable_cuda_graph: true (--disable-cuda-graph) turns CUDA graphs off, but cuda_graph_max_bs: 16 "
        "(--cuda-graph-max-bs) sets the batch sizes they are captured for" in result["msg"]
    )


def test_a_sweep_configuration_with_both_is_refused_by_the_object_builder():
    # as roles/sglang_benchmark/tasks/sweep_one.yml builds it: the request with the configuration over it
    request = {"model_path": "/models/m", "disable_cuda_graph": True}
    configuration = {"cuda_graph_max_bs": 16}
    kind, result = run_main(
        epforge_known_issues,
        {
            "table": KNOWN_ISSUES,
            "gpu_facts": gpu_facts("9.0", 1, "none"),
            "stack": STACK,
            "server": {**request, **configuration},
            "fail_on_error": False,
            "sglang_version": VERSION,
            "flag_table": TABLES[VERSION],
        },
    )
    assert kind == "fail", result
    assert result["msg"].startswith(f"the server settings cannot be rendered for SGLang {VERSION}: ")
    assert "disable_cuda_graph: true (--disable-cuda-graph) turns CUDA graphs off" in result["msg"]
    assert "remove cuda_graph_max_bs to run without CUDA graphs" in result["msg"]
    # the configuration alone renders
    kind, result = run_main(
        epforge_known_issues,
        {
            "table": KNOWN_ISSUES,
            "gpu_facts": gpu_facts("9.0", 1, "none"),
            "stack": STACK,
            "server": {"model_path": "/models/m", **configuration},
            "sglang_version": VERSION,
            "flag_table": TABLES[VERSION],
        },
    )
    assert kind == "exit" and "--cuda-graph-max-bs" in result["server_object"]["argv"]
