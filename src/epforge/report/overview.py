"""The fleet overview from the provisioning facts (epforge_preflight, _cuda_toolkit, _ml_env,
_cuda_extensions, _deepep, _flashinfer, _sglang, _steps) and the final env's arch coverage as a host x
component matrix (epforge_final_env): rows of text, for the Markdown and HTML writers to lay out."""

from __future__ import annotations


def _ids(items) -> str:
    return ", ".join(str((i or {}).get("id", i)) for i in items or []) or "none"


def fabric_text(fabric: dict | None) -> str:
    """The PCIe fabric of epforge_preflight's gpu.fabric in one cell: IOMMU, sockets, paths, and each
    finding of the fabric rows' kind (ACS redirect, narrow links, slow slots, small BAR1)."""
    fabric = fabric or {}
    if not fabric.get("available"):
        return f"not read ({fabric.get('reason') or 'no facts'})" if fabric else "-"
    sockets = sorted({s for s in (fabric.get("sockets") or {}).values() if s is not None})
    kinds = ", ".join(f"{n} {k}" for k, n in sorted((fabric.get("pair_kinds") or {}).items()))
    parts = [
        f"IOMMU {fabric.get('iommu', '?')}",
        f"socket(s) {', '.join(map(str, sockets)) or '?'}",
        f"GPU pairs: {kinds or 'none'}",
    ]
    redirect = fabric.get("acs_redirect_bridges") or []
    if redirect:
        parts.append(f"ACS redirect on {', '.join(redirect)}")
    elif not fabric.get("acs_read"):
        parts.append(f"ACS not read ({fabric.get('lspci_error') or 'no bridge with ACS'})")
    for key in ("narrow_links", "slow_slots", "small_bar1"):
        parts += fabric.get(key) or []
    return "; ".join(parts)


def overview_rows(hosts: dict[str, dict]) -> list[dict]:
    """One row per host from the provisioning facts: GPUs and interconnect, stack, toolkit, torch, each
    extension and its archs, DeepEP and FlashInfer state, SGLang, known issues applied, steps skipped."""
    rows = []
    for host, facts in hosts.items():
        pre = facts.get("preflight") or {}
        if not any(facts.get(k) for k in ("preflight", "cuda_toolkit", "ml_env", "final_env", "steps")):
            continue
        gpu = pre.get("gpu") or {}
        if gpu.get("gpu_count"):
            gpus = (
                f"{gpu['gpu_count']}x {'/'.join(gpu.get('names') or ['?'])} "
                f"({'/'.join(gpu.get('archs') or [])}), {gpu.get('interconnect', '?')}, "
                f"driver {gpu.get('driver_version') or '?'}"
            )
        else:
            gpus = f"no GPU ({gpu.get('reason') or 'not probed'})" if pre else "-"
        fabric = fabric_text(gpu.get("fabric")) if gpu.get("gpu_count") else "-"
        stack = pre.get("stack") or {}
        tk = facts.get("cuda_toolkit") or {}
        ml = facts.get("ml_env") or {}
        exts = facts.get("cuda_extensions") or {}
        dep = facts.get("deepep") or {}
        fi = facts.get("flashinfer") or {}
        sg = facts.get("sglang") or {}
        ki = pre.get("known_issues") or {}
        steps = (facts.get("steps") or {}).get("steps") or []
        not_done = [s for s in steps if s.get("status") != "done"]
        rows.append(
            {
                "host": host,
                "gpus": gpus,
                "fabric": fabric,
                "stack": f"{stack.get('name', '?')} (CUDA {stack.get('cuda', '?')}, archs "
                f"{', '.join(stack.get('arch_list') or [])})"
                if stack
                else "-",
                "toolkit": f"CUDA {tk.get('nvcc_release') or tk.get('version', '?')} "
                f"({tk.get('method', '?')}) at {tk.get('home', '?')}"
                if tk
                else "-",
                "torch": f"{ml.get('torch_version', '?')} (CUDA {ml.get('torch_cuda', '?')}; "
                f"{', '.join(ml.get('torch_arch_list') or [])})"
                if ml
                else "-",
                "extensions": "; ".join(
                    f"{name}: {', '.join(e.get('archs_found') or []) or 'not checked'}"
                    for name, e in sorted(exts.items())
                )
                or "-",
                "deepep": (
                    f"{dep.get('version', '?')} ({dep.get('source', '?')} {str(dep.get('commit', ''))[:7]}), "
                    f"SASS {', '.join(dep.get('sass_archs') or [])}, import {dep.get('import_status', '?')}, "
                    + (
                        f"GPU round trip on {dep['gpu_verify'].get('gpus')} GPUs"
                        if (dep.get("gpu_verify") or {}).get("result")
                        else "no GPU round trip"
                    )
                )
                if dep
                else "-",
                "flashinfer": f"{fi.get('version', '?')}, JIT {fi.get('jit_kernel', '?')} for "
                f"{fi.get('jit_arch_list', '?')}: SASS {', '.join(fi.get('jit_sass_archs') or [])}"
                if fi
                else "-",
                "sglang": f"{sg.get('version', '?')} ({sg.get('mode', '?')})" if sg else "-",
                "known_issues": f"adjusted: {_ids(ki.get('adjustments'))}; "
                f"warnings: {_ids(ki.get('warnings'))}"
                if ki
                else "-",
                "not_done": "; ".join(
                    f"{s.get('step')}: {s.get('status')} ({s.get('reason') or s.get('detail') or '?'})"
                    for s in not_done
                )
                if steps
                else ("-" if not facts.get("steps") else "none"),
            }
        )
    return rows


OVERVIEW_COLUMNS = (
    ("host", "host"),
    ("gpus", "GPUs and interconnect"),
    ("fabric", "PCIe fabric"),
    ("stack", "stack"),
    ("toolkit", "toolkit"),
    ("torch", "torch"),
    ("extensions", "extensions (SASS)"),
    ("deepep", "DeepEP"),
    ("flashinfer", "FlashInfer"),
    ("sglang", "SGLang"),
    ("known_issues", "known issues applied"),
    ("not_done", "steps skipped and why"),
)

COMPONENT_ORDER = ("torch", "sgl_kernel", "sgl_kernel.flash_ops", "flashinfer", "deep_ep")


MATRIX_TITLE = "Final env: arch coverage (host x component)"
MATRIX_TEXT = (
    "What the server will import (epforge_final_env): the distribution that provides each component and "
    "whether its SASS covers the hosts' GPU archs; JIT components compile at first use."
)


def coverage_matrix(hosts: dict[str, dict]) -> tuple[list[str], list[dict]]:
    """Host x component from epforge_final_env: per cell a status (ok, missing, jit, absent, ...), its text,
    and the features without kernels per host."""
    components: list[str] = []
    for facts in hosts.values():
        for name in (facts.get("final_env") or {}).get("components") or {}:
            if name not in components:
                components.append(name)
    components.sort(key=lambda n: (COMPONENT_ORDER.index(n) if n in COMPONENT_ORDER else 99, n))
    rows = []
    for host, facts in hosts.items():
        final = facts.get("final_env") or {}
        if not final.get("components"):
            continue
        cells = {}
        for name in components:
            c = final["components"].get(name)
            if not c:
                cells[name] = {"status": "absent", "text": "-"}
                continue
            status = c.get("status", "?")
            who = f"{c.get('distribution') or 'not installed'} {c.get('version') or ''}".strip()
            if status in ("ok", "missing_archs"):
                found = ", ".join(c.get("sass") or []) or "none"
                tail = "" if not c.get("missing") else f"; lacks {', '.join(c['missing'])}"
                text = f"{who}: SASS {found}{tail}"
                status = "ok" if not c.get("missing") else "missing"
            elif status == "jit":
                text = f"{who}: JIT at first use"
            else:
                text = f"{who}: {status.replace('_', ' ')}"
            cells[name] = {"status": status, "text": text}
        lacking = [f for f in final.get("features") or [] if not f.get("kernels")]
        rows.append(
            {
                "host": host,
                "archs": ", ".join(final.get("archs") or []),
                "cells": cells,
                "deep_ep": (final.get("deep_ep") or {}).get("state", ""),
                "lacking": "; ".join(
                    f"{f['feature']}{' (REQUESTED)' if f.get('requested') else ''}: no kernels for "
                    f"{', '.join(f.get('missing') or [])}"
                    for f in lacking
                )
                or "none",
            }
        )
    return components, rows
