"""GPU facts (epforge_gpu_facts) gathered with nvidia-smi: the one gatherer.

Module nvidia_gpu_facts publishes them; module epforge_preflight_checks gathers them in the same call as its
host checks (one module call for role preflight on a no-op rerun). The parsers live in epforge_nvidia.py.
Gathering never fails because a host has no GPU: such a host gets available=false with the reason. It
fails (through the module) only when nvidia-smi answers the GPU query with output it cannot parse.
"""

from __future__ import annotations

import os

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.nvidia import (
    LINK_CLASSES,
    QUERY_FIELDS,
    classify_interconnect,
    parse_cuda_version,
    parse_p2p,
    parse_query_csv,
    parse_topology,
)
from ansible_collections.epforge.ep.plugins.module_utils.pci_fabric import bdf_of, gather_fabric
from ansible_collections.epforge.ep.plugins.module_utils.process import TIMED_OUT, run_bounded

QUERY_ARGS = [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]
DEFAULT_TIMEOUT = 60
# The fabric options of both modules that gather GPU facts (doc fragment epforge.ep.pci_fabric).
FABRIC_ARGUMENT_SPEC = {"fabric_root": {"type": "path", "default": "/"}, "lspci_path": {"type": "path"}}


def empty_facts(reason: str) -> dict:
    return {
        "available": False,
        "reason": reason,
        "gpu_count": 0,
        "gpus": [],
        "driver_version": "",
        "cuda_driver_version": "",
        "interconnect": "none",
        "topology": {"gpus": [], "matrix": {}, "links": dict.fromkeys(LINK_CLASSES, 0)},
        "topology_error": "",
        "peer_access": {"status": "no_gpu", "pairs": 0, "ok_pairs": 0, "missing": [], "error": ""},
        "archs": [],
        "fabric": {"available": False, "reason": reason or "no GPU"},
    }


def one_line(text: str) -> str:
    return " ".join(tail(text, 5).split())


class NvidiaSmi:
    """Runs nvidia-smi with a bounded time, as argv lists."""

    def __init__(self, path: str, timeout: int):
        self.path = path
        self.timeout = timeout

    def run(self, args: list[str]) -> tuple[list[str], int, str, str]:
        argv = [self.path, *args]
        rc, out, err, _unused = run_bounded(argv, timeout=self.timeout, env_update={"LC_ALL": "C"})
        return argv, rc, out, err


def failure_reason(rc: int, out: str, err: str, timeout: int) -> str:
    if rc == TIMED_OUT:
        return f"nvidia-smi timed out after {timeout} s"
    message = one_line(err) or one_line(out) or "no output"
    return f"nvidia-smi failed: {message}, rc {rc}"


def unknown_peer_access(error: str) -> dict:
    return {"status": "unknown", "pairs": 0, "ok_pairs": 0, "missing": [], "error": error}


def peer_access(smi: NvidiaSmi, gpu_count: int) -> dict:
    """Peer reads between every GPU pair: DeepEP crashes when only some pairs have them (sglang #19033,
    DeepEP #584), so preflight's known-issues rows read this. Unreadable -> status unknown, never a failure.
    """
    _argv, rc, out, err = smi.run(["topo", "-p2p", "r"])
    if rc != 0:
        return unknown_peer_access(failure_reason(rc, out, err, smi.timeout))
    try:
        p2p = parse_p2p(out)
    except ValueError as exc:
        return unknown_peer_access(str(exc))
    if len(p2p["gpus"]) != gpu_count:
        return unknown_peer_access(
            f"topo -p2p r lists {len(p2p['gpus'])} GPUs but the query listed {gpu_count}"
        )
    return {key: p2p[key] for key in ("status", "pairs", "ok_pairs", "missing")} | {"error": ""}


def topology_facts(smi: NvidiaSmi, gpu_count: int) -> dict:
    """topology and interconnect from `nvidia-smi topo -m`, else interconnect unknown with the reason."""
    _argv, rc, out, err = smi.run(["topo", "-m"])
    if rc != 0:
        return {"interconnect": "unknown", "topology_error": failure_reason(rc, out, err, smi.timeout)}
    try:
        topology = parse_topology(out)
    except ValueError as exc:
        return {"interconnect": "unknown", "topology_error": str(exc)}
    if len(topology["gpus"]) != gpu_count:
        return {
            "interconnect": "unknown",
            "topology_error": f"topo -m lists {len(topology['gpus'])} GPUs but the query listed {gpu_count}",
        }
    return {"topology": topology, "interconnect": classify_interconnect(topology)}


def find_nvidia_smi(module, path: str | None) -> tuple[str | None, str]:
    """(path, "") of nvidia-smi, or (None, why not); an empty path looks it up on the PATH."""
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return None, f"nvidia-smi not found at {path}"
        return path, ""
    path = module.get_bin_path("nvidia-smi")
    if not path:
        return None, "nvidia-smi not found on PATH"
    return path, ""


def persistence_modes(smi: NvidiaSmi) -> dict[str, str]:
    """{bdf: Enabled | Disabled} from nvidia-smi ({} when it cannot say)."""
    _argv, rc, out, _err = smi.run(["--query-gpu=pci.bus_id,persistence_mode", "--format=csv,noheader"])
    modes = {}
    for line in out.splitlines() if rc == 0 else []:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[1] in ("Enabled", "Disabled"):
            modes[bdf_of(fields[0])] = fields[1]
    return modes


def fabric_facts(module, smi: NvidiaSmi, gpus: list[dict], root: str, lspci_path: str | None) -> dict:
    """The PCIe fabric between the GPUs (pci_fabric.gather_fabric): sysfs under root, one lspci -D -vvv."""
    lspci = lspci_path or module.get_bin_path("lspci", opt_dirs=["/usr/sbin", "/sbin"])
    text, error = "", ""
    if not lspci:
        error = "lspci not found (Debian/Ubuntu: apt-get install pciutils): ACS not read"
    else:
        rc, out, err, _unused = run_bounded(
            [lspci, "-D", "-vvv"], timeout=smi.timeout, env_update={"LC_ALL": "C"}
        )
        text = out if rc == 0 else ""
        if rc != 0:
            error = f"lspci -D -vvv failed: {one_line(err or out) or 'no output'}, rc {rc}"
        elif "ACSCtl:" not in out and os.geteuid() != 0:
            error = "lspci ran without root, so it shows no extended capability (ACS not read)"
    return gather_fabric(root, gpus, text, error, persistence_modes(smi))


def gather_gpu_facts(
    module,
    nvidia_smi_path: str | None = None,
    timeout: int = DEFAULT_TIMEOUT,
    fabric_root: str = "/",
    lspci_path: str | None = None,
) -> dict:
    """The epforge_gpu_facts of this host (schema: ansible-doc -M library nvidia_gpu_facts)."""
    path, missing = find_nvidia_smi(module, nvidia_smi_path)
    if not path:
        return empty_facts(missing)
    smi = NvidiaSmi(path, timeout)

    argv, rc, out, err = smi.run(QUERY_ARGS)
    if rc != 0:
        if "No devices were found" in out + err:
            return empty_facts("no GPU listed (nvidia-smi: No devices were found)")
        return empty_facts(failure_reason(rc, out, err, smi.timeout))
    try:
        gpus = parse_query_csv(out)
    except ValueError as exc:
        fail_cmd(module, f"cannot parse the nvidia-smi GPU query: {exc}", argv, rc, output=out + err)
    if not gpus:
        return empty_facts("no GPU listed")

    facts = empty_facts("")
    facts.update(
        available=True,
        gpu_count=len(gpus),
        gpus=[{key: value for key, value in gpu.items() if key != "driver_version"} for gpu in gpus],
        driver_version=gpus[0]["driver_version"],
        archs=sorted({gpu["arch"] for gpu in gpus}, key=lambda arch: tuple(int(p) for p in arch.split("."))),
    )
    _argv, rc, out, err = smi.run([])
    facts["cuda_driver_version"] = parse_cuda_version(out) if rc == 0 else ""
    facts["peer_access"] = peer_access(smi, len(gpus))
    facts.update(topology_facts(smi, len(gpus)))
    facts["fabric"] = fabric_facts(module, smi, gpus, fabric_root, lspci_path)
    return facts
