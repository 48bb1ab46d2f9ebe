"""Settings confirmation (plugins/module_utils/sglang_server/confirm.py): requested settings + a server_info
dict in,
a report out in which every requested setting is confirmed, mismatched or unconfirmed with the reason.

The server_info answers are REAL: SGLang 0.5.16 on a lent H200 (tests/fixtures/sglang_h200/README.md). The
settings are the ones that launch used (its README's flags), written as epforge settings. Further real
captures plug in the same way: a JSON dict in, a report out."""

from __future__ import annotations

import json

from conftest import FIXTURES

from ansible_collections.epforge.ep.plugins.module_utils.sglang_server.confirm import (
    CRITICAL,
    confirm_settings,
    describe_entry,
    unconfirmed_critical,
)

REAL = FIXTURES / "sglang_h200"
COMMON = {
    "model_path": "/root/smoke",
    "host": "127.0.0.1",
    "port": 30000,
    "extra_args": [
        "--attention-backend",
        "triton",
        "--grammar-backend",
        "none",
        "--sampling-backend",
        "pytorch",
        "--enforce-disable-flashinfer-allreduce-fusion",
    ],
}
# tp1-graph was launched with --tp-size 1 --cuda-graph-max-bs 32
GRAPH = {**COMMON, "tp_size": 1, "cuda_graph_max_bs": 32}


def real_info(tag: str) -> dict:
    return json.loads((REAL / f"{tag}-get_server_info.json").read_text())


def accounted(report: dict) -> list[str]:
    return sorted(e["key"] for kind in ("confirmed", "mismatched", "unconfirmed") for e in report[kind])


def test_real_launch_is_confirmed_setting_by_setting_with_the_renamed_key_mapped():
    info = real_info("tp1-graph")
    assert "cuda_graph_max_bs" not in info  # 0.5.16 reports the batch only under the new name
    report = confirm_settings(GRAPH, info, "0.5.16")
    assert report["mismatched"] == [] and report["unconfirmed"] == []
    confirmed = {e["key"]: e for e in report["confirmed"]}
    assert confirmed["cuda_graph_max_bs"] == {
        "key": "cuda_graph_max_bs",
        "requested": 32,
        "running": 32,
        "reported_as": "cuda_graph_max_bs_decode",
    }
    # pass-through flags are confirmed too, under their argparse dest
    assert confirmed["extra_args --attention-backend"]["running"] == "triton"
    assert confirmed["extra_args --enforce-disable-flashinfer-allreduce-fusion"]["running"] is True
    assert accounted(report) == sorted(
        [
            "model_path",
            "host",
            "port",
            "tp_size",
            "cuda_graph_max_bs",
            "extra_args --attention-backend",
            "extra_args --grammar-backend",
            "extra_args --sampling-backend",
            "extra_args --enforce-disable-flashinfer-allreduce-fusion",
        ]
    )
    assert describe_entry(confirmed["cuda_graph_max_bs"]) == (
        "cuda_graph_max_bs: requested 32, running 32 (reported as cuda_graph_max_bs_decode)"
    )


def test_a_setting_the_server_does_not_show_is_unconfirmed_with_the_reason_never_dropped():
    # the no-graph server reports the CUDA-graph batch as null: asking for 32 there cannot be confirmed
    report = confirm_settings(
        {**COMMON, "tp_size": 1, "cuda_graph_max_bs": 32}, real_info("tp1-nograph"), "0.5.16"
    )
    [entry] = report["unconfirmed"]
    assert entry["key"] == "cuda_graph_max_bs"
    assert entry["reason"] == "the running server reports 'cuda_graph_max_bs_decode' as null"
    # a release that reports it under neither name: both names are in the reason
    info = {k: v for k, v in real_info("tp1-graph").items() if not k.startswith("cuda_graph_max_bs")}
    [entry] = confirm_settings(GRAPH, info, "0.5.16")["unconfirmed"]
    assert entry == {
        "key": "cuda_graph_max_bs",
        "requested": 32,
        "reason": "the running server (SGLang 0.5.16) does not report 'cuda_graph_max_bs' "
        "(nor as cuda_graph_max_bs_decode) in its server info",
    }


def test_env_secrets_and_unknown_keys_are_listed_with_their_reason():
    settings = {
        **GRAPH,
        "api_key": "sk-never-returned",
        "env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"},
        "extra_args": [*COMMON["extra_args"], "--api-key=sk-never-returned", "--no-such-flag", "1"],
    }
    report = confirm_settings(settings, real_info("tp1-graph"), "0.5.16")
    reasons = {e["key"]: e["reason"] for e in report["unconfirmed"]}
    assert reasons["api_key"].startswith("a secret")
    assert reasons["env.NCCL_P2P_LEVEL"].startswith("an environment variable") and "env.NCCL_PROTO" in reasons
    assert reasons["extra_args --api-key"] == "a secret: not compared"
    assert "does not report 'no_such_flag'" in reasons["extra_args --no-such-flag"]
    assert "sk-never-returned" not in json.dumps(report)


def test_mismatch_and_strict_keys():
    report = confirm_settings(
        {**GRAPH, "tp_size": 2, "moe_a2a_backend": "deepep"}, real_info("tp1-graph"), "0.5.16"
    )
    assert {e["key"]: e["running"] for e in report["mismatched"]} == {"tp_size": 1, "moe_a2a_backend": "none"}
    assert unconfirmed_critical(report) == []
    # a server_info without tp_size and ep_size: both critical settings are unconfirmed
    info = {k: v for k, v in real_info("tp1-graph").items() if k not in ("tp_size", "ep_size")}
    report = confirm_settings({**GRAPH, "ep_size": 1}, info, "0.5.16")
    assert [e["key"] for e in unconfirmed_critical(report)] == ["tp_size", "ep_size"]
    assert set(CRITICAL) == {"tp_size", "ep_size", "moe_a2a_backend", "deepep_mode"}


def test_false_booleans_match_an_unset_value_and_numbers_match_their_strings():
    info = real_info("tp1-graph")
    report = confirm_settings({"disable_custom_all_reduce": False, "port": "30000", "tp_size": "1"}, info)
    assert report["mismatched"] == [] and report["unconfirmed"] == []
