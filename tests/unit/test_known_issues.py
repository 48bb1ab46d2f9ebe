"""The known-issues table (data/known_issues.yml), its evaluator and module.

Every row of the real table has a matching and a non-matching case here; a row without cases fails
test_every_row_has_cases, so a new row cannot land untested.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import epforge_known_issues as module_under_test
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from gpu_fact_samples import GPU_NAMES, NO_GPU, gpu_facts, sm120_box
from moduletools import ASK_INVOCATION, run_main

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import (
    TableError,
    build_context,
    evaluate,
    format_adjustment,
    format_finding,
    matches,
    validate_table,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
CU128 = yaml.safe_load((ROOT / "stacks" / "cu128.yml").read_text())["epforge_stack_spec"]
SM120_PCIE = gpu_facts("12.0", 8, "pcie")
# 4 GPUs where only two pairs have peer reads (as nvidia_gpu_facts reads tests/fixtures/nvidia-smi/
# synthetic-4gpu-partial-p2p.txt)
PARTIAL_P2P = {
    **gpu_facts("12.0", 4, "pcie"),
    "peer_access": {
        "status": "partial",
        "pairs": 6,
        "ok_pairs": 2,
        "error": "",
        "missing": ["GPU0-GPU2 CNS", "GPU0-GPU3 CNS", "GPU1-GPU2 CNS", "GPU1-GPU3 CNS"],
    },
}
H200_NVLINK = gpu_facts("9.0", 2, "nvlink")
# The fabric (tests/fixtures/fabric/sysfs_trees.py, WRITTEN trees): GPUs 0-3 behind a switch under socket 0,
# 4-7 under socket 1. A badly set up box (ACS redirect on every downstream port, IOMMU translating, GPU 5 at
# x8, BAR1 256 MiB) and the same box set up well.
FABRIC_BAD = sm120_box()
FABRIC_GOOD = sm120_box(
    acs_redirect=False, iommu="identity", narrow={}, bar1_mib=131072, cmdline="ro intel_iommu=on iommu=pt"
)


def run(gpu: dict, stack: dict, server: dict) -> dict:
    return evaluate(TABLE, gpu, stack, server)


def severity_list(result: dict, severity: str) -> list[dict]:
    return result["findings"][{"error": "errors", "warning": "warnings", "adjust": "adjustments"}[severity]]


def ids(result: dict, severity: str) -> list[str]:
    return [f["id"] for f in severity_list(result, severity)]


# id -> (severity, [matching cases], [non-matching cases]); a case is (gpu facts, stack, server settings).
CASES = {
    "tp_size_exceeds_gpus": (
        "error",
        [
            (H200_NVLINK, CU130, {"tp_size": 8}),
            (H200_NVLINK, CU130, {"tp_size": "4"}),  # extra vars arrive as text
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2}),
            (H200_NVLINK, CU130, {"tp_size": 4, "nnodes": 2}),
            (NO_GPU, CU130, {"tp_size": 8}),  # a build host has no GPU count to compare with
        ],
    ),
    "multi_node_without_dist_init_addr": (
        "error",
        [
            (SM120_PCIE, CU130, {"tp_size": 16, "nnodes": 2}),
            (NO_GPU, CU130, {"nnodes": "2", "node_rank": 1}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 16, "nnodes": 2, "dist_init_addr": "10.0.0.1:5000"}),
            (SM120_PCIE, CU130, {"tp_size": 8}),
        ],
    ),
    "flashinfer_allreduce_fusion_sm120": (
        "adjust",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "enable_flashinfer_allreduce_fusion": True}),
            (NO_GPU, CU130, {"enable_flashinfer_allreduce_fusion": "yes"}),  # target archs from the stack
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "enable_flashinfer_allreduce_fusion": True}),
            (SM120_PCIE, CU130, {"tp_size": 8, "enable_flashinfer_allreduce_fusion": False}),
        ],
    ),
    "flashinfer_allreduce_fusion_backend_sm120": (
        "error",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "flashinfer_allreduce_fusion_backend": "auto"}),
            (SM120_PCIE, CU130, {"tp_size": 4, "flashinfer_allreduce_fusion_backend": "trtllm"}),
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "flashinfer_allreduce_fusion_backend": "auto"}),
            (SM120_PCIE, CU130, {"tp_size": 8}),
        ],
    ),
    "torch_symm_mem_sm120_pcie": (
        "error",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "enable_torch_symm_mem": True}),
            (
                gpu_facts("9.0", 4, "pcie"),
                CU130,
                {"tp_size": 4, "enable_torch_symm_mem": True},
            ),  # H200 NVL over PCIe
            (NO_GPU, CU130, {"enable_torch_symm_mem": True}),  # the stack targets sm_120
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "enable_torch_symm_mem": True}),
            (SM120_PCIE, CU130, {"tp_size": 8}),
        ],
    ),
    "custom_allreduce_pcie_multi_gpu": (
        "adjust",
        [
            (SM120_PCIE, CU130, {"tp_size": 8}),
            (gpu_facts("12.0", 4, "mixed"), CU130, {"tp_size": 4, "disable_custom_all_reduce": False}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 2}),
            (gpu_facts("9.0", 8, "nvlink"), CU130, {"tp_size": 8}),
            (SM120_PCIE, CU130, {"tp_size": 8, "disable_custom_all_reduce": True}),
        ],
    ),
    "pcie_ipc_allreduce_opt_in": (
        "warning",
        [
            (SM120_PCIE, CU130, {"tp_size": 8}),  # SGLang 0.5.23 with FlashInfer 0.7.2
            # independent of SGLang's own custom all-reduce, which the flag turns off
            (gpu_facts("12.0", 4, "mixed"), CU130, {"tp_size": "4", "disable_custom_all_reduce": True}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}}),
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"}}),  # answered
            (SM120_PCIE, CU130, {"tp_size": 6}),  # the kernels build 2, 4 or 8 ranks only
            (SM120_PCIE, CU130, {"tp_size": 1}),
            (SM120_PCIE, CU130, {"tp_size": 8, "enable_deterministic_inference": True}),
            (SM120_PCIE, CU130, {"tp_size": 8, "nnodes": 2, "dist_init_addr": "10.0.0.1:5000"}),
            (SM120_PCIE, CU128, {"tp_size": 8}),  # SGLang 0.5.10.post1 lacks it
            # SGLang 0.5.21 carries it but pins FlashInfer 0.6.18, which lacks the kernels
            (
                SM120_PCIE,
                {**CU130, "sglang": {"version": "0.5.21"}, "flashinfer": {"version": "0.6.18"}},
                {"tp_size": 8},
            ),
            (gpu_facts("9.0", 8, "nvlink"), CU130, {"tp_size": 8}),
            (NO_GPU, CU130, {"tp_size": 8}),  # a build host: no interconnect to judge
        ],
    ),
    "deepep_normal_mode_needs_nvlink": (
        "adjust",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep"}),  # auto uses normal for prefill
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "normal"}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep"}),
            (SM120_PCIE, CU130, {"tp_size": 8}),
        ],
    ),
    "deepep_interconnect_unknown": (
        "warning",
        [
            (gpu_facts("12.0", 4, "unknown"), CU130, {"tp_size": 4, "moe_a2a_backend": "deepep"}),
        ],
        [
            (
                gpu_facts("12.0", 4, "unknown"),
                CU130,
                {"tp_size": 4, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"},
            ),
            (NO_GPU, CU130, {"moe_a2a_backend": "deepep"}),  # a build host: no GPU to ask
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep"}),
        ],
    ),
    "deepep_normal_mode_disables_cuda_graph": (
        "warning",
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep", "deepep_mode": "normal"}),
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep", "deepep_mode": "auto"}),
            # On PCIe normal mode is adjusted to low_latency first, so this warning no longer applies.
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "normal"}),
        ],
    ),
    "deepep_ep_size_differs_from_tp_size": (
        "adjust",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "ep_size": 4, "moe_a2a_backend": "deepep"}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "ep_size": "8", "moe_a2a_backend": "deepep"}),
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep"}),
            (SM120_PCIE, CU130, {"tp_size": 8, "ep_size": 4}),
        ],
    ),
    "deepep_deepgemm_disabled_sm120": (
        "warning",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (NO_GPU, CU128, {"moe_a2a_backend": "DeepEP"}),
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep"}),
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "none"}),
        ],
    ),
    "nccl_algo_tree_with_cuda_graphs": (
        "error",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"NCCL_ALGO": "Tree"}}),
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"NCCL_ALGO": "allreduce:tree"}}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"NCCL_ALGO": "^Tree"}}),  # excludes Tree
            (SM120_PCIE, CU130, {"tp_size": 8, "env": {"NCCL_ALGO": "Ring"}}),
            (SM120_PCIE, CU130, {"tp_size": 8, "disable_cuda_graph": True, "env": {"NCCL_ALGO": "Tree"}}),
        ],
    ),
    "deepep_unquantized_low_latency_only": (
        "warning",
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep"}),  # auto: normal for prefill
            (NO_GPU, CU130, {"moe_a2a_backend": "deepep", "deepep_mode": "normal"}),
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            # on PCIe the mode is adjusted to low_latency first
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep"}),
            (H200_NVLINK, CU130, {"tp_size": 2}),
        ],
    ),
    "deepep_unquantized_no_runner_sm120": (
        "warning",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (NO_GPU, CU130, {"moe_a2a_backend": "deepep"}),  # the stack targets sm_120
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (SM120_PCIE, CU130, {"tp_size": 8}),
        ],
    ),
    "deepep_v2_needs_deep_gemm_fp8_sm120": (
        "error",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep_v2"}),
            (NO_GPU, CU130, {"moe_a2a_backend": "deepep_v2"}),
        ],
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep_v2"}),
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep"}),
        ],
    ),
    "deepep_v2_requirements": (
        "warning",
        [
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep_v2"}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep_v2"}),  # the error row instead
            (H200_NVLINK, CU130, {"tp_size": 2, "moe_a2a_backend": "deepep"}),
        ],
    ),
    "deepep_partial_peer_access": (
        "error",
        [
            (PARTIAL_P2P, CU130, {"tp_size": 4, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (PARTIAL_P2P, CU130, {"tp_size": 4, "moe_a2a_backend": "deepep_v2"}),
        ],
        [
            (PARTIAL_P2P, CU130, {"tp_size": 4}),
            (
                {**PARTIAL_P2P, "peer_access": {"status": "full"}},
                CU130,
                {"tp_size": 4, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"},
            ),
        ],
    ),
    "deepep_peer_access_unknown": (
        "warning",
        [
            (SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}),
            (
                {**SM120_PCIE, "peer_access": {"status": "unknown"}},
                CU130,
                {"tp_size": 8, "moe_a2a_backend": "deepep"},
            ),
        ],
        [
            (
                {**SM120_PCIE, "peer_access": {"status": "full"}},
                CU130,
                {"tp_size": 8, "moe_a2a_backend": "deepep"},
            ),
            (NO_GPU, CU130, {"moe_a2a_backend": "deepep"}),
            (
                {**gpu_facts("12.0", 1, "single"), "peer_access": {"status": "unknown"}},
                CU130,
                {"moe_a2a_backend": "deepep"},
            ),
        ],
    ),
    "flashinfer_jit_nvcc_before_12_9_sm120": (
        "adjust",
        [
            (SM120_PCIE, CU128, {"tp_size": 8, "env": {"NCCL_P2P_LEVEL": "SYS"}}),
            (NO_GPU, CU128, {}),
        ],
        [
            (SM120_PCIE, CU130, {"tp_size": 8}),
            (SM120_PCIE, CU128, {"tp_size": 8, "env": {"FLASHINFER_CUDA_ARCH_LIST": "12.0"}}),
            (H200_NVLINK, CU128, {"tp_size": 2}),
        ],
    ),
    "fabric_acs_redirect_tp_group": (
        "error",
        [
            (FABRIC_BAD, CU130, {"tp_size": 2}),  # GPUs 0 and 1: one switch, ACS redirect on both ports
            (FABRIC_BAD, CU130, {"tp_size": 8}),
        ],
        [
            (FABRIC_BAD, CU130, {"tp_size": 2, "env": {"NCCL_P2P_DISABLE": "1"}}),  # no peer traffic asked
            (FABRIC_BAD, CU130, {"tp_size": 1}),
            (FABRIC_GOOD, CU130, {"tp_size": 8}),
            (NO_GPU, CU130, {"tp_size": 8}),
        ],
    ),
    "fabric_acs_redirect": (
        "warning",
        [(FABRIC_BAD, CU130, {"tp_size": 1})],
        [(FABRIC_BAD, CU130, {"tp_size": 2}), (FABRIC_GOOD, CU130, {"tp_size": 1}), (SM120_PCIE, CU130, {})],
    ),
    "fabric_iommu_translating": (
        "warning",
        [(FABRIC_BAD, CU130, {"tp_size": 1})],
        [(FABRIC_GOOD, CU130, {"tp_size": 8}), (NO_GPU, CU130, {}), (SM120_PCIE, CU130, {"tp_size": 8})],
    ),
    "fabric_tp_group_across_sockets": (
        "warning",
        [
            (FABRIC_GOOD, CU130, {"tp_size": 8}),
            (FABRIC_GOOD, CU130, {"tp_size": 2, "env": {"CUDA_VISIBLE_DEVICES": "0,4"}}),
        ],
        [
            (FABRIC_GOOD, CU130, {"tp_size": 4}),
            (FABRIC_GOOD, CU130, {"tp_size": 4, "base_gpu_id": 4}),
            (FABRIC_GOOD, CU130, {"tp_size": 2, "base_gpu_id": 3, "env": {"CUDA_VISIBLE_DEVICES": "1,2"}}),
        ],
    ),
    "fabric_link_below_max": (
        "warning",
        [(FABRIC_BAD, CU130, {"tp_size": 1})],
        [(FABRIC_GOOD, CU130, {"tp_size": 8})],
    ),
    "fabric_bar1_small": (
        "warning",
        [(FABRIC_BAD, CU130, {"tp_size": 1})],
        [(FABRIC_GOOD, CU130, {"tp_size": 8}), (NO_GPU, CU130, {})],
    ),
}


def test_table_is_valid_and_every_row_has_cases():
    assert validate_table(TABLE) == []
    assert set(CASES) == {row["id"] for row in TABLE["issues"]}
    for row in TABLE["issues"]:
        assert CASES[row["id"]][0] == row["severity"], row["id"]


def test_required_rows_present():
    """The dead ends issue 2 names, by id (renaming one must be deliberate)."""
    assert {
        "flashinfer_allreduce_fusion_sm120",
        "torch_symm_mem_sm120_pcie",
        "custom_allreduce_pcie_multi_gpu",
        "deepep_normal_mode_needs_nvlink",
        "nccl_algo_tree_with_cuda_graphs",
        "flashinfer_jit_nvcc_before_12_9_sm120",
        "deepep_ep_size_differs_from_tp_size",
        "deepep_deepgemm_disabled_sm120",
        "deepep_unquantized_no_runner_sm120",
        "deepep_v2_needs_deep_gemm_fp8_sm120",
        "deepep_partial_peer_access",
    } <= set(CASES)
    for row in TABLE["issues"]:
        assert row["source"] and row["remedy"] and row["consequence"]


def test_sources_are_public_or_a_project_doc_section():
    """A source is a URL, an upstream file, or a section of a doc in docs/ that exists - never a file
    users do not have (the project's working notes)."""
    docs = {path.name: path.read_text() for path in (ROOT / "docs").glob("*.md")}
    for row in TABLE["issues"]:
        source = " ".join(row["source"].split())
        assert "stack-facts" not in source and "../shared" not in source, row["id"]
        cited = re.findall(r"docs/([\w.-]+\.md), ((?:\"[^\"]+\"(?: and )?)+)", source)
        for doc, sections in cited:
            for section in re.findall(r'"([^"]+)"', sections):
                assert f"## {section}" in docs[doc], (row["id"], doc, section)
        assert cited or "https://" in source or "sglang python/" in source, row["id"]


@pytest.mark.parametrize(("issue_id", "case"), [(i, c) for i, (_, match, _) in CASES.items() for c in match])
def test_row_matches(issue_id, case):
    severity = CASES[issue_id][0]
    result = run(*case)
    assert issue_id in ids(result, severity)
    assert issue_id in result["matched"]


@pytest.mark.parametrize(
    ("issue_id", "case"), [(i, c) for i, (_, _, nomatch) in CASES.items() for c in nomatch]
)
def test_row_does_not_match(issue_id, case):
    result = run(*case)
    assert issue_id not in result["matched"]


# ---------------------------------------------------------------- what the rows do


def test_torch_symm_mem_error_names_problem_remedy_and_source():
    result = run(SM120_PCIE, CU130, {"tp_size": 8, "enable_torch_symm_mem": True})
    [error] = result["findings"]["errors"]
    line = format_finding(error)
    assert "KeyError: 12" in line and "NVLink multicast" in line
    assert "Remedy: remove enable_torch_symm_mem" in line and "torch_symm_mem.py" in line


def test_deepep_on_pcie_becomes_low_latency_with_the_reason():
    result = run(SM120_PCIE, CU130, {"tp_size": 8, "moe_a2a_backend": "deepep"})
    [adj] = [a for a in result["findings"]["adjustments"] if a["id"] == "deepep_normal_mode_needs_nvlink"]
    assert adj["changes"] == {"deepep_mode": {"from": "auto", "to": "low_latency", "requested": False}}
    assert result["adjusted_settings"]["deepep_mode"] == "low_latency"
    assert result["settings_changes"]["deepep_mode"] == "low_latency"
    assert "deepep_mode: auto -> low_latency" in format_adjustment(adj)
    assert "NVLink" in adj["consequence"]


def test_ep_size_takes_tp_size():
    result = run(
        SM120_PCIE,
        CU130,
        {"tp_size": 8, "ep_size": 4, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"},
    )
    assert result["adjusted_settings"]["ep_size"] == 8
    [adj] = [a for a in result["findings"]["adjustments"] if a["id"] == "deepep_ep_size_differs_from_tp_size"]
    assert adj["changes"]["ep_size"] == {"from": 4, "to": 8, "requested": True}


def test_flashinfer_arch_env_merges_into_existing_env():
    result = run(SM120_PCIE, CU128, {"tp_size": 8, "env": {"NCCL_P2P_LEVEL": "SYS"}})
    assert result["adjusted_settings"]["env"] == {
        "NCCL_P2P_LEVEL": "SYS",
        "FLASHINFER_CUDA_ARCH_LIST": "12.0a",
    }
    assert result["settings_changes"]["env"] == {"FLASHINFER_CUDA_ARCH_LIST": "12.0a"}
    [adj] = [
        a for a in result["findings"]["adjustments"] if a["id"] == "flashinfer_jit_nvcc_before_12_9_sm120"
    ]
    assert "env.FLASHINFER_CUDA_ARCH_LIST=12.0a" in format_adjustment(adj)


def test_example_inventory_of_the_motivating_host():
    """inventory/examples/rtx-pro-6000.yml on an 8x sm_120 PCIe host with stack cu128: no error."""
    inventory = yaml.safe_load((ROOT / "inventory" / "examples" / "rtx-pro-6000.yml").read_text())
    server = inventory["all"]["vars"]["epforge_server"]
    result = run(SM120_PCIE, CU128, server)
    assert result["findings"]["errors"] == []
    assert set(ids(result, "adjust")) == {
        "custom_allreduce_pcie_multi_gpu",
        "flashinfer_jit_nvcc_before_12_9_sm120",
    }
    assert ids(result, "warning") == [
        "deepep_deepgemm_disabled_sm120",
        "deepep_unquantized_no_runner_sm120",
        "deepep_peer_access_unknown",
    ]
    assert result["adjusted_settings"]["deepep_mode"] == "low_latency"  # already requested: untouched
    assert result["adjusted_settings"]["env"]["NCCL_PROTO"] == "LL,LL128,Simple"


def test_no_gpu_and_no_settings_find_nothing():
    result = run(NO_GPU, CU130, {})
    assert result["matched"] == [] and result["adjusted_settings"] == {} and result["settings_changes"] == {}
    assert result["context"]["target"] == {"archs": ["12.0"], "source": "stack"}


def test_secrets_never_come_back():
    server = {
        "tp_size": 8,
        "api_key": "sk-secret",
        "moe_a2a_backend": "deepep",
        "env": {"HF_TOKEN": "hf_secret", "NCCL_P2P_LEVEL": "SYS"},
    }
    before = copy.deepcopy(server)
    result = run(SM120_PCIE, CU128, server)
    assert server == before  # the input is not modified
    assert "sk-secret" not in repr(result) and "hf_secret" not in repr(result)
    assert result["adjusted_settings"]["env"]["NCCL_P2P_LEVEL"] == "SYS"
    # What the docs tell callers to do gives the full adjusted settings, secrets included.
    launched = {**server, **{k: v for k, v in result["settings_changes"].items() if k != "env"}}
    launched["env"] = {**server["env"], **result["settings_changes"].get("env", {})}
    assert launched["api_key"] == server["api_key"]
    assert launched["env"]["HF_TOKEN"] == server["env"]["HF_TOKEN"]
    assert launched["deepep_mode"] == "low_latency"
    assert launched["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"


# ---------------------------------------------------------------- the grammar


def context(**server) -> dict:
    return build_context(SM120_PCIE, CU130, server, {"tp_size": 1})


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        ({"fact": "gpu.interconnect", "equals": "PCIe"}, True),
        ({"fact": "gpu.interconnect", "not_equals": "pcie"}, False),
        ({"fact": "gpu.interconnect", "in": ["nvlink", "pcie"]}, True),
        ({"fact": "gpu.interconnect", "not_in": ["nvlink"]}, True),
        ({"fact": "gpu.count", "gt": 7}, True),
        ({"fact": "gpu.count", "ge": 9}, False),
        ({"fact": "gpu.count", "lt": 9}, True),
        ({"fact": "gpu.count", "le": 7}, False),
        ({"fact": "stack.cuda", "version_lt": "13.1"}, True),
        ({"fact": "stack.cuda", "version_ge": "13.1"}, False),
        ({"fact": "gpu.archs", "any_in": ["9.0", "12.0"]}, True),
        ({"fact": "gpu.archs", "all_in": ["9.0"]}, False),
        ({"fact": "gpu.archs", "any_not_in": ["12.0"]}, False),
        ({"fact": "server.tp_size", "eq_fact": "gpu.count"}, False),
        ({"fact": "server.tp_size", "lt_fact": "gpu.count"}, True),
        ({"fact": "server.tp_size", "gt_fact": "gpu.count"}, False),
        ({"fact": "server.missing", "present": False}, True),
        ({"fact": "server.missing", "equals": "x"}, False),  # a missing fact matches nothing
        ({"fact": "server.missing", "not_equals": "x"}, False),
        ({"fact": "gpu.archs", "equals": "12.0"}, False),  # a list is no scalar
        ({"fact": "gpu.interconnect", "gt": 1}, False),  # text is no number
        ({"fact": "gpu.interconnect", "matches": "^pc"}, True),
        ({"all": [{"fact": "gpu.count", "equals": 8}, {"fact": "server.tp_size", "equals": "1"}]}, True),
        ({"any": [{"fact": "gpu.count", "equals": 2}, {"fact": "gpu.count", "equals": 3}]}, False),
        ({"not": {"fact": "gpu.count", "equals": 2}}, True),
    ],
)
def test_operators(cond, expected):
    assert matches(cond, context()) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        ("true", True),
        ("Yes", True),
        (1, True),
        ("on", True),
        (False, False),
        ("false", False),
        ("0", False),
        (None, False),
    ],
)
def test_truthy_accepts_yaml_and_extra_vars_booleans(value, expected):
    assert matches({"fact": "server.flag", "truthy": True}, context(flag=value)) is expected


def test_truthy_does_not_match_text_that_is_no_boolean():
    assert matches({"fact": "server.flag", "truthy": True}, context(flag="maybe")) is False
    assert matches({"fact": "server.flag", "truthy": False}, context(flag="maybe")) is False


def row(**overrides) -> dict:
    base = {
        "id": "r",
        "title": "t",
        "severity": "warning",
        "consequence": "c",
        "remedy": "r",
        "source": "s",
        "seen_on": {"sglang": "0.5.23"},
        "condition": {"fact": "gpu.count", "gt": 1},
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        (row(condition={"fact": "gpu.count", "bigger": 1}), "unknown operator"),
        (row(condition={"fact": "gpu.count", "gt": 1, "lt": 3}), "exactly one operator"),
        (row(condition={"fact": "host.name", "equals": "x"}), "must start with one of"),
        (row(condition={"fact": "gpu.count", "in": "pcie"}), "'in' takes a list"),
        (row(condition={"fact": "gpu.count", "gt": "many"}), "'gt' takes a number"),
        (row(condition={"fact": "server.x", "matches": "("}), "no regular expression"),
        (row(condition={"fact": "server.x", "truthy": "yes"}), "takes true or false"),
        (row(condition={"all": []}), "non-empty list"),
        (row(condition={"all": [{"fact": "gpu.count", "gt": 1}], "fact": "x"}), "must stand alone"),
        (row(condition="{{ gpu.count > 1 }}"), "must be a non-empty mapping"),  # no templates
        (row(severity="fatal"), "severity 'fatal'"),
        (row(severity="adjust"), "needs 'adjust'"),
        (row(adjust={"x": 1}), "only severity adjust rows"),
        (row(severity="adjust", adjust={"x": {"from": "elsewhere"}}), "'from' takes a fact path"),
        (row(remedy=""), "missing remedy"),
        (row(seen_on=None), "missing seen_on"),
        (row(seen_on={"deepgemm": "1.0"}), "unknown component deepgemm"),
        (row(holds_through={"sglang": "latest"}), "'latest' is not a version"),
    ],
)
def test_validation_names_the_problem(bad_row, message):
    problems = validate_table({"issues": [bad_row]})
    assert any(message in p for p in problems), problems
    with pytest.raises(TableError, match="issue 'r'"):
        evaluate({"issues": [bad_row]}, SM120_PCIE, CU130, {})


def test_validation_of_the_table_shape():
    assert validate_table([]) == [
        "the known-issues table must be a mapping with keys server_defaults and issues"
    ]
    assert "issues must be a non-empty list of rows" in validate_table({"issues": []})
    assert any("duplicate id" in p for p in validate_table({"issues": [row(), row()]}))


def test_adjustments_chain_until_nothing_changes():
    """A later adjust row sees what an earlier one set (rows are re-read after every change)."""
    table = {
        "issues": [
            row(id="second", severity="adjust", condition={"fact": "server.a", "equals": 1}, adjust={"b": 2}),
            row(
                id="first",
                severity="adjust",
                condition={"fact": "server.start", "truthy": True},
                adjust={"a": 1},
            ),
            row(id="warn", severity="warning", condition={"fact": "server.b", "equals": 2}),
            row(id="gone", severity="error", condition={"fact": "server.start", "truthy": False}),
        ]
    }
    result = evaluate(table, NO_GPU, CU130, {"start": True})
    assert [a["id"] for a in result["findings"]["adjustments"]] == ["first", "second"]
    assert result["adjusted_settings"] == {"start": True, "a": 1, "b": 2}
    assert ids(result, "warning") == ["warn"] and result["findings"]["errors"] == []


# ---------------------------------------------------------------- the module


def run_module(args: dict) -> tuple[str, dict]:
    return run_main(module_under_test, args, capture_warnings=True)


def test_module_fails_on_an_error_row_with_problem_and_remedy():
    how, result = run_module(
        {
            "table": TABLE,
            "gpu_facts": SM120_PCIE,
            "stack": CU130,
            "server": {"tp_size": 8, "enable_torch_symm_mem": True, "api_key": "sk-1"},
        }
    )
    assert how == "fail"
    assert result["msg"].startswith("1 known dead end(s) in the requested server settings: [torch_symm_mem")
    assert "KeyError: 12" in result["msg"] and "Remedy:" in result["msg"]
    assert result["matched"] == [
        "torch_symm_mem_sm120_pcie",
        "pcie_ipc_allreduce_opt_in",
        "custom_allreduce_pcie_multi_gpu",
    ]
    assert "sk-1" not in repr(result)


def test_module_returns_errors_when_told_not_to_fail():
    how, result = run_module(
        {
            "table": TABLE,
            "gpu_facts": SM120_PCIE,
            "stack": CU130,
            "fail_on_error": False,
            "server": {"tp_size": 8, "env": {"NCCL_ALGO": "Tree"}},
        }
    )
    assert how == "exit" and result["changed"] is False
    assert [e["id"] for e in result["findings"]["errors"]] == ["nccl_algo_tree_with_cuda_graphs"]
    assert result["messages"][0].startswith("ERROR [nccl_algo_tree_with_cuda_graphs]")


def test_module_reports_adjustments_and_warnings():
    how, result = run_module(
        {
            "table": TABLE,
            "gpu_facts": SM120_PCIE,
            "stack": CU130,
            "server": {"tp_size": 8, "moe_a2a_backend": "deepep"},
        }
    )
    assert how == "exit"
    assert result["settings_changes"] == {"disable_custom_all_reduce": True, "deepep_mode": "low_latency"}
    assert [m.split(" ", 2)[:2] for m in result["messages"]] == [
        ["ADJUSTED", "[custom_allreduce_pcie_multi_gpu]"],
        ["ADJUSTED", "[deepep_normal_mode_needs_nvlink]"],
        ["WARNING", "[pcie_ipc_allreduce_opt_in]"],
        ["WARNING", "[deepep_deepgemm_disabled_sm120]"],
        ["WARNING", "[deepep_unquantized_no_runner_sm120]"],
        ["WARNING", "[deepep_peer_access_unknown]"],
    ]
    assert len(result["_warnings"]) == 4 and "PCIe-IPC" in result["_warnings"][0]
    assert "DeepGEMM" in result["_warnings"][1]


def test_module_refuses_a_malformed_table():
    how, result = run_module({"table": {"issues": [row(severity="fatal")]}, "stack": CU130})
    assert how == "fail"
    assert result["msg"].startswith("the known-issues table is malformed: issue 'r': severity 'fatal'")
    assert "fix data/known_issues.yml" in result["msg"]


def test_module_output_masks_secrets_even_in_its_invocation(capsys):
    """The real exit path (JSON on stdout, as Ansible reads it): secrets are masked, with -vvv too."""
    server = {"tp_size": 8, "api_key": "sk-live-123", "env": {"HF_TOKEN": "hf_abcdef", "NCCL_PROTO": "LL"}}
    # the invocation record, asked for where ansible-core adds it only when asked (2.21)
    args = {"table": TABLE, "gpu_facts": SM120_PCIE, "stack": CU130, "server": server}
    with (
        patch_module_args({**args, **ASK_INVOCATION}),
        pytest.raises(SystemExit) as done,
    ):
        module_under_test.main()
    assert done.value.code == 0
    out = capsys.readouterr().out
    result = json.loads(out)
    assert "sk-live-123" not in out and "hf_abcdef" not in out
    assert result["invocation"]["module_args"]["server"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert result["invocation"]["module_args"]["server"]["env"]["NCCL_PROTO"] == "LL"
    assert result["settings_changes"] == {"disable_custom_all_reduce": True}


def test_the_preflight_fact_gpu_summary_is_valid_gpu_facts():
    """A later play without nvidia_gpu_facts can pass ansible_local.epforge_preflight.gpu instead."""
    summary = {
        "available": True,
        "reason": "",
        "gpu_count": 8,
        "names": [GPU_NAMES["12.0"]],
        "archs": ["12.0"],
        "interconnect": "pcie",
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
    }
    server = {"tp_size": 8, "moe_a2a_backend": "deepep", "enable_flashinfer_allreduce_fusion": True}
    full, short = run(SM120_PCIE, CU128, server), run(summary, CU128, server)
    assert short["matched"] == full["matched"] and short["settings_changes"] == full["settings_changes"]
    assert short["context"]["gpu"] == full["context"]["gpu"]


# ---------------------------------------------------------------- releases (installed.*)

FUSION_ON_SM120 = {"tp_size": 8, "enable_flashinfer_allreduce_fusion": True}


def released(sglang: str) -> dict:
    return {
        "source": "env",
        "sglang": sglang,
        "flashinfer": "0.7.2",
        "torch": "2.14.1+cu130",
        "nccl": "2.28.9",
    }


def test_the_same_settings_with_two_sglang_releases_get_two_verdicts():
    """flashinfer_allreduce_fusion_sm120 is known through SGLang 0.5.23 (holds_through): there the fusion is
    turned off (adjust); on a newer release, where SGLang may have enabled FlashInfer's SM12x kernel
    (flashinfer#3903), the same row only warns that it was not checked, and the settings stay as asked."""
    known = evaluate(TABLE, SM120_PCIE, CU130, FUSION_ON_SM120, installed=released("0.5.23"))
    assert "flashinfer_allreduce_fusion_sm120" in ids(known, "adjust")
    assert known["adjusted_settings"]["enable_flashinfer_allreduce_fusion"] is False

    newer = evaluate(TABLE, SM120_PCIE, CU130, FUSION_ON_SM120, installed=released("0.6.1"))
    assert "flashinfer_allreduce_fusion_sm120" not in ids(newer, "adjust")
    warning = next(
        w for w in severity_list(newer, "warning") if w["id"] == "flashinfer_allreduce_fusion_sm120"
    )
    assert warning["doubtful"] == {"was": "adjust", "newer": ["sglang 0.6.1 (known through 0.5.23)"]}
    assert "not checked" in warning["consequence"] and "reported, not applied" in warning["consequence"]
    assert newer["adjusted_settings"]["enable_flashinfer_allreduce_fusion"] is True
    # custom allreduce over PCIe: the same two verdicts
    assert "custom_allreduce_pcie_multi_gpu" in ids(known, "adjust")
    assert "custom_allreduce_pcie_multi_gpu" in ids(newer, "warning")


def test_before_the_install_the_stacks_planned_releases_are_judged():
    result = evaluate(TABLE, SM120_PCIE, CU130, FUSION_ON_SM120)
    assert result["context"]["installed"] == {
        "source": "stack",
        "sglang": CU130["sglang"]["version"],
        "flashinfer": CU130["flashinfer"]["version"],
        "torch": CU130["torch"]["version"],
        "nccl": "",
    }
    assert "flashinfer_allreduce_fusion_sm120" in ids(result, "adjust")


def test_a_condition_can_compare_installed_releases():
    ctx = build_context(SM120_PCIE, CU130, {}, installed=released("0.5.23"))
    assert matches({"fact": "installed.nccl", "version_ge": "2.28"}, ctx)
    assert not matches({"fact": "installed.sglang", "version_ge": "0.6"}, ctx)
    assert not matches({"fact": "installed.nccl", "version_ge": "2.28"}, build_context(SM120_PCIE, CU130, {}))


def test_every_row_says_which_releases_it_was_seen_on():
    for row_ in TABLE["issues"]:
        assert row_["seen_on"] and all(str(v).strip() for v in row_["seen_on"].values()), row_["id"]


def test_after_the_install_another_verdict_refuses_the_launch(tmp_path):
    """Module epforge_known_issues with env (role final_env): the releases come from the env's dist-info names
    (nothing imported). The stack's SGLang gives preflight's verdict again; a newer SGLang in the env gives
    another one, and the run is refused, as the argv is not changed after the install."""
    expected = ["custom_allreduce_pcie_multi_gpu", "flashinfer_allreduce_fusion_sm120"]
    for sglang, outcome in (("0.5.23", "exit"), ("0.6.1", "fail")):
        site = tmp_path / sglang / "lib" / "python3.11" / "site-packages"
        for dist in (
            f"sglang-{sglang}",
            "flashinfer_python-0.7.2",
            "torch-2.14.1+cu130",
            "nvidia_nccl_cu13-2.28.9",
        ):
            (site / f"{dist}.dist-info").mkdir(parents=True)
        args = {
            "table": TABLE,
            "gpu_facts": SM120_PCIE,
            "stack": CU130,
            "server": FUSION_ON_SM120,
            "env": str(tmp_path / sglang),
            "expect_adjustments": expected,
        }
        how, result = run_module(args)
        assert how == outcome, result
        assert result["context"]["installed"] == {**released(sglang), "torch": "2.14.1+cu130"}
    assert "another known-issues verdict" in result["msg"] and "sglang 0.6.1" in result["msg"]
    assert (
        "adjusted then: custom_allreduce_pcie_multi_gpu, flashinfer_allreduce_fusion_sm120; now: none"
        in result["msg"]
    )


def test_the_docs_table_of_rows_and_releases_matches_the_table():
    """docs/known-issues.md lists every row with its severity, seen_on and holds_through, as the YAML says."""
    doc = (ROOT / "docs" / "known-issues.md").read_text()
    listed = re.findall(r"^\| `([a-z0-9_]+)` \| (\w+) \| (.*) \| (.*) \|$", doc, flags=re.M)
    expected = [
        (
            row["id"],
            row["severity"],
            "; ".join(f"{k}: {v}" for k, v in row["seen_on"].items()),
            ", ".join(f"{k} {v}" for k, v in (row.get("holds_through") or {}).items()) or "-",
        )
        for row in TABLE["issues"]
    ]
    assert listed == expected
