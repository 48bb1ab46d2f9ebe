"""Known failure signatures of an SGLang launch (and the builds under it): log text -> classification.

A launch that dies after minutes of loading prints hundreds of lines; the one that matters is often a
single line deep in a traceback. This table turns such lines into a name, a plain summary and a remedy,
so a failed start says *why* and *what to do* in its first line.

Each row: id, patterns (regular expressions; any one matching a line selects the row), optional
`requires` (expressions that must also match somewhere in the text), summary, remedy, source.
Rows are ordered specific-first: the first matching row is the primary classification.
Pure functions only (unit-tested in tests/unit/test_signatures.py).
"""

from __future__ import annotations

import re

SIGNATURES: list[dict] = [
    {
        "id": "torch_symm_mem_keyerror",
        "patterns": [r"KeyError: 1[1-9]\b", r"KeyError: [2-9][0-9]\b"],
        "requires": [r"symm_mem|symm-mem|symmetric_memory|all_reduce|allreduce"],
        "summary": "torch symmetric-memory allreduce has no size entry for this GPU generation "
                   "(SGLang's torch_symm_mem table knows compute capability 9 and 10 only)",
        "remedy": "remove --enable-torch-symm-mem (enable_torch_symm_mem: false); the feature also needs "
                  "NVLink multicast, which PCIe-only hosts lack",
        "source": "sglang srt/distributed/device_communicators/torch_symm_mem.py; stack-facts.md",
    },
    {
        "id": "torch_symm_mem_keyerror",
        "patterns": [r"KeyError: 12\b"],
        "summary": "torch symmetric-memory allreduce has no size entry for compute capability 12 "
                   "(SGLang's torch_symm_mem table knows 9 and 10 only)",
        "remedy": "remove --enable-torch-symm-mem (enable_torch_symm_mem: false); the feature also needs "
                  "NVLink multicast, which PCIe-only hosts lack",
        "source": "sglang srt/distributed/device_communicators/torch_symm_mem.py; stack-facts.md",
    },
    {
        "id": "flashinfer_no_target_arch",
        "patterns": [r"requires GPUs with sm75 or higher", r"SM 12\.x requires CUDA >= 12\.9"],
        "summary": "FlashInfer's JIT found no target arch: an SM12x GPU with a CUDA 12.8 nvcc "
                   "(the sm75 message is misleading)",
        "remedy": "use nvcc >= 12.9 (stack cu130), or set FLASHINFER_CUDA_ARCH_LIST=12.0a in the server env, "
                  "or use a FlashInfer with PR #3633",
        "source": "flashinfer issue #3675, vLLM issue #50705",
    },
    {
        "id": "deep_ep_missing",
        "patterns": [r"No module named '?deep_ep'?", r"ModuleNotFoundError: .*deep_ep"],
        "summary": "--moe-a2a-backend deepep needs the deep_ep package, which is not installed in this env",
        "remedy": "run the deepep role for this host (it builds DeepEP for the host's arch), or set "
                  "moe_a2a_backend: none",
        "source": "sglang srt/layers/moe/token_dispatcher/deepep.py imports deep_ep",
    },
    {
        "id": "deep_ep_no_gpu",
        "patterns": [r"does not expose a usable CUDA device"],
        "summary": "deep_ep's import check found no usable CUDA device",
        "remedy": "run the server on a host whose driver exposes the GPUs (check nvidia-smi and "
                  "CUDA_VISIBLE_DEVICES in the server env)",
        "source": "sgl-deep-ep 0.1.2.post1 deep_ep/__init__.py prerequisite check",
    },
    {
        "id": "no_kernel_image",
        "patterns": [r"no kernel image is available for execution on the device",
                     r"CUDA error: no kernel image"],
        "summary": "a CUDA extension has no SASS/PTX for this GPU's architecture",
        "remedy": "rebuild the extension named in the traceback for the host's arch (TORCH_CUDA_ARCH_LIST, "
                  "e.g. 12.0 for RTX PRO 6000) with the cuda_extension role; check with cuobjdump --list-elf",
        "source": "CUDA runtime error cudaErrorNoKernelImageForDevice",
    },
    {
        "id": "cuda_graph_capture_failed",
        "patterns": [r"Capture [Cc][Uu][Dd][Aa] graph failed", r"CUDA graph capture failed",
                     r"cudaErrorStreamCaptureUnsupported",
                     r"operation not permitted when stream is capturing"],
        "summary": "capturing CUDA graphs failed during startup",
        "remedy": "lower cuda_graph_max_bs, or set disable_cuda_graph: true to start without graphs "
                  "(slower decode); an NCCL setting that breaks capture (e.g. NCCL_ALGO=Tree) is "
                  "another cause",
        "source": "sglang srt/model_executor/cuda_graph_runner.py error text",
    },
    {
        "id": "cuda_out_of_memory",
        "patterns": [r"CUDA out of memory", r"torch\.OutOfMemoryError", r"OutOfMemoryError",
                     r"Not enough memory\. Please try to increase --mem-fraction-static"],
        "summary": "the GPU ran out of memory while loading the model, the KV cache or the CUDA graphs",
        "remedy": "raise tp_size (spread the weights), lower cuda_graph_max_bs or --mem-fraction-static in "
                  "extra_args, or free the GPUs (nvidia-smi shows other processes)",
        "source": "torch.cuda.OutOfMemoryError; sglang model_runner memory check",
    },
    {
        "id": "nccl_error",
        "patterns": [r"NCCL error", r"ncclInternalError", r"ncclUnhandledCudaError", r"ncclSystemError",
                     r"ncclInvalidUsage", r"ncclRemoteError", r"NCCL WARN"],
        "summary": "NCCL failed while setting up or running collectives between the GPUs",
        "remedy": "rerun with NCCL_DEBUG=INFO in env to see the transport; on PCIe hosts try "
                  "NCCL_P2P_LEVEL=SYS or NCCL_P2P_DISABLE=1, check IOMMU/ACS settings and that every rank "
                  "sees every GPU",
        "source": "NCCL result codes (nccl.h ncclResult_t)",
    },
    {
        "id": "cuda_driver_too_old",
        "patterns": [r"CUDA driver version is insufficient", r"NVIDIA driver on your system is too old",
                     r"cudaErrorInsufficientDriver"],
        "summary": "the NVIDIA driver is older than the CUDA runtime the stack's torch was built with",
        "remedy": "upgrade the driver to the stack's minimum (epforge_stack_spec.driver.min_version) or "
                  "choose the stack that fits the driver",
        "source": "CUDA runtime cudaErrorInsufficientDriver",
    },
    {
        "id": "no_gpu",
        "patterns": [r"No CUDA GPUs are available", r"Found no NVIDIA driver on your system",
                     r"torch\.cuda\.is_available\(\) is False"],
        "summary": "the server process sees no GPU",
        "remedy": "check nvidia-smi on the host, the service user's access to /dev/nvidia* (group video or "
                  "render), and CUDA_VISIBLE_DEVICES in the server env",
        "source": "torch CUDA initialisation errors",
    },
    {
        "id": "port_in_use",
        "patterns": [r"[Aa]ddress already in use", r"\[Errno 98\]"],
        "summary": "the server's port is already taken by another process",
        "remedy": "stop the other server (state: stopped) or choose another port",
        "source": "OSError EADDRINUSE",
    },
    {
        "id": "bad_cli_flag",
        "patterns": [r"error: unrecognized arguments:", r"error: argument --[\w-]+: invalid",
                     r"error: the following arguments are required"],
        "summary": "SGLang's argument parser refused a flag (not in this SGLang version, or a bad value)",
        "remedy": "check the flag against `python -m sglang.launch_server --help` of the installed version; "
                  "the sglang role validates flags before a launch",
        "source": "argparse error text (sglang ServerArgs.add_cli_args)",
    },
    {
        "id": "model_not_found",
        "patterns": [r"is not a local folder and is not a valid model identifier",
                     r"Repository Not Found", r"Can't load the configuration of",
                     r"We couldn't connect to 'https://huggingface\.co'"],
        "summary": "the model path is neither a local directory nor a reachable Hugging Face repository",
        "remedy": "point model_path at a local copy of the model (readable by the server user) or allow "
                  "the host to reach huggingface.co",
        "source": "transformers/huggingface_hub error text",
    },
    {
        "id": "permission_denied",
        "patterns": [r"PermissionError: \[Errno 13\]"],
        "summary": "the server user may not read or write a path it needs",
        "remedy": "give the server user access to the path in the traceback (model directory, cache dirs)",
        "source": "OSError EACCES",
    },
]

_COMPILED: list[tuple[dict, list[re.Pattern], list[re.Pattern]]] = [
    (row, [re.compile(p) for p in row["patterns"]], [re.compile(p) for p in row.get("requires", [])])
    for row in SIGNATURES
]


def classify(text: str | None) -> list[dict]:
    """Every known signature found in text, primary first.

    Each result: id, summary, remedy, source and `line` (the first log line that matched, stripped).
    A signature id appears once even when several rows share it.
    """
    if not text:
        return []
    lines = text.splitlines()
    found: list[dict] = []
    seen: set[str] = set()
    for row, patterns, requires in _COMPILED:
        if row["id"] in seen:
            continue
        if requires and not all(r.search(text) for r in requires):
            continue
        for line in lines:
            if any(p.search(line) for p in patterns):
                found.append({
                    "id": row["id"], "summary": row["summary"], "remedy": row["remedy"],
                    "source": row["source"], "line": line.strip()[:300],
                })
                seen.add(row["id"])
                break
    return found


def describe(classes: list[dict]) -> str:
    """One sentence for a failure message: the primary classification and its remedy."""
    if not classes:
        return ""
    first = classes[0]
    return f"[{first['id']}] {first['summary']}. Remedy: {first['remedy']}"
