#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: disable ACS on the PCIe bridges between a host's GPUs, now and at every boot."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pci_acs_fix
short_description: Disable ACS on exactly the PCIe bridges between the GPUs, now and at boot
description:
  - Reads the PCIe fabric between the GPUs as preflight does (nvidia-smi, sysfs under O(fabric_root), one
    C(lspci -D -vvv)). The bridges it touches are those on a GPU pair's path whose ACS control has request or
    completion redirect on, plus those its boot list already holds that are still on such a path; nothing
    else on the host is touched.
  - For each such bridge whose ACS Control register (C(setpci -s BDF ECAP_ACS+0x6.w)) is not 0000, writes
    0000 (an argv list), then reads it back. A write does not survive a reboot, so the module also writes the
    boot list O(config_path) (each bridge's vendor:device and sysfs path) and a systemd oneshot unit
    O(unit_name) that runs O(script_path) at boot; the script writes a bridge only when the device at that
    address is still the recorded one (bus numbers move).
  - Check mode changes nothing and returns the writes it would make (C(writes)) and, in diff mode, the boot
    list and unit before and after. A rerun on a fixed host writes nothing (C(changed=false)).
  - Fails, before any write, when no GPU or no fabric could be read, or when lspci did not show the ACS bits
    (not root, no pciutils).
options:
  nvidia_smi_path:
    description: nvidia-smi to list the GPUs with; unset looks it up on the PATH.
    type: path
  setpci_path:
    description: setpci (Debian/Ubuntu package C(pciutils)); unset looks it up on the PATH.
    type: path
  timeout:
    description: Seconds each nvidia-smi, lspci or setpci call may run.
    type: int
    default: 60
  config_path:
    description: The boot list (JSON) the boot unit reads.
    type: path
    default: /etc/epforge/acs-off.json
  unit_name:
    description: The systemd oneshot unit that clears ACS again at boot.
    type: str
    default: epforge-acs-off
  unit_dir:
    description: Where the unit file is written.
    type: path
    default: /etc/systemd/system
  script_path:
    description: The boot script (role preflight installs C(files/epforge_acs_off.py) there).
    type: path
    default: /usr/local/lib/epforge/epforge_acs_off.py
  python:
    description: The interpreter the boot unit runs the script with.
    type: path
    default: /usr/bin/python3
  enable:
    description: Enable the unit (systemctl daemon-reload, enable) where systemd runs.
    type: bool
    default: true
extends_documentation_fragment:
  - epforge.ep.pci_fabric
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode writes no register and no file; it returns the register writes it would make (C(writes)).
  diff_mode:
    support: partial
    details: >-
      The diff shows the boot list and the unit file; the register writes are only in C(writes), and enabling
      the unit is not shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Disable ACS between the GPUs (preflight_fabric_fix)
  epforge.ep.pci_acs_fix:
  register: acs

- name: Show the writes
  ansible.builtin.debug:
    msg: "{{ acs.writes }}"
"""

RETURN = r"""
bridges:
  description: The bridges kept free of ACS, with vendor, device, sysfs path and the control value read.
  returned: always
  type: list
  elements: dict
  sample:
    - bdf: "0000:02:00.0"
      vendor: "0x1000"
      device: "0xc030"
      path: /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0
      control: "001d"
writes:
  description: The setpci argv lists written (check mode, the ones that would be).
  returned: always
  type: list
  elements: list
  sample: [[/usr/bin/setpci, -s, "0000:02:00.0", ECAP_ACS+0x6.w=0000]]
unit:
  description: Path of the boot unit.
  returned: always
  type: str
check_mode:
  description: Whether the module ran in check mode (the play's or the task's), so nothing was written.
  returned: always
  type: bool
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, write_atomic
from ansible_collections.epforge.ep.plugins.module_utils.gpu_facts import (
    FABRIC_ARGUMENT_SPEC,
    gather_gpu_facts,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded

REGISTER = "ECAP_ACS+0x6.w"  # ACS Control, in the ACS extended capability (PCIe spec; setpci's name for it)


def unit_text(script: str, python: str, config: str) -> str:
    return (
        "# Written by epforge (module pci_acs_fix): clears ACS on the bridges between the GPUs at boot.\n"
        "[Unit]\n"
        "Description=epforge: disable ACS on the PCIe bridges between the GPUs\n"
        "After=sysinit.target\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={python} {script} {config}\n"
        "RemainAfterExit=yes\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


class AcsFix:
    """Plan (read only), then apply: setpci writes, the boot list, the unit."""

    def __init__(self, module: AnsibleModule):
        self.module = module
        self.p = module.params
        self.setpci = self.p["setpci_path"] or module.get_bin_path("setpci", opt_dirs=["/usr/sbin", "/sbin"])
        if not self.setpci:
            module.fail_json(
                msg="setpci not found (Debian/Ubuntu: apt-get install pciutils); nothing was changed"
            )
        self.root = self.p["fabric_root"]
        self.unit_path = os.path.join(self.p["unit_dir"], f"{self.p['unit_name']}.service")

    def fabric(self) -> dict:
        facts = gather_gpu_facts(
            self.module, self.p["nvidia_smi_path"], self.p["timeout"], self.root, self.p["lspci_path"]
        )
        fabric = facts.get("fabric") or {}
        if not fabric.get("available"):
            self.module.fail_json(msg=f"no PCIe fabric to fix: {fabric.get('reason') or facts.get('reason')}")
        if not fabric.get("acs_read"):
            why = fabric.get("lspci_error") or "no ACS listed"
            self.module.fail_json(msg=f"the bridges' ACS bits could not be read ({why}); nothing was changed")
        return fabric

    def identity(self, bdf: str) -> dict:
        base = os.path.join(self.root, "sys/bus/pci/devices", bdf)
        real = os.path.relpath(os.path.realpath(base), os.path.realpath(self.root))
        return {
            "bdf": bdf,
            "vendor": read_text(os.path.join(base, "vendor")).strip(),
            "device": read_text(os.path.join(base, "device")).strip(),
            "path": "/" + real,
        }

    def control(self, bdf: str) -> str:
        argv = [self.setpci, "-s", bdf, REGISTER]
        done = run_bounded(argv, timeout=self.p["timeout"])
        if done.rc != 0 or not done.out.strip():
            fail_cmd(
                self.module,
                f"cannot read the ACS control of {bdf}; nothing was changed",
                argv,
                done.rc,
                output=done.err or done.out,
            )
        return done.out.strip().lower()

    def targets(self, fabric: dict) -> list[str]:
        on_paths = {b for pair in fabric.get("pairs", []) for b in pair.get("via", [])}
        with_acs = {b for b in on_paths if (fabric.get("bridges", {}).get(b) or {}).get("acs") is not None}
        redirect = {b for pair in fabric.get("pairs", []) for b in pair.get("acs_redirect", [])}
        listed = {
            b["bdf"] for b in (json.loads(read_text(self.p["config_path"]) or "{}").get("bridges") or [])
        }
        return sorted(redirect | (listed & with_acs))

    def run(self) -> dict:
        fabric = self.fabric()
        bridges = [{**self.identity(b), "control": self.control(b)} for b in self.targets(fabric)]
        writes = [
            [self.setpci, "-s", b["bdf"], f"{REGISTER}=0000"] for b in bridges if b["control"] != "0000"
        ]
        config = {
            "root": self.root,
            "setpci": self.setpci,
            "bridges": [{k: b[k] for k in ("bdf", "vendor", "device", "path")} for b in bridges],
        }
        files = {
            self.p["config_path"]: json_text(config),
            self.unit_path: unit_text(self.p["script_path"], self.p["python"], self.p["config_path"]),
        }
        stale = {path: text for path, text in files.items() if read_text(path) != text}
        result = {
            "changed": bool(writes or stale),
            "bridges": bridges,
            "writes": writes,
            "unit": self.unit_path,
            "check_mode": self.module.check_mode,
            "diff": [
                {"before_header": p, "after_header": p, "before": read_text(p), "after": t}
                for p, t in stale.items()
            ],
        }
        if self.module.check_mode or not result["changed"]:
            return result
        for argv in writes:
            done = run_bounded(argv, timeout=self.p["timeout"])
            if done.rc != 0:
                fail_cmd(
                    self.module,
                    f"setpci could not clear ACS on {argv[2]}",
                    argv,
                    done.rc,
                    output=done.err or done.out,
                    **result,
                )
            if self.control(argv[2]) != "0000":
                self.module.fail_json(
                    msg=f"ACS control of {argv[2]} still reads non-zero after the write", **result
                )
        for path, text in stale.items():
            write_atomic(path, text, 0o644)
        if self.p["enable"] and os.path.isdir("/run/systemd/system"):
            for argv in (
                ["systemctl", "daemon-reload"],
                ["systemctl", "enable", f"{self.p['unit_name']}.service"],
            ):
                done = run_bounded(argv, timeout=self.p["timeout"])
                if done.rc != 0:
                    fail_cmd(
                        self.module, "cannot enable the boot unit", argv, done.rc, output=done.err, **result
                    )
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi_path": {"type": "path"},
            "setpci_path": {"type": "path"},
            "timeout": {"type": "int", "default": 60},
            "config_path": {"type": "path", "default": "/etc/epforge/acs-off.json"},
            "unit_name": {"type": "str", "default": "epforge-acs-off"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "script_path": {"type": "path", "default": "/usr/local/lib/epforge/epforge_acs_off.py"},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "enable": {"type": "bool", "default": True},
            **FABRIC_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    module.exit_json(**AcsFix(module).run())


if __name__ == "__main__":
    main()
