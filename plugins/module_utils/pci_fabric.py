# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The PCIe fabric between a host's GPUs, read from sysfs and one `lspci -D -vvv` (epforge_gpu_facts.fabric).

On PCIe-only boxes peer traffic between GPUs fails or crawls under SGLang for reasons below it: ACS redirect
on a bridge between two GPUs sends their peer traffic up to the root complex, an IOMMU that translates does
the same, GPUs on two CPU sockets put every allreduce on the inter-socket link, a card trained at a lower
width (or in a slower slot) loses bandwidth without an error, a small BAR1 limits what a peer can map.
This module gathers the facts those rows of data/known_issues.yml read; it only reads.

Where each fact comes from (root is "/" on a host, a fixture tree in tests):
- a GPU's place in the tree: the realpath of /sys/bus/pci/devices/<domain:bus:dev.fn>, whose directories
  name the root complex (pci0000:00) and every bridge above the GPU, root first;
- link speed and width: current_link_speed/_width, max_link_speed/_width of the GPU and its port;
- NUMA node and CPU socket: numa_node, then the node's (or local_cpulist's) first CPU's
  topology/physical_package_id;
- BAR1: line 1 of the GPU's `resource` file (start, end, flags; a 64-bit BAR takes lines 1 and 2);
- IOMMU: the GPU's iommu_group/type (identity = passthrough, DMA/DMA-FQ = translated), /sys/class/iommu,
  and the kernel command line;
- ACS: the `ACSCtl:` line of each bridge in `lspci -D -vvv` (pciutils prints it from the ACS extended
  capability; only root sees extended capabilities, so without root every bridge's ACS is unknown).
"""

from __future__ import annotations

import os
import re

# ACS control bits that send peer requests or completions upstream instead of straight across a switch
# (PCIe spec "ACS P2P Request Redirect" / "ACS P2P Completion Redirect"); NCCL's troubleshooting page says
# to disable ACS for peer-to-peer between GPUs.
ACS_REDIRECT_BITS = ("ReqRedir", "CmpltRedir")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_LSPCI_HEADER = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")
_ACS_CTL = re.compile(r"^\s*ACSCtl:\s*(.*)$")
_ACS_BIT = re.compile(r"([A-Za-z]+)([+-])")
_SPEED = re.compile(r"([0-9.]+)\s*GT/s")
_CMDLINE_KEYS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict")


def bdf_of(pci_bus_id: str) -> str:
    """nvidia-smi's 00000000:01:00.0 as sysfs names it (0000:01:00.0)."""
    text = str(pci_bus_id).strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return f"0000:{text}" if len(parts) == 2 else text


def parse_lspci_acs(text: str) -> dict[str, dict[str, bool]]:
    """{bdf: {bit: enabled}} from `lspci -D -vvv`, for every device that shows an ACSCtl line."""
    acs: dict[str, dict[str, bool]] = {}
    current = ""
    for line in (text or "").splitlines():
        header = _LSPCI_HEADER.match(line)
        if header:
            current = header.group(1).lower()
            continue
        ctl = _ACS_CTL.match(line)
        if ctl and current:
            acs[current] = {name: sign == "+" for name, sign in _ACS_BIT.findall(ctl.group(1))}
    return acs


def parse_lspci_names(text: str) -> dict[str, str]:
    """{bdf: 'PCI bridge: ...'} from the header lines of `lspci -D -vvv`."""
    names = {}
    for line in (text or "").splitlines():
        header = _LSPCI_HEADER.match(line)
        if header:
            names[header.group(1).lower()] = header.group(2).strip()
    return names


def _read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _read(root: str, path: str) -> str:
    """A file of the host (path absolute on the host) under root."""
    return _read_file(os.path.join(root, path.lstrip("/")))


def _speed(text: str) -> float | None:
    match = _SPEED.search(text or "")
    return float(match.group(1)) if match else None


def _int(text: str) -> int | None:
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


def _first_cpu(cpulist: str) -> int | None:
    match = re.match(r"\s*(\d+)", cpulist or "")
    return int(match.group(1)) if match else None


def socket_of(root: str, numa_node: int | None, local_cpulist: str) -> int | None:
    """The CPU socket (physical_package_id) of the node's first CPU, else of the device's first local CPU."""
    cpu = None
    if numa_node is not None and numa_node >= 0:
        cpu = _first_cpu(_read(root, f"/sys/devices/system/node/node{numa_node}/cpulist"))
    if cpu is None:
        cpu = _first_cpu(local_cpulist)
    if cpu is None:
        return None
    return _int(_read(root, f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"))


def bar_size_mib(resource: str, region: int) -> int | None:
    """Size of a BAR from a sysfs `resource` file (one 'start end flags' line per region), in MiB."""
    lines = (resource or "").splitlines()
    if region >= len(lines):
        return None
    fields = lines[region].split()
    if len(fields) < 2:
        return None
    start, end = _int(fields[0]), _int(fields[1])
    if start is None or end is None or end <= start:
        return None
    return (end - start + 1) // (1024 * 1024)


def device_path(root: str, bdf: str) -> tuple[str, list[str]]:
    """(root complex, [bridges from the root port down to the device's parent]) from the sysfs realpath."""
    link = os.path.join(root, "sys/bus/pci/devices", bdf)
    real = os.path.realpath(link)
    parts = real.split(os.sep)
    complexes = [p for p in parts if p.startswith("pci")]
    chain = [p for p in parts if _BDF.match(p)]
    return (complexes[0] if complexes else ""), chain[:-1] if chain and chain[-1] == bdf else chain


def link_facts(root: str, device: str, port: str) -> dict:
    base = f"/sys/bus/pci/devices/{device}"
    port_max = _speed(_read(root, f"/sys/bus/pci/devices/{port}/max_link_speed")) if port else None
    return {
        "speed_gts": _speed(_read(root, f"{base}/current_link_speed")),
        "max_speed_gts": _speed(_read(root, f"{base}/max_link_speed")),
        "width": _int(_read(root, f"{base}/current_link_width")),
        "max_width": _int(_read(root, f"{base}/max_link_width")),
        "port_max_speed_gts": port_max,
    }


def iommu_mode(root: str, group_types: list[str], cmdline: str) -> dict:
    """off | passthrough | translated | unknown, with the evidence and the command line's IOMMU words."""
    words = [w for w in cmdline.split() if w.split("=", 1)[0] in _CMDLINE_KEYS]
    types = sorted({t for t in group_types if t})
    units_dir = os.path.join(root, "sys/class/iommu")
    units = sorted(os.listdir(units_dir)) if os.path.isdir(units_dir) else []
    if types:
        translated = [t for t in types if t.upper().startswith("DMA")]
        mode = "translated" if translated else ("passthrough" if "identity" in types else "unknown")
        evidence = f"iommu_group type {', '.join(types)}"
    elif not units:
        mode, evidence = "off", "no IOMMU unit in /sys/class/iommu"
    else:
        mode, evidence = "unknown", f"IOMMU units {', '.join(units)} but no group type for the GPUs"
    return {"mode": mode, "evidence": evidence, "cmdline": words}


def _pair_path(a: dict, b: dict) -> dict:
    """The bridges peer traffic between GPUs a and b crosses, and what kind of path it is."""
    common = []
    if a["root_complex"] == b["root_complex"]:
        for x, y in zip(a["path"], b["path"], strict=False):
            if x != y:
                break
            common.append(x)
    if common:
        via = [*reversed(a["path"][len(common) :]), common[-1], *b["path"][len(common) :]]
        kind = "switch"
    else:
        via = [*reversed(a["path"]), *b["path"]]
        same_socket = a["socket"] is not None and a["socket"] == b["socket"]
        kind = "host_bridge" if same_socket or a["root_complex"] == b["root_complex"] else "cross_socket"
        if a["socket"] is not None and b["socket"] is not None and a["socket"] != b["socket"]:
            kind = "cross_socket"
    return {"gpus": [a["index"], b["index"]], "kind": kind, "via": via}


def gather_fabric(
    root: str, gpus: list[dict], lspci_text: str = "", lspci_error: str = "", persistence: dict | None = None
) -> dict:
    """The fabric facts for gpus ([{index, pci_bus_id, memory_total_mib}] from nvidia-smi)."""
    if not gpus:
        return {"available": False, "reason": "no GPU"}
    acs = parse_lspci_acs(lspci_text)
    names = parse_lspci_names(lspci_text)
    cmdline = _read(root, "/proc/cmdline")
    entries, group_types, bridges = [], [], {}
    for gpu in gpus:
        bdf = bdf_of(gpu.get("pci_bus_id", ""))
        base = f"/sys/bus/pci/devices/{bdf}"
        if not os.path.exists(os.path.join(root, base.lstrip("/"))):
            return {
                "available": False,
                "reason": f"GPU {gpu.get('index')} ({bdf}) is not in {root}sys/bus/pci",
            }
        complex_, path = device_path(root, bdf)
        numa = _int(_read(root, f"{base}/numa_node"))
        group_link = os.path.join(root, base.lstrip("/"), "iommu_group")
        if os.path.exists(group_link):
            group_types.append(_read_file(os.path.join(os.path.realpath(group_link), "type")))
        bar1 = bar_size_mib(_read(root, f"{base}/resource"), 1)
        entries.append(
            {
                "index": gpu.get("index"),
                "bdf": bdf,
                "root_complex": complex_,
                "path": path,
                "numa_node": numa if numa is not None and numa >= 0 else None,
                "socket": socket_of(root, numa, _read(root, f"{base}/local_cpulist")),
                "link": link_facts(root, bdf, path[-1] if path else ""),
                "bar1_mib": bar1,
                "memory_mib": gpu.get("memory_total_mib"),
                "persistence_mode": (persistence or {}).get(bdf, "unknown"),
            }
        )
        for bridge in path:
            bits = acs.get(bridge)
            bridges[bridge] = {
                "name": names.get(bridge, ""),
                "acs": bits,
                "acs_redirect": None if bits is None else any(bits.get(b) for b in ACS_REDIRECT_BITS),
            }
    pairs = []
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            pair = _pair_path(a, b)
            pair["acs_redirect"] = [x for x in pair["via"] if (bridges.get(x) or {}).get("acs_redirect")]
            pairs.append(pair)
    return {
        "available": True,
        "reason": "",
        "gpus": entries,
        "bridges": bridges,
        "pairs": pairs,
        "iommu": iommu_mode(root, group_types, cmdline),
        "acs_read": bool(acs),
        "lspci_error": lspci_error,
    }


def tp_group(server: dict, gpu_count: int) -> list[int]:
    """The GPU indexes (nvidia-smi's PCI order) of the first TP group of a single-node launch: base_gpu_id on,
    or the first tp_size of CUDA_VISIBLE_DEVICES when the settings set it (as indexes)."""
    tp = _int(server.get("tp_size")) or 1
    visible = str((server.get("env") or {}).get("CUDA_VISIBLE_DEVICES", "")).strip()
    if visible:
        indexes = [_int(v) for v in visible.split(",")]
        if all(i is not None for i in indexes):
            return [i for i in indexes[:tp] if i < gpu_count]
    base = _int(server.get("base_gpu_id")) or 0
    return [i for i in range(base, base + tp) if i < gpu_count]


def fabric_context(fabric: dict | None, server: dict) -> dict:
    """What the known-issue rows read as fabric.*: the facts reduced to what a condition compares.

    available; iommu (off | passthrough | translated | unknown); acs_read; acs_redirect (GPU pairs whose path
    crosses a bridge with ACS redirect on, as 'GPU0-GPU1 via 0000:02:00.0'); tp_acs_redirect (those within the
    first TP group); tp_sockets (CPU sockets the TP group spans); narrow_links (trained below the card's
    width); slow_slots (a card faster than the port above it); small_bar1 (BAR1 below the GPU's memory).
    """
    fabric = fabric or {}
    if not fabric.get("available"):
        return {"available": False, "iommu": "unknown", "acs_read": False}
    gpus = {g["index"]: g for g in fabric.get("gpus", [])}
    group = set(tp_group(server, len(gpus)))
    redirect = [p for p in fabric.get("pairs", []) if p.get("acs_redirect")]

    def pair_text(pair: dict) -> str:
        return f"GPU{pair['gpus'][0]}-GPU{pair['gpus'][1]} via {', '.join(pair['acs_redirect'])}"

    narrow, slow, small = [], [], []
    for index, gpu in sorted(gpus.items()):
        link = gpu.get("link") or {}
        if link.get("width") and link.get("max_width") and link["width"] < link["max_width"]:
            narrow.append(f"GPU{index} x{link['width']} of x{link['max_width']}")
        card, port = link.get("max_speed_gts"), link.get("port_max_speed_gts")
        if card and port and port < card:
            slow.append(f"GPU{index} {card:g} GT/s card under a {port:g} GT/s port")
        bar1, memory = gpu.get("bar1_mib"), gpu.get("memory_mib")
        if bar1 and memory and bar1 < memory:
            small.append(f"GPU{index} BAR1 {bar1} MiB of {memory} MiB")
    sockets = {gpus[i].get("socket") for i in group if i in gpus and gpus[i].get("socket") is not None}
    return {
        "available": True,
        "iommu": (fabric.get("iommu") or {}).get("mode", "unknown"),
        "acs_read": bool(fabric.get("acs_read")),
        "acs_redirect": [pair_text(p) for p in redirect],
        "tp_acs_redirect": [pair_text(p) for p in redirect if set(p["gpus"]) <= group],
        "tp_sockets": len(sockets),
        "narrow_links": narrow,
        "slow_slots": slow,
        "small_bar1": small,
    }


def fabric_summary(fabric: dict | None) -> dict:
    """The fabric as local fact epforge_preflight records it and `epforge report` shows it: stable across
    reruns (no current link speed, which an idle GPU lowers), judged without server settings."""
    fabric = fabric or {}
    if not fabric.get("available"):
        return {"available": False, "reason": fabric.get("reason", "")}
    context = fabric_context(fabric, {"tp_size": 1})
    kinds: dict[str, int] = {}
    for pair in fabric.get("pairs", []):
        kinds[pair["kind"]] = kinds.get(pair["kind"], 0) + 1
    bridges = sorted({b for p in fabric.get("pairs", []) for b in p.get("acs_redirect", [])})
    return {
        "available": True,
        "iommu": context["iommu"],
        "acs_read": context["acs_read"],
        "acs_redirect_bridges": bridges,
        "sockets": {f"GPU{g['index']}": g.get("socket") for g in fabric.get("gpus", [])},
        "pair_kinds": kinds,
        "narrow_links": context["narrow_links"],
        "slow_slots": context["slow_slots"],
        "small_bar1": context["small_bar1"],
        "lspci_error": fabric.get("lspci_error", ""),
    }
