"""Parsers for nvidia-smi output: the GPU query CSV, the CUDA version the driver supports, the
`nvidia-smi topo -m` connection matrix and the `nvidia-smi topo -p2p r` peer-read matrix; plus the rules
that name a host's GPU interconnect and its peer access (full, none or partial).

Pure functions (text in, data out). Malformed input raises ValueError with a message that names the
line at fault, so the module can report it instead of guessing.
"""

from __future__ import annotations

import csv
import re

# The fields the module asks for, in this order (nvidia-smi --query-gpu=...).
QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "pci.bus_id", "uuid", "driver_version")

# Link classes of `nvidia-smi topo -m` (its legend), counted per GPU pair in topology["links"].
LINK_CLASSES = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
# Older drivers wrote SOC for what newer ones call SYS (a path across the SMP interconnect).
_LINK_ALIASES = {"SOC": "SYS"}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NVLINK = re.compile(r"^NV(\d+)$")
_GPU = re.compile(r"^GPU(\d+)$")
_CAPABILITY = re.compile(r"^\d+\.\d+$")
_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*(\S+)")
# Words of the header's trailing columns: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID".
_HEADER_TAIL_WORDS = {"CPU", "NUMA", "GPU", "Affinity", "ID"}


def parse_query_csv(text: str) -> list[dict]:
    """GPUs from `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`.

    Returns one dict per GPU: index (int), name, compute_capability ("12.0"), arch (same string),
    memory_total_mib (int), pci_bus_id, uuid, driver_version. Empty output gives [].
    """
    gpus = []
    lines = [line for line in text.splitlines() if line.strip()]
    for number, row in enumerate(csv.reader(lines, skipinitialspace=True), start=1):
        fields = [field.strip() for field in row]
        if len(fields) != len(QUERY_FIELDS):
            raise ValueError(
                f"query line {number} has {len(fields)} fields, expected {len(QUERY_FIELDS)} "
                f"({', '.join(QUERY_FIELDS)}): {lines[number - 1]!r}"
            )
        index, name, capability, memory, bus_id, uuid, driver = fields
        if not index.isdigit():
            raise ValueError(f"query line {number}: index {index!r} is not a number")
        if not _CAPABILITY.match(capability):
            raise ValueError(f"query line {number}: compute_cap {capability!r} is not MAJOR.MINOR")
        if not memory.isdigit():
            raise ValueError(f"query line {number}: memory.total {memory!r} is not a number of MiB")
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "compute_capability": capability,
                "arch": capability,
                "memory_total_mib": int(memory),
                "pci_bus_id": bus_id,
                "uuid": uuid,
                "driver_version": driver,
            }
        )
    indexes = [gpu["index"] for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"query lists a GPU index twice: {indexes}")
    return gpus


def parse_cuda_version(text: str) -> str:
    """The newest CUDA the driver supports ("13.0"), from plain `nvidia-smi` ("CUDA Version: 13.0" in
    its header) or `nvidia-smi --version` ("CUDA Version : 13.0"). "" when absent or not a version
    (some drivers print "N/A" or "Not Found")."""
    match = _CUDA_VERSION.search(text or "")
    if match and _CAPABILITY.match(match.group(1)):
        return match.group(1)
    return ""


def _link_class(token: str) -> str | None:
    """The LINK_CLASSES name of a matrix cell, or None for a token the legend does not define."""
    token = _LINK_ALIASES.get(token, token)
    if _NVLINK.match(token):
        return "NV"
    return token if token in LINK_CLASSES else None


def _clean_lines(text: str) -> list[str]:
    """The output's lines without the escape codes nvidia-smi adds on a terminal."""
    return [_ANSI.sub("", line).rstrip() for line in (text or "").splitlines()]


def _is_legend(tokens: list[str]) -> bool:
    return bool(tokens) and tokens[0].rstrip(":") == "Legend"


def _matrix_rows(lines: list[str]):
    """(tokens, line) of each matrix row: blank lines before the first row are skipped; a blank line
    after it, or the legend, ends the matrix."""
    seen_row = False
    for line in lines:
        tokens = line.split()
        if not tokens:
            if seen_row:
                return
            continue
        if _is_legend(tokens):
            return
        seen_row = True
        yield tokens, line


def _topology_header(lines: list[str]) -> tuple[int, list[str]]:
    """The line number of the header and the device names it lists (GPUs first, then NICs)."""
    for number, line in enumerate(lines):
        tokens = line.split()
        # The header starts with GPU0; GPU0's own row has X right after its name.
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X"):
            devices = []
            for token in tokens:
                if token in _HEADER_TAIL_WORDS:
                    break
                devices.append(token)
            return number, devices
        if _is_legend(tokens):
            break
    raise ValueError("no header row of GPU names (a line starting with GPU0) before the legend")


def _header_gpus(devices: list[str]) -> list[str]:
    """The header's GPU names, which must be GPU0..GPUn and stand before any other device."""
    gpus = [device for device in devices if _GPU.match(device)]
    if [int(_GPU.match(gpu).group(1)) for gpu in gpus] != list(range(len(gpus))):
        raise ValueError(f"header GPU names are not GPU0..GPU{len(gpus) - 1}: {devices}")
    if devices[: len(gpus)] != gpus:
        raise ValueError(f"header lists a non-GPU device before a GPU: {devices}")
    return gpus


def _topology_rows(lines: list[str], devices: list[str], gpus: list[str]) -> dict[str, list[str]]:
    """Each device's row of cells (NIC rows empty: they say nothing about GPU pairs)."""
    rows: dict[str, list[str]] = {}
    for tokens, line in _matrix_rows(lines):
        name = tokens[0]
        if name not in devices:
            raise ValueError(f"matrix row {name!r} is not a device of the header {devices}")
        if name not in gpus:
            rows[name] = []
            continue
        cells = tokens[1 : 1 + len(devices)]
        if len(cells) < len(devices):
            raise ValueError(f"row {name} has {len(cells)} cells for {len(devices)} devices: {line!r}")
        rows[name] = cells
    return rows


def _check_diagonal(gpu: str, cell: str) -> None:
    if cell != "X":
        raise ValueError(f"{gpu} to itself reads {cell!r}, expected X")


def _link_matrix(rows: dict[str, list[str]], gpus: list[str]) -> tuple[dict, dict]:
    """The GPU-to-GPU matrix and the count of each link class over unordered pairs."""
    matrix: dict[str, dict[str, str]] = {}
    links = dict.fromkeys(LINK_CLASSES, 0)
    for row_number, gpu in enumerate(gpus):
        if gpu not in rows:
            raise ValueError(f"no matrix row for {gpu} (header lists {len(gpus)} GPUs)")
        matrix[gpu] = {}
        for column, peer in enumerate(gpus):
            cell = rows[gpu][column]
            if column == row_number:
                _check_diagonal(gpu, cell)
                continue
            link = _link_class(cell)
            if link is None:
                raise ValueError(f"unknown link {cell!r} between {gpu} and {peer}")
            matrix[gpu][peer] = cell
            if column > row_number:
                links[link] += 1
    return matrix, links


def parse_topology(text: str) -> dict:
    """GPU-to-GPU links from `nvidia-smi topo -m`.

    Handles the header of device names (GPUs, then NICs or mlx5_N devices), the trailing columns
    (CPU Affinity, NUMA Affinity, GPU NUMA ID), the bold/underline escape codes nvidia-smi puts around
    the header on a terminal, tab- or space-aligned columns, "X" on the diagonal, NIC rows (ignored)
    and the legend after the matrix. Returns
    {"gpus": ["GPU0", ...], "matrix": {"GPU0": {"GPU1": "NV18", ...}, ...},
     "links": {"NV": n, "PIX": n, ...}} where links counts each unordered GPU pair once.
    Raises ValueError for a missing header, a missing or short GPU row, a diagonal other than X,
    or a link token the legend does not define.
    """
    lines = _clean_lines(text)
    header_at, devices = _topology_header(lines)
    gpus = _header_gpus(devices)
    rows = _topology_rows(lines[header_at + 1 :], devices, gpus)
    matrix, links = _link_matrix(rows, gpus)
    return {"gpus": gpus, "matrix": matrix, "links": links}


def classify_interconnect(topology: dict) -> str:
    """nvlink when every GPU pair is NV#, pcie when none is, mixed otherwise; single for one GPU,
    none for no GPU."""
    gpus = topology.get("gpus", [])
    if not gpus:
        return "none"
    if len(gpus) == 1:
        return "single"
    links = topology["links"]
    pairs = sum(links.values())
    if links["NV"] == pairs:
        return "nvlink"
    if links["NV"] == 0:
        return "pcie"
    return "mixed"


# Cells of `nvidia-smi topo -p2p <r|w|n|a|p>` (its legend): OK, or why a pair has no peer access.
P2P_STATUSES = {
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "DR": "Disabled by regkey",
    "U": "Unknown",
}


def _p2p_header(lines: list[str]) -> tuple[int, list[str]]:
    """The line number after the header and its GPU names (GPU0..GPUn)."""
    for number, line in enumerate(lines):
        tokens = line.split()
        if tokens and all(_GPU.match(token) for token in tokens):
            if tokens != [f"GPU{i}" for i in range(len(tokens))]:
                raise ValueError(f"header GPU names are not GPU0..GPU{len(tokens) - 1}: {tokens}")
            return number + 1, tokens
        if _is_legend(tokens):
            break
    raise ValueError("no header row of GPU names (GPU0 GPU1 ...) before the legend")


def _p2p_row(name: str, cells: list[str], gpus: list[str]) -> dict[str, str]:
    """One GPU's peer statuses: X on the diagonal, a legend status elsewhere."""
    row = {}
    for peer, cell in zip(gpus, cells, strict=True):
        if peer == name:
            _check_diagonal(name, cell)
            continue
        if cell not in P2P_STATUSES:
            raise ValueError(f"unknown peer status {cell!r} between {name} and {peer}")
        row[peer] = cell
    return row


def _p2p_matrix(lines: list[str], gpus: list[str]) -> dict[str, dict[str, str]]:
    matrix: dict[str, dict[str, str]] = {}
    for tokens, line in _matrix_rows(lines):
        name, cells = tokens[0], tokens[1:]
        if name not in gpus or name in matrix:
            raise ValueError(f"matrix row {name!r} is not a new GPU of the header {gpus}: {line!r}")
        if len(cells) != len(gpus):
            raise ValueError(f"row {name} has {len(cells)} cells for {len(gpus)} GPUs: {line!r}")
        matrix[name] = _p2p_row(name, cells, gpus)
    if sorted(matrix) != sorted(gpus):
        raise ValueError(f"rows for {sorted(matrix)} but the header lists {gpus}")
    return matrix


def _missing_pairs(matrix: dict[str, dict[str, str]], gpus: list[str]) -> list[str]:
    """'GPU0-GPU2 CNS' for each pair without peer access both ways (the status of the failing way)."""
    missing = []
    for i, gpu in enumerate(gpus):
        for peer in gpus[i + 1 :]:
            there, back = matrix[gpu][peer], matrix[peer][gpu]
            if there != "OK" or back != "OK":
                missing.append(f"{gpu}-{peer} {there if there != 'OK' else back}")
    return missing


def _p2p_status(gpu_count: int, pairs: int, missing: int) -> str:
    if gpu_count == 1:
        return "single"
    if not missing:
        return "full"
    if missing == pairs:
        return "none"
    return "partial"


def parse_p2p(text: str) -> dict:
    """The GPU pairs with and without peer access from `nvidia-smi topo -p2p r` (or w/n/a/p).

    Handles a title line before the matrix ("P2P Connectivity Matrix"), the escape codes around the
    header, tab- or space-aligned columns and the legend. Returns
    {"gpus": [...], "matrix": {"GPU0": {"GPU1": "OK", ...}, ...}, "pairs": n, "ok_pairs": n,
     "missing": ["GPU0-GPU2 CNS", ...], "status": full|none|partial|single}, where a pair has peer access
    only when both directions read OK. Raises ValueError naming the line at fault.
    """
    lines = _clean_lines(text)
    start, gpus = _p2p_header(lines)
    matrix = _p2p_matrix(lines[start:], gpus)
    missing = _missing_pairs(matrix, gpus)
    pairs = len(gpus) * (len(gpus) - 1) // 2
    return {
        "gpus": gpus,
        "matrix": matrix,
        "pairs": pairs,
        "ok_pairs": pairs - len(missing),
        "missing": missing,
        "status": _p2p_status(len(gpus), pairs, len(missing)),
    }
