"""A python with torch and SGLang's parser (parser-only install), shared by the tests of SGLang's parser.

The session fixture sglang_env builds a venv with the cu130 stack's torch (from this machine's local wheels)
and the stack's SGLang installed by module sglang_install in parser-only mode (`--no-deps` plus the role's
sglang_parser_deps), once, cached under .cache/sglang-parser/<key> (gitignored; the key holds the SGLang,
torch and Python versions and a hash of the parser deps). A fresh machine builds it in about 3 minutes.
EPFORGE_SGLANG_PYTHON=/path/to/python uses an existing environment with the stack's SGLang instead.

parser_python(version, base) gives a python that can import an older release's server_args: the base venv's
when the role measured no extra deps for that release, else a second cached venv layered on the base one (a
.pth file puts the base venv's site-packages, torch included, after its own) holding only the extras, pinned
as that release's wheel requires them.

Test modules bind the fixture to its name (`sglang_env = sglang_parser_env.sglang_env`; tests/ is on
sys.path).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import moduletools
import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.sglang_flags import RESULT_MARK

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "sglang-parser"
STACK = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
ROLE_VARS = yaml.safe_load((ROOT / "roles" / "sglang" / "vars" / "main.yml").read_text())
SGLANG_VERSION = STACK["sglang"]["version"]
TORCH_PIN = f"torch=={STACK['torch']['version']}"
# The role's measured list for the stack's release (vars/main.yml; 0.5.23's is the common list).
assert ROLE_VARS["__sglang_parser_deps_measured"][SGLANG_VERSION] == "{{ __sglang_parser_deps_common }}"
PARSER_DEPS = ROLE_VARS["__sglang_parser_deps_common"]
# torchvision's release built against the stack's torch (a release's wheel names torchvision unpinned).
TORCHVISION_FOR_TORCH = {"2.14.1": "0.29.1"}


def run_module(module: str, args: dict, check: bool = False) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, diff=True, timeout=1800)


# A sitecustomize.py that counts the processes running the project's SGLang flag-check script (each one is a
# parser run): the script is passed with -c, so its mark is in the process's own command line.
COUNTER = f"""\
import os
try:
    with open("/proc/self/cmdline", "rb") as handle:
        if {RESULT_MARK.strip().encode()!r} in handle.read():
            with open(os.environ["EPFORGE_TEST_PARSER_COUNT"], "a") as out:
                out.write(str(os.getpid()) + "\\n")
except OSError:
    pass
"""


def parser_run_counter(directory: Path) -> tuple[dict, Path]:
    """(the environment that makes every python of a playbook run count SGLang parser runs, the count file):
    pass the environment to run_playbook, read the count with parser_runs."""
    site = directory / "parser-counter"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(COUNTER)
    count_file = directory / "parser-runs.txt"
    return {"PYTHONPATH": str(site), "EPFORGE_TEST_PARSER_COUNT": str(count_file)}, count_file


def parser_runs(count_file: Path) -> int:
    return len(count_file.read_text().splitlines()) if count_file.exists() else 0


def install_args(python: str, state: Path, **over) -> dict:
    args = {
        "python": python,
        "version": SGLANG_VERSION,
        "kernel_package": STACK["sglang"]["kernel_package"],
        "install_deps": False,
        "parser_deps": PARSER_DEPS,
        "keep": [TORCH_PIN],
        "log_path": str(state / "sglang-install.log"),
        "stamp_path": str(state / "sglang.stamp.json"),
        "timeout": 900,
    }
    args.update(over)
    return args


def cache_key() -> str:
    deps = hashlib.sha256(json.dumps(sorted(PARSER_DEPS)).encode()).hexdigest()[:10]
    py = f"{sys.version_info.major}{sys.version_info.minor}"
    return f"sglang-{SGLANG_VERSION}-{TORCH_PIN.replace('==', '-')}-py{py}-{deps}"


def _run_logged(argvs: list[list[str]], log: Path, timeout: float = 1200) -> None:
    """Run each argv with its output appended to log; fail the test with the log's tail on an error."""
    with open(log, "ab") as out:
        for argv in argvs:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            if proc.returncode != 0:
                pytest.fail(
                    f"{argv} failed (rc {proc.returncode}); log {log}:\n"
                    + "\n".join(log.read_text().splitlines()[-30:])
                )


@pytest.fixture(scope="session")
def sglang_env() -> dict:
    """A python with the stack's SGLang (parser-only), built once and cached; with how it was made."""
    override = os.environ.get("EPFORGE_SGLANG_PYTHON")
    if override:
        return {"python": override, "built_now": False, "first_install": None, "state": None}
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / cache_key()
    state = CACHE / (cache_key() + ".state")
    python = str(venv / "bin" / "python")
    ready = venv / ".epforge-ready"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return {"python": python, "built_now": False, "first_install": None, "state": state}
        state.mkdir(exist_ok=True)
        started = time.monotonic()
        _run_logged(
            [
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                [python, "-m", "pip", "install", "--disable-pip-version-check", TORCH_PIN],
            ],
            state / "venv.log",
        )
        torch_seconds = time.monotonic() - started
        rc, first = run_module("sglang_install", install_args(python, state))
        if rc != 0:
            pytest.fail(f"sglang_install failed: {first.get('msg')}\n{first.get('log_tail')}")
        size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True, check=True).stdout
        first["measured"] = {
            "torch_seconds": round(torch_seconds),
            "total_seconds": round(time.monotonic() - started),
            "venv_mib": int(size.split()[0]),
        }
        (state / "first-install.json").write_text(json.dumps(first, indent=1))
        ready.write_text(json.dumps(first["measured"]) + "\n")
        return {"python": python, "built_now": True, "first_install": first, "state": state}


# ------------------------------------------------------------------------- older releases' extra deps


def extra_parser_deps(version: str) -> list[str]:
    """The packages the role measured for version's parser beyond the common list (names, in its order)."""
    measured = ROLE_VARS["__sglang_parser_deps_measured"].get(version)
    if measured is None:
        measured = ROLE_VARS["__sglang_parser_deps_measured"][ROLE_VARS["__sglang_parser_deps_fallback"]]
    # The entries are Jinja: "{{ __sglang_parser_deps_common + ['a', 'b'] }}"; the quoted names are extras.
    return re.findall(r"'([^']+)'", measured)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_pins(wheel: Path, names: list[str]) -> list[str]:
    """Each name as the wheel's own Requires-Dist names it (its pin, e.g. transformers==5.3.0), outside the
    extras; torchvision pinned to the stack torch's build; a name the wheel does not require stays bare."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    required = {}
    for line in lines:
        if line.startswith("Requires-Dist: ") and "extra ==" not in line:
            spec = line.removeprefix("Requires-Dist: ").split(";")[0].strip()
            required[_canonical(re.split(r"[<>=!~ \[(]", spec, maxsplit=1)[0])] = spec
    torch_version = TORCH_PIN.removeprefix("torch==")
    pins = []
    for name in names:
        if _canonical(name) == "torchvision":
            pins.append(f"torchvision=={TORCHVISION_FOR_TORCH[torch_version]}")
        else:
            pins.append(required.get(_canonical(name), name))
    return pins


def site_packages(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def parser_python(version: str, base_python: str, wheel: Path, also: tuple[str, ...] = ()) -> str:
    """A python that imports version's server_args: base_python when the role measured no extra deps for
    it; else a cached venv layered on base_python's (its own site-packages first, then the base's through a
    .pth file: one torch on disk) with the extras, and the names in also, pinned from the wheel."""
    extras = extra_parser_deps(version) + [name for name in also if name not in extra_parser_deps(version)]
    if not extras:
        return base_python
    pins = wheel_pins(wheel, extras)
    key = hashlib.sha256(json.dumps([base_python, pins]).encode()).hexdigest()[:10]
    venv = CACHE / f"extras-{version}-{key}"
    python = str(venv / "bin" / "python")
    ready = venv / ".epforge-ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return python
        log = CACHE / f"extras-{version}-{key}.log"
        _run_logged([[sys.executable, "-m", "venv", "--clear", str(venv)]], log)
        Path(site_packages(python), "epforge-base.pth").write_text(site_packages(base_python) + "\n")
        # Base packages are seen as installed through the .pth: pip adds only what the extras lack.
        _run_logged([[python, "-m", "pip", "install", "--disable-pip-version-check", *pins]], log)
        ready.write_text(json.dumps(pins) + "\n")
    return python
