"""Make the project's Ansible modules and module_utils importable the way Ansible loads them; provide what
tests need through session fixtures (never from another test having run first); enforce the skip rule.

The skip rule (docs/testing.md): a test may skip only when it needs a GPU or GitHub, which this machine may
lack. Such a skip's reason starts with SKIP_GPU or SKIP_GITHUB; any other skip is turned into a failure, so
the test command (scripts/test.sh) fails on it. Everything else a test needs (a CUDA 13 nvcc, a venv with
torch, SGLang's bench client) a fixture below builds when it is absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# Built test prerequisites that a fresh clone on the same machine may reuse.
CACHE = ROOT / ".cache" / "epforge-tests"


SKIP_GPU = "GPU:"
SKIP_GITHUB = "GitHub:"
ALLOWED_SKIPS = (SKIP_GPU, SKIP_GITHUB)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


# Tests that use this machine's own state run in ONE pytest-xdist group (scripts/test.sh runs four workers
# with --dist loadgroup): one worker runs them in collection order, as a serial run would. That state is what
# playbooks against localhost hold or write (the run lock, /var/lib/epforge, /etc/ansible/facts.d, service
# accounts, /opt/epforge), the localhost Molecule scenarios (tests/test_molecule.py marks those) and the
# toolchain scenario's env that torch_venv reuses. Every other test (tmp dirs, podman containers, locked test
# caches) runs on whichever worker is free. docs/testing.md, "Parallel runs".
THIS_MACHINE_GROUP = "this_machine"
THIS_MACHINE_FILES = frozenset(
    {
        "test_controller_side.py",
        "test_cuda_toolkit.py",
        "test_ml_env.py",
        "test_ml_env_existing.py",
        "test_pip_guard.py",
        "test_preflight_checks.py",
        "test_probe_cache.py",
        "test_process.py",
        "test_record_step.py",
        "test_report.py",
        "test_run_lock.py",
        "test_server_object.py",
        "test_server_settings_preflight.py",
        "test_sglang_bench_role.py",
        "test_sglang_flags_real.py",
        "test_sglang_server.py",
        "test_smoke_model_role.py",
        "test_sweep.py",
        "test_wheelhouse.py",
    }
)


# Fixtures that build or need what only this machine's test setup holds: a CUDA 13 toolkit, torch envs, the
# bench client, SGLang's parser envs, the Molecule image. A test that uses one, itself or through another
# fixture, is marked `machine_setup`: the unit tests under the newest controller run in a container without
# them (tests/test_controller_pythons.py, `-m "not machine_setup"`); here every test runs.
MACHINE_SETUP_FIXTURES = frozenset(
    {
        "cuda13_nvcc",
        "cuda13_home",
        "torch_venv",
        "torch_cpu_python",
        "bench_client_python",
        "bench_client",
        "sglang_env",
        "molecule_image",
    }
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Put the tests of THIS_MACHINE_FILES in the one group (before xdist reads the groups); mark the tests
    that use a fixture of MACHINE_SETUP_FIXTURES."""
    del config
    for item in items:
        if item.path.name in THIS_MACHINE_FILES:
            item.add_marker(pytest.mark.xdist_group(THIS_MACHINE_GROUP))
        if MACHINE_SETUP_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.machine_setup)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip whose reason is not a GPU's or GitHub's is a failure: the test lacked a fixture."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not reason.startswith(ALLOWED_SKIPS):
            report.outcome = "failed"
            report.longrepr = (
                f"skipped for a reason that is neither a GPU's nor GitHub's: {reason!r}. Only tests that "
                f"need a GPU or GitHub may skip (reason starting {SKIP_GPU!r} or {SKIP_GITHUB!r}); give the "
                "test what it needs through a fixture in tests/conftest.py (docs/testing.md)."
            )


def cache_lock(name: str, timeout: float = 3600):
    """The lock of one test-cache entry, held while it is checked and built: parallel builders (pytest-xdist
    workers, two test runs on one machine) take turns, and the later one finds the entry ready. Bounded."""
    import bench_env  # noqa: PLC0415 - tests/fixtures/bench_serving, put on sys.path by pytest's pythonpath

    return bench_env.locked(CACHE / f".{name}.lock", timeout)


def cu130_spec() -> dict:
    return yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]


@pytest.fixture(scope="session")
def cuda13_nvcc() -> str:
    """A real CUDA 13 nvcc: $EPFORGE_TEST_NVCC, /usr/local/cuda-13.0, else a CUDA_HOME assembled by the
    project's own cuda_toolkit_pypi module into the test cache (about 10 s and 2 GB of wheels, once)."""
    for candidate in (
        os.environ.get("EPFORGE_TEST_NVCC"),
        "/usr/local/cuda-13.0/bin/nvcc",
        str(CACHE / "cuda-13.0" / "bin" / "nvcc"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    spec = cu130_spec()
    args = {
        "prefix": str(CACHE / "cuda-13.0"),
        "cuda_version": spec["cuda"]["version"],
        "packages": spec["cuda"]["pypi_packages"],
        "wheel_dir": str(CACHE / "wheels"),
        "log_path": str(CACHE / "cuda-13.0.log"),
    }
    import moduletools  # noqa: PLC0415 - test support, importable once pytest put tests/ on sys.path

    rc, result = moduletools.run_module("cuda_toolkit_pypi", args, timeout=1800)
    assert rc == 0, f"assembling a test CUDA_HOME failed: {result.get('msg')} (log {args['log_path']})"
    return result["nvcc"]


@pytest.fixture(scope="session")
def cuda13_home(cuda13_nvcc) -> Path:
    return Path(cuda13_nvcc).resolve().parents[1]


@pytest.fixture(scope="session")
def bench_client_python(tmp_path_factory) -> Path:
    """Python of a venv with SGLang's real bench_serving client and the stack's torch (cu130 build, CPU use):
    built once under ~/.cache/epforge/ by tests/fixtures/bench_serving/bench_env.py, then reused."""
    import bench_env  # noqa: PLC0415 - tests/fixtures/bench_serving, put on sys.path above

    log = tmp_path_factory.mktemp("bench-client") / "build.log"
    with open(log, "ab") as handle:
        return bench_env.bench_client_python(log=handle)


# The toolchain Molecule scenario's venv: reused when present (no second torch download), else built.
MOLECULE_ML_ENV = Path("/opt/epforge-molecule/ml-env")


@pytest.fixture(scope="session")
def bench_client(bench_client_python, tmp_path_factory) -> tuple[Path, Path]:
    """(python of the bench client venv, a word-level tokenizer of the stand-in's words that it saved)."""
    import bench_env  # noqa: PLC0415 - as above

    tokenizer = bench_env.make_tokenizer_with(
        bench_client_python, tmp_path_factory.mktemp("tok") / "tokenizer"
    )
    return bench_client_python, tokenizer


def has_torch(venv: Path, version: str) -> bool:
    return any((venv / "lib").glob(f"python3*/site-packages/torch-{version}*.dist-info"))


@pytest.fixture(scope="session")
def torch_venv() -> Path:
    """A venv with the cu130 stack's torch (2.14.1, CUDA 13 build) and the ml_env build packages: the
    toolchain scenario's when it exists, else one built by the project's ml_env_torch module into the test
    cache (torch and NVIDIA's CUDA 13 wheels: about 4 GB, minutes, once)."""
    torch = cu130_spec()["torch"]
    if has_torch(MOLECULE_ML_ENV, torch["version"]):
        return MOLECULE_ML_ENV
    with cache_lock("ml-env"):
        return _build_torch_venv(torch)


def _build_torch_venv(torch: dict) -> Path:
    venv = CACHE / "ml-env"
    args = {
        "path": str(venv),
        "torch_version": torch["version"],
        "torch_cuda": "13.0",
        "toolkit_cuda": "13.0",
        "archs": ["12.0"],
        "packages": ["setuptools", "wheel", "ninja", "packaging"],
        "log_path": str(CACHE / "ml-env.log"),
        "stamp_path": str(CACHE / "ml-env.stamp.json"),
        "base_python": sys.executable,
        "timeout": 3000,
    }
    import moduletools  # noqa: PLC0415 - as above

    rc, result = moduletools.run_module("ml_env_torch", args, timeout=3600)
    assert rc == 0, f"building the test torch venv failed: {result.get('msg')} (log {args['log_path']})"
    return venv


# The smoke model's forward-pass test: a small CPU torch with transformers (not the stack's 4 GB CUDA torch).
TORCH_CPU_NEEDS = ["torch==2.13.*", "transformers>=5,<6", "numpy", "tokenizers", "safetensors"]


@pytest.fixture(scope="session")
def torch_cpu_python() -> str:
    """An interpreter with torch, transformers, numpy, tokenizers and safetensors: $EPFORGE_TEST_TORCH_PYTHON
    when set (a GPU image's venv, say), else a venv built once into the test cache with pip
    (torch==2.13.*: on this machine pip's find-links hold its CPU build, 190 MB; about 1.2 GB installed)."""
    import subprocess  # noqa: PLC0415 - only this fixture runs commands

    probe = "import torch, transformers, numpy, tokenizers, safetensors"
    override = os.environ.get("EPFORGE_TEST_TORCH_PYTHON")
    if override:
        ok = subprocess.run([override, "-c", probe], capture_output=True, check=False).returncode == 0
        assert ok, f"EPFORGE_TEST_TORCH_PYTHON={override} lacks one of {TORCH_CPU_NEEDS}"
        return override
    venv = CACHE / "torch-cpu-transformers"
    python = venv / "bin" / "python"
    with cache_lock("torch-cpu-transformers"):
        if not (
            python.exists()
            and subprocess.run([str(python), "-c", probe], capture_output=True, check=False).returncode == 0
        ):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *TORCH_CPU_NEEDS], check=True, timeout=3600
            )
    return str(python)


MOLECULE_IMAGE = "localhost/epforge-molecule-bookworm:latest"
# Seconds: the image build takes about 1-2 minutes (debootstrap over the network).
IMAGE_TIMEOUT = int(os.environ.get("EPFORGE_IMAGE_TIMEOUT", "900"))


@pytest.fixture(scope="session")
def molecule_image() -> str:
    """The test-host image (Debian bookworm, systemd as PID 1) that Molecule scenarios and every podman test
    start containers from: built, or found up to date, once per session by molecule/_podman/build-image.sh
    (log .cache/molecule-logs/build-image.log). Returns the image name."""
    import subprocess  # noqa: PLC0415 - only the fixtures that run commands need it

    script = ROOT / "molecule" / "_podman" / "build-image.sh"
    log = ROOT / ".cache" / "molecule-logs" / "build-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        try:
            built = subprocess.run(
                [str(script)], stdout=out, stderr=subprocess.STDOUT, timeout=IMAGE_TIMEOUT + 60, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{script.relative_to(ROOT)} timed out after {IMAGE_TIMEOUT + 60} s (log {log})")
    if built.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        pytest.fail(f"{script.relative_to(ROOT)} failed (rc {built.returncode}), log {log}:\n{tail}")
    return MOLECULE_IMAGE
