"""nvidia_gpu_facts: the nvidia-smi parsers (plugins/module_utils/nvidia.py) on real captured outputs and
on broken copies of them, the module with run_bounded patched in plugins/module_utils/gpu_facts.py (the one
gatherer; community.general style), and the module run for real by `ansible` on this machine (no
nvidia-smi here) and with a fake nvidia-smi on PATH that prints the captures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from unittest import mock

import nvidia_gpu_facts
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES, ROOT
from gpu_fact_samples import NO_GPU

from ansible_collections.epforge.ep.plugins.module_utils import gpu_facts as epforge_gpu_facts
from ansible_collections.epforge.ep.plugins.module_utils.nvidia import (
    LINK_CLASSES,
    classify_interconnect,
    parse_cuda_version,
    parse_p2p,
    parse_query_csv,
    parse_topology,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import Completed

SMI = FIXTURES / "nvidia-smi"
VENV_BIN = os.path.dirname(sys.executable)


def fixture(name: str) -> str:
    return (SMI / name).read_text()


def links(**counts: int) -> dict:
    return {name: counts.get(name, 0) for name in LINK_CLASSES}


# ---------------------------------------------------------------- parse_query_csv


# The two GPUs of tests/fixtures/nvidia-smi/h200x2-query.csv (captured on the lent 2x H200), as the module
# lists them in epforge_gpu_facts (the query's per-GPU driver_version is reported once, host-wide).
H200_GPUS = [
    {
        "index": 0,
        "name": "NVIDIA H200",
        "compute_capability": "9.0",
        "arch": "9.0",
        "memory_total_mib": 143771,
        "pci_bus_id": "00000000:00:06.0",
        "uuid": "GPU-ab94a1d0-a636-e01b-ca8f-2a7a9b05f8af",
    },
    {
        "index": 1,
        "name": "NVIDIA H200",
        "compute_capability": "9.0",
        "arch": "9.0",
        "memory_total_mib": 143771,
        "pci_bus_id": "00000000:00:07.0",
        "uuid": "GPU-15eaac1e-c3ac-f04d-57f3-9ac0dc3bb406",
    },
]


def test_query_csv_from_h200_capture():
    gpus = parse_query_csv(fixture("h200x2-query.csv"))
    assert gpus == [{**gpu, "driver_version": "580.159.04"} for gpu in H200_GPUS]


def test_query_csv_empty_output_lists_no_gpu():
    assert parse_query_csv("") == []
    assert parse_query_csv("\n\n") == []


def test_query_csv_name_with_comma_is_quoted_csv():
    line = (
        '0, "NVIDIA RTX PRO 6000 Blackwell, Server Edition", 12.0, 97887, 00000000:01:00.0, GPU-x, 580.95.05'
    )
    (gpu,) = parse_query_csv(line)
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell, Server Edition"
    assert gpu["arch"] == "12.0" and gpu["memory_total_mib"] == 97887


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the real header line (format=csv without noheader): index is not a number
        (fixture("h200x2-query-header.csv"), "index 'index' is not a number"),
        # the real answer to an unknown field: one field instead of seven
        (fixture("h200x2-query-bad-field.txt"), "has 1 fields, expected 7"),
        (
            fixture("h200x2-query.csv").replace(", 9.0,", ", [N/A],", 1),
            "compute_cap '[N/A]' is not MAJOR.MINOR",
        ),
        (fixture("h200x2-query.csv").replace(", 9.0,", ", 9,", 1), "compute_cap '9' is not MAJOR.MINOR"),
        (fixture("h200x2-query.csv").replace("143771", "143771 MiB", 1), "memory.total '143771 MiB'"),
        (fixture("h200x2-query.csv").replace("1, NVIDIA", "0, NVIDIA"), "index twice"),
        (fixture("h200x2-query.csv").replace(", 580.159.04", ""), "has 6 fields"),
    ],
)
def test_query_csv_malformed_raises_with_the_reason(text, message):
    with pytest.raises(ValueError) as raised:
        parse_query_csv(text)
    assert message in str(raised.value)


# ---------------------------------------------------------------- parse_cuda_version


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("h200x2-nvidia-smi.txt", "13.0"),  # header of plain nvidia-smi
        ("h200x2-version.txt", "13.0"),  # nvidia-smi --version
        ("public-aikitoria18-version.txt", "13.2"),
        ("public-driver-not-loaded.txt", ""),
        ("h200x2-topo.txt", ""),
    ],
)
def test_cuda_version_from_captures(name, version):
    assert parse_cuda_version(fixture(name)) == version


def test_cuda_version_not_a_version_is_empty():
    assert parse_cuda_version("| NVIDIA-SMI 535.1  Driver Version: 535.1  CUDA Version: N/A |") == ""
    assert parse_cuda_version("CUDA Version                              : Not Found") == ""
    assert parse_cuda_version(None) == ""


# ---------------------------------------------------------------- parse_topology on real captures


@pytest.mark.parametrize(
    ("name", "gpus", "expected_links", "interconnect"),
    [
        ("h200x2-topo.txt", 2, links(NV=1), "nvlink"),
        ("public-nccl1617-4xh100-nv6-nic-topo.txt", 4, links(NV=6), "nvlink"),
        ("public-aikitoria18-4x3090-mixed-topo.txt", 4, links(NV=2, PHB=2, NODE=2), "mixed"),
        ("public-8x4090-pcie-node-sys-topo.txt", 8, links(PHB=4, NODE=12, SYS=12), "pcie"),
        ("public-quda669-8gpu-pcie-mlx5-topo.txt", 8, links(PIX=4, PXB=8, SYS=16), "pcie"),
        ("public-club3090-46-5gpu-pcie-topo.txt", 5, links(PHB=2, NODE=4, SYS=4), "pcie"),
        ("public-missalignment106-4xl40s-nic-topo.txt", 4, links(NODE=2, SYS=4), "pcie"),
    ],
)
def test_topology_captures(name, gpus, expected_links, interconnect):
    topology = parse_topology(fixture(name))
    assert topology["gpus"] == [f"GPU{i}" for i in range(gpus)]
    assert topology["links"] == expected_links
    assert sum(expected_links.values()) == gpus * (gpus - 1) // 2
    assert classify_interconnect(topology) == interconnect
    # only GPU pairs, both directions, no diagonal, no NIC
    for gpu in topology["gpus"]:
        assert sorted(topology["matrix"][gpu]) == sorted(set(topology["gpus"]) - {gpu})


def test_topology_h200_header_escape_codes_and_extra_columns():
    raw = fixture("h200x2-topo.txt")
    assert "\x1b[4m" in raw and "GPU NUMA ID" in raw  # the capture really has them
    assert parse_topology(raw)["matrix"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}


def test_topology_8x4090_cells():
    matrix = parse_topology(fixture("public-8x4090-pcie-node-sys-topo.txt"))["matrix"]
    assert matrix["GPU0"]["GPU1"] == "PHB"
    assert matrix["GPU0"]["GPU5"] == "NODE"
    assert matrix["GPU0"]["GPU7"] == "SYS"
    assert matrix["GPU7"]["GPU6"] == "PHB"


def test_topology_nic_rows_and_columns_are_ignored():
    topology = parse_topology(fixture("public-nccl1617-4xh100-nv6-nic-topo.txt"))
    assert set(topology["matrix"]) == {"GPU0", "GPU1", "GPU2", "GPU3"}
    assert all(not peer.startswith("NIC") for row in topology["matrix"].values() for peer in row)
    quda = parse_topology(fixture("public-quda669-8gpu-pcie-mlx5-topo.txt"))
    assert "mlx5_0" not in quda["matrix"] and "mlx5_0" not in quda["matrix"]["GPU4"]


def test_topology_single_gpu():
    # the H200 capture cut down to GPU0: header and row as nvidia-smi writes them for one GPU
    lines = fixture("h200x2-topo.txt").splitlines()
    header = lines[0].replace("GPU1\t", "")
    row = "GPU0\t X \t0-31\t0\t\tN/A"
    topology = parse_topology("\n".join([header, row, "", *lines[3:]]))
    assert topology == {"gpus": ["GPU0"], "matrix": {"GPU0": {}}, "links": links()}
    assert classify_interconnect(topology) == "single"


def test_topology_ends_at_the_blank_line_after_the_matrix():
    # a report that pastes `topo -p2p r` right after the matrix (no legend in between): its GPU rows
    # must not be read as more matrix rows
    matrix = fixture("h200x2-topo.txt").split("\n\n")[0]
    topology = parse_topology(matrix + "\n\n" + fixture("h200x2-p2p.txt"))
    assert topology["matrix"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}


def test_topology_old_soc_token_counts_as_sys():
    text = fixture("public-club3090-46-5gpu-pcie-topo.txt").replace("SYS ", "SOC ")
    topology = parse_topology(text)
    assert topology["links"] == links(PHB=2, NODE=4, SYS=4)
    assert topology["matrix"]["GPU0"]["GPU1"] == "SOC"


# ---------------------------------------------------------------- parse_topology on broken copies


def _drop_line(text: str, starts: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(starts))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no header row"),
        (fixture("h200x2-topo.txt").split("Legend")[1], "no header row"),  # legend only
        (fixture("h200x2-nvidia-smi.txt"), "no header row"),  # another command's output
        (fixture("public-driver-not-loaded.txt"), "no header row"),
        ("\n".join(fixture("public-8x4090-pcie-node-sys-topo.txt").splitlines()[1:]), "no header row"),
        (_drop_line(fixture("public-8x4090-pcie-node-sys-topo.txt"), "GPU7"), "no matrix row for GPU7"),
        (
            fixture("public-8x4090-pcie-node-sys-topo.txt").replace(
                "GPU3\tNODE\tNODE\tPHB\t X \tNODE\tNODE\tSYS\tSYS\t0-35,72-107\t0\t\tN/A",
                "GPU3\tNODE\tNODE\tPHB",
            ),
            "row GPU3 has",
        ),
        (
            fixture("public-8x4090-pcie-node-sys-topo.txt").replace("GPU5\tNODE\tNODE", "GPU5\tFOO\tNODE"),
            "unknown link 'FOO' between GPU5 and GPU0",
        ),
        (fixture("h200x2-topo.txt").replace("GPU0\t X \t", "GPU0\tNV18\t"), "GPU0 to itself reads 'NV18'"),
        (fixture("public-aikitoria18-4x3090-mixed-topo.txt").replace("GPU2 ", "GPU9 ", 1), "not GPU0..GPU3"),
        (
            fixture("public-aikitoria18-4x3090-mixed-topo.txt").replace("\nGPU3 ", "\nGPU7 "),
            "matrix row 'GPU7'",
        ),
        (
            fixture("public-nccl1617-4xh100-nv6-nic-topo.txt").replace("GPU3    NIC0", "NIC0    GPU3", 1),
            "non-GPU device before a GPU",
        ),
    ],
)
def test_topology_malformed_raises_with_the_reason(text, message):
    with pytest.raises(ValueError) as raised:
        parse_topology(text)
    assert message in str(raised.value)


# ---------------------------------------------------------------- classify_interconnect


def test_classify_every_branch():
    assert classify_interconnect({"gpus": [], "matrix": {}, "links": links()}) == "none"
    assert classify_interconnect({}) == "none"
    assert classify_interconnect({"gpus": ["GPU0"], "links": links()}) == "single"
    three = ["GPU0", "GPU1", "GPU2"]
    assert classify_interconnect({"gpus": three, "links": links(NV=3)}) == "nvlink"
    assert classify_interconnect({"gpus": three, "links": links(SYS=2, PIX=1)}) == "pcie"
    assert classify_interconnect({"gpus": three, "links": links(NV=1, NODE=2)}) == "mixed"


# ---------------------------------------------------------------- the module, run_bounded patched


class AnsibleExitJson(Exception):
    pass


class AnsibleFailJson(Exception):
    pass


def exit_json(self, **kwargs):
    raise AnsibleExitJson(kwargs)


def fail_json(self, **kwargs):
    raise AnsibleFailJson(kwargs)


def query_for(count: int) -> str:
    """A query answer for `count` GPUs in the format of the H200 capture (same columns, new indexes)."""
    row = fixture("h200x2-query.csv").splitlines()[0]
    return "\n".join(row.replace("0, ", f"{i}, ", 1) for i in range(count)) + "\n"


class FakeSmi:
    """Answers run_bounded like nvidia-smi would, from fixtures; records every argv."""

    def __init__(self, query=None, header=None, topo=None, p2p=None):
        self.answers = {
            "query": query or (0, fixture("h200x2-query.csv"), ""),
            "header": header or (0, fixture("h200x2-nvidia-smi.txt"), ""),
            "topo": topo or (0, fixture("h200x2-topo.txt"), ""),
            "p2p": p2p or (0, fixture("h200x2-p2p.txt"), ""),
        }
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        if any(arg.startswith("--query-gpu=") for arg in argv):
            answer = self.answers["query"]
        elif "-p2p" in argv:
            answer = self.answers["p2p"]
        elif "topo" in argv:
            answer = self.answers["topo"]
        else:
            answer = self.answers["header"]
        return Completed(*answer, 0.01)


def bin_path(found: dict):
    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return found.get(arg)

    return get_bin_path


ON_PATH = {"nvidia-smi": "/usr/bin/nvidia-smi", "timeout": "/usr/bin/timeout"}


def run_module(args: dict, smi: FakeSmi | None = None, found: dict | None = None):
    smi = smi or FakeSmi()
    with (
        patch_module_args(args),
        mock.patch.multiple(
            basic.AnsibleModule,
            exit_json=exit_json,
            fail_json=fail_json,
            get_bin_path=bin_path(ON_PATH if found is None else found),
        ),
        mock.patch.object(epforge_gpu_facts, "run_bounded", side_effect=smi),
    ):
        try:
            nvidia_gpu_facts.main()
        except AnsibleExitJson as done:
            return "exit", done.args[0], smi
        except AnsibleFailJson as failed:
            return "fail", failed.args[0], smi
    raise AssertionError("the module returned without exit_json or fail_json")


def test_module_h200_host():
    how, result, smi = run_module({})
    assert how == "exit" and result["changed"] is False
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["available"] is True and facts["reason"] == ""
    assert facts["gpu_count"] == 2
    assert facts["gpus"] == H200_GPUS
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["interconnect"] == "nvlink" and facts["topology_error"] == ""
    assert facts["topology"]["links"] == links(NV=1)
    assert facts["archs"] == ["9.0"]
    argvs = [argv for argv, _ in smi.calls]
    prefix = ["/usr/bin/nvidia-smi"]
    assert argvs == [
        [
            *prefix,
            "--query-gpu=index,name,compute_cap,memory.total,pci.bus_id,uuid,driver_version",
            "--format=csv,noheader,nounits",
        ],
        prefix,
        [*prefix, "topo", "-p2p", "r"],
        [*prefix, "topo", "-m"],
        # the fabric facts: persistence mode per GPU (no lspci on this fake PATH: ACS not read)
        [*prefix, "--query-gpu=pci.bus_id,persistence_mode", "--format=csv,noheader"],
    ]
    assert facts["fabric"]["available"] is False  # these GPUs' bus ids are not in this machine's /sys
    assert facts["peer_access"] == {"status": "full", "pairs": 1, "ok_pairs": 1, "missing": [], "error": ""}
    assert all(kwargs == {"timeout": 60, "env_update": {"LC_ALL": "C"}} for _, kwargs in smi.calls)


def test_module_check_mode_gathers_the_same():
    _, normal, _ = run_module({})
    how, checked, _ = run_module({"_ansible_check_mode": True})
    assert how == "exit" and checked["ansible_facts"] == normal["ansible_facts"]


def test_module_without_nvidia_smi_succeeds_with_reason():
    smi = FakeSmi()
    how, result, _ = run_module({}, smi, found={"timeout": "/usr/bin/timeout"})
    assert how == "exit"
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts == {
        **NO_GPU,
        "topology": {"gpus": [], "matrix": {}, "links": links()},
        "topology_error": "",
        "peer_access": {"status": "no_gpu", "pairs": 0, "ok_pairs": 0, "missing": [], "error": ""},
    }
    assert smi.calls == []


def test_module_driver_not_loaded_succeeds_with_reason():
    smi = FakeSmi(query=(9, fixture("public-driver-not-loaded.txt"), ""))
    how, result, _ = run_module({}, smi)
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert how == "exit" and facts["available"] is False and facts["gpu_count"] == 0
    assert facts["reason"] == (
        "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running., rc 9"
    )
    assert len(smi.calls) == 1


def test_module_error_on_stderr_is_preferred():
    smi = FakeSmi(query=(2, "", fixture("h200x2-query-bad-field.txt")))
    _, result, _ = run_module({}, smi)
    assert result["ansible_facts"]["epforge_gpu_facts"]["reason"] == (
        'nvidia-smi failed: Field "bogus_field" is not a valid field to query., rc 2'
    )


def test_module_no_devices_and_empty_answer():
    _, result, _ = run_module({}, FakeSmi(query=(6, fixture("h200x2-query-no-device.txt"), "")))
    assert result["ansible_facts"]["epforge_gpu_facts"]["reason"] == (
        "no GPU listed (nvidia-smi: No devices were found)"
    )
    _, result, _ = run_module({}, FakeSmi(query=(0, "\n", "")))
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["reason"] == "no GPU listed"
    assert facts["available"] is False and facts["interconnect"] == "none"


def test_module_query_timeout():
    _, result, _ = run_module({"timeout": 7}, FakeSmi(query=(124, "", "")))
    assert result["ansible_facts"]["epforge_gpu_facts"]["reason"] == "nvidia-smi timed out after 7 s"


def test_module_malformed_query_fails_with_cmd_rc_and_tail():
    text = fixture("h200x2-query.csv").replace(", 9.0,", ", N/A,", 1)
    how, result, _ = run_module({}, FakeSmi(query=(0, text, "")))
    assert how == "fail"
    assert result["msg"].startswith("cannot parse the nvidia-smi GPU query: query line 1: compute_cap 'N/A'")
    assert result["rc"] == 0
    assert result["cmd"][-2:] == [
        "--query-gpu=index,name,compute_cap,memory.total,pci.bus_id,uuid,driver_version",
        "--format=csv,noheader,nounits",
    ]
    assert "GPU-ab94a1d0-a636-e01b-ca8f-2a7a9b05f8af" in result["log_tail"]


# ---------------------------------------------------------------- peer access (nvidia-smi topo -p2p r)


def test_p2p_real_h200_capture_is_full():
    p2p = parse_p2p(fixture("h200x2-p2p.txt"))
    assert p2p == {
        "gpus": ["GPU0", "GPU1"],
        "matrix": {"GPU0": {"GPU1": "OK"}, "GPU1": {"GPU0": "OK"}},
        "pairs": 1,
        "ok_pairs": 1,
        "missing": [],
        "status": "full",
    }


def test_p2p_partial_access_names_the_missing_pairs():
    # SYNTHETIC (tests/fixtures/nvidia-smi/README.md): the real capture's format, two pairs with peer reads
    p2p = parse_p2p(fixture("synthetic-4gpu-partial-p2p.txt"))
    assert p2p["status"] == "partial" and p2p["pairs"] == 6 and p2p["ok_pairs"] == 2
    assert p2p["missing"] == ["GPU0-GPU2 CNS", "GPU0-GPU3 CNS", "GPU1-GPU2 CNS", "GPU1-GPU3 CNS"]


def test_p2p_none_single_one_direction_and_space_aligned():
    text = fixture("h200x2-p2p.txt")
    assert parse_p2p(text.replace("OK", "NS"))["status"] == "none"
    # one direction not OK is enough to lose the pair; the code shown is the one that is not OK
    one_way = text.replace(" GPU1\tOK", " GPU1\tTNS")
    assert parse_p2p(one_way)["missing"] == ["GPU0-GPU1 TNS"]
    spaced = "P2P Connectivity Matrix\n        GPU0    GPU1\n GPU0   X       CNS\n GPU1   CNS     X\n"
    assert parse_p2p(spaced)["missing"] == ["GPU0-GPU1 CNS"]
    single = "        GPU0\n GPU0   X\n\nLegend:\n\n  X    = Self\n"
    assert parse_p2p(single)["status"] == "single"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("OK\tX", "OK\tY"), "GPU1 to itself reads 'Y', expected X"),
        (("X\tOK", "X\tBAD"), "unknown peer status 'BAD' between GPU0 and GPU1"),
        (("GPU1\tOK\tX\t", "GPU1\tOK\t"), "row GPU1 has 1 cells for 2 GPUs"),
        (("GPU0\tGPU1", "GPU0\tGPU2"), "header GPU names are not GPU0..GPU1"),
    ],
)
def test_p2p_malformed_is_named(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_p2p(fixture("h200x2-p2p.txt").replace(*change))
    with pytest.raises(ValueError, match="no header row"):
        parse_p2p("Legend:\n  X = Self\n")


def test_module_partial_peer_access_and_unreadable_p2p():
    smi = FakeSmi(
        query=(0, query_for(4), ""),
        topo=(0, fixture("public-aikitoria18-4x3090-mixed-topo.txt"), ""),
        p2p=(0, fixture("synthetic-4gpu-partial-p2p.txt"), ""),
    )
    facts = run_module({}, smi)[1]["ansible_facts"]["epforge_gpu_facts"]
    assert facts["peer_access"]["status"] == "partial" and facts["peer_access"]["ok_pairs"] == 2
    facts = run_module({}, FakeSmi(p2p=(6, "", "Unknown Error")))[1]["ansible_facts"]["epforge_gpu_facts"]
    assert facts["peer_access"]["status"] == "unknown"
    assert facts["peer_access"]["error"] == "nvidia-smi failed: Unknown Error, rc 6"
    assert facts["interconnect"] == "nvlink"  # the rest is gathered as before
    smi = FakeSmi(p2p=(0, fixture("synthetic-4gpu-partial-p2p.txt"), ""))
    facts = run_module({}, smi)[1]["ansible_facts"]["epforge_gpu_facts"]
    assert facts["peer_access"]["error"] == "topo -p2p r lists 4 GPUs but the query listed 2"


def test_module_malformed_topology_gives_unknown():
    broken = fixture("h200x2-topo.txt").replace("NV18", "NVX", 1)
    how, result, _ = run_module({}, FakeSmi(topo=(0, broken, "")))
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert how == "exit" and facts["available"] is True and facts["gpu_count"] == 2
    assert facts["interconnect"] == "unknown"
    assert facts["topology_error"] == "unknown link 'NVX' between GPU0 and GPU1"


def test_module_topology_command_failure_gives_unknown():
    _, result, _ = run_module({}, FakeSmi(topo=(255, "", "Unknown Error")))
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["interconnect"] == "unknown"
    assert facts["topology_error"] == "nvidia-smi failed: Unknown Error, rc 255"


def test_module_topology_and_query_disagree():
    _, result, _ = run_module({}, FakeSmi(topo=(0, fixture("public-8x4090-pcie-node-sys-topo.txt"), "")))
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["interconnect"] == "unknown"
    assert facts["topology_error"] == "topo -m lists 8 GPUs but the query listed 2"


@pytest.mark.parametrize(
    ("topo", "count", "interconnect"),
    [
        ("public-8x4090-pcie-node-sys-topo.txt", 8, "pcie"),
        ("public-aikitoria18-4x3090-mixed-topo.txt", 4, "mixed"),
        ("public-nccl1617-4xh100-nv6-nic-topo.txt", 4, "nvlink"),
    ],
)
def test_module_interconnects(topo, count, interconnect):
    smi = FakeSmi(query=(0, query_for(count), ""), topo=(0, fixture(topo), ""))
    _, result, _ = run_module({}, smi)
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["gpu_count"] == count and facts["interconnect"] == interconnect


def test_module_archs_sorted_numerically_and_unique():
    rows = [
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 00000000:01:00.0, GPU-a, 580.95.05",
        "1, NVIDIA GeForce RTX 4090, 8.9, 24564, 00000000:02:00.0, GPU-b, 580.95.05",
        "2, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 00000000:03:00.0, GPU-c, 580.95.05",
    ]
    topo = fixture("public-club3090-46-5gpu-pcie-topo.txt")
    smi = FakeSmi(query=(0, "\n".join(rows), ""), topo=(0, topo, ""))
    _, result, _ = run_module({}, smi)
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["archs"] == ["8.9", "12.0"]
    assert facts["interconnect"] == "unknown"  # 5 GPUs in the matrix, 3 in the query


def test_module_header_failure_leaves_cuda_version_empty():
    _, result, _ = run_module({}, FakeSmi(header=(9, "", "")))
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert facts["cuda_driver_version"] == "" and facts["available"] is True


def test_module_explicit_path(tmp_path):
    how, result, _ = run_module({"nvidia_smi_path": str(tmp_path / "nvidia-smi")})
    assert how == "exit"
    reason = result["ansible_facts"]["epforge_gpu_facts"]["reason"]
    assert reason == f"nvidia-smi not found at {tmp_path}/nvidia-smi"
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    _, result, smi = run_module({"nvidia_smi_path": str(exe)}, found={})
    assert result["ansible_facts"]["epforge_gpu_facts"]["available"] is True
    assert smi.calls[0][0][0] == str(exe) and smi.calls[0][1]["timeout"] == 60  # bounded without coreutils


def test_module_rejects_timeout_below_one():
    how, result, smi = run_module({"timeout": 0})
    assert how == "fail" and "timeout must be at least 1 second" in result["msg"]
    assert smi.calls == []


# ---------------------------------------------------------------- the module for real, through ansible


def ansible_adhoc(args: str = "", path: str | None = None) -> dict:
    env = dict(
        os.environ,
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    if path is not None:
        env["PATH"] = path
    argv = [os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "epforge.ep.nvidia_gpu_facts"]
    if args:
        argv += ["-a", args]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    report = json.loads(proc.stdout)
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


def fake_smi(tmp_path, query: str, topo: str, header: str = "h200x2-nvidia-smi.txt", query_rc: int = 0):
    """An nvidia-smi on PATH that prints the captures, as the real one would for these arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat '{SMI / query}'; exit {query_rc} ;;\n"
        f"  topo) if [ \"$2\" = -p2p ]; then cat '{SMI / 'h200x2-p2p.txt'}'; else cat '{SMI / topo}'; fi ;;\n"
        f"  *) cat '{SMI / header}' ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin"


def test_real_run_on_this_machine_without_nvidia_smi():
    path = f"{VENV_BIN}:/usr/bin:/bin"
    searched = [*path.split(":"), "/sbin", "/usr/sbin", "/usr/local/sbin"]  # where get_bin_path looks
    if any(os.path.exists(f"{d}/nvidia-smi") for d in searched):
        pytest.skip("GPU: this machine has an nvidia-smi; the test is about a host without one")
    result = ansible_adhoc(path=path)
    facts = result["ansible_facts"]["epforge_gpu_facts"]
    assert not result.get("failed") and result["changed"] is False
    assert facts["gpu_count"] == 0 and facts["available"] is False
    assert facts["reason"] == "nvidia-smi not found on PATH" and facts["interconnect"] == "none"


def test_real_run_with_fake_nvidia_smi_on_path(tmp_path):
    path = fake_smi(tmp_path, "h200x2-query.csv", "h200x2-topo.txt")
    facts = ansible_adhoc(path=path)["ansible_facts"]["epforge_gpu_facts"]
    assert facts["available"] is True and facts["gpu_count"] == 2
    assert [gpu["uuid"] for gpu in facts["gpus"]] == [
        "GPU-ab94a1d0-a636-e01b-ca8f-2a7a9b05f8af",
        "GPU-15eaac1e-c3ac-f04d-57f3-9ac0dc3bb406",
    ]
    assert facts["driver_version"] == "580.159.04" and facts["cuda_driver_version"] == "13.0"
    assert facts["interconnect"] == "nvlink" and facts["topology"]["matrix"]["GPU1"]["GPU0"] == "NV18"


def test_real_run_driver_failure_and_malformed_query(tmp_path):
    (tmp_path / "a").mkdir()
    path = fake_smi(tmp_path / "a", "public-driver-not-loaded.txt", "h200x2-topo.txt", query_rc=9)
    result = ansible_adhoc(path=path)
    assert not result.get("failed")
    assert result["ansible_facts"]["epforge_gpu_facts"]["reason"].endswith("installed and running., rc 9")

    (tmp_path / "b").mkdir()
    path = fake_smi(tmp_path / "b", "h200x2-query-header.csv", "h200x2-topo.txt")
    result = ansible_adhoc(args=f"nvidia_smi_path={tmp_path}/b/bin/nvidia-smi timeout=20", path=path)
    assert result["failed"] is True
    assert "query line 1: index 'index' is not a number" in result["msg"]
    assert result["cmd"][0] == f"{tmp_path}/b/bin/nvidia-smi"
    assert "143771 MiB" in result["log_tail"]
