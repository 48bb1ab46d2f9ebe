# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Clear the ACS Control register of the PCIe bridges between GPUs again at boot (epforge-acs-off.service).

Module pci_acs_fix wrote the list (CONFIG, JSON: root, setpci, bridges [{bdf, vendor, device, path}]) when it
disabled ACS on those bridges; a setpci write does not survive a reboot. Bus numbers can move between boots
(a card added, a BIOS update), so each bridge is written only when the device at that address is still the
one recorded: same vendor:device and the same sysfs path (the chain of bridges above it). A bridge that
differs is left alone and named; the unit then fails, so `systemctl status epforge-acs-off` shows it.
Usage: epforge_acs_off.py CONFIG
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REGISTER = "ECAP_ACS+0x6.w"  # ACS Control, in the ACS extended capability


def read(root: str, path: str) -> str:
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def identity(root: str, bdf: str) -> dict:
    link = os.path.join(root, "sys/bus/pci/devices", bdf)
    real = os.path.realpath(link)
    base = os.path.realpath(root)
    return {
        "vendor": read(root, f"/sys/bus/pci/devices/{bdf}/vendor"),
        "device": read(root, f"/sys/bus/pci/devices/{bdf}/device"),
        "path": "/" + os.path.relpath(real, base) if os.path.exists(link) else "",
    }


def main(config_path: str) -> int:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    root, setpci, failed = config.get("root", "/"), config.get("setpci", "setpci"), 0
    for bridge in config.get("bridges", []):
        bdf = bridge["bdf"]
        found = identity(root, bdf)
        wanted = {key: bridge[key] for key in ("vendor", "device", "path")}
        if found != wanted:
            print(f"{bdf}: left alone, it is not the recorded bridge (found {found}, recorded {wanted})")
            failed += 1
            continue
        done = subprocess.run(
            [setpci, "-s", bdf, f"{REGISTER}=0000"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            print(f"{bdf}: setpci failed rc {done.returncode}: {done.stderr.strip()}")
            failed += 1
        else:
            print(f"{bdf}: ACS control cleared ({bridge['vendor']}:{bridge['device']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
