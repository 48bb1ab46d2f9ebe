"""Preflight's request check (validate_settings, module epforge_server_settings) against the stack's SGLang
release by name: an SGLANG_/SGL_ variable of env the release reads nowhere, or whose value its type does not
parse, is refused with the closest name it reads; a flag the release lacks is named with what became of it.

Every table is the committed data of a pinned release (data/sglang_env/, data/sglang_flag_successors.json,
data/sglang_flags/), each checked against the wheels by its own test.
"""

from __future__ import annotations

import json
from pathlib import Path

import epforge_server_settings
import pytest
from moduletools import run_main

from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    build_server_env,
    validate_settings,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
SUCCESSORS = DATA / "sglang_flag_successors.json"


def tables(version: str) -> dict:
    return {
        "flag_table": json.loads((DATA / "sglang_flags" / f"{version}.json").read_text()),
        "env_table": json.loads((DATA / "sglang_env" / f"{version}.json").read_text()),
        "flag_successors": json.loads(SUCCESSORS.read_text()),
    }


def problems(version: str, settings: dict) -> list[str]:
    return validate_settings(settings, require_model=False, **tables(version))


def env_problems(version: str, env: dict) -> list[str]:
    return problems(version, {"env": env})


# ------------------------------------------------------------------------------------ variables


def test_a_misspelt_variable_gets_the_closest_name_the_release_reads():
    assert env_problems("0.5.23", {"SGLANG_ENABLE_PCIE_IPC_ALLREDCE": "1"}) == [
        "env.SGLANG_ENABLE_PCIE_IPC_ALLREDCE is not a variable SGLang 0.5.23 reads (did you mean "
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?): neither its sglang/srt/environ.py table nor any of its modules "
        "names it; variables without the SGLANG_/SGL_ prefix pass as they are"
    ]


def test_a_variable_of_a_newer_release_is_refused_for_an_older_one():
    found = env_problems("0.5.16", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1", "SGLANG_PCIE_IPC_MAX_NUMEL": 1})
    assert [p.split(" (did you mean")[0] for p in found] == [
        "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is not a variable SGLang 0.5.16 reads",
        "env.SGLANG_PCIE_IPC_MAX_NUMEL is not a variable SGLang 0.5.16 reads",
    ]


def test_a_typed_value_that_does_not_parse_is_refused_with_what_sglang_would_do():
    assert env_problems(
        "0.5.23",
        {
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "on",
            "SGLANG_PCIE_IPC_MAX_NUMEL": "1.5e6",
            "SGLANG_WARMUP_TIMEOUT": "x",
        },
    ) == [
        "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE must be one of true, 1, yes, y, false, 0, no, n (any case) for "
        "SGLang 0.5.23 (EnvBool in sglang/srt/environ.py), got 'on': SGLang would only warn and use its "
        "default False",
        "env.SGLANG_PCIE_IPC_MAX_NUMEL must be an integer for SGLang 0.5.23 (EnvInt in "
        "sglang/srt/environ.py), got '1.5e6': SGLang would only warn and use its default 0",
        "env.SGLANG_WARMUP_TIMEOUT must be a number for SGLang 0.5.23 (EnvFloat in sglang/srt/environ.py), "
        "got 'x': SGLang would only warn and use its default -1",
    ]


def test_a_variable_read_through_int_outside_environ_py_is_checked_too():
    assert env_problems("0.5.23", {"SGLANG_HEALTH_CHECK_TIMEOUT": "20s"}) == [
        "env.SGLANG_HEALTH_CHECK_TIMEOUT must be an integer for SGLang 0.5.23, got '20s': "
        "sglang/srt/entrypoints/http_server.py reads it with int(), which raises on that value"
    ]


def test_legacy_prefix_and_deprecated_alias_are_read_with_the_type_of_the_name_they_stand_for():
    assert env_problems("0.5.23", {"SGL_ENABLE_PCIE_IPC_ALLREDUCE": "maybe", "SGL_ZZZZZZZZZZ": "1"}) == [
        "env.SGL_ENABLE_PCIE_IPC_ALLREDUCE must be one of true, 1, yes, y, false, 0, no, n (any case) for "
        "SGLang 0.5.23 (EnvBool in sglang/srt/environ.py), got 'maybe' (SGLang reads it as "
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE): SGLang would only warn and use its default False",
        "env.SGL_ZZZZZZZZZZ is not a variable SGLang 0.5.23 reads: neither its sglang/srt/environ.py "
        "table nor any of its modules names it; variables without the SGLANG_/SGL_ prefix pass as they are",
    ]
    (alias,) = env_problems("0.5.23", {"SGLANG_USE_TRITON_ROUTER_SUM": 2})
    assert (
        "(EnvBoolWithAlias in sglang/srt/environ.py), got '2' (SGLang reads it as "
        "SGLANG_USE_CUSTOM_ROUTER_SUM)" in alias
    )


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.16", "0.5.23"])
def test_good_values_and_other_programs_variables_pass(version):
    env = {
        "NCCL_P2P_LEVEL": "SYS",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_TYPO_ANYTHING": "x",
        "SGLANG_HEALTH_CHECK_TIMEOUT": 60,
        "SGL_FORCE_SHUTDOWN": "1",  # a literal of every release's modules
        "SGLANG_CACHE_DIT_ANY_SUFFIX": "1",  # completed at run time from a literal prefix
        "SGLANG_TORCH_PROFILER_DIR": "/tmp/p",  # read outside environ.py, untyped
    }
    if version == "0.5.23":
        env |= {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": True, "SGLANG_PCIE_IPC_MAX_NUMEL": 1048576}
        env |= {"SGLANG_WARMUP_TIMEOUT": "1e3", "SGL_ENABLE_PCIE_IPC_ALLREDUCE": "YES"}
    assert env_problems(version, env) == []
    # what the server gets is what was judged: a YAML true is written 'true', which EnvBool takes
    assert build_server_env({"env": env}).get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "true") == "true"


def test_without_an_env_table_no_variable_is_judged_by_name():
    settings = {"env": {"SGLANG_NO_SUCH_THING": "x"}}
    assert validate_settings(settings, require_model=False) == []


# ---------------------------------------------------------------------------------- retired flags


def test_retired_flags_name_their_successor_as_a_setting_and_as_a_flag():
    assert problems("0.5.23", {"elastic_ep_rejoin": True, "keep_mm_feature_on_device": True}) == [
        "unknown server setting 'elastic_ep_rejoin' (value True): --elastic-ep-rejoin was removed in "
        "SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 names its successor --elastic-ep-join-mode "
        "recover: did you mean ep_join_mode: recover?",
        "unknown server setting 'keep_mm_feature_on_device' (value True): --keep-mm-feature-on-device was "
        "removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 names its successor "
        "--mm-feature-transport=cuda_ipc: did you mean mm_feature_transport: cuda_ipc?",
    ]
    assert problems("0.5.23", {"extra_args": ["--elastic-ep-rejoin", "--keep-mm-feature-on-device"]}) == [
        "extra_args names --elastic-ep-rejoin, which SGLang 0.5.23 does not know: --elastic-ep-rejoin was "
        "removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 names its successor "
        "--elastic-ep-join-mode recover: did you mean --elastic-ep-join-mode recover?",
        "extra_args names --keep-mm-feature-on-device, which SGLang 0.5.23 does not know: "
        "--keep-mm-feature-on-device was removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 "
        "names its successor --mm-feature-transport=cuda_ipc: did you mean --mm-feature-transport cuda_ipc?",
    ]


def test_the_suggested_successor_is_accepted_by_the_release():
    assert problems("0.5.23", {"ep_join_mode": "recover", "mm_feature_transport": "cuda_ipc"}) == []


def test_removed_without_successor_and_a_successor_the_release_lacks_too():
    assert problems(
        "0.5.23", {"torchao_config": "int8wo", "extra_args": ["--piecewise-cuda-graph-compiler"]}
    ) == [
        "unknown server setting 'torchao_config' (value 'int8wo'): --torchao-config was removed in SGLang "
        "0.5.23, no successor named",
        "extra_args names --piecewise-cuda-graph-compiler, which SGLang 0.5.23 does not know: "
        "--piecewise-cuda-graph-compiler was removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 "
        "names its successor --cuda-graph-tc-compiler, which SGLang 0.5.23 lacks too",
    ]


def test_a_successor_the_release_lacks_is_followed_to_its_own():
    (found,) = problems("0.5.23", {"enable_piecewise_cuda_graph": True})
    assert found.endswith(
        "SGLang 0.5.10.post1 names its successor --enforce-piecewise-cuda-graph (SGLang 0.5.16 names that "
        "one's successor --cuda-graph-backend-prefill=tc_piecewise): did you mean "
        "cuda_graph_backend_prefill: tc_piecewise?"
    )


def test_a_flag_newer_than_the_release_and_a_kept_deprecated_spelling():
    assert problems("0.5.10.post1", {"elastic_ep_rejoin": True}) == [
        "unknown server setting 'elastic_ep_rejoin' (value True): SGLang 0.5.10.post1 has no "
        "--elastic-ep-rejoin (a flag of SGLang 0.5.16); SGLang 0.5.16 names its successor "
        "--elastic-ep-join-mode recover, which SGLang 0.5.10.post1 lacks too"
    ]
    (kept,) = problems("0.5.16", {"disable_piecewise_cuda_graph": True})
    assert kept.endswith(
        "--disable-piecewise-cuda-graph is a deprecated spelling of cuda_graph_backend_prefill in SGLang "
        "0.5.16; SGLang 0.5.16 names its successor --cuda-graph-backend-prefill=disabled: did you mean "
        "cuda_graph_backend_prefill: disabled?"
    )


def test_a_typo_with_no_history_still_gets_the_closest_name():
    (typo,) = problems("0.5.23", {"chunked_prefil_size": 4096})
    assert typo.startswith(
        "unknown server setting 'chunked_prefil_size' (did you mean 'chunked_prefill_size'?)"
    )


# ------------------------------------------------------------------------------ the module, by path


def test_the_module_reads_the_tables_by_path_and_refuses_before_anything_changes(tmp_path):
    paths = {
        "flag_table_path": str(DATA / "sglang_flags" / "0.5.23.json"),
        "env_table_path": str(DATA / "sglang_env" / "0.5.23.json"),
        "flag_successors_path": str(SUCCESSORS),
    }
    settings = {
        "model_path": "/m",
        "keep_mm_feature_on_device": True,
        "env": {"SGLANG_PCIE_IPC_MAX_NUMEL": "1k"},
    }
    kind, result = run_main(epforge_server_settings, {"settings": settings, **paths})
    assert kind == "fail"
    assert result["problems"] == [
        "unknown server setting 'keep_mm_feature_on_device' (value True): --keep-mm-feature-on-device was "
        "removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang 0.5.16 names its successor "
        "--mm-feature-transport=cuda_ipc: did you mean mm_feature_transport: cuda_ipc?",
        "env.SGLANG_PCIE_IPC_MAX_NUMEL must be an integer for SGLang 0.5.23 (EnvInt in "
        "sglang/srt/environ.py), got '1k': SGLang would only warn and use its default 0",
    ]
    good = {
        "model_path": "/m",
        "mm_feature_transport": "cuda_ipc",
        "env": {"SGLANG_PCIE_IPC_MAX_NUMEL": 4096},
    }
    assert run_main(epforge_server_settings, {"settings": good, **paths})[0] == "exit"
    # a release without files checks no name; a file that is not a JSON object is named
    missing = dict(paths, env_table_path=str(tmp_path / "none.json"))
    assert (
        run_main(epforge_server_settings, {"settings": {"env": {"SGLANG_X_Y": "1"}}, **missing})[0] == "exit"
    )
    (tmp_path / "bad.json").write_text("[1]")
    kind, result = run_main(
        epforge_server_settings, {"settings": {}, **dict(paths, env_table_path=str(tmp_path / "bad.json"))}
    )
    assert kind == "fail" and result["msg"] == f"the env table {tmp_path / 'bad.json'} is not a JSON object"


def test_prefixes_the_user_vouches_for_pass_unchecked_and_only_those():
    """epforge_sglang_env_allowed (module option env_allowed_prefixes): the test double's SGLANG_STANDIN_*
    knobs are refused by name without it and pass with it; any other unknown SGLANG_ name is still refused."""
    paths = {"env_table_path": str(DATA / "sglang_env" / "0.5.23.json")}
    settings = {"model_path": "/m", "env": {"SGLANG_STANDIN_LOAD_SECONDS": "1"}}
    kind, result = run_main(epforge_server_settings, {"settings": settings, **paths})
    assert kind == "fail" and "env.SGLANG_STANDIN_LOAD_SECONDS is not a variable" in result["msg"]
    allowed = {**paths, "env_allowed_prefixes": ["SGLANG_STANDIN_"]}
    assert run_main(epforge_server_settings, {"settings": settings, **allowed})[0] == "exit"
    typo = {
        "model_path": "/m",
        "env": {"SGLANG_STANDIN_LOAD_SECONDS": "1", "SGLANG_ENABLE_PCIE_IPC_ALLREDCE": "1"},
    }
    kind, result = run_main(epforge_server_settings, {"settings": typo, **allowed})
    assert kind == "fail" and result["problems"] == [
        "env.SGLANG_ENABLE_PCIE_IPC_ALLREDCE is not a variable SGLang 0.5.23 reads (did you mean "
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?): neither its sglang/srt/environ.py table nor any of its modules "
        "names it; variables without the SGLANG_/SGL_ prefix pass as they are"
    ]
