# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter epforge.ep.pcie_ipc_probe: whether role collective_probe adds the variant pcie_ipc (SGLang's
PCIe-IPC all-reduce on, NCCL as it is) to its default variants, and why.

Where the all-reduce can act has one owner, module_utils/pcie_ipc.can_act (known-issues row
pcie_ipc_allreduce_opt_in: PCIe or mixed GPUs, TP 2/4/8 over every GPU, SGLang >= 0.5.21 with FlashInfer
>= 0.7.0, not deterministic; and bf16). The probe asks it about the host, not about the request's switch: the
variable in the request's env is left out of the question (a server that sets it on runs this path, one that
sets it off may want to know what it leaves), and the probe reads no config.json, so under dtype auto the
model's dtype is unknown here and the reason says so (role tuner reads it).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import TableError
from ansible_collections.epforge.ep.plugins.module_utils.pcie_ipc import ROW, VARIABLE, can_act


def _mapping(value, what: str) -> dict:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError(f"pcie_ipc_probe needs {what} as a mapping, got {type(value).__name__}")
    return value


def pcie_ipc_probe(gpu_facts, table, stack=None, request=None, variants=None) -> dict:
    """{add, reason}: add is true where the PCIe-IPC all-reduce can act on this host and the probe measures
    its default variants (variants None: the user listed none)."""
    request = dict(_mapping(request, "the server request"))
    env = _mapping(request.get("env"), "the request's env")
    request["env"] = {k: v for k, v in env.items() if k != VARIABLE}
    try:
        act, why = can_act(
            _mapping(table, "the known-issues table"),
            _mapping(gpu_facts, "GPU facts"),
            _mapping(stack, "the stack"),
            request,
        )
    except TableError as exc:
        raise AnsibleFilterError(f"the known-issues table is malformed: {exc}") from exc
    if not why:  # no all-reduce between PCIe peers here: nothing to measure, nothing to say
        return {"add": False, "reason": ""}
    if not act:
        return {"add": False, "reason": f"variant pcie_ipc not added ({why})"}
    if variants is not None:
        return {
            "add": False,
            "reason": (
                f"variant pcie_ipc not added: collective_probe_variants lists the variants (add "
                f"{{name: pcie_ipc, env: {{{VARIABLE}: '1'}}}} to measure SGLang's PCIe-IPC all-reduce)"
            ),
        }
    dtype = str(request.get("dtype") or "auto")
    known = (
        f"the request's dtype is {dtype}"
        if dtype != "auto"
        else "the model's dtype is unknown to the probe (it reads no config.json; role tuner does), "
        "measured with bf16 messages, the only ones SGLang gives it"
    )
    gpus = int(_mapping(gpu_facts, "GPU facts").get("gpu_count") or 0)
    return {
        "add": True,
        "reason": f"variant pcie_ipc added: SGLang's PCIe-IPC all-reduce can act on TP {gpus} here "
        f"(row {ROW}); {known}",
    }


class FilterModule:
    def filters(self):
        return {"pcie_ipc_probe": pcie_ipc_probe}
