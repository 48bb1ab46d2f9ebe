# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: where the PCIe fabric facts are read (plugins/module_utils/pci_fabric.py), written once for
nvidia_gpu_facts and epforge_preflight_checks; FABRIC_ARGUMENT_SPEC in plugins/module_utils/gpu_facts.py is
the matching argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  fabric_root:
    description:
      - Directory the host's C(/sys) and C(/proc/cmdline) are read under for the fabric facts (C(fabric)),
        C(/) on a host, or a copy of another host's files to judge them elsewhere.
    type: path
    default: /
  lspci_path:
    description:
      - lspci (Debian/Ubuntu package C(pciutils)) to read the ACS control bits of each bridge with
        (C(lspci -D -vvv), one call); unset looks it up on the PATH. Without lspci, or not as root (only root
        sees extended capabilities), every bridge's ACS is unknown and C(fabric.lspci_error) says why.
    type: path
"""
