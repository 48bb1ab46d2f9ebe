"""deepep: the build rules of plugins/module_utils/deepep.py, and the modules deepep_source, deepep_plan and
deepep_gpu_verify run the way Ansible runs them, on real trees (the stand-in repository of
tests/deepep_fake_src, a real git), real interpreters and real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import moduletools
import pytest
from test_cuda_binary_archs import KERNEL, ensure_cuobjdump

from ansible_collections.epforge.ep.plugins.module_utils.arch import check_required
from ansible_collections.epforge.ep.plugins.module_utils.deepep import (
    SUPPORTED,
    UNKNOWN,
    UNSUPPORTED_V2,
    DeepEPError,
    build_flags,
    build_key,
    classify_build_log,
    classify_source,
    include_path,
    non_nvlink_pairs,
    prebuilt_stamp_key,
    prebuilt_verdict,
    prebuilt_wheel_glob,
    setup_py_version,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "deepep"
sys.path.insert(0, str(ROOT / "tests" / "deepep_fake_src"))
import make_fake_deepep  # noqa: E402


def run_module(module: str, args: dict, check: bool = False) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, timeout=600)


@pytest.fixture(scope="module")
def fake_repo(tmp_path_factory) -> tuple[Path, str]:
    dest = tmp_path_factory.mktemp("fake") / "deepep"
    return dest, make_fake_deepep.make(str(dest))


# ---- build rules (DeepEP v1.2.1 setup.py) ----


def test_flags_for_sm120_force_no_aggressive_ptx():
    env = build_flags(["12.0"], nvshmem=True, disable_sm90_features=False, aggressive_ptx=False)
    assert env == {
        "TORCH_CUDA_ARCH_LIST": "12.0",
        "DISABLE_AGGRESSIVE_PTX_INSTRS": "1",
        "DISABLE_SM90_FEATURES": "0",
    }


def test_aggressive_ptx_only_for_exactly_9_0():
    assert (
        build_flags(["9.0"], nvshmem=True, disable_sm90_features=False, aggressive_ptx=True)[
            "DISABLE_AGGRESSIVE_PTX_INSTRS"
        ]
        == "0"
    )
    for archs in (["12.0"], ["9.0", "12.0"], ["9.0a"]):
        with pytest.raises(DeepEPError, match=r"exactly '9\.0'"):
            build_flags(archs, nvshmem=True, disable_sm90_features=False, aggressive_ptx=True)


def test_sm90_features_off_refused_with_nvshmem_allowed_without():
    with pytest.raises(DeepEPError, match="DISABLE_SM90_FEATURES cannot be combined with NVSHMEM"):
        build_flags(["8.0"], nvshmem=True, disable_sm90_features=True, aggressive_ptx=False)
    env = build_flags(["8.0"], nvshmem=False, disable_sm90_features=True, aggressive_ptx=False)
    assert env["DISABLE_SM90_FEATURES"] == "1"


def test_prebuilt_wheel_acceptance_from_captured_sass_lists():
    def sass(name):
        text = (FIX / name).read_text()
        return sorted({line.rsplit(".", 2)[-2] for line in text.splitlines() if line.startswith("ELF file")})

    sgl = sass("cuobjdump-list-elf-sgl-deep-ep-0.1.2.post1.txt")
    assert sgl == ["sm_100", "sm_103", "sm_90"]
    # the one coverage rule (plugins/module_utils/arch.py), as cuda_binary_archs applies it to a wheel
    assert check_required(sgl, [], ["12.0"])["missing"] == ["12.0"]
    assert check_required(sgl, [], ["9.0", "10.0"])["missing"] == []
    built = sass("cuobjdump-list-elf-deep_ep_cpp-v1.2.1-sm120.txt")
    assert check_required(built, [], ["12.0"])["missing"] == []
    assert check_required(built, [], ["12.0a"])["missing"] == ["12.0a"]  # plain sm_120 is no 12.0a build


def test_prebuilt_wheel_glob_is_the_file_pip_download_writes():
    assert prebuilt_wheel_glob("sgl-deep-ep==0.1.2.post1") == "sgl_deep_ep-0.1.2.post1-*.whl"
    assert prebuilt_wheel_glob("deep.ep>=1.0; python_version>'3'") == "deep_ep-*-*.whl"
    assert prebuilt_wheel_glob("sgl-deep-ep[x] == 0.2") == "sgl_deep_ep-0.2-*.whl"


def test_prebuilt_stamp_key_follows_the_wheel_bytes_and_the_arch_list():
    key = prebuilt_stamp_key("a" * 64, ["12.0"])
    assert key == prebuilt_stamp_key("a" * 64, ["12.0"])
    assert key != prebuilt_stamp_key("b" * 64, ["12.0"])
    assert key != prebuilt_stamp_key("a" * 64, ["12.0a"])
    assert key != prebuilt_stamp_key("a" * 64, ["9.0", "12.0"])


def test_prebuilt_verdict_texts():
    lacking = {"files": [{"member": "x.so"}], "sass_archs": ["sm_90", "sm_100"], "missing_archs": ["12.0"]}
    assert prebuilt_verdict("sgl-deep-ep==0.1.2.post1", ["12.0"], lacking, "") == (
        False,
        "sgl-deep-ep==0.1.2.post1 carries SASS sm_90, sm_100 and lacks 12.0 needed for arch list 12.0",
    )
    fits = {**lacking, "missing_archs": []}
    assert prebuilt_verdict("w", ["9.0", "10.0"], fits, "") == (True, "w carries SASS sm_90, sm_100")
    assert prebuilt_verdict("w", ["12.0"], {}, "boom") == (False, "w carries SASS  (cuobjdump failed: boom)")
    no_device = {"files": [], "sass_archs": [], "missing_archs": []}
    assert prebuilt_verdict("w", ["12.0"], no_device, "")[0] is False


def test_classify_source_on_the_stand_in_and_others():
    text = make_fake_deepep.SETUP_V1
    assert classify_source(text, set())[0] == SUPPORTED
    assert setup_py_version(text) == "1.2.1"
    kind, reason = classify_source(make_fake_deepep.SETUP_V2, {"deep_ep/utils/find_pkgs.py"})
    assert kind == UNSUPPORTED_V2 and "EP_JIT_CACHE_DIR" in reason
    assert classify_source(None, set())[0] == UNKNOWN
    kind, reason = classify_source("from setuptools import setup\nsetup(name='x')\n", set())
    assert kind == UNKNOWN and "deep_ep_cpp" in reason


@pytest.mark.skipif(
    not (ROOT / "third_party" / "DeepEP" / "setup.py").exists(),
    reason="GitHub: no fetched DeepEP checkout in third_party/DeepEP (git clone from GitHub)",
)
def test_classify_real_deepep_v1_2_1():
    text = (ROOT / "third_party" / "DeepEP" / "setup.py").read_text()
    assert classify_source(text, set())[0] == SUPPORTED
    assert setup_py_version(text) == "1.2.1"


def test_build_key_is_stable_and_input_sensitive():
    a = build_key({"archs": ["12.0"], "nvshmem": "3.4.5"})
    assert a == build_key({"nvshmem": "3.4.5", "archs": ["12.0"]})
    assert a != build_key({"archs": ["9.0"], "nvshmem": "3.4.5"})
    assert len(a) == 16


def test_include_path_adds_cccl_and_env_headers(tmp_path):
    cuda = tmp_path / "cuda"
    (cuda / "include" / "cccl").mkdir(parents=True)
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "include").mkdir(parents=True)
    got = include_path(str(cuda), [str(site), str(site)], ["/extra"])
    assert got == ["/extra", str(cuda / "include" / "cccl"), str(site / "nvidia" / "cu13" / "include")]


def test_build_log_diagnosis():
    assert "libibverbs-dev" in classify_build_log(
        "csrc/kernels/configs.cuh:3:10: fatal error: infiniband/mlx5dv.h: No such file or directory"
    )
    assert "cccl" in classify_build_log("fatal error: cuda/std/cstdint: No such file or directory")
    assert classify_build_log("all good") is None


# ---- modules ----


def test_deepep_source_reads_the_stand_in(fake_repo):
    repo, commit = fake_repo
    rc, res = run_module("deepep_source", {"path": str(repo), "expect_commit": commit[:7]})
    assert rc == 0, res
    assert res["build_system"] == SUPPORTED and res["commit"] == commit and res["version"] == "1.2.1"
    assert len(res["tree_sha256"]) == 64


def test_deepep_source_refuses_v2_and_a_moved_ref(fake_repo, tmp_path):
    repo, _commit = fake_repo
    rc, res = run_module("deepep_source", {"path": str(repo), "expect_commit": "0123456"})
    assert rc != 0 and "not the expected 0123456" in res["msg"]
    v2 = tmp_path / "v2"
    subprocess.run(["git", "clone", "-q", "--branch", "v2-jit", str(repo), str(v2)], check=True)
    rc, res = run_module("deepep_source", {"path": str(v2)})
    assert rc != 0 and res["build_system"] == UNSUPPORTED_V2
    assert "does not support" in res["msg"] and "v1.2.1" in res["msg"]
    rc, res = run_module("deepep_source", {"path": str(tmp_path / "nothing")})
    assert rc != 0 and "does not exist" in res["msg"]


def test_deepep_source_checks_the_resolved_commit_of_an_exported_tree(fake_repo, tmp_path):
    """The role's git path exports the ref's tree (no .git): the resolver's commit is checked and reported."""
    repo, commit = fake_repo
    rc, res = run_module(
        "cuda_extension_source",
        {"name": "git", "kind": "git", "source": str(repo), "ref": "v1.2.1", "work_dir": str(tmp_path)},
    )
    assert rc == 0 and res["revision"] == commit and not (Path(res["source_dir"]) / ".git").exists()
    tree = res["source_dir"]
    rc, res = run_module("deepep_source", {"path": tree, "commit": commit, "expect_commit": commit[:7]})
    assert rc == 0 and res["commit"] == commit, res
    rc, res = run_module("deepep_source", {"path": tree, "commit": commit, "expect_commit": "0123456"})
    assert rc != 0 and "not the expected 0123456" in res["msg"]


def fake_nvshmem(root: Path, host_lib: str = "libnvshmem_host.so") -> Path:
    (root / "include" / "non_abi").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "lib" / host_lib).write_text("")
    (root / "include" / "non_abi" / "nvshmem_version.h").write_text(
        "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 4\n"
        "#define NVSHMEM_VENDOR_PATCH_VERSION 5\n"
    )
    return root


def plan_args(tmp_path: Path, **over) -> dict:
    cuda = tmp_path / "cuda"
    (cuda / "include" / "cccl").mkdir(parents=True, exist_ok=True)
    hdr = tmp_path / "hdr" / "infiniband"
    hdr.mkdir(parents=True, exist_ok=True)
    (hdr / "mlx5dv.h").write_text("/* stand-in */\n")
    args = {
        "python": sys.executable,
        "cuda_home": str(cuda),
        "arch_list": ["12.0"],
        "nvshmem_package": "nvidia-nvshmem-cu13",
        "system_include_dirs": [str(tmp_path / "hdr")],
    }
    args.update(over)
    return args


def test_deepep_plan_missing_nvshmem_is_a_clear_error(tmp_path):
    # The test interpreter has no nvidia.nvshmem package: exactly "NVSHMEM missing".
    rc, res = run_module("deepep_plan", plan_args(tmp_path))
    assert rc != 0 and res["msg"].startswith("NVSHMEM not found") and "deepep_install_nvshmem" in res["msg"]
    rc, res = run_module("deepep_plan", plan_args(tmp_path, nvshmem_dir=str(tmp_path / "none")))
    assert rc != 0 and "is not an NVSHMEM install" in res["msg"]
    wheel_like = fake_nvshmem(tmp_path / "wheel-like", host_lib="libnvshmem_host.so.3")
    rc, res = run_module("deepep_plan", plan_args(tmp_path, nvshmem_dir=str(wheel_like)))
    assert rc != 0 and "unversioned libnvshmem_host.so" in res["msg"]


def test_deepep_plan_with_nvshmem_dir(tmp_path):
    nv = fake_nvshmem(tmp_path / "nvshmem")
    rc, res = run_module("deepep_plan", plan_args(tmp_path, nvshmem_dir=str(nv)))
    assert rc == 0, res
    assert res["nvshmem"] == {"dir": str(nv), "version": "3.4.5", "source": "nvshmem_dir"}
    assert res["build_env"]["NVSHMEM_DIR"] == str(nv)
    assert res["build_env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"] == "1"
    assert res["include_dirs"][0] == str(tmp_path / "cuda" / "include" / "cccl")
    assert res["sass_archs"] == ["sm_120"] and res["key_extra"]["nvshmem"]["version"] == "3.4.5"


def test_deepep_plan_refuses_missing_mlx5dv_and_bad_flags(tmp_path):
    nv = fake_nvshmem(tmp_path / "nvshmem")
    rc, res = run_module(
        "deepep_plan", plan_args(tmp_path, nvshmem_dir=str(nv), system_include_dirs=[str(tmp_path / "empty")])
    )
    assert rc != 0 and "mlx5dv.h not found" in res["msg"] and "libibverbs-dev" in res["msg"]
    rc, res = run_module("deepep_plan", plan_args(tmp_path, nvshmem_dir=str(nv), aggressive_ptx=True))
    assert rc != 0 and "exactly '9.0'" in res["msg"]
    rc, res = run_module("deepep_plan", plan_args(tmp_path, nvshmem_dir=str(nv), disable_sm90_features=True))
    assert rc != 0 and "DISABLE_SM90_FEATURES" in res["msg"]
    # Without NVSHMEM (allowed): SM90 features off is fine and no mlx5dv.h is needed.
    rc, res = run_module(
        "deepep_plan",
        plan_args(
            tmp_path,
            require_nvshmem=False,
            disable_sm90_features=True,
            arch_list=["8.0"],
            system_include_dirs=[],
        ),
    )
    assert rc == 0 and res["nvshmem"]["source"] == "none" and res["build_env"]["DISABLE_SM90_FEATURES"] == "1"


GPU_SCRIPT = r"""
import json, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
mode = "{mode}"
if mode == "hang":
    time.sleep(60)
if mode == "crash":
    raise SystemExit(7)
ok = mode == "ok"
res = {{"ok": ok, "modes": {{"normal": {{"ok": ok, "latency_us_mean": 41.5,
                                       "max_rel_diff": 0.0 if ok else 0.3,
        **({{}} if ok else {{"error": "round trip result incorrect"}})}}}}}}
open(args["--out"], "w").write(json.dumps(res))
sys.exit(0 if ok else 1)
"""


def run_gpu_verify(tmp_path: Path, script: Path, *, check: bool = False, **args) -> tuple[int, dict]:
    """Module deepep_gpu_verify running script with this python; result and log in tmp_path."""
    return run_module(
        "deepep_gpu_verify",
        {
            "python": sys.executable,
            "script": str(script),
            "result_path": str(tmp_path / "r.json"),
            "log_path": str(tmp_path / "gv.log"),
            **args,
        },
        check=check,
    )


@pytest.mark.parametrize("mode", ["ok", "wrong", "crash", "hang"])
def test_deepep_gpu_verify_module(tmp_path, mode):
    script = tmp_path / "rt.py"
    script.write_text(GPU_SCRIPT.format(mode=mode))
    rc, res = run_gpu_verify(tmp_path, script, timeout=5, modes=["normal"])
    if mode == "ok":
        assert rc == 0 and res["result"]["modes"]["normal"]["latency_us_mean"] == 41.5 and not res["changed"]
    elif mode == "wrong":
        assert rc != 0 and "normal: round trip result incorrect" in res["msg"]
    elif mode == "crash":
        assert rc != 0 and "wrote no result" in res["msg"] and res["rc"] == 7
    else:
        assert rc != 0 and "did not finish within 5 s" in res["msg"]


def test_deepep_gpu_verify_check_mode_runs_nothing(tmp_path):
    rc, res = run_gpu_verify(tmp_path, tmp_path / "absent.py", check=True)
    assert rc == 0 and res.get("skipped") and not (tmp_path / "gv.log").exists()


# ---- normal mode needs NVLink: real `nvidia-smi topo -m` captures (tests/fixtures/nvidia-smi) ----

TOPO = ROOT / "tests" / "fixtures" / "nvidia-smi"


def test_nvlink_pairs_from_real_topologies():
    assert non_nvlink_pairs((TOPO / "h200x2-topo.txt").read_text(), 2) == []
    pcie = (TOPO / "public-8x4090-pcie-node-sys-topo.txt").read_text()
    assert non_nvlink_pairs(pcie, 2) == [("GPU0", "GPU1", "PHB")]
    assert len(non_nvlink_pairs(pcie, 8)) == 28
    assert non_nvlink_pairs((TOPO / "h200x2-topo.txt").read_text(), 4) is None  # only 2 GPUs there
    assert non_nvlink_pairs("not a matrix", 2) is None


def fake_smi(tmp_path: Path, capture: str) -> Path:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{TOPO / capture}'\n")
    smi.chmod(0o755)
    return smi


MODES_SCRIPT = r"""
import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
modes = args["--modes"].split(",")
res = {"ok": True, "modes": {m: {"ok": True, "latency_us_mean": 1.0} for m in modes}}
open(args["--out"], "w").write(json.dumps(res))
"""


@pytest.mark.parametrize(
    ("capture", "ran", "skipped"),
    [
        ("h200x2-topo.txt", ["normal", "low_latency"], []),
        ("public-8x4090-pcie-node-sys-topo.txt", ["low_latency"], ["normal"]),
    ],
)
def test_gpu_verify_drops_normal_mode_without_nvlink(tmp_path, capture, ran, skipped):
    script = tmp_path / "rt.py"
    script.write_text(MODES_SCRIPT)
    rc, res = run_gpu_verify(tmp_path, script, nvidia_smi=str(fake_smi(tmp_path, capture)))
    assert rc == 0, res
    assert sorted(res["result"]["modes"]) == sorted(ran)
    assert sorted(res["skipped_modes"]) == skipped
    if skipped:
        assert "GPU0-GPU1 is PHB, not NVLink" in res["skipped_modes"]["normal"]
        assert "--deepep-mode low_latency" in res["skipped_modes"]["normal"]


def test_gpu_verify_fails_when_no_mode_is_left(tmp_path):
    rc, res = run_gpu_verify(
        tmp_path,
        tmp_path / "rt.py",
        modes=["normal"],
        nvidia_smi=str(fake_smi(tmp_path, "public-8x4090-pcie-node-sys-topo.txt")),
    )
    assert rc != 0 and "no DeepEP mode left" in res["msg"]


# ---- the prebuilt wheel's verdict and its stamp: real wheels of nvcc-built binaries, a real cuobjdump ----

WHEEL_NAME = "sgl_deep_ep-0.1.2.post1-cp311-cp311-linux_x86_64.whl"
REQUIREMENT = "sgl-deep-ep==0.1.2.post1"


@pytest.fixture(scope="module")
def extension_builds(cuda13_nvcc, tmp_path_factory) -> dict[str, Path]:
    """A CUDA extension built twice with nvcc (SASS sm_90 only; SASS sm_120) and a host-only helper (gcc)."""
    out = tmp_path_factory.mktemp("ext")
    (out / "k.cu").write_text(KERNEL)
    built = {}
    for arch in ("90", "120"):
        built[arch] = out / f"sm{arch}.so"
        subprocess.run(
            [
                cuda13_nvcc,
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-gencode",
                f"arch=compute_{arch},code=sm_{arch}",
                str(out / "k.cu"),
                "-o",
                str(built[arch]),
            ],
            check=True,
            timeout=300,
            capture_output=True,
        )
    (out / "host.c").write_text("int host_only(void) { return 1; }\n")
    built["host"] = out / "libhost.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(out / "host.c"), "-o", str(built["host"])], check=True)
    return built


def write_wheel(path: Path, extension: Path, host: Path) -> Path:
    """A wheel laid out like sgl-deep-ep's: the extension, a host-only library, Python code and metadata."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        whl.write(extension, "deep_ep/_C.cpython-311-x86_64-linux-gnu.so")
        whl.write(host, "deep_ep/libhost.so")
        whl.writestr("deep_ep/__init__.py", "")
        whl.writestr(
            "sgl_deep_ep-0.1.2.post1.dist-info/METADATA", "Name: sgl-deep-ep\nVersion: 0.1.2.post1\n"
        )
    return path


def judge(
    folder: Path, archs: list[str], cuobjdump: str, *, check: bool = False, **extra
) -> tuple[int, dict]:
    args = {
        "folder": str(folder),
        "requirement": REQUIREMENT,
        "required_archs": archs,
        "cuobjdump": cuobjdump,
    }
    return run_module("deepep_prebuilt", {**args, **extra}, check=check)


@pytest.mark.build
def test_prebuilt_verdict_is_stamped_and_reused_until_wheel_or_archs_change(extension_builds, tmp_path):
    cuobjdump = ensure_cuobjdump()
    no_tool = str(tmp_path / "no-cuobjdump")  # a rerun that needs cuobjdump says so: the stamp did not answer
    wheel = write_wheel(tmp_path / WHEEL_NAME, extension_builds["90"], extension_builds["host"])
    stamp = Path(f"{wheel}.archs.json")

    rc, res = judge(tmp_path, ["12.0"], cuobjdump)
    assert rc == 0, res
    assert (res["ok"], res["stamp"], res["changed"]) == (False, "written", True)
    assert res["verdict"] == f"{REQUIREMENT} carries SASS sm_90 and lacks 12.0 needed for arch list 12.0"
    assert [f["member"] for f in res["files"]] == [
        "deep_ep/_C.cpython-311-x86_64-linux-gnu.so"
    ]  # host-only out
    assert json.loads(stamp.read_text())["wheel_sha256"] == res["sha256"]

    rc, again = judge(tmp_path, ["12.0"], no_tool)
    assert rc == 0 and (again["stamp"], again["changed"]) == ("hit", False)
    assert again["verdict"] == res["verdict"] and again["ok"] is False

    # Another arch list is another question: not answered by the stamp, read again and re-stamped.
    rc, other = judge(tmp_path, ["9.0"], no_tool)
    assert rc == 0 and other["stamp"] == "not_written" and "cuobjdump not found" in other["verdict"]
    rc, other = judge(tmp_path, ["9.0"], cuobjdump)
    assert rc == 0 and (other["ok"], other["stamp"]) == (True, "written")

    # The same file name with other bytes (a re-download of a rebuilt wheel) is read again.
    write_wheel(wheel, extension_builds["120"], extension_builds["host"])
    rc, rebuilt = judge(tmp_path, ["9.0"], no_tool)
    assert rc == 0 and rebuilt["stamp"] == "not_written" and rebuilt["sha256"] != res["sha256"]
    rc, rebuilt = judge(tmp_path, ["12.0"], cuobjdump)
    assert rc == 0 and (rebuilt["ok"], rebuilt["sass_archs"], rebuilt["stamp"]) == (
        True,
        ["sm_120"],
        "written",
    )
    assert judge(tmp_path, ["12.0"], no_tool)[1]["stamp"] == "hit"


@pytest.mark.build
def test_prebuilt_check_mode_and_failed_readings_write_no_stamp(extension_builds, tmp_path):
    wheel = write_wheel(tmp_path / WHEEL_NAME, extension_builds["120"], extension_builds["host"])
    rc, res = judge(tmp_path, ["12.0"], ensure_cuobjdump(), check=True)
    assert rc == 0 and res["ok"] is True and res["stamp"] == "would_write" and res["changed"] is True
    assert not Path(f"{wheel}.archs.json").exists()
    # A cuobjdump that cannot read the binary: the reason is in the verdict, nothing is stamped.
    failing = tmp_path / "cuobjdump"
    failing.write_text("#!/bin/sh\necho 'cuobjdump fatal   : unsupported file' >&2\nexit 1\n")
    failing.chmod(0o755)
    rc, res = judge(tmp_path, ["12.0"], str(failing))
    assert rc == 0 and res["ok"] is False and res["stamp"] == "not_written"
    assert (
        "(cuobjdump failed: cuobjdump could not read" in res["verdict"]
        and "unsupported file" in res["verdict"]
    )
    assert not Path(f"{wheel}.archs.json").exists()


def fake_cuobjdump(path: Path, listing: str = "sm120a.o.txt") -> str:
    """A cuobjdump that prints a captured listing (tests/fixtures/cuobjdump) for any binary."""
    path.write_text(f"#!/bin/sh\ncat {ROOT / 'tests' / 'fixtures' / 'cuobjdump' / listing}\n")
    path.chmod(0o755)
    return str(path)


def folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_prebuilt_check_mode_predicts_the_real_run_s_changed_and_writes_nothing(tmp_path):
    """Check mode's changed is the real run's (stamp written or not, by the stamp's key), on disk nothing."""
    cuobjdump = fake_cuobjdump(tmp_path / "cuobjdump")
    folder = tmp_path / "prebuilt"
    folder.mkdir()
    wheel = folder / WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("deep_ep/_C.cpython-311-x86_64-linux-gnu.so", b"stand-in binary")
    stamp = Path(f"{wheel}.archs.json")

    def check_then_real(archs: list[str], expected: bool) -> dict:
        before = folder_state(folder)
        rc, predicted = judge(folder, archs, cuobjdump, check=True)
        assert rc == 0, predicted
        assert folder_state(folder) == before, "check mode wrote into the folder"
        rc, real = judge(folder, archs, cuobjdump)
        assert rc == 0, real
        assert predicted["changed"] == real["changed"] == expected, (predicted, real)
        assert (predicted["ok"], predicted["verdict"]) == (real["ok"], real["verdict"])
        return predicted

    assert check_then_real(["12.0"], True)["stamp"] == "would_write"  # no stamp yet
    assert stamp.exists()
    assert check_then_real(["12.0"], False)["stamp"] == "hit"  # the rerun: answered from the stamp
    assert check_then_real(["12.0a"], True)["stamp"] == "would_write"  # another arch list, another key
    stamp.write_text("{}")  # a stamp of no key is read again and rewritten
    check_then_real(["12.0a"], True)
    # A reading that fails writes no stamp in a real run: check mode predicts no change either.
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'cuobjdump fatal   : unsupported file' >&2\nexit 1\n")
    failing.chmod(0o755)
    stamp.unlink()
    rc, predicted = judge(folder, ["12.0"], str(failing), check=True)
    rc2, real = judge(folder, ["12.0"], str(failing))
    assert rc == rc2 == 0 and predicted["changed"] is real["changed"] is False
    assert predicted["stamp"] == real["stamp"] == "not_written" and not stamp.exists()


def test_prebuilt_no_wheel_one_wheel_or_stale_ones(tmp_path):
    rc, res = judge(tmp_path / "absent", ["12.0"], "/bin/true")
    assert rc == 0 and res["wheels"] == [] and res["stamp"] == "none" and res["ok"] is False
    rc, res = judge(tmp_path / "absent", ["12.0"], "/bin/true", require_wheel=True)
    assert rc != 0 and res["msg"] == (
        f"expected one wheel for {REQUIREMENT} in {tmp_path / 'absent'}, found []: remove the stale ones"
    )
    (tmp_path / WHEEL_NAME).write_text("not a zip")
    rc, res = judge(tmp_path, ["12.0"], "/bin/true")
    assert rc == 0 and res["ok"] is False and "is not a readable wheel" in res["verdict"]
    assert not (tmp_path / f"{WHEEL_NAME}.archs.json").exists()
    (tmp_path / "sgl_deep_ep-0.1.2.post1-cp312-cp312-linux_x86_64.whl").write_text("")
    rc, res = judge(tmp_path, ["12.0"], "/bin/true")
    assert rc != 0 and "remove the stale ones" in res["msg"] and len(res["wheels"]) == 2


@pytest.mark.build
def test_prebuilt_watch_names_folder_wheel_and_stamp_and_a_change_there_changes_the_answer(
    extension_builds, tmp_path
):
    """The probe cache's contract (plugins/module_utils/watch.py): an answer from the stamp names the folder,
    the wheel and the stamp; a stale wheel beside it, an edited stamp or a re-downloaded wheel changes a
    watched path's state and the real rerun's answer."""
    cuobjdump = ensure_cuobjdump()
    folder = tmp_path / "prebuilt"
    folder.mkdir()
    wheel = write_wheel(folder / WHEEL_NAME, extension_builds["120"], extension_builds["host"])
    stamp = Path(f"{wheel}.archs.json")
    rc, first = judge(folder, ["12.0"], cuobjdump)
    assert rc == 0 and first["stamp"] == "written" and first["watch"] == [], first
    rc, hit = judge(folder, ["12.0"], cuobjdump)
    assert rc == 0 and hit["stamp"] == "hit" and not hit["changed"] and hit["ok"], hit
    assert hit["watch"] == sorted([str(folder), str(wheel), str(stamp)])

    def rerun_after(change) -> dict:
        before = moduletools.watched_states(hit["watch"])
        change()
        assert moduletools.changed_paths(before), "no watched path saw the change"
        return judge(folder, ["12.0"], cuobjdump)[1]

    stale = folder / "sgl_deep_ep-0.1.2.post1-cp312-cp312-linux_x86_64.whl"
    refused = rerun_after(lambda: stale.write_text(""))
    assert refused.get("failed") and "remove the stale ones" in refused["msg"]
    stale.unlink()
    hit = judge(folder, ["12.0"], cuobjdump)[1]
    assert hit["stamp"] == "hit" and hit["watch"]

    saved = stamp.read_text()
    reread = rerun_after(lambda: stamp.write_text(saved.replace('"key": "', '"key": "0')))
    assert reread["stamp"] == "written" and reread["changed"], reread
    hit = judge(folder, ["12.0"], cuobjdump)[1]

    redownloaded = rerun_after(lambda: write_wheel(wheel, extension_builds["90"], extension_builds["host"]))
    assert redownloaded["sha256"] != hit["sha256"] and not redownloaded["ok"], redownloaded
