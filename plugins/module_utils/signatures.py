"""Known failure signatures of an SGLang launch (and the builds under it): log text -> classification.

Shared by module sglang_server (a failed start) and module server_jit_check (provision's JIT build as the
server's account). A launch that dies after minutes of loading prints hundreds of lines; the one that
matters is often a single line deep in a traceback. This table turns such lines into a name, a plain
summary and a remedy, so a failed start says *why* and *what to do* in its first line.

Each row: id, patterns (regular expressions; any one matching a line selects the row), optional
`requires` (expressions that must also match somewhere in the text), summary, remedy, source.
Rows are ordered specific-first: the first matching row is the primary classification.
Pure functions only (unit-tested in tests/unit/test_signatures.py).
"""

from __future__ import annotations

import re

# A build tool's name as a JIT build runs it: ninja, nvcc, a C/C++ compiler driver, with an optional target
# prefix and version suffix (x86_64-linux-gnu-g++-12).
_BUILD_TOOL = r"(?:[\w.]+-)*(?:ninja|nvcc|c\+\+|g\+\+|gcc|cc)(?:-\d+(?:\.\d+)*)?"

SIGNATURES: list[dict] = [
    {
        "id": "torch_symm_mem_keyerror",
        "patterns": [r"KeyError: 1[1-9]\b", r"KeyError: [2-9][0-9]\b"],
        "requires": [r"symm_mem|symm-mem|symmetric_memory|all_reduce|allreduce"],
        "summary": "torch symmetric-memory allreduce has no size entry for this GPU generation "
        "(SGLang's torch_symm_mem table knows compute capability 9 and 10 only)",
        "remedy": "remove --enable-torch-symm-mem (enable_torch_symm_mem: false); the feature also needs "
        "NVLink multicast, which PCIe-only hosts lack",
        "source": "sglang python/sglang/srt/distributed/device_communicators/torch_symm_mem.py "
        "(TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES in all_reduce_utils.py)",
    },
    {
        "id": "torch_symm_mem_keyerror",
        "patterns": [r"KeyError: 12\b"],
        "summary": "torch symmetric-memory allreduce has no size entry for compute capability 12 "
        "(SGLang's torch_symm_mem table knows 9 and 10 only)",
        "remedy": "remove --enable-torch-symm-mem (enable_torch_symm_mem: false); the feature also needs "
        "NVLink multicast, which PCIe-only hosts lack",
        "source": "sglang python/sglang/srt/distributed/device_communicators/torch_symm_mem.py "
        "(TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES in all_reduce_utils.py)",
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
        # A JIT build (FlashInfer's run_ninja, torch's cpp_extension, a ninja rule's shell command) could not
        # find its build tool on the server's PATH. Python's subprocess says `FileNotFoundError: [Errno 2] No
        # such file or directory: 'ninja'` (seen on an H200, SGLang 0.5.16: sgl_kernel -> flashinfer.norm ->
        # gen_norm_module().build_and_load() -> run_ninja); a command ninja runs through /bin/sh says
        # `/bin/sh: 1: nvcc: not found`; nvcc without its host compiler `gcc: No such file or directory`.
        # Before every generic row: the tool names no module and no GPU.
        "id": "jit_tool_missing",
        "patterns": [
            rf"No such file or directory: '(?P<tool>(?:[^']*/)?{_BUILD_TOOL})'",
            r"(?:^|\s)(?:/bin/|/usr/bin/)?(?:ba|da)?sh: (?:\d+: |line \d+: )?"
            rf"(?P<tool>(?:[^\s:]*/)?{_BUILD_TOOL}): (?:command )?not found",
            # nvcc found, its host compiler not: "gcc: No such file or directory", then "nvcc fatal   : Failed
            # to preprocess host compiler properties."
            rf"(?:^|\s)(?P<tool>(?:[^\s:]*/)?{_BUILD_TOOL}): No such file or directory\s*$",
        ],
        "summary": "a JIT build (FlashInfer / torch extensions) found no {tool} on the server's PATH",
        "remedy": "the server's PATH needs the ML env's bin/ (ninja, from pip's ninja wheel) and the CUDA "
        "toolkit's bin/ (nvcc): sglang_server puts them first (the env's bin/, then CUDA_HOME/bin where a "
        "toolkit is known, then the service PATH); a server whose PATH lacks them hits this, e.g. a "
        "hand-made unit, or a PATH in epforge_server.env, which replaces epforge's; with no toolkit known "
        "(cuda_home, the cuda_toolkit role's fact) nvcc is not on it; c++/gcc come from the host's compiler "
        "package (build-essential)",
        "source": "CPython Lib/subprocess.py (Popen._execute_child raises FileNotFoundError, ENOENT) under "
        "flashinfer flashinfer/jit/cpp_ext.py run_ninja; /bin/sh 'not found' for a command of a ninja rule",
    },
    {
        "id": "deep_ep_missing",
        "patterns": [
            r"No module named '?deep_ep'?",
            r"ModuleNotFoundError: .*deep_ep",
            # SGLang 0.5.16's own message (seen on a real server, tests/fixtures/sglang_h200)
            r"DeepEP is not installed",
        ],
        "summary": "--moe-a2a-backend deepep needs the deep_ep package, which is not installed in this env",
        "remedy": "run the deepep role for this host (it builds DeepEP for the host's arch), or set "
        "moe_a2a_backend: none",
        "source": "sglang srt/layers/moe/token_dispatcher/deepep.py imports deep_ep",
    },
    {
        # A rank of a multi-node group (nnodes > 1) that never met the others at dist_init_addr: torch's
        # TCPStore gives up after the distributed timeout, on rank 0 (no client came) or on a rank >= 1
        # (it could not connect).
        "id": "multinode_join_timeout",
        "patterns": [
            r"DistStoreError: Timed out after \d+ seconds waiting for clients",
            r"DistNetworkError: The client socket has timed out after",
        ],
        "summary": "a rank of the multi-node group did not meet the others at dist_init_addr in time",
        "remedy": "start every rank of the group (epforge_node_group) in the same run, and check that each "
        "reaches node_rank 0's dist_init_addr (HOST:PORT, epforge_dist_init_port) through the firewall; "
        "dist_timeout bounds the wait",
        "source": "torch.distributed TCPStore (c10d) timeouts; sglang srt/distributed/bootstrap.py "
        "init_distributed_environment(distributed_init_method=tcp://dist_init_addr)",
    },
    {
        # A context_length (extra_args --context-length) above the one the model's config derives, refused at
        # launch unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (then SGLang only warns, without the
        # "To allow overriding" sentence, which this pattern needs).
        "id": "context_length_exceeds_model",
        "patterns": [
            r"context_length \(\d+\) is greater than the derived context_length \(\d+\).*"
            r"To allow overriding this maximum"
        ],
        "summary": "the requested context length is longer than the model's own (its config.json)",
        "remedy": "drop --context-length from extra_args or lower it to the model's derived length; "
        "only if the model really takes more (e.g. RoPE scaling), set "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in env",
        "source": "sglang python/sglang/srt/configs/model_config.py (ModelConfig._derive_context_length)",
    },
    {
        # A request longer than the server's context length (input alone, or input + max_new_tokens), refused
        # by the tokenizer manager. The auto-truncate warnings share the words but end "Truncating ...".
        "id": "context_length_exceeded",
        "patterns": [
            r"The input \(\d+ tokens\) is longer than the model's context length \(\d+ tokens\)\.\s*$",
            r"Requested token count exceeds the model's maximum context length of \d+ tokens",
        ],
        "summary": "a request is longer than the server's context length (its input, or its input plus "
        "max_new_tokens)",
        "remedy": "shorten the request or its max_new_tokens, or serve a longer context (--context-length in "
        "extra_args, up to the model's own); --allow-auto-truncate makes SGLang truncate instead",
        "source": "sglang python/sglang/srt/managers/tokenizer_manager.py "
        "(TokenizerManager._validate_one_request)",
    },
    {
        "id": "model_arch_unsupported",
        "patterns": [r"Model architectures \[.*\] are not supported for now"],
        "summary": "this SGLang release has no implementation of the model's architecture (config.json "
        "architectures)",
        "remedy": "use a stack whose SGLang release supports the architecture (the error lists those it "
        "knows), or a model of a supported architecture",
        "source": "sglang python/sglang/srt/models/registry.py (_ModelRegistry._raise_for_unsupported)",
    },
    {
        # Hybrid sliding-window models: the SWA pool sized from the request cap (max_running_requests with
        # the radix cache off) takes the whole KV budget.
        "id": "swa_pool_cap",
        # (GiB in the hybrid SWA configurator, GB in 0.5.23's DeepSeek V4 one: "The DSV4 SWA pool cap (...)")
        "patterns": [r"SWA pool cap \(\d+ tokens, [\d.]+ Gi?B\) leaves no room for the full"],
        "summary": "the sliding-window (SWA) KV pool, sized for max_running_requests, leaves no memory for "
        "the full-attention KV pool",
        "remedy": "lower --max-running-requests (extra_args), lower SGLANG_SWA_EVICTION_INTERVAL (env) or, "
        "for DeepSeek V4 on 0.5.23, --swa-prefix-tails, or raise --mem-fraction-static; more GPUs (tp_size) "
        "give each a larger KV budget",
        "source": "sglang python/sglang/srt/model_executor/pool_configurator.py "
        "(calculate_pool_sizes of SWAChunkCapPoolConfigurator in 0.5.16, SWARequestCapPoolConfigurator and "
        "DSV4PoolConfigurator in 0.5.23)",
    },
    {
        # Hybrid sliding-window models: the SWA pool (full tokens x swa_full_tokens_ratio) is below one
        # request's admission floor, so every request would wait forever; SGLang refuses to start.
        "id": "swa_pool_too_small",
        "patterns": [r"SWA pool \(\d+ tokens\) cannot hold even one request"],
        "summary": "the sliding-window (SWA) KV pool is too small to admit even one request",
        "remedy": "raise --swa-full-tokens-ratio (extra_args) or the total KV budget "
        "(--mem-fraction-static, or more GPUs with tp_size)",
        "source": "sglang python/sglang/srt/model_executor/pool_configurator.py "
        "(HybridSWAPoolConfigurator._solve_pool_sizes in 0.5.16, MemoryPoolConfigurator."
        "validate_swa_pool_size in 0.5.23)",
    },
    {
        # Any other missing module: the summary and remedy name the package and the role that installs it
        # (MODULE_PROVIDERS), filled in by classify() from the module name in the matching line.
        "id": "python_module_missing",
        "patterns": [r"(?:ModuleNotFoundError|ImportError): No module named '?([\w.]+)'?"],
        "summary": "the Python module {module} is not installed in the server's environment",
        "remedy": "{remedy}",
        "source": "Python import system (ModuleNotFoundError); package names from the stack files (stacks/)",
    },
    {
        # SGLang asks torch.cuda.set_device for a GPU index the host does not have (tp_size x dp_size or
        # base_gpu_id beyond the visible GPUs). Seen on a real server: tests/fixtures/sglang_h200.
        "id": "not_enough_gpus",
        "patterns": [r"CUDA error: invalid device ordinal", r"GPU device may be out of range"],
        "summary": "the server asked for a GPU index this host does not have (more ranks than visible GPUs)",
        "remedy": "set tp_size (x dp_size, and ep_size within it) to at most the GPUs nvidia-smi lists, and "
        "check CUDA_VISIBLE_DEVICES in the server env",
        "source": "CUDA cudaErrorInvalidDevice from torch.cuda.set_device in sglang "
        "srt/distributed/bootstrap.py (init_torch_distributed)",
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
        "patterns": [
            r"no kernel image is available for execution on the device",
            r"CUDA error: no kernel image",
        ],
        "summary": "a CUDA extension has no SASS/PTX for this GPU's architecture",
        "remedy": "rebuild the extension named in the traceback for the host's arch (TORCH_CUDA_ARCH_LIST, "
        "e.g. 12.0 for RTX PRO 6000) with the cuda_extension role; check with cuobjdump --list-elf",
        "source": "CUDA runtime error cudaErrorNoKernelImageForDevice",
    },
    {
        "id": "cuda_graph_capture_failed",
        "patterns": [
            r"Capture [Cc][Uu][Dd][Aa] graph failed",
            r"CUDA graph capture failed",
            r"cudaErrorStreamCaptureUnsupported",
            r"operation not permitted when stream is capturing",
        ],
        "summary": "capturing CUDA graphs failed during startup",
        "remedy": "lower cuda_graph_max_bs, or set disable_cuda_graph: true to start without graphs "
        "(slower decode); an NCCL setting that breaks capture (e.g. NCCL_ALGO=Tree) is "
        "another cause",
        "source": "sglang srt/model_executor/cuda_graph_runner.py error text",
    },
    {
        "id": "cuda_out_of_memory",
        "patterns": [
            r"CUDA out of memory",
            r"torch\.OutOfMemoryError",
            r"OutOfMemoryError",
            r"Not enough memory\. Please try to increase --mem-fraction-static",
        ],
        "summary": "the GPU ran out of memory while loading the model, the KV cache or the CUDA graphs",
        "remedy": "raise tp_size (spread the weights), lower cuda_graph_max_bs or --mem-fraction-static in "
        "extra_args, or free the GPUs (nvidia-smi shows other processes)",
        "source": "torch.cuda.OutOfMemoryError; sglang model_runner memory check",
    },
    {
        "id": "nccl_error",
        "patterns": [
            r"NCCL error",
            r"ncclInternalError",
            r"ncclUnhandledCudaError",
            r"ncclSystemError",
            r"ncclInvalidUsage",
            r"ncclRemoteError",
            r"NCCL WARN",
        ],
        "summary": "NCCL failed while setting up or running collectives between the GPUs",
        "remedy": "rerun with NCCL_DEBUG=INFO in env to see the transport; on PCIe hosts try "
        "NCCL_P2P_LEVEL=SYS or NCCL_P2P_DISABLE=1, check IOMMU/ACS settings and that every rank "
        "sees every GPU",
        "source": "NCCL result codes (nccl.h ncclResult_t)",
    },
    {
        "id": "cuda_driver_too_old",
        "patterns": [
            r"CUDA driver version is insufficient",
            r"NVIDIA driver on your system is too old",
            r"cudaErrorInsufficientDriver",
        ],
        "summary": "the NVIDIA driver is older than the CUDA runtime the stack's torch was built with",
        "remedy": "upgrade the driver to the stack's minimum (epforge_stack_spec.driver.min_version) or "
        "choose the stack that fits the driver",
        "source": "CUDA runtime cudaErrorInsufficientDriver",
    },
    {
        "id": "no_gpu",
        "patterns": [
            r"No CUDA GPUs are available",
            r"Found no NVIDIA driver on your system",
            r"torch\.cuda\.is_available\(\) is False",
        ],
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
        "patterns": [
            r"error: unrecognized arguments:",
            r"error: argument --[\w-]+: invalid",
            r"error: the following arguments are required",
        ],
        "summary": "SGLang's argument parser refused a flag (not in this SGLang version, or a bad value)",
        "remedy": "check the flag against `python -m sglang.launch_server --help` of the installed version; "
        "the sglang role validates flags before a launch",
        "source": "argparse error text (sglang ServerArgs.add_cli_args)",
    },
    {
        "id": "model_not_found",
        "patterns": [
            r"is not a local folder and is not a valid model identifier",
            r"Repository Not Found",
            r"Can't load the configuration of",
            r"We couldn't connect to 'https://huggingface\.co'",
        ],
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

# Import name (top-level package) -> (the distribution that provides it, how epforge installs it).
# The package names are those of the stack files (stacks/cu130.yml, stacks/cu128.yml) and of SGLang's
# own dependencies (its wheel METADATA).
MODULE_PROVIDERS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "role ml_env installs it (the stack's torch build)"),
    "sglang": ("sglang", "role sglang installs it"),
    "sgl_kernel": ("sglang-kernel", "role sglang installs it with SGLang (stack sglang.kernel_package)"),
    "flashinfer": ("flashinfer-python", "role flashinfer installs it (stack flashinfer.package)"),
    "deep_ep": ("DeepEP (deep_ep)", "role deepep builds it"),
    "deep_gemm": (
        "sgl-deep-gemm",
        "no epforge role installs it; add it with the sglang role's extra "
        "packages, or leave the deep_gemm MoE runner off",
    ),
    "triton": ("triton", "it comes with torch (role ml_env)"),
    "xgrammar": ("xgrammar", "an SGLang dependency: rerun role sglang"),
    "transformers": ("transformers", "an SGLang dependency: rerun role sglang"),
    "IPython": (
        "ipython",
        "an SGLang dependency (sglang/utils.py imports IPython.display): rerun role sglang",
    ),
}


def module_provider(module: str) -> tuple[str, str]:
    """(distribution, how epforge installs it) for an import name such as 'flashinfer.sampling'."""
    top = module.split(".", 1)[0]
    if top in MODULE_PROVIDERS:
        return MODULE_PROVIDERS[top]
    return (
        f"the package that provides {top}",
        "no epforge role installs it: add it to the server environment (or rerun role sglang if it is "
        "an SGLang dependency)",
    )


def _fill(row: dict, match: re.Match) -> tuple[str, str]:
    """summary and remedy of a row, with {module}/{remedy} (or a named group, e.g. {tool}) filled from the
    matching line."""
    if row["id"] != "python_module_missing":
        return row["summary"].format(**match.groupdict()), row["remedy"]
    module = match.group(1)
    package, how = module_provider(module)
    return (row["summary"].format(module=module), f"install {package} into the server's environment: {how}")


# Lines that name an error but report an optional feature SGLang turned off and went on without, e.g.
# "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed (ModuleNotFoundError:
# No module named 'openai_harmony')" in every healthy SGLang 0.5.16 log (tests/fixtures/sglang_h200).
# They never classify a failure.
BENIGN_LINES = [
    re.compile(r"\bdisabled\b.*\b(?:ModuleNotFoundError|ImportError)\b"),
    re.compile(r"Ignore import error when loading"),
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
    lines = [line for line in text.splitlines() if not any(b.search(line) for b in BENIGN_LINES)]
    found: list[dict] = []
    seen: set[str] = set()
    for row, patterns, requires in _COMPILED:
        if row["id"] in seen:
            continue
        if requires and not all(r.search(text) for r in requires):
            continue
        for line in lines:
            match = next((m for m in (p.search(line) for p in patterns) if m), None)
            if match:
                summary, remedy = _fill(row, match)
                found.append(
                    {
                        "id": row["id"],
                        "summary": summary,
                        "remedy": remedy,
                        "source": row["source"],
                        "line": line.strip()[:300],
                    }
                )
                seen.add(row["id"])
                break
    return found


# The last line of a Python traceback: `[module.]Name: message` (or a bare Name), at the start of a line
# after any log prefix such as "[2026-11-30 10:00:05 TP0] ".
_LOG_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*)+")
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::\s.*)?$"
)


def final_exception_line(text: str | None) -> str:
    """The last exception line in a log (e.g. "ModuleNotFoundError: No module named 'flashinfer'"), or ''."""
    last = ""
    for line in (text or "").splitlines():
        candidate = _LOG_PREFIX.sub("", line).strip()
        if _EXCEPTION_LINE.match(candidate):
            last = candidate
    return last[:300]


def explain_failure(text: str | None) -> list[dict]:
    """classify(text), or when no signature matches one `unclassified` entry naming the log's final
    exception line (or saying that there is none), so a failure never ends without a reason."""
    found = classify(text)
    if found:
        return found
    line = final_exception_line(text)
    if line:
        summary = f"no known failure signature matched; the log's final exception is: {line}"
    else:
        summary = "no known failure signature matched and the log holds no exception line"
    return [
        {
            "id": "unclassified",
            "summary": summary,
            "remedy": "read the log tail (log_path) around that line; "
            "if it is a recurring failure, add a row to plugins/module_utils/signatures.py",
            "source": "the server log",
            "line": line,
        }
    ]


def describe(classes: list[dict]) -> str:
    """One sentence for a failure message: the primary classification and its remedy."""
    if not classes:
        return ""
    first = classes[0]
    return f"[{first['id']}] {first['summary']}. Remedy: {first['remedy']}"
