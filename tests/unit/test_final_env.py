"""final_env_check: the env the server really imports, on a real venv holding small real wheels built here.

The wheels are ours and tiny, their binaries real: kernels compiled with this machine's nvcc (sm_90 only,
sm_120 only, both) and read with a real cuobjdump. They mimic the layouts of the real packages (read from the
wheels; see docs/final-env.md): `deep_ep` 1.2.1 as a DeepEP v1.x source build installs it
(package deep_ep + top-level extension deep_ep_cpp), `sgl-deep-ep` as SGLang's packaged DeepEP (deep_ep/_C.so,
sm_90 only like the real one's sm_90/sm_100/sm_103), `sglang-kernel` (sgl_kernel/sm90 and sm100 common_ops,
FlashAttention 3 in flash_ops), `flashinfer-python` (no binaries: JIT) and a torch with libtorch_cuda.so.
The real 11 GB SGLang install is exercised by hand (docs/final-env.md), not in CI.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import moduletools
import pytest
from test_cuda_binary_archs import KERNEL, ensure_cuobjdump

from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.final_env_check.final_env import (
    requested_features,
    setting_values,
    stamp_difference,
    wheel_distribution,
)

ROOT = Path(__file__).resolve().parents[2]

SO = "cpython-311-x86_64-linux-gnu.so"


def build_wheel(out: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real wheel (zip, METADATA, WHEEL, RECORD with sha256) holding the given files."""
    dist_info = f"{name}-{version}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: epforge-tests\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
    )
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def kit(tmp_path_factory, cuda13_nvcc):
    """Kernels compiled here and the wheels that carry them."""
    nvcc = cuda13_nvcc
    out = tmp_path_factory.mktemp("final-env")
    (out / "k.cu").write_text(KERNEL)
    libs = {}
    for name, codes in {"sm90": ["90"], "sm120": ["120"], "sm90_sm120": ["90", "120"]}.items():
        gencode = [f for c in codes for f in ("-gencode", f"arch=compute_{c},code=sm_{c}")]
        subprocess.run(
            [
                nvcc,
                "-shared",
                "-Xcompiler",
                "-fPIC",
                *gencode,
                str(out / "k.cu"),
                "-o",
                str(out / f"{name}.so"),
            ],
            check=True,
            timeout=300,
            capture_output=True,
        )
        libs[name] = (out / f"{name}.so").read_bytes()
    wheels = out / "wheels"
    wheels.mkdir()
    kit = {
        "source_deep_ep": build_wheel(
            wheels,
            "deep_ep",
            "1.2.1+9af0e0d",
            {"deep_ep/__init__.py": b"BUILD = 'source v1.2.1'\n", f"deep_ep_cpp.{SO}": libs["sm120"]},
        ),
        "sgl_deep_ep": build_wheel(
            wheels,
            "sgl_deep_ep",
            "0.1.2.post1",
            {"deep_ep/__init__.py": b"BUILD = 'sgl-deep-ep'\n", f"deep_ep/_C.{SO}": libs["sm90"]},
        ),
        "sglang_kernel": build_wheel(
            wheels,
            "sglang_kernel",
            "0.4.10",
            {
                "sgl_kernel/__init__.py": b"",
                "sgl_kernel/sm90/common_ops.abi3.so": libs["sm90"],
                "sgl_kernel/sm100/common_ops.abi3.so": libs["sm120"],
                "sgl_kernel/flash_ops.abi3.so": libs["sm90"],
            },
        ),
        "flashinfer": build_wheel(wheels, "flashinfer_python", "0.7.2", {"flashinfer/__init__.py": b""}),
        "torch": build_wheel(
            wheels,
            "torch",
            "2.14.1",
            {
                "torch/__init__.py": b"",
                "torch/lib/libtorch_cuda.so": libs["sm90_sm120"],
                "torch/lib/libtorch_cpu.so": b"not read: only libtorch_cuda.so holds the CUDA kernels\n",
            },
        ),
    }
    kit["cuobjdump"] = ensure_cuobjdump()
    return kit


def make_env(tmp_path: Path, kit: dict, *names: str) -> Path:
    """A venv with the named wheels installed in that order (pip, no index, no deps)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    for name in names:
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                str(kit[name]),
            ],
            check=True,
            timeout=300,
        )
    return python


def run(tmp_path: Path, kit: dict, python: Path, check: bool = False, **args) -> dict:
    base = {
        "python": str(python),
        "archs": ["12.0"],
        "cuobjdump": kit["cuobjdump"],
        "cache_path": str(tmp_path / "listings.json"),
        "log_path": str(tmp_path / "final-env.log"),
    }
    return moduletools.run_module_in(
        tmp_path, "final_env_check", {**base, **args}, check=check, diff=True, timeout=600
    )


def imported_build(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import deep_ep; print(deep_ep.BUILD)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


FULL = ("torch", "flashinfer", "source_deep_ep", "sglang_kernel", "sgl_deep_ep")  # a full SGLang install last


@pytest.mark.build
def test_sgl_deep_ep_installed_last_wins_and_the_verified_wheel_is_restored(tmp_path, kit):
    python = make_env(tmp_path, kit, *FULL)
    assert imported_build(python) == "sgl-deep-ep"  # pip: the package installed last owns deep_ep
    settings = {"moe_a2a_backend": "deepep", "deepep_mode": "low_latency", "api_key": "not-needed"}

    # check mode says what it would do and changes nothing
    dry = run(tmp_path, kit, python, check=True, settings=settings, deepep_wheel=str(kit["source_deep_ep"]))
    assert dry["_rc"] == 0 and dry["changed"] and dry["deep_ep"]["state"] == "would_repair", dry
    assert dry["deep_ep"]["owner"] == "sgl-deep-ep" and "uninstall -y sgl-deep-ep" in dry["actions"][0]
    assert imported_build(python) == "sgl-deep-ep"

    fixed = run(tmp_path, kit, python, settings=settings, deepep_wheel=str(kit["source_deep_ep"]))
    assert fixed["_rc"] == 0 and fixed["changed"], fixed
    assert fixed["deep_ep"]["state"] == "repaired" and fixed["deep_ep"]["replaced"] == "sgl-deep-ep"
    assert fixed["deep_ep"]["claimants"] == ["deep-ep"]
    assert imported_build(python) == "source v1.2.1"
    deep_ep = fixed["components"]["deep_ep"]
    assert (
        deep_ep["distribution"] == "deep_ep" and deep_ep["sass"] == ["sm_120"] and deep_ep["status"] == "ok"
    )
    assert [Path(b).name for b in deep_ep["binaries"]] == [f"deep_ep_cpp.{SO}"]
    features = {f["feature"]: f for f in fixed["features"]}
    assert features["moe_a2a_backend deepep"]["requested"] and features["moe_a2a_backend deepep"]["kernels"]
    # fa3 is not requested: recorded as lacking kernels for 12.0, not a failure
    assert not features["attention_backend fa3"]["requested"]
    assert features["attention_backend fa3"]["missing"] == ["12.0"]
    assert fixed["components"]["sgl_kernel"]["covered"]["12.0"].startswith("sass sm_120 (common_ops")
    assert fixed["components"]["flashinfer"]["status"] == "jit"
    assert fixed["components"]["torch"]["sass"] == ["sm_90", "sm_120"]

    again = run(tmp_path, kit, python, settings=settings, deepep_wheel=str(kit["source_deep_ep"]))
    assert again["_rc"] == 0 and not again["changed"] and again["deep_ep"]["state"] == "verified", again
    assert again["components"] == fixed["components"]


@pytest.mark.build
def test_without_repair_the_wrong_deep_ep_fails_naming_both(tmp_path, kit):
    python = make_env(tmp_path, kit, *FULL)
    unknown = run(tmp_path, kit, python, components=["deep_ep", "vllm"])
    assert unknown["_rc"] != 0 and "unknown components ['vllm']" in unknown["msg"]
    result = run(
        tmp_path,
        kit,
        python,
        settings={"moe_a2a_backend": "deepep"},
        deepep_wheel=str(kit["source_deep_ep"]),
        repair=False,
    )
    assert result["_rc"] != 0 and "owned by sgl-deep-ep (0.1.2.post1)" in result["msg"]
    assert "deep-ep==1.2.1+9af0e0d" in result["msg"]
    assert imported_build(python) == "sgl-deep-ep"  # nothing changed


@pytest.mark.build
def test_requested_features_without_kernels_fail_on_a_serving_env_only(tmp_path, kit):
    # SGLang's own DeepEP (no source build verified by epforge): DeepEP has no sm_120 kernels; fa3 neither
    python = make_env(tmp_path, kit, "torch", "flashinfer", "sglang_kernel", "sgl_deep_ep")
    settings = {"moe_a2a_backend": "deepep", "extra_args": ["--attention-backend", "fa3"]}
    failed = run(tmp_path, kit, python, settings=settings)
    assert failed["_rc"] != 0 and not failed["ok"], failed
    assert "attention_backend fa3 needs sgl_kernel.flash_ops (sglang_kernel 0.4.10" in failed["msg"]
    assert "moe_a2a_backend deepep needs deep_ep (sgl_deep_ep 0.1.2.post1" in failed["msg"]
    assert "SASS sm_90), which lacks 12.0" in failed["msg"]
    assert failed["deep_ep"]["state"] == "not_verified_by_epforge"
    # a parser-only env (a CPU build host) records it and goes on
    recorded = run(tmp_path, kit, python, settings=settings, serving=False)
    assert recorded["_rc"] == 0 and recorded["ok"] is False and not recorded["changed"]
    # on an H100 (9.0) the same settings have kernels
    hopper = run(tmp_path, kit, python, settings=settings, archs=["9.0"])
    assert hopper["_rc"] == 0 and hopper["ok"], hopper


def test_a_cuobjdump_that_cannot_read_fails_with_command_rc_and_tail(tmp_path, kit):
    """The listing goes through plugins/module_utils/cuobjdump.py: its failure fields reach fail_json."""
    python = make_env(tmp_path, kit, "torch", "flashinfer")
    broken = tmp_path / "cuobjdump"
    broken.write_text("#!/bin/sh\necho 'cuobjdump fatal   : Could not open input file' >&2\nexit 255\n")
    broken.chmod(0o755)
    failed = run(tmp_path, kit, python, cuobjdump=str(broken))
    assert failed["_rc"] != 0 and failed["msg"].startswith("cuobjdump could not read "), failed
    assert failed["cmd"][:3] == [str(broken), "-lelf", "-lptx"] and failed["rc"] == 255
    assert "Could not open input file" in failed["log_tail"]


def test_bad_input_fails_before_anything(tmp_path):
    result = moduletools.run_module_in(
        tmp_path,
        "final_env_check",
        {
            "python": sys.executable,
            "archs": ["120"],
            "cuobjdump": "/bin/true",
            "log_path": str(tmp_path / "l"),
        },
    )
    assert result["_rc"] != 0 and "archs must be GPU archs" in result["msg"]
    result = moduletools.run_module_in(
        tmp_path,
        "final_env_check",
        {
            "python": sys.executable,
            "archs": ["12.0"],
            "cuobjdump": "/bin/true",
            "log_path": str(tmp_path / "l"),
            "deepep_wheel": str(tmp_path / "deep_ep.tar.gz"),
        },
    )
    assert result["_rc"] != 0 and "is not a wheel file name" in result["msg"]


def test_settings_and_features():
    assert setting_values(
        {"extra_args": ["--attention-backend=fa3", "--decode-attention-backend", "triton"]},
        "attention_backend",
    ) == ["fa3", "triton"]
    assert setting_values({"attention_backend": "fa3"}, "attention_backend") == ["fa3"]
    assert wheel_distribution("/w/sgl_deep_ep-0.1.2.post1-cp310-abi3-linux_x86_64.whl") == (
        "sgl-deep-ep",
        "0.1.2.post1",
    )
    names = [f["feature"] for f in requested_features({"moe_a2a_backend": "deepep"}, serving=False)]
    assert names == ["moe_a2a_backend deepep"]
    assert len(requested_features({}, serving=True)) == 3  # torch, sgl_kernel common ops, flashinfer


def test_the_stamp_key_is_the_digest_of_the_options_in_either_layout():
    """A stamp an older epforge wrote (key: sha256 of sorted JSON with spaces) still answers."""
    options = {"archs": ["10.0"], "serving": True, "settings": {}}
    files = {"/env/RECORD": [1, 2, 3, 4]}
    spaced = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()
    for key in (digest(options), spaced):
        assert stamp_difference({"key": key, "files": files, "result": {}}, options, files) == ""
    other = {"key": digest({**options, "serving": False}), "files": files, "result": {}}
    assert stamp_difference(other, options, files) == "inputs changed"
    assert stamp_difference({"key": digest(options), "files": files}, options, files) == "no stamp"
    moved = {"/env/RECORD": [1, 2, 3, 5]}
    stamp = {"key": digest(options), "files": files, "result": {}}
    assert stamp_difference(stamp, options, moved) == "env files changed: /env/RECORD"


@pytest.mark.build
def test_role_deepep_puts_its_wheel_back_before_verifying(tmp_path, kit):
    """What roles/deepep/tasks/verify.yml runs first: only deep_ep, any env (serving false)."""
    python = make_env(tmp_path, kit, *FULL)
    args = {"components": ["deep_ep"], "serving": False, "deepep_wheel": str(kit["source_deep_ep"])}
    fixed = run(tmp_path, kit, python, **args)
    assert fixed["_rc"] == 0 and fixed["changed"] and set(fixed["components"]) == {"deep_ep"}, fixed
    assert [f["feature"] for f in fixed["features"]] == ["moe_a2a_backend deepep"]
    assert imported_build(python) == "source v1.2.1"
    assert not run(tmp_path, kit, python, **args)["changed"]
