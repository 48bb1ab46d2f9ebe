"""cuda_binary_archs: the cuobjdump parser and the arch rules on captured outputs, and the module itself on
kernels compiled here with a real nvcc and read with a real cuobjdump.

Tools: nvcc from the session fixture cuda13_nvcc (tests/conftest.py: $EPFORGE_TEST_NVCC,
/usr/local/cuda-13.0 or a CUDA_HOME assembled once with the cuda_toolkit_pypi module); cuobjdump from
$EPFORGE_TEST_CUOBJDUMP or the stack's nvidia-cuda-cuobjdump wheel, downloaded once into
.cache/epforge-tests/ (pip, about 2 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import moduletools
import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_cuobjdump_listing

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "cuobjdump"
CACHE = ROOT / ".cache" / "epforge-tests"
KERNEL = """
__global__ void add(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i]; }
"""


def stack_pin(name: str) -> str:
    """'nvidia-cuda-cuobjdump' -> 'nvidia-cuda-cuobjdump==13.2.51' as written in stacks/cu130.yml."""
    spec = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
    return next(p for p in spec["cuda"]["pypi_packages"] if p.split("==")[0] == name)


def ensure_cuobjdump() -> str:
    """A real cuobjdump: $EPFORGE_TEST_CUOBJDUMP, else the stack's wheel unpacked into the test cache."""
    if os.environ.get("EPFORGE_TEST_CUOBJDUMP"):
        return os.environ["EPFORGE_TEST_CUOBJDUMP"]
    target = CACHE / "cuobjdump" / "cuobjdump"
    if target.exists():
        return str(target)
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-q",
            "-d",
            str(wheels),
            stack_pin("nvidia-cuda-cuobjdump"),
        ],
        check=True,
        timeout=600,
    )
    wheel = next(wheels.glob("nvidia_cuda_cuobjdump-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/bin/cuobjdump"))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(zf.read(member))
        tmp.chmod(0o755)
        tmp.rename(target)
    return str(target)


# ------------------------------------------------------------------------------------------------ parser


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_parse_multi_arch_shared_object():
    parsed = parse_cuobjdump_listing(fixture("multi-sm90-sm120-sm100a-ptx120.so.txt"))
    assert parsed["sass"] == ["sm_90", "sm_100a", "sm_120"]
    assert parsed["ptx"] == ["sm_120"]
    assert parsed["entries"] == 7
    assert parsed["host_only"] is False


def test_parse_sass_only_and_ptx_only():
    sm90 = parse_cuobjdump_listing(fixture("sm90-only.o.txt"))
    assert (sm90["sass"], sm90["ptx"]) == (["sm_90"], [])
    ptx = parse_cuobjdump_listing(fixture("ptx90-only.o.txt"))
    assert (ptx["sass"], ptx["ptx"]) == ([], ["sm_90"])


def test_parse_arch_specific_and_family_builds():
    assert parse_cuobjdump_listing(fixture("sm120a.o.txt"))["sass"] == ["sm_120a"]
    # cuobjdump prints a family build (compute_120f/sm_120f) as plain sm_120
    assert parse_cuobjdump_listing(fixture("sm120f.o.txt"))["sass"] == ["sm_120"]


def test_parse_host_only_and_archive():
    host = parse_cuobjdump_listing(fixture("host-only.o.txt"))
    assert host == {"sass": [], "ptx": [], "entries": 0, "host_only": True}
    archive = parse_cuobjdump_listing(fixture("archive-sm90-ptx90.a.txt"))
    assert (archive["sass"], archive["ptx"]) == (["sm_90"], ["sm_90"])


# ------------------------------------------------------------------------------------------------ module


@pytest.fixture(scope="module")
def binaries(cuda13_nvcc, tmp_path_factory):
    """Real binaries compiled here: SASS sm_90 only, SASS sm_120 (.so), PTX compute_90 only, sm_120a."""
    nvcc = cuda13_nvcc
    out = tmp_path_factory.mktemp("kernels")
    src = out / "k.cu"
    src.write_text(KERNEL)
    builds = {
        "sm90.o": ["-c", "-gencode", "arch=compute_90,code=sm_90"],
        "sm120.so": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_120,code=sm_120"],
        "ptx90.o": ["-c", "-gencode", "arch=compute_90,code=compute_90"],
        "sm120a.o": ["-c", "-gencode", "arch=compute_120a,code=sm_120a"],
    }
    for name, flags in builds.items():
        subprocess.run(
            [nvcc, *flags, str(src), "-o", str(out / name)], check=True, timeout=300, capture_output=True
        )
    (out / "host.c").write_text("int host_only;\n")
    subprocess.run(["gcc", "-c", str(out / "host.c"), "-o", str(out / "host.o")], check=True)
    return out


def run_module(args: dict, module: str = "cuda_binary_archs", check: bool = False) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, timeout=600)


@pytest.mark.build
def test_module_sm90_only_fails_for_12_0_naming_what_it_found(binaries):
    rc, res = run_module(
        {"paths": [str(binaries / "sm90.o")], "required_archs": ["12.0"], "cuobjdump": ensure_cuobjdump()}
    )
    assert rc != 0
    assert res["failed"] is True
    assert "lacks 12.0 (SASS found: sm_90; PTX found: none)" in res["msg"]
    assert res["missing"] == {str(binaries / "sm90.o"): ["12.0"]}


@pytest.mark.build
def test_module_sm120_passes_every_spelling(binaries):
    for spelling in ("12.0", "sm_120", "12.0f"):
        rc, res = run_module(
            {
                "paths": [str(binaries / "sm120.so")],
                "required_archs": [spelling],
                "cuobjdump": ensure_cuobjdump(),
            }
        )
        assert rc == 0, res
        assert res["files"][0]["sass"] == ["sm_120"]
        assert res["files"][0]["covered"] == {spelling: "sass sm_120"}


@pytest.mark.build
def test_module_sm120a_covers_12_0_but_sm120_does_not_cover_12_0a(binaries):
    cuobjdump = ensure_cuobjdump()
    rc, res = run_module(
        {"paths": [str(binaries / "sm120a.o")], "required_archs": ["12.0"], "cuobjdump": cuobjdump}
    )
    assert rc == 0 and res["sass_archs"] == ["sm_120a"]
    rc, res = run_module(
        {"paths": [str(binaries / "sm120.so")], "required_archs": ["12.0a"], "cuobjdump": cuobjdump}
    )
    assert rc != 0 and "lacks 12.0a (SASS found: sm_120" in res["msg"]


@pytest.mark.build
def test_module_ptx_only_counts_only_when_accepted(binaries):
    cuobjdump = ensure_cuobjdump()
    args = {"paths": [str(binaries / "ptx90.o")], "required_archs": ["12.0"], "cuobjdump": cuobjdump}
    rc, res = run_module(args)
    assert rc != 0
    assert "SASS found: none; PTX found: sm_90" in res["msg"]
    assert "PTX does not count" in res["msg"]
    rc, res = run_module({**args, "accept_ptx": True})
    assert rc == 0
    assert res["files"][0]["covered"] == {"12.0": "ptx sm_90"}
    assert res["ptx_archs"] == ["sm_90"] and res["sass_archs"] == []


@pytest.mark.build
def test_module_directory_glob_and_host_only(binaries):
    cuobjdump = ensure_cuobjdump()
    # a directory scan: the host-only object fails the requirement unless ignored
    rc, res = run_module(
        {
            "paths": [str(binaries)],
            "patterns": ["sm120*", "host.o"],
            "required_archs": ["12.0"],
            "cuobjdump": cuobjdump,
        }
    )
    assert rc != 0 and "host.o lacks 12.0 (no device code)" in res["msg"]
    rc, res = run_module(
        {
            "paths": [str(binaries)],
            "patterns": ["sm120*", "host.o"],
            "required_archs": ["12.0"],
            "cuobjdump": cuobjdump,
            "ignore_host_only": True,
        }
    )
    assert rc == 0, res
    assert [Path(f["path"]).name for f in res["files"]] == ["sm120.so", "sm120a.o"]
    assert res["host_only"] == [str(binaries / "host.o")]
    # a glob over everything, no requirement: lists without failing
    rc, res = run_module({"paths": [str(binaries / "*.o")], "cuobjdump": cuobjdump})
    assert rc == 0
    assert {Path(f["path"]).name: f["sass"] for f in res["files"]} == {
        "host.o": [],
        "ptx90.o": [],
        "sm120a.o": ["sm_120a"],
        "sm90.o": ["sm_90"],
    }


def test_module_bad_input_fails_clearly(tmp_path):
    rc, res = run_module(
        {"paths": [str(tmp_path / "nothing-*.so")], "required_archs": ["12.0"], "cuobjdump": "/bin/true"}
    )
    assert rc != 0 and "no file matched" in res["msg"]
    (tmp_path / "x.so").write_bytes(b"")
    rc, res = run_module({"paths": [str(tmp_path / "x.so")], "required_archs": ["twelve"]})
    assert rc != 0 and "no GPU arch: twelve" in res["msg"]
    rc, res = run_module({"paths": [str(tmp_path / "x.so")], "cuobjdump": str(tmp_path / "missing")})
    assert rc != 0 and "cuobjdump not found" in res["msg"]
