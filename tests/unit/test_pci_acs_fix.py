"""Module pci_acs_fix and its boot script (roles/preflight/files/epforge_acs_off.py) on a WRITTEN host (tests/
fixtures/fabric/sysfs_trees.py: 8 GPUs behind two PCIe switches, ACS redirect on every downstream port), with
TEST DOUBLES of nvidia-smi, lspci and setpci (tests/fixtures/fabric/fake_pci.py; no GPU or switch here).
Check mode shows the writes and the boot files and changes nothing; apply writes exactly those; a rerun is
changed=false; afterwards the fabric reads ACS off and preflight's error row no longer matches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from gpu_fact_samples import gpu_facts
from moduletools import run_module

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import evaluate
from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import gather_fabric

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "fabric"))
from fake_pci import install, install_nvidia_smi  # noqa: E402
from sysfs_trees import two_switch_host, written_tree  # noqa: E402

SCRIPT = ROOT / "roles" / "preflight" / "files" / "epforge_acs_off.py"
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
DOWNSTREAM = [f"0000:02:0{i}.0" for i in range(4)] + [f"0000:82:0{i}.0" for i in range(4)]


def host(tmp_path: Path) -> tuple[dict, Path, list[dict]]:
    root, gpus, lspci = written_tree(tmp_path / "host", two_switch_host())
    tools = install(tmp_path / "state", lspci, tmp_path / "bin")
    smi = install_nvidia_smi(tmp_path / "bin", gpus)
    args = {
        "nvidia_smi_path": str(smi),
        "fabric_root": str(root),
        "lspci_path": str(tools["lspci"]),
        "setpci_path": str(tools["setpci"]),
        "config_path": str(tmp_path / "etc" / "acs-off.json"),
        "unit_dir": str(tmp_path / "units"),
        "script_path": str(SCRIPT),
        "python": sys.executable,
        "enable": False,
    }
    return args, root, gpus


def written(tmp_path: Path) -> list[str]:
    return (tmp_path / "state" / "writes.log").read_text().splitlines()


def boot(args: dict) -> subprocess.CompletedProcess:
    """What the unit runs at boot."""
    argv = [sys.executable, str(SCRIPT), args["config_path"]]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_check_mode_shows_the_writes_and_apply_makes_exactly_those(tmp_path):
    args, root, gpus = host(tmp_path)
    rc, planned = run_module("pci_acs_fix", args, check=True, diff=True)
    assert rc == 0 and planned["changed"] is True, planned
    assert [w[2] for w in planned["writes"]] == DOWNSTREAM  # exactly the bridges with redirect on a GPU path
    assert {b["control"] for b in planned["bridges"]} == {"001d"}
    assert written(tmp_path) == [] and not (tmp_path / "etc").exists() and not (tmp_path / "units").exists()
    unit = next(d for d in planned["diff"] if d["after_header"].endswith("epforge-acs-off.service"))
    assert (
        f"ExecStart={sys.executable} {SCRIPT} {args['config_path']}" in unit["after"] and unit["before"] == ""
    )

    rc, applied = run_module("pci_acs_fix", args)
    assert rc == 0 and applied["changed"] is True, applied
    assert written(tmp_path) == [" ".join(w[1:]) for w in planned["writes"]]
    config = json.loads(Path(args["config_path"]).read_text())
    assert [b["bdf"] for b in config["bridges"]] == DOWNSTREAM
    assert config["bridges"][0]["path"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0"
    assert Path(applied["unit"]).read_text() == unit["after"]

    rc, again = run_module("pci_acs_fix", args, check=True)
    assert rc == 0 and again["changed"] is False and again["writes"] == [], again
    rc, again = run_module("pci_acs_fix", args)
    assert rc == 0 and again["changed"] is False and len(written(tmp_path)) == len(DOWNSTREAM)

    # The fabric now reads ACS off, and settings that need peer traffic there are no longer refused.
    lspci = subprocess.run(
        [args["lspci_path"], "-D", "-vvv"], capture_output=True, text=True, check=True
    ).stdout
    fabric = gather_fabric(str(root), gpus, lspci)
    assert all(not p["acs_redirect"] for p in fabric["pairs"])
    verdict = evaluate(TABLE, {**gpu_facts("12.0", 8, "pcie"), "fabric": fabric}, CU130, {"tp_size": 2})
    assert "fabric_acs_redirect_tp_group" not in verdict["matched"]


def test_the_boot_script_writes_only_the_recorded_bridges(tmp_path):
    """After a reboot ACS is back on (the state reset); the script clears it on each recorded bridge whose
    vendor:device and sysfs path are unchanged, and leaves a bridge whose bus number now names another
    device alone, naming it, with a failing exit status."""
    args, _, _ = host(tmp_path)
    assert run_module("pci_acs_fix", args)[0] == 0
    install(tmp_path / "state", (tmp_path / "state" / "lspci.txt").read_text(), tmp_path / "bin")  # "reboot"
    done = boot(args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert written(tmp_path) == [f"-s {bdf} ECAP_ACS+0x6.w=0000" for bdf in DOWNSTREAM]

    config = json.loads(Path(args["config_path"]).read_text())
    config["bridges"][0]["device"] = "0xdead"  # the device at 0000:02:00.0 is no longer the recorded one
    Path(args["config_path"]).write_text(json.dumps(config))
    install(tmp_path / "state", (tmp_path / "state" / "lspci.txt").read_text(), tmp_path / "bin")
    done = boot(args)
    assert done.returncode == 1
    assert "0000:02:00.0: left alone, it is not the recorded bridge" in done.stdout
    assert written(tmp_path) == [f"-s {bdf} ECAP_ACS+0x6.w=0000" for bdf in DOWNSTREAM[1:]]


def test_nothing_is_written_where_the_acs_bits_cannot_be_read(tmp_path):
    args, _, _ = host(tmp_path)
    (tmp_path / "state" / "lspci.txt").write_text("0000:00:00.0 Host bridge: Intel Corporation Device 0d57\n")
    rc, result = run_module("pci_acs_fix", args)
    assert rc != 0 and "could not be read" in result["msg"] and "nothing was changed" in result["msg"]
    assert written(tmp_path) == [] and not (tmp_path / "etc").exists()
