"""The PCIe fabric facts (plugins/module_utils/pci_fabric.py): the REAL capture of the lent H200's sysfs
(tests/fixtures/gpu_host_h200), this machine's own lspci, and WRITTEN trees of hosts no reachable machine has
(tests/fixtures/fabric/sysfs_trees.py; tests/fixtures/fabric/README.md says which is which)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from gpu_fact_samples import sm120_box
from moduletools import run_module

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import evaluate, format_finding
from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import (
    bar_size_mib,
    bdf_of,
    fabric_context,
    fabric_summary,
    gather_fabric,
    parse_lspci_acs,
    parse_lspci_names,
)
from epforge.report.overview import fabric_text

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests" / "fixtures" / "gpu_host_h200"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "fabric"))
from fake_pci import install, install_nvidia_smi  # noqa: E402
from sysfs_trees import tree_from_capture, two_switch_host, written_tree  # noqa: E402

TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]


def test_the_lent_h200_as_its_sysfs_showed_it(tmp_path):
    """The real capture: one GPU straight on the root complex of a VM, Gen5 x16, no IOMMU."""
    root = tree_from_capture(
        (H200 / "sysfs-pcie.txt").read_text(), tmp_path, (H200 / "proc-cmdline.txt").read_text()
    )
    query = (H200 / "query-pcie.csv").read_text().splitlines()[1]
    bus_id = query.split(", ")[2]
    fabric = gather_fabric(str(root), [{"index": 0, "pci_bus_id": bus_id, "memory_total_mib": 143771}])
    assert fabric["available"] is True and fabric["pairs"] == [] and fabric["bridges"] == {}
    gpu = fabric["gpus"][0]
    assert gpu["bdf"] == "0000:00:06.0" and gpu["root_complex"] == "pci0000:00" and gpu["path"] == []
    assert gpu["link"] == {
        "speed_gts": 32.0,
        "max_speed_gts": 32.0,
        "width": 16,
        "max_width": 16,
        "port_max_speed_gts": None,
    }
    assert gpu["numa_node"] is None  # numa_node -1 in the capture
    # iommu-groups.txt counted 0 groups and the capture has no /sys/class/iommu: no IOMMU
    assert (H200 / "iommu-groups.txt").read_text().strip() == "0"
    assert fabric["iommu"] == {"mode": "off", "evidence": "no IOMMU unit in /sys/class/iommu", "cmdline": []}
    context = fabric_context(fabric, {"tp_size": 1})
    assert context["acs_redirect"] == [] and context["narrow_links"] == [] and context["tp_sockets"] == 0


def test_this_machines_own_lspci_is_read():
    """lspci -D -vvv of this machine (virtio devices, no bridge with ACS; pciutils from scripts/bootstrap.sh):
    every device named, no ACS."""
    text = subprocess.run(["lspci", "-D", "-vvv"], capture_output=True, text=True, check=True).stdout
    names = parse_lspci_names(text)
    assert names and all(bdf.startswith("0000:") for bdf in names)
    assert set(names) == {p.name for p in Path("/sys/bus/pci/devices").iterdir()}
    assert parse_lspci_acs(text) == {}


def test_a_box_behind_two_switches_on_two_sockets(tmp_path):
    root, gpus, lspci = written_tree(tmp_path, two_switch_host())
    fabric = gather_fabric(str(root), gpus, lspci)
    by_pair = {tuple(p["gpus"]): p for p in fabric["pairs"]}
    assert len(by_pair) == 28
    assert by_pair[(0, 1)] == {
        "gpus": [0, 1],
        "kind": "switch",
        "via": ["0000:02:00.0", "0000:01:00.0", "0000:02:01.0"],
        "acs_redirect": ["0000:02:00.0", "0000:02:01.0"],  # the downstream ports; the upstream one has no ACS
    }
    assert by_pair[(3, 4)]["kind"] == "cross_socket"
    assert by_pair[(3, 4)]["via"] == [
        "0000:02:03.0",
        "0000:01:00.0",
        "0000:00:01.0",
        "0000:80:01.0",
        "0000:81:00.0",
        "0000:82:00.0",
    ]
    assert [g["socket"] for g in fabric["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert fabric["gpus"][5]["link"]["width"] == 8 and fabric["gpus"][5]["bar1_mib"] == 256
    assert fabric["iommu"] == {
        "mode": "translated",
        "evidence": "iommu_group type DMA-FQ",
        "cmdline": ["intel_iommu=on"],
    }
    assert fabric["bridges"]["0000:02:00.0"]["acs"]["ReqRedir"] is True
    assert fabric["bridges"]["0000:01:00.0"]["acs"] is None  # no ACS capability listed: unknown, not off

    context = fabric_context(fabric, {"tp_size": 4})
    assert (
        context["tp_sockets"] == 1
        and len(context["tp_acs_redirect"]) == 6
        and len(context["acs_redirect"]) == 28
    )
    assert context["narrow_links"] == ["GPU5 x8 of x16"]
    assert context["small_bar1"][0] == "GPU0 BAR1 256 MiB of 97887 MiB"
    assert fabric_context(fabric, {"tp_size": 2, "env": {"CUDA_VISIBLE_DEVICES": "3,4"}})["tp_sockets"] == 2


def test_a_well_set_up_box_has_no_finding_but_the_socket_split(tmp_path):
    root, gpus, lspci = written_tree(
        tmp_path,
        two_switch_host(acs_redirect=False, iommu="identity", narrow={}, bar1_mib=131072, cmdline="iommu=pt"),
    )
    fabric = gather_fabric(str(root), gpus, lspci)
    assert fabric["iommu"]["mode"] == "passthrough" and fabric["iommu"]["cmdline"] == ["iommu=pt"]
    result = evaluate(TABLE, {**sm120_box(), "fabric": fabric}, CU130, {"tp_size": 8})
    fabric_ids = [
        f["id"] for f in result["findings"]["errors"] + result["findings"]["warnings"] if "fabric" in f["id"]
    ]
    assert fabric_ids == ["fabric_tp_group_across_sockets"]


def test_the_error_names_the_bridges_and_the_way_out():
    """Settings that need peer traffic over an ACS-redirected path are refused, naming what was found."""
    result = evaluate(TABLE, sm120_box(), CU130, {"tp_size": 2})
    error = next(f for f in result["findings"]["errors"] if f["id"] == "fabric_acs_redirect_tp_group")
    assert error["found"] == ["GPU0-GPU1 via 0000:02:00.0, 0000:02:01.0"]
    line = format_finding(error)
    assert "Found: GPU0-GPU1 via 0000:02:00.0, 0000:02:01.0." in line and "NCCL_P2P_DISABLE=1" in line


def test_sysfs_and_nvidia_smi_spellings():
    assert bdf_of("00000000:01:00.0") == "0000:01:00.0" and bdf_of("0000:C1:00.0") == "0000:c1:00.0"
    assert bdf_of("01:00.0") == "0000:01:00.0"
    line = "0x0000038000000000 0x0000039fffffffff 0x000000000014220c"
    assert bar_size_mib(f"0x00000000f0000000 0x00000000f3ffffff 0x0000000000040200\n{line}", 1) == 131072
    assert bar_size_mib("", 1) is None


def test_the_module_gathers_the_fabric_in_its_one_call(tmp_path):
    """nvidia_gpu_facts on a written tree (fabric_root), with a fake nvidia-smi and a fake lspci (TEST
    DOUBLES, tests/fixtures/fabric/fake_pci.py; no GPU here): the fabric is in epforge_gpu_facts."""
    root, gpus, lspci = written_tree(tmp_path / "host", two_switch_host())
    tools = install(tmp_path / "state", lspci, tmp_path / "bin")
    smi = install_nvidia_smi(tmp_path / "bin", gpus)
    args = {"nvidia_smi_path": str(smi), "fabric_root": str(root), "lspci_path": str(tools["lspci"])}
    rc, result = run_module("nvidia_gpu_facts", args)
    assert rc == 0, result
    fabric = result["ansible_facts"]["epforge_gpu_facts"]["fabric"]
    assert fabric["available"] and len(fabric["pairs"]) == 28 and fabric["lspci_error"] == ""
    assert {g["persistence_mode"] for g in fabric["gpus"]} == {"Enabled"}
    modes = {bdf_of(g["pci_bus_id"]): "Enabled" for g in gpus}
    assert json.dumps(fabric) == json.dumps(gather_fabric(str(root), gpus, lspci, "", modes))


def test_the_report_cell_names_every_fabric_finding(tmp_path):
    """epforge_preflight records fabric_summary (no current link speed: an idle GPU lowers it, and the fact
    must not change on a rerun); epforge report's overview turns it into one cell."""
    root, gpus, lspci = written_tree(tmp_path, two_switch_host())
    summary = fabric_summary(gather_fabric(str(root), gpus, lspci))
    assert "speed_gts" not in json.dumps(summary)
    text = fabric_text(summary)
    assert text.startswith(
        "IOMMU translated; socket(s) 0, 1; GPU pairs: 16 cross_socket, 12 switch; ACS redirect on "
    )
    assert "0000:82:03.0" in text and "GPU5 x8 of x16" in text and "GPU7 BAR1 256 MiB of 97887 MiB" in text
    assert fabric_text({"available": False, "reason": "no GPU"}) == "not read (no GPU)"
