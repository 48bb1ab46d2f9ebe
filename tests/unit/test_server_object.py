"""The one server settings object (plugins/module_utils/server_object.py) and every flag of a release by name
(data/sglang_flags/VERSION.json through plugins/module_utils/sglang_args.py).

Pure tests first (the object, its digest and its refusals; flag-table settings checked and rendered), then
role preflight refusing a misspelt SGLang flag before anything changes (a real ansible-playbook run).
The end-to-end test on a fake 8x PCIe host is in test_sglang_flags_real.py (it needs SGLang's parser).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_preflight_checks import fact_file, failure, no_gpu_path, play

from ansible_collections.epforge.ep.plugins.module_utils.server_object import build, digest_of, problems
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    RENAMED_DESTS,
    build_server_argv,
    validate_settings,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE_0523 = json.loads((ROOT / "data" / "sglang_flags" / "0.5.23.json").read_text())
TABLE_0516 = json.loads((ROOT / "data" / "sglang_flags" / "0.5.16.json").read_text())


def verdict(settings: dict, adjustments: list | None = None) -> dict:
    return {"adjusted_settings": settings, "findings": {"adjustments": adjustments or []}}


def test_a_model_named_by_repo_id_runs_from_the_directory_role_model_fetches_it_to():
    settings = {
        "model_path": "moonshotai/Kimi-K2.5",
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3",
        "tp_size": 8,
    }
    obj = build(verdict(settings), "0.5.23", TABLE_0523, model_dir="/srv/models")
    argv = obj["argv"]
    assert argv[argv.index("--model-path") + 1] == "/srv/models/moonshotai/Kimi-K2.5"
    draft = argv[argv.index("--speculative-draft-model-path") + 1]
    assert draft == "/srv/models/lightseekorg/kimi-k2.5-eagle3"
    assert "moonshotai/Kimi-K2.5" not in argv
    assert [(a["id"], a["source"], a["changes"]) for a in obj["adjustments"]] == [
        (
            "model-fetched-by-role-model",
            "moonshotai/Kimi-K2.5",
            {"model_path": "/srv/models/moonshotai/Kimi-K2.5"},
        ),
        (
            "model-fetched-by-role-model",
            "lightseekorg/kimi-k2.5-eagle3",
            {"speculative_draft_model_path": "/srv/models/lightseekorg/kimi-k2.5-eagle3"},
        ),
    ]
    assert obj["env"]["HF_HUB_OFFLINE"] == "1"
    # a local directory stays as it is (verified in place by role model, never copied)
    local = build(verdict({"model_path": "/models/m"}), "0.5.23", TABLE_0523, model_dir="/srv/models")
    assert local["settings"]["model_path"] == "/models/m" and local["adjustments"] == []


def test_object_renders_once_and_its_digest_names_argv_and_env():
    adjustment = {
        "id": "deepep_normal_mode_needs_nvlink",
        "changes": {"deepep_mode": {"from": "auto", "to": "low_latency", "requested": True}},
        "consequence": "normal mode needs NVLink",
        "source": "https://github.com/deepseek-ai/DeepEP/issues/216",
    }
    settings = {
        "model_path": "/models/m",
        "tp_size": 8,
        "deepep_mode": "low_latency",
        "chunked_prefill_size": 128,
        "env": {"NCCL_P2P_LEVEL": "SYS"},
        "api_key": "sk-never-in-the-object",
    }
    obj = build(verdict(settings, [adjustment]), "0.5.23", TABLE_0523)
    assert obj["argv"] == build_server_argv(
        {k: v for k, v in settings.items() if k != "api_key"}, sglang_version="0.5.23", flag_table=TABLE_0523
    )
    assert obj["argv"][-2:] == ["--chunked-prefill-size", "128"]
    # HF_HUB_OFFLINE=1 in every launch: SGLang never downloads (role model fetched and verified the files)
    assert obj["env"] == {"NCCL_P2P_LEVEL": "SYS", "HF_HUB_OFFLINE": "1"}
    assert obj["settings"]["host"] == "127.0.0.1" and obj["settings"]["port"] == 30000
    assert "sk-never-in-the-object" not in json.dumps(obj)
    assert obj["adjustments"] == [
        {
            "id": adjustment["id"],
            "changes": adjustment["changes"],
            "reason": "normal mode needs NVLink",
            "source": adjustment["source"],
        }
    ]
    assert obj["digest"] == digest_of("0.5.23", obj["argv"], obj["env"])
    assert problems(obj, "0.5.23") == []
    # Another release, argv or environment is another launch: another digest.
    assert build(verdict(settings), "0.5.16", TABLE_0516)["digest"] != obj["digest"]
    assert build(verdict({**settings, "tp_size": 4}), "0.5.23", TABLE_0523)["digest"] != obj["digest"]
    assert build(verdict(settings), "0.5.23", TABLE_0523)["digest"] == obj["digest"]
    assert build(verdict({}), "0.5.23") == {}


def test_an_edited_object_or_one_for_another_release_is_refused():
    obj = build(verdict({"model_path": "/m", "tp_size": 2}), "0.5.23")
    edited = {**obj, "argv": [*obj["argv"], "--disable-cuda-graph"]}
    assert "no longer matches its digest" in problems(edited, "0.5.23")[0]
    env_edited = {**obj, "env": {"NCCL_ALGO": "Tree"}}
    assert "no longer matches its digest" in problems(env_edited, "0.5.23")[0]
    assert "rendered for SGLang 0.5.23, but SGLang 0.5.16" in problems(obj, "0.5.16")[0]
    assert "lacks digest" in problems({k: v for k, v in obj.items() if k != "digest"})[0]
    assert "no server settings object" in problems({})[0]


def test_every_flag_of_the_release_is_known_by_name_and_a_typo_gets_a_did_you_mean():
    settings = {"model_path": "/m", "chunked_prefil_size": 128}
    [problem] = validate_settings(settings, flag_table=TABLE_0523)
    assert "unknown server setting 'chunked_prefil_size' (did you mean 'chunked_prefill_size'?)" in problem
    assert "SGLang 0.5.23's flags" in problem
    assert validate_settings({"model_path": "/m", "chunked_prefill_size": 128}, flag_table=TABLE_0523) == []
    # Without the table only epforge's own keys are known.
    assert (
        "unknown server setting 'chunked_prefill_size'"
        in validate_settings({"model_path": "/m", "chunked_prefill_size": 128})[0]
    )
    # Kinds and choices come from the release's own parser.
    bad = validate_settings(
        {"model_path": "/m", "chunked_prefill_size": "lots", "mem_fraction_static": "most"},
        flag_table=TABLE_0523,
    )
    assert any("chunked_prefill_size (--chunked-prefill-size) must be an integer" in p for p in bad), bad
    assert any("mem_fraction_static (--mem-fraction-static) must be a number" in p for p in bad), bad
    [choice] = validate_settings({"model_path": "/m", "attention_backend": "trition"}, flag_table=TABLE_0523)
    assert "attention_backend (--attention-backend) must be one of" in choice
    assert "(did you mean 'triton'?)" in choice
    # The key is never a setting of its own: it travels through the launcher.
    assert (
        "unknown server setting 'admin_api_key'"
        in validate_settings({"model_path": "/m", "admin_api_key": "x"}, flag_table=TABLE_0523)[0]
    )


def test_flag_table_settings_render_by_their_kind_after_the_schema_flags():
    spec = TABLE_0523["flags"]
    bool_store_true = next(k for k, v in spec.items() if v["kind"] == "bool" and v["action"] == "store_true")
    listed = next(k for k, v in spec.items() if v["kind"] == "list" and not v["choices"])
    settings = {
        "model_path": "/m",
        "mem_fraction_static": 0.8,
        bool_store_true: True,
        listed: ["1", "2"],
        "attention_backend": "triton",
    }
    argv = build_server_argv(settings, sglang_version="0.5.23", flag_table=TABLE_0523)
    tail = argv[argv.index("30000") + 1 :]
    expected: list[str] = []
    for key in sorted(["mem_fraction_static", bool_store_true, listed, "attention_backend"]):
        flag = spec[key]["flag"]
        expected += {
            "mem_fraction_static": [flag, "0.8"],
            bool_store_true: [flag],
            listed: [flag, "1", "2"],
            "attention_backend": [flag, "triton"],
        }[key]
    assert tail == expected
    # false leaves a store_true flag out
    assert spec[bool_store_true]["flag"] not in build_server_argv(
        {**settings, bool_store_true: False}, sglang_version="0.5.23", flag_table=TABLE_0523
    )


def test_a_flag_set_twice_through_its_new_name_and_the_stable_key_is_refused():
    settings = {"model_path": "/m", "cuda_graph_max_bs": 16, "cuda_graph_max_bs_decode": 32}
    [problem] = validate_settings(settings, flag_table=TABLE_0523)
    assert "cuda_graph_max_bs_decode and cuda_graph_max_bs both set --cuda-graph-max-bs-decode" in problem
    extra = {"model_path": "/m", "chunked_prefill_size": 64, "extra_args": ["--chunked-prefill-size", "8"]}
    assert "extra_args repeats --chunked-prefill-size" in validate_settings(extra, flag_table=TABLE_0523)[0]


@pytest.mark.parametrize("typo", ["chunked_prefil_size", "mem_fraction_statik"])
def test_preflight_refuses_a_misspelt_sglang_flag_before_anything_changes(tmp_path, typo):
    rc, report = play(tmp_path, {"epforge_server": {"model_path": "/m", typo: 1}}, no_gpu_path())
    assert rc != 0
    task, msg = failure(report)
    assert task == "Refuse malformed server settings (shape, keys, types, ranges) before anything changes"
    assert f"unknown server setting '{typo}' (did you mean" in msg
    assert not fact_file(tmp_path).exists()


def test_an_extra_args_flag_the_release_does_not_know_is_refused_in_preflight(tmp_path):
    """Issue 'nothing let in' (12): extra_args are judged against the release's flag table (SGLang's own
    parser's flags) in preflight, before its fact is written - not only by the parser after the install."""
    assert validate_settings(
        {"model_path": "/m", "extra_args": ["--enable-metrics", "--chunked-prefil-size=8"]},
        flag_table=TABLE_0523,
    ) == [
        "extra_args names --chunked-prefil-size, which SGLang 0.5.23 does not know "
        "(did you mean --chunked-prefill-size?)"
    ]
    settings = {"model_path": "/m", "extra_args": ["--no-such-flag", "1"]}
    rc, report = play(tmp_path, {"epforge_server": settings}, no_gpu_path())
    assert rc != 0
    _task, msg = failure(report)
    assert "extra_args names --no-such-flag, which SGLang 0.5.23 does not know" in msg, msg
    assert not fact_file(tmp_path).exists()


TABLE_0510 = json.loads((ROOT / "data" / "sglang_flags" / "0.5.10.post1.json").read_text())


def test_renamed_dests_are_stable_keys_across_the_pinned_releases():
    # Every pair is a real rename in the data: the older dest in 0.5.10.post1, the newer one in 0.5.23.
    for old, new in RENAMED_DESTS:
        assert old in TABLE_0510["flags"] and new not in TABLE_0510["flags"], old
        assert new in TABLE_0523["flags"] and old not in TABLE_0523["flags"], new
    settings = {"model_path": "/m", "cuda_graph_bs": [1, 2, 4], "dsa_decode_backend": "flashmla_sparse"}
    new = build_server_argv(settings, sglang_version="0.5.23", flag_table=TABLE_0523)
    old = build_server_argv(settings, sglang_version="0.5.10.post1", flag_table=TABLE_0510)
    assert new[new.index("--cuda-graph-bs-decode") :][:4] == ["--cuda-graph-bs-decode", "1", "2", "4"]
    assert old[old.index("--cuda-graph-bs") :][:4] == ["--cuda-graph-bs", "1", "2", "4"]
    assert "--dsa-decode-backend" in new and "--nsa-decode-backend" in old
    [twice] = validate_settings(
        {"model_path": "/m", "cuda_graph_bs": [1], "cuda_graph_bs_decode": [2]}, flag_table=TABLE_0523
    )
    assert "cuda_graph_bs and cuda_graph_bs_decode both set --cuda-graph-bs-decode" in twice


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        ({"model_path": "/models/m\nExecStartPre=/bin/sh"}, "model_path"),
        ({"model_path": "/m", "env": {"NCCL_ALGO": "Ring\nLD_PRELOAD=/tmp/x.so"}}, "env.NCCL_ALGO"),
        ({"model_path": "/m", "extra_args": ["--x", "a\rb"]}, "extra_args[1]"),
        ({"model_path": "/m", "attention_backend": "triton\x00"}, "attention_backend"),
    ],
)
def test_control_characters_are_refused_in_every_value(settings, where):
    """Issue 'nothing let in' (12): a newline in a value would end a line of the unit or its environment file
    and start another (a variable or a directive of the caller's choosing)."""
    problems = validate_settings(settings, flag_table=TABLE_0523)
    assert any(p.startswith(f"{where} holds a control character") for p in problems), problems
