"""Signatures of plugins/module_utils/signatures.py checked against the error text of the code
that raises it, never against a line pasted here.

SGLang rows: each pinned release's wheel (downloaded once into .cache/sglang-wheels by the helper of
scripts/sglang_flag_data.py, as tests/unit/test_sglang_flag_data.py does) is opened with zipfile, the module
the row's `source` cites is parsed with ast, and the raise statement whose message matches the site's marker
is turned into the line a traceback prints: its f-string / concatenation template (a name assigned in the
same function is followed to its assignment), each placeholder replaced by a plausible value (PLACEHOLDERS),
prefixed with the exception class. classify() must name the row as primary. A release without the raise site
is recorded in its Site with the reason, and the test asserts that the release really lacks it.

jit_tool_missing: the lines come from this machine itself - a real exec of a build tool that is not on PATH
(CPython's FileNotFoundError, as FlashInfer's run_ninja raised it on an H200) and a real /bin/sh running a
command that is not on PATH (what a ninja rule prints). No crash log of that H200 run is stored under
tests/fixtures, so none is used here.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import socket
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.signatures import SIGNATURES, classify

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "sglang-wheels"
STANDIN = ROOT / "tests" / "sglang_standin"
RELEASES = ("0.5.16", "0.5.23")

NOISE = """[2026-11-30 10:00:01] server_args=ServerArgs(model_path='/models/Kimi-K2.5', tp_size=8)
[2026-11-30 10:00:05 TP0] Load weight begin. avail mem=94.12 GB
[2026-11-30 10:03:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16
"""


@dataclass(frozen=True)
class Site:
    """A raise statement of SGLang: the row it must select, the wheel module (the upstream path without
    its leading python/), a regular expression over the message template ({placeholders} in braces), and
    the releases that lack it, each with the reason."""

    signature: str
    module: str
    marker: str
    absent: dict = field(default_factory=dict)


SITES = [
    Site(
        "context_length_exceeds_model",
        "sglang/srt/configs/model_config.py",
        r"To allow overriding this maximum",
    ),
    Site(
        "context_length_exceeded",
        "sglang/srt/managers/tokenizer_manager.py",
        r"is longer than the model's context length",
    ),
    Site(
        "context_length_exceeded",
        "sglang/srt/managers/tokenizer_manager.py",
        r"exceeds the model's maximum context length",
    ),
    Site("model_arch_unsupported", "sglang/srt/models/registry.py", r"are not supported for now"),
    Site(
        "swa_pool_too_small",
        "sglang/srt/model_executor/pool_configurator.py",
        r"cannot hold even one request",
    ),
    Site("swa_pool_cap", "sglang/srt/model_executor/pool_configurator.py", r"^SWA pool cap \("),
    Site(
        "swa_pool_cap",
        "sglang/srt/model_executor/pool_configurator.py",
        r"^The DSV4 SWA pool cap \(",
        absent={
            "0.5.16": "0.5.16's DSV4PoolConfigurator sizes no SWA request cap (no swa_cap_tokens), so it "
            "raises no cap error; the check came with 0.5.23"
        },
    ),
]

# Log lines of the same modules that share a row's words but report no failure (SGLang warns and goes on):
# (module, marker over the template of a logger.warning call, the row they must not select).
WARNINGS = [
    (
        "sglang/srt/configs/model_config.py",
        r"is greater than the derived context_length",
        "context_length_exceeds_model",
    ),
    ("sglang/srt/managers/tokenizer_manager.py", r"Truncating the input", "context_length_exceeded"),
    ("sglang/srt/managers/tokenizer_manager.py", r"Truncating max_new_tokens", "context_length_exceeded"),
]

# A plausible value for each placeholder expression of the templates above (keyed by its source text).
PLACEHOLDERS = {
    # model_config.py: a 256k request on a 128k model
    "reason": "User-specified",
    "context_length": 262144,
    "derived_context_len": 131072,
    # tokenizer_manager.py
    "input_token_num": 140000,
    "self.context_len": 131072,
    "max_new_tokens": 2048,
    "total_tokens": 142048,
    # registry.py: str() of a list and of dict_keys, as the f-string prints them
    "architectures": ["NoSuchModelForCausalLM"],
    "all_supported_archs": "dict_keys(['DeepseekV3ForCausalLM', 'LlamaForCausalLM', 'Qwen3ForCausalLM'])",
    # pool_configurator.py
    "swa_tokens": 4096,
    "sliding_window_size": 4096,
    "page_size": 64,
    "self._sliding_window_size": 4096,
    "self._page_size": 64,
    "fixed_swa_bytes / (1 << 30)": 71.25,
    "available_bytes / (1 << 30)": 70.5,
    "self.swa_cap_tokens": 1048576,
    "swa_fixed_bytes / (1 << 30)": 71.25,
}

SGLANG_IDS = {site.signature for site in SITES}
# Every id this file tests (tests/unit/test_signatures.py counts them as covered).
UPSTREAM_TESTED_IDS = SGLANG_IDS | {"jit_tool_missing"}


# ----------------------------------------------------------------------------------- reading the wheels


@functools.cache
def load_generator():
    spec = importlib.util.spec_from_file_location(
        "sglang_flag_data", ROOT / "scripts" / "sglang_flag_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def wheel_module(release: str, module: str) -> tuple[str, ast.Module] | None:
    """(source, tree) of a module of the release's wheel, or None when the wheel has no such file."""
    wheel = load_generator().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        if module not in archive.namelist():
            return None
        source = archive.read(module).decode()
    return source, ast.parse(source)


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def enclosing_function(node: ast.AST, up: dict) -> ast.AST | None:
    while node in up:
        node = up[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def assigned_before(name: str, node: ast.AST, up: dict) -> ast.expr | None:
    """The value of the last `name = ...` of node's function before node."""
    scope = enclosing_function(node, up)
    found = [
        stmt
        for stmt in (ast.walk(scope) if scope else ())
        if isinstance(stmt, ast.Assign)
        and stmt.lineno < node.lineno
        and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    ]
    return max(found, key=lambda stmt: stmt.lineno).value if found else None


def is_text(expr: ast.expr | None) -> bool:
    """A message expression: a str constant, an f-string or a concatenation of them."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return is_text(expr.left) and is_text(expr.right)
    return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))


def template_parts(expr: ast.expr, node: ast.AST, up: dict) -> list:
    """A message expression as text pieces (str) and placeholders (ast.FormattedValue or a bare ast.expr)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return template_parts(expr.left, node, up) + template_parts(expr.right, node, up)
    if isinstance(expr, ast.JoinedStr):
        parts: list = []
        for value in expr.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            elif isinstance(value.value, ast.Name) and value.format_spec is None and value.conversion == -1:
                local = assigned_before(value.value.id, node, up)
                parts += template_parts(local, node, up) if is_text(local) else [value]
            else:
                parts.append(value)
        return parts
    if isinstance(expr, ast.Name):
        local = assigned_before(expr.id, node, up)
        if is_text(local):
            return template_parts(local, node, up)
    return [expr]


def template_text(parts: list) -> str:
    """The template with each placeholder as {its source}: what a Site's marker is matched against."""
    return "".join(
        p if isinstance(p, str) else "{" + ast.unparse(getattr(p, "value", p)) + "}" for p in parts
    )


def render(parts: list) -> str:
    """The message as SGLang would print it, each placeholder from PLACEHOLDERS."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        expr = ast.unparse(getattr(part, "value", part))
        assert expr in PLACEHOLDERS, (
            f"no plausible value for the placeholder {{{expr}}}: add it to PLACEHOLDERS"
        )
        value = PLACEHOLDERS[expr]
        conversion = getattr(part, "conversion", -1)
        if conversion != -1:
            value = {ord("r"): repr, ord("s"): str, ord("a"): ascii}[conversion](value)
        spec = getattr(part, "format_spec", None)
        spec_text = "".join(v.value for v in spec.values if isinstance(v, ast.Constant)) if spec else ""
        out.append(format(value, spec_text))
    return "".join(out)


def messages(release: str, module: str, marker: str, kind: type) -> list[tuple[int, str, list]]:
    """(line, exception class or call name, template parts) of each raise (kind ast.Raise) or logger.warning
    call (kind ast.Call) in the module whose message template matches marker."""
    loaded = wheel_module(release, module)
    if loaded is None:
        return []
    _source, tree = loaded
    up = parents(tree)
    found = []
    for node in ast.walk(tree):
        if kind is ast.Raise and isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call, name = node.exc, ast.unparse(node.exc.func)
        elif (
            kind is ast.Call
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "warning"
        ):
            call, name = node, ast.unparse(node.func)
        else:
            continue
        if not call.args:
            continue
        parts = template_parts(call.args[0], node, up)
        if re.search(marker, template_text(parts)):
            found.append((node.lineno, name, parts))
    return found


def traceback_text(release: str, site: Site, lineno: int, exc_class: str, message: str) -> str:
    """A launch log ending in the raise: the frame of the wheel's file, then the line a traceback prints."""
    return (
        NOISE
        + "[2026-11-30 10:04:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        + f'  File "/opt/epforge/venv/lib/python3.12/site-packages/{site.module}", line {lineno}\n'
        + f"{exc_class}: {message}\n"
        + "[2026-11-30 10:04:01] Received sigquit from a child process. It usually means the child failed.\n"
    )


def case_id(site: Site, release: str) -> str:
    return f"{site.signature}-{release}-" + re.sub(r"\W+", "_", site.marker).strip("_")


# Every (site, release) is a case of exactly one of the two tests below: present, or recorded absent.
PRESENT = [
    pytest.param(site, release, id=case_id(site, release))
    for site in SITES
    for release in RELEASES
    if release not in site.absent
]
ABSENT = [
    pytest.param(site, release, reason, id=case_id(site, release))
    for site in SITES
    for release, reason in site.absent.items()
]


# ------------------------------------------------------------------------------------ the SGLang rows


@pytest.mark.parametrize(("site", "release"), PRESENT)
def test_raise_site_line_is_classified(site, release):
    found = messages(release, site.module, site.marker, ast.Raise)
    assert len(found) == 1, (
        f"SGLang {release} {site.module}: {len(found)} raise statements match {site.marker!r}"
    )
    [(lineno, exc_class, parts)] = found
    message = render(parts)
    line = f"{exc_class}: {message}".splitlines()[0]
    classes = classify(traceback_text(release, site, lineno, exc_class, message))
    assert classes, f"unclassified: {line}"
    assert classes[0]["id"] == site.signature, (line, classes[0])
    assert classes[0]["line"] == line[:300]
    # The row cites the file of the raise site (SGLang's repository path: python/ + the wheel's path).
    sources = [row["source"] for row in SIGNATURES if row["id"] == site.signature]
    assert any(f"python/{site.module}" in source for source in sources), sources


@pytest.mark.parametrize(("site", "release", "reason"), ABSENT)
def test_raise_site_absent_in_release(site, release, reason):
    """A release recorded without a raise site really lacks it (reason: in the Site); the others hold it."""
    assert release in RELEASES and reason
    assert messages(release, site.module, site.marker, ast.Raise) == [], (
        f"SGLang {release} now has the raise site {site.marker!r}: drop it from the Site's absent"
    )
    others = [r for r in RELEASES if r not in site.absent]
    assert others and all(messages(r, site.module, site.marker, ast.Raise) for r in others)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("module", "marker", "signature"), WARNINGS, ids=[w[2] + "-" + w[1] for w in WARNINGS]
)
def test_warnings_with_the_same_words_are_not_failures(module, marker, signature, release):
    found = messages(release, module, marker, ast.Call)
    assert found, f"SGLang {release} {module}: no logger.warning matches {marker!r}"
    for _lineno, _name, parts in found:
        line = f"[2026-11-30 10:04:00 TP0] {render(parts)}"
        assert signature not in [c["id"] for c in classify(NOISE + line + "\n")], line


def test_every_sglang_site_holds_in_some_release():
    # A Site recorded absent everywhere would test nothing.
    assert all(set(RELEASES) - set(site.absent) for site in SITES)
    assert SGLANG_IDS == {
        "context_length_exceeds_model",
        "context_length_exceeded",
        "model_arch_unsupported",
        "swa_pool_cap",
        "swa_pool_too_small",
    }


# ------------------------------------------------------------------------------------ jit_tool_missing

# The build tools a JIT build runs by name or by path (FlashInfer's run_ninja runs "ninja"; its ninja rules
# run nvcc and the host compiler; torch's cpp_extension the same).
# A path is made absolute under the test's tmp dir (a path that surely does not exist).
TOOLS = ["ninja", "nvcc", "c++", "g++", "gcc", "cc", "cuda/bin/nvcc", "x86_64-linux-gnu-g++-12"]


def failed_exec_line(tool: str, empty_dir: Path) -> str:
    """The last line of the traceback of a real exec of tool with PATH = an empty directory."""
    with pytest.raises(FileNotFoundError) as caught:
        subprocess.run([tool, "--version"], env={"PATH": str(empty_dir)}, capture_output=True, check=False)
    return f"{type(caught.value).__name__}: {caught.value}"


@pytest.mark.parametrize("tool", TOOLS)
def test_jit_tool_missing_from_a_real_failed_exec(tool, tmp_path):
    if "/" in tool:
        tool = str(tmp_path / tool)
    line = failed_exec_line(tool, tmp_path)
    assert line == f"FileNotFoundError: [Errno 2] No such file or directory: '{tool}'"
    log = (
        NOISE
        + "Traceback (most recent call last):\n"
        + '  File "/opt/epforge/venv/lib/python3.12/site-packages/flashinfer/jit/cpp_ext.py", in run_ninja\n'
        + f"{line}\n"
    )
    [first, *_] = classify(log)
    assert first["id"] == "jit_tool_missing" and first["line"] == line
    assert f"found no {tool} on the server's PATH" in first["summary"]
    assert "bin/" in first["remedy"] and "PATH" in first["remedy"]


SHELLS = [shell for shell in ("/bin/sh", "/bin/bash") if os.path.exists(shell)]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("tool", ["nvcc", "c++", "cuda/bin/nvcc"])
def test_jit_tool_missing_from_the_shell_of_a_ninja_rule(shell, tool, tmp_path):
    # ninja runs each rule's command with /bin/sh -c: a missing compiler is the shell's "not found".
    if "/" in tool:
        tool = str(tmp_path / tool)
    proc = subprocess.run(
        [shell, "-c", f"{tool} -c x.cu -o x.o"],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 127, proc
    line = proc.stderr.strip().splitlines()[-1]
    [first, *_] = classify(
        NOISE + f"FAILED: norm/norm.cuda.o\n{line}\nninja: build stopped: subcommand failed.\n"
    )
    assert first["id"] == "jit_tool_missing" and first["line"] == line, line
    assert f"found no {tool} on" in first["summary"]


def test_jit_tool_missing_from_nvcc_without_its_host_compiler(cuda13_nvcc, tmp_path):
    # A real nvcc (tests/conftest.py) with no gcc on PATH: what a JIT build prints when only nvcc is found.
    (tmp_path / "x.cu").write_text("__global__ void k() {}\n")
    proc = subprocess.run(
        [cuda13_nvcc, "-c", "x.cu", "-o", "x.o"],
        cwd=tmp_path,
        env={"PATH": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0, proc
    [first, *_] = classify(NOISE + "FAILED: norm/norm.cuda.o\n" + proc.stderr)
    assert first["id"] == "jit_tool_missing", proc.stderr
    assert first["line"] in proc.stderr and "found no gcc on" in first["summary"]


def test_jit_tool_missing_names_only_build_tools(tmp_path):
    # A missing file that is no build tool, a tool whose name only ends like one, ninja's own failure text.
    for other in ("accelerate", "/models/Kimi-K2.5/cc_config", "ninja-build.sh"):
        line = failed_exec_line(other, tmp_path)
        assert "jit_tool_missing" not in [c["id"] for c in classify(line)], line
    assert classify("ninja: build stopped: subcommand failed.") == []
    assert classify("FileNotFoundError: [Errno 2] No such file or directory: '/models/x/config.json'") == []


def test_jit_tool_missing_comes_before_the_generic_rows(tmp_path):
    """Specific-first: the JIT row precedes the generic rows, so a log that also holds a permission error or
    a missing module (FlashInfer's JIT cache, its import) still names the build tool first."""
    ids = [row["id"] for row in SIGNATURES]
    jit = ids.index("jit_tool_missing")
    generic = (
        "python_module_missing",
        "not_enough_gpus",
        "cuda_out_of_memory",
        "nccl_error",
        "permission_denied",
    )
    assert all(jit < ids.index(name) for name in generic)
    line = failed_exec_line("ninja", tmp_path)
    others = "PermissionError: [Errno 13] Permission denied: '/root/.cache/flashinfer'\n"
    others += "ModuleNotFoundError: No module named 'flashinfer.jit'\n"
    found = [c["id"] for c in classify(NOISE + others + line + "\n")]
    assert found == ["jit_tool_missing", "python_module_missing", "permission_denied"]


# ------------------------------------------------------------------------ the stand-in emits the same lines


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def standin_crash(line: str) -> str:
    """The traceback the SGLang stand-in (tests/sglang_standin) prints when told to crash at once with line
    (SGLANG_STANDIN_CRASH_AFTER + SGLANG_STANDIN_CRASH_LINE, its existing crash mechanism): its stderr from
    the stand-in's own frame line on (whatever else the stand-in logs before stays out)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(STANDIN),
        "SGLANG_STANDIN_CRASH_AFTER": "0",
        "SGLANG_STANDIN_CRASH_LINE": line,
    }
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/standin"]
    argv += ["--port", str(free_port())]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc
    frame = '  File "standin", line 1, in <module>\n'
    assert frame in proc.stderr, proc.stderr
    return "Traceback (most recent call last):\n" + frame + proc.stderr.split(frame, 1)[1].splitlines()[0]


def test_standin_crash_lines_are_classified(tmp_path):
    release = RELEASES[-1]
    lines = {"jit_tool_missing": failed_exec_line("ninja", tmp_path)}
    for site in SITES:
        if release not in site.absent and site.signature not in lines:
            [(_lineno, exc_class, parts)] = messages(release, site.module, site.marker, ast.Raise)
            lines[site.signature] = f"{exc_class}: {render(parts)}"
    for signature, line in lines.items():
        classes = classify(standin_crash(line))
        assert classes and classes[0]["id"] == signature, (line, classes)
