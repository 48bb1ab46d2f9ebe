"""Role cuda_toolkit and its modules (cuda_toolkit_pypi, cuda_toolkit_verify), on real files and tools.

Fast tests: parsers on captured nvcc output, wheel unpacking on real zip files, the modules' refusals, and
the role's refusals of bad input (cu12 stack with method pypi, unknown method, CUDA_HOME of another version)
through ansible-playbook, each proving that nothing was created.
@pytest.mark.build tests assemble a real CUDA 13.0 prefix from the stack's wheels (about 10 s), compile and
link with it, and run the role twice: the second run must be changed=0 with one module call.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import cuda_toolkit_pypi
import moduletools
import pytest
import yaml

from ansible_collections.epforge.ep.plugins.module_utils.arch import nvcc_missing_archs
from ansible_collections.epforge.ep.plugins.module_utils.cuda import (
    driver_api_symbols,
    parse_gpu_list,
    parse_nvcc_release,
    stub_source,
    unversioned_links,
)
from ansible_collections.epforge.ep.plugins.module_utils.digests import stamp_of

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "cuobjdump"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
# Role tasks that run on the controller only (no module call on the host).
CONTROLLER_ACTIONS = {
    "ansible.builtin.set_fact",
    "ansible.builtin.assert",
    "ansible.builtin.include_tasks",
    "ansible.builtin.include_role",
    "ansible.builtin.import_tasks",
    "ansible.builtin.debug",
    "ansible.builtin.fail",
    "ansible.builtin.validate_argument_spec",
    "ansible.builtin.include_vars",
    "set_fact",
    "assert",
    "include_tasks",
    "debug",
    "fail",
    "validate_argument_spec",
    "include_vars",
}


def run_module(module: str, args: dict, check: bool = False, diff: bool = False) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, diff=diff, timeout=900)


def run_role(tmp_path: Path, role_vars: dict, *, check: bool = False, name: str = "run") -> dict:
    """Run role cuda_toolkit on localhost with a JSON stdout callback; return a summary of the run."""
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "cuda_toolkit test",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "epforge_facts_dir": str(tmp_path / "facts"),
                        "epforge_state_dir": str(tmp_path / "state"),
                        "epforge_log_dir": str(tmp_path / "log"),
                        **role_vars,
                    },
                    "roles": ["cuda_toolkit"],
                    "post_tasks": [
                        {
                            "name": "Expose the outputs",
                            "ansible.builtin.debug": {
                                "msg": {
                                    "home": "{{ cuda_toolkit_home }}",
                                    "nvcc": "{{ cuda_toolkit_nvcc }}",
                                    "cuobjdump": "{{ cuda_toolkit_cuobjdump }}",
                                    "steps": "{{ epforge_steps }}",
                                }
                            },
                        }
                    ],
                }
            ]
        )
    )
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        }
                    }
                }
            }
        )
    )
    argv = [str(PLAYBOOK_BIN), "-i", str(inventory), str(playbook)] + (["--check", "--diff"] if check else [])
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    out = json.loads(proc.stdout[proc.stdout.index("{") :])
    role_calls, changed, failures, outputs = [], [], [], {}
    for play in out["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get("localhost", {})
            if task["task"]["name"] == "Expose the outputs":
                outputs = res.get("msg", {})
            action = res.get("action", "").removeprefix("epforge.ep.")  # the module, by its short name
            if task["task"]["name"].startswith("cuda_toolkit : ") or "cuda_toolkit" in task["task"].get(
                "path", ""
            ):
                if not res.get("skipped") and action not in CONTROLLER_ACTIONS:
                    role_calls.append(action)
            if res.get("changed"):
                changed.append(task["task"]["name"])
            if res.get("failed"):
                failures.append(res.get("msg", ""))
    return {
        "rc": proc.returncode,
        "seconds": seconds,
        "role_calls": role_calls,
        "changed": changed,
        "failures": failures,
        "outputs": outputs,
        "raw": out,
    }


def assert_no_op_path(run: dict) -> None:
    """The no-op path: one assert, the probe, one skipped include (the install and the verify behind it)."""
    role_tasks = [
        t["task"]["name"]
        for p in run["raw"]["plays"]
        for t in p["tasks"]
        if t["task"]["name"].startswith("cuda_toolkit : ")
    ]
    assert sum("Install, verify and record" in name for name in role_tasks) == 1
    assert not any("Verify nvcc" in name or "Install with" in name for name in role_tasks), role_tasks
    assert sum("Refuse" in name for name in role_tasks) == 1


# ------------------------------------------------------------------------------------------------ parsers


def test_parse_nvcc_outputs_from_fixtures():
    assert parse_nvcc_release((FIX / "nvcc-13.0-version.txt").read_text()) == ("13.0", "13.0.88")
    assert parse_nvcc_release((FIX / "cuobjdump-13.2-version.txt").read_text()) == ("13.2", "13.2.51")
    assert parse_nvcc_release("nvcc: command not found") is None
    code = parse_gpu_list((FIX / "nvcc-13.0-list-gpu-code.txt").read_text())
    arch = parse_gpu_list((FIX / "nvcc-13.0-list-gpu-arch.txt").read_text())
    assert "sm_120" in code and "compute_120" in arch and "sm_70" not in code
    assert nvcc_missing_archs(code, arch, ["12.0", "sm_120a", "9.0"]) == []
    assert nvcc_missing_archs(code, arch, ["7.0", "12.0"]) == ["7.0"]
    assert nvcc_missing_archs(code, [], ["12.0"]) == ["12.0"]


def test_small_helpers():
    assert unversioned_links(["libcudart.so.13", "libnvvm.so.4", "libculibos.a", "libx.so", "libx.so.1"]) == {
        "libcudart.so": "libcudart.so.13",
        "libnvvm.so": "libnvvm.so.4",
    }
    a = stamp_of({"packages": ["a==1"], "prefix": "/p"})
    assert a == stamp_of({"prefix": "/p", "packages": ["a==1"]})
    assert a["digest"] != stamp_of({"packages": ["a==2"], "prefix": "/p"})["digest"]
    wheel = "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl"
    assert cuda_toolkit_pypi.wheel_name_version(wheel) == ("nvidia-cuda-nvcc", "13.0.88")
    assert cuda_toolkit_pypi.pinned("nvidia-cuda-nvcc==13.0.88") == ("nvidia-cuda-nvcc", "13.0.88")
    assert cuda_toolkit_pypi.pinned("nvidia-cuda-nvcc>=13") is None


def test_driver_api_symbols_and_stub_source():
    text = (
        "CUresult cuInit(unsigned int Flags);\nCUresult  cuMemAlloc_v2(CUdeviceptr *p, size_t n);\n"
        "typedef CUresult (*PFN_cuInit)(unsigned int);\nint cudaNotDriver(void);\n"
    )
    assert driver_api_symbols(text) == ["cuInit", "cuMemAlloc_v2"]
    src = stub_source(["cuInit"])
    assert "int cuInit(void) { return 34; }" in src


def make_wheel(path: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, data)
    return path


def test_extract_wheel_keeps_toolkit_tree_modes_and_dist_info(tmp_path):
    wheel = make_wheel(
        tmp_path / "nvidia_x-13.0.1-py3-none-any.whl",
        {
            "nvidia/cu13/bin/tool": (b"#!/bin/sh\n", 0o744),
            "nvidia/cu13/include/x.h": (b"/* x */", 0o644),
            "nvidia/cu13/.metadata/provenance.txt": (b"build farm", 0o644),
            "nvidia/__init__.py": (b"", 0o644),
            "nvidia_x-13.0.1.dist-info/METADATA": (b"Name: nvidia-x", 0o644),
        },
    )
    dest = tmp_path / "home"
    dest.mkdir()
    count = cuda_toolkit_pypi.extract_wheel(str(wheel), "nvidia/cu13", str(dest))
    assert count == 3
    assert (dest / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert (dest / "include" / "x.h").stat().st_mode & 0o777 == 0o644
    assert (dest / "dist-info" / "nvidia_x-13.0.1.dist-info" / "METADATA").exists()
    assert not (dest / ".metadata").exists() and not (dest / "__init__.py").exists()


def test_extract_wheel_refuses_paths_outside_the_prefix(tmp_path):
    wheel = make_wheel(tmp_path / "evil-1.0-py3-none-any.whl", {"nvidia/cu13/../../../escape": (b"x", 0o644)})
    dest = tmp_path / "home"
    dest.mkdir()
    with pytest.raises(cuda_toolkit_pypi.InstallError, match="unsafe path"):
        cuda_toolkit_pypi.extract_wheel(str(wheel), "nvidia/cu13", str(dest))
    assert not (tmp_path / "escape").exists()


# ------------------------------------------------------------------------------------------------ modules


def pypi_args(tmp_path: Path, **over) -> dict:
    return {
        "prefix": str(tmp_path / "opt" / "cuda-13.0"),
        "cuda_version": "13.0",
        "packages": CU130["cuda"]["pypi_packages"],
        "wheel_dir": str(tmp_path / "wheels"),
        "log_path": str(tmp_path / "log" / "cuda_toolkit.log"),
        **over,
    }


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"cuda_version": "12.8", "prefix": "/tmp/never/cuda-12.8"}, "cannot install CUDA 12.8"),
        ({"packages": ["nvidia-cuda-nvcc>=13"]}, "not pinned: nvidia-cuda-nvcc>=13"),
        ({"packages": ["nvidia-cuda-runtime==13.0.96"]}, "lack nvidia-cuda-nvcc"),
        ({"prefix": "/opt"}, "too close to /"),
    ],
)
def test_pypi_module_refuses_bad_input_before_any_change(tmp_path, over, needle):
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path, **over))
    assert rc != 0 and needle in res["msg"]
    assert not (tmp_path / "wheels").exists() and not (tmp_path / "opt").exists()


def test_pypi_module_never_overwrites_a_foreign_or_other_version_prefix(tmp_path):
    foreign = tmp_path / "opt" / "cuda-13.0"
    foreign.mkdir(parents=True)
    (foreign / "README").write_text("someone else's toolkit")
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path))
    assert rc != 0 and "was not assembled by epforge" in res["msg"]
    assert (foreign / "README").read_text() == "someone else's toolkit"
    other = tmp_path / "opt" / "cuda-x"
    other.mkdir()
    (other / ".epforge-cuda-toolkit.json").write_text(
        json.dumps({"inputs": {"cuda_version": "13.2"}, "digest": "0"})
    )
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path, prefix=str(other)))
    assert rc != 0 and "holds CUDA 13.2; it is never replaced by CUDA 13.0" in res["msg"]


def test_pypi_module_check_mode_changes_nothing(tmp_path):
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path), check=True, diff=True)
    assert rc == 0 and res["changed"] is True
    assert '"cuda_version": "13.0"' in res["diff"]["after"]
    assert not (tmp_path / "opt").exists() and not (tmp_path / "wheels").exists()


def fake_nvcc(home: Path, release: str, codes: str) -> Path:
    """A CUDA_HOME whose bin/nvcc prints a real-format version and arch list (captured 13.0 text, edited)."""
    (home / "bin").mkdir(parents=True)
    major_minor = ".".join(release.split(".")[:2])
    version = (
        (FIX / "nvcc-13.0-version.txt")
        .read_text()
        .replace("13.0.88", release)
        .replace("release 13.0", f"release {major_minor}")
        .replace("cuda_13.0", f"cuda_{major_minor}")
    )
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        f"  --version) cat <<'EOF'\n{version}EOF\n;;\n"
        f"  --list-gpu-code) printf '%s\\n' {codes.replace('compute_', 'sm_')} ;;\n"
        f"  --list-gpu-arch) printf '%s\\n' {codes.replace('sm_', 'compute_')} ;;\n"
        "  *) exit 1 ;;\nesac\n"
    )
    nvcc.chmod(0o755)
    return nvcc


def test_verify_module_refuses_another_cuda_version_and_missing_archs(tmp_path):
    home = tmp_path / "cuda-12.8"
    fake_nvcc(home, "12.8.93", "sm_90 sm_100 sm_120")
    fact = tmp_path / "facts" / "epforge_cuda_toolkit.fact"
    args = {"home": str(home), "cuda_version": "13.0", "archs": ["12.0"], "facts_dir": str(fact.parent)}
    rc, res = run_module("cuda_toolkit_verify", args)
    assert rc != 0
    assert "is CUDA 12.8 (12.8.93) but the stack needs CUDA 13.0" in res["msg"]
    assert not fact.exists()
    rc, res = run_module("cuda_toolkit_verify", {**args, "cuda_version": "12.8", "archs": ["12.1"]})
    assert rc != 0 and "cannot compile for 12.1" in res["msg"]
    # a probe reports and never fails or writes
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is False and len(res["problems"]) == 1
    assert not fact.exists()


def test_verify_module_records_once_then_probe_is_ok(tmp_path):
    home = tmp_path / "cuda-12.8"
    fake_nvcc(home, "12.8.93", "sm_90 sm_120")
    fact = tmp_path / "facts" / "epforge_cuda_toolkit.fact"
    args = {
        "home": str(home),
        "cuda_version": "12.8",
        "archs": ["12.0a"],
        "facts_dir": str(fact.parent),
        "method": "existing",
        "source": "test",
        "inputs": {"a": 1},
    }
    rc, res = run_module("cuda_toolkit_verify", args, check=True)
    assert rc == 0 and res["changed"] is True and not fact.exists()
    rc, res = run_module("cuda_toolkit_verify", args, diff=True)
    assert rc == 0 and res["changed"] is True and '"nvcc_release": "12.8.93"' in res["diff"]["after"]
    assert json.loads(fact.read_text())["version"] == "12.8"
    rc, res = run_module("cuda_toolkit_verify", args)
    assert rc == 0 and res["changed"] is False
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert res["ok"] is True
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False, "inputs": {"a": 2}})
    assert res["ok"] is False  # changed inputs: the role installs again


def verify_args(home: Path, fact: Path, release: str = "13.0") -> dict:
    return {
        "home": str(home),
        "cuda_version": release,
        "archs": ["12.0"],
        "facts_dir": str(fact.parent),
        "method": "existing",
        "source": "test",
    }


def test_verify_watch_on_a_real_toolkit_and_a_deleted_fact_reruns(cuda13_home, tmp_path):
    """The no-op answer on a real CUDA 13 home names what it depends on; deleting the fact changes a watched
    path's state and the rerun's answer (the probe is no longer ok)."""
    fact = tmp_path / "facts" / "epforge_cuda_toolkit.fact"
    args = verify_args(cuda13_home, fact)
    rc, res = run_module("cuda_toolkit_verify", args)
    assert rc == 0 and res["changed"] is True and res["watch"] == []  # it wrote the fact: nothing to reuse
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is True and res["changed"] is False
    watch = res["watch"]
    nvcc = cuda13_home / "bin" / "nvcc"
    claimed = {str(fact), str(cuda13_home), str(cuda13_home / "bin"), str(nvcc), os.path.realpath(nvcc)}
    claimed |= {
        str(cuda13_home / "include"),
        str(cuda13_home / "bin" / "cuobjdump"),
    }  # missing here, still watched
    assert claimed <= set(watch) and watch == sorted(set(watch)) and all(os.path.isabs(p) for p in watch)
    rc, res = run_module("cuda_toolkit_verify", args)  # enforce=true, nothing to write: the same list
    assert rc == 0 and res["changed"] is False and res["watch"] == watch

    before = moduletools.watched_states(watch)
    fact.unlink()
    assert moduletools.changed_paths(before) == [str(fact)]
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is False and res["watch"] == []


def test_verify_watch_sees_a_replaced_nvcc(tmp_path):
    """nvcc replaced by another release (an upgrade in place): its watched state changes and the probe's
    answer does too."""
    home = tmp_path / "cuda-13.0"
    fake_nvcc(home, "13.0.88", "sm_90 sm_120")
    fact = tmp_path / "facts" / "epforge_cuda_toolkit.fact"
    args = verify_args(home, fact)
    assert run_module("cuda_toolkit_verify", args)[1]["changed"] is True
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is True and str(home / "bin" / "nvcc") in res["watch"]
    before = moduletools.watched_states(res["watch"])
    upgrade = fake_nvcc(tmp_path / "upgrade", "13.0.96", "sm_90 sm_120")
    os.replace(upgrade, home / "bin" / "nvcc")
    assert (
        moduletools.watched_states(res["watch"])[str(home / "bin" / "nvcc")]
        != before[str(home / "bin" / "nvcc")]
    )
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is False and res["nvcc_release"] == "13.0.96" and res["watch"] == []


def test_verify_watch_sees_a_retargeted_home_link(tmp_path):
    """A CUDA_HOME reached through a symlink (/usr/local/cuda -> cuda-13.0): retargeting the link to another
    toolkit changes a watched path and the answer."""
    fake_nvcc(tmp_path / "cuda-13.0", "13.0.88", "sm_90 sm_120")
    fake_nvcc(tmp_path / "cuda-12.8", "12.8.93", "sm_90 sm_120")
    link = tmp_path / "cuda"
    link.symlink_to("cuda-13.0")
    fact = tmp_path / "facts" / "epforge_cuda_toolkit.fact"
    args = verify_args(link, fact)
    run_module("cuda_toolkit_verify", args)
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is True
    assert {str(link), str(tmp_path / "cuda-13.0"), str(tmp_path / "cuda-13.0" / "bin" / "nvcc")} <= set(
        res["watch"]
    )
    before = moduletools.watched_states(res["watch"])
    link.unlink()
    link.symlink_to("cuda-12.8")
    assert str(link) in moduletools.changed_paths(before)
    rc, res = run_module("cuda_toolkit_verify", {**args, "enforce": False})
    assert rc == 0 and res["ok"] is False and "is CUDA 12.8" in res["problems"][0]


# ------------------------------------------------------------------------------------ role: bad input


def test_role_refuses_pypi_for_cuda_12(tmp_path):
    run = run_role(
        tmp_path,
        {
            "epforge_stack": "cu128",
            "cuda_toolkit_method": "pypi",
            "cuda_toolkit_prefix": str(tmp_path / "opt" / "cuda-12.8"),
        },
    )
    assert run["rc"] != 0
    assert any("cannot install CUDA 12.8" in msg and "no nvcc" in msg for msg in run["failures"])
    assert run["role_calls"] == []  # refused by an assert on the controller: nothing ran on the host
    assert not (tmp_path / "opt").exists() and not (tmp_path / "facts").exists()


def test_role_refuses_unknown_method(tmp_path):
    run = run_role(tmp_path, {"cuda_toolkit_method": "conda"})
    assert run["rc"] != 0
    assert any("conda" in msg for msg in run["failures"])
    assert run["role_calls"] == []
    assert not (tmp_path / "facts").exists()


def test_role_refuses_in_one_assert_naming_every_rule_that_failed(tmp_path):
    """The refusals are one controller task: its message holds the sentence of each failed rule."""
    run = run_role(
        tmp_path,
        {
            "epforge_stack": "cu128",
            "cuda_toolkit_method": "pypi",
            "cuda_toolkit_pypi_packages": [],
            "cuda_toolkit_prefix": str(tmp_path / "opt" / "cuda-12.8"),
        },
    )
    assert run["rc"] != 0 and run["role_calls"] == []
    msg = next(m for m in run["failures"] if "cannot install CUDA 12.8" in m)
    assert "cuda_toolkit_pypi_packages is empty" in msg
    run = run_role(tmp_path, {"cuda_toolkit_method": "existing"}, name="nohome")
    assert run["rc"] != 0 and run["role_calls"] == []
    assert any(
        m == "cuda_toolkit_method existing needs cuda_toolkit_home (the CUDA_HOME to verify)."
        for m in run["failures"]
    )
    assert not (tmp_path / "opt").exists() and not (tmp_path / "facts").exists()


def test_role_refuses_existing_home_of_another_version(tmp_path):
    home = tmp_path / "cuda-12.8"
    fake_nvcc(home, "12.8.93", "sm_90 sm_100 sm_120")
    run = run_role(tmp_path, {"cuda_toolkit_method": "existing", "cuda_toolkit_home": str(home)})
    assert run["rc"] != 0
    assert any("is CUDA 12.8 (12.8.93) but the stack needs CUDA 13.0" in msg for msg in run["failures"])
    assert not (tmp_path / "facts").exists()
    recorded = [
        step
        for p in run["raw"]["plays"]
        for t in p["tasks"]
        if t["task"]["name"].endswith("Record the run-summary step cuda_toolkit")
        for host in t["hosts"].values()
        for step in host.get("ansible_facts", {}).get("epforge_steps", [])
    ]
    assert [s["status"] for s in recorded if s["step"] == "cuda_toolkit"] == ["failed"], recorded
    assert "is CUDA 12.8 (12.8.93)" in recorded[-1]["detail"]


def test_role_existing_verifies_in_place_and_reruns_with_one_call(tmp_path):
    home = tmp_path / "cuda-13.0"
    fake_nvcc(home, "13.0.88", "sm_90 sm_100 sm_120")
    role_vars = {"cuda_toolkit_method": "existing", "cuda_toolkit_home": str(home)}
    first = run_role(tmp_path, role_vars)
    assert first["rc"] == 0, first["failures"]
    assert first["outputs"]["home"] == str(home)
    assert first["outputs"]["cuobjdump"] == ""
    fact = json.loads((tmp_path / "facts" / "epforge_cuda_toolkit.fact").read_text())
    assert (fact["method"], fact["version"], fact["nvcc_release"]) == ("existing", "13.0", "13.0.88")
    second = run_role(tmp_path, role_vars)
    assert second["rc"] == 0 and second["changed"] == []
    assert second["role_calls"] == ["cuda_toolkit_verify"]
    assert_no_op_path(second)


# ------------------------------------------------------------------------------------ real install


@pytest.mark.build
def test_pypi_module_assembles_a_working_cuda_home(tmp_path):
    started = time.monotonic()
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path))
    install_s = time.monotonic() - started
    assert rc == 0, res
    assert res["changed"] is True and res["nvcc_release"] == "13.0.88" and res["stub_symbols"] > 400
    home = Path(res["home"])
    for rel in (
        "bin/nvcc",
        "bin/cuobjdump",
        "nvvm/bin/cicc",
        "include/cuda_runtime.h",
        "include/cccl/cub",
        "lib64/libcudart.so",
        "lib64/stubs/libcuda.so",
        "targets/x86_64-linux/include/cuda.h",
        "dist-info",
    ):
        assert (home / rel).exists(), rel
    # a second run is a no-op by its stamp
    started = time.monotonic()
    rc, again = run_module("cuda_toolkit_pypi", pypi_args(tmp_path))
    assert rc == 0 and again["changed"] is False
    print(f"pypi install {install_s:.1f} s, no-op rerun {time.monotonic() - started:.2f} s")

    # a stamp an older epforge wrote (sorted JSON with spaces) for the same inputs: no reinstall; rewritten
    # once in the current layout (check mode only says so)
    stamp_file = home / ".epforge-cuda-toolkit.json"
    current = json.loads(stamp_file.read_text())
    spaced = hashlib.sha256(json.dumps(current["inputs"], sort_keys=True).encode()).hexdigest()
    stamp_file.write_text(json.dumps({**current, "digest": spaced}))
    installed_at = (home / "bin" / "nvcc").stat().st_mtime_ns
    rc, dry = run_module("cuda_toolkit_pypi", pypi_args(tmp_path), check=True)
    assert rc == 0 and dry["changed"] is True and json.loads(stamp_file.read_text())["digest"] == spaced
    rc, rewritten = run_module("cuda_toolkit_pypi", pypi_args(tmp_path))
    assert rc == 0 and rewritten["changed"] is True and json.loads(stamp_file.read_text()) == current
    assert (home / "bin" / "nvcc").stat().st_mtime_ns == installed_at  # nothing installed again
    rc, again = run_module("cuda_toolkit_pypi", pypi_args(tmp_path))
    assert rc == 0 and again["changed"] is False

    # the prefix works as CUDA_HOME: compile for sm_120 and link an executable against the libcuda stub
    src = tmp_path / "drv.cu"
    src.write_text(
        "#include <cuda.h>\n#include <thrust/device_vector.h>\n"
        "__global__ void k(float *a) { a[threadIdx.x] = 1.f; }\n"
        "int main() { CUdevice d; CUcontext c; cuInit(0); cuDeviceGet(&d, 0);\n"
        "  cuCtxCreate(&c, nullptr, 0, d); return 0; }\n"
    )
    exe = tmp_path / "drv"
    subprocess.run(
        [
            str(home / "bin" / "nvcc"),
            "-gencode",
            "arch=compute_120,code=sm_120",
            str(src),
            "-o",
            str(exe),
            "-lcuda",
        ],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True, check=True).stdout
    assert "[libcuda.so.1]" in needed  # the stub's SONAME: the driver's library is loaded at run time
    rc, archs = run_module(
        "cuda_binary_archs", {"paths": [str(exe)], "required_archs": ["12.0"], "cuda_home": str(home)}
    )
    assert rc == 0 and archs["sass_archs"] == ["sm_120"]
    assert archs["cuobjdump"] == str(home / "bin" / "cuobjdump")

    # changed inputs (no stub) rebuild the prefix in place, same version
    rc, res = run_module("cuda_toolkit_pypi", pypi_args(tmp_path, link_stub=False))
    assert rc == 0 and res["changed"] is True
    assert not (home / "lib64" / "stubs" / "libcuda.so").exists()
    assert not Path(str(home) + ".epforge-old").exists() and not Path(str(home) + ".epforge-new").exists()


@pytest.mark.build
def test_role_pypi_installs_then_reruns_with_one_module_call(tmp_path):
    role_vars = {"cuda_toolkit_prefix": str(tmp_path / "opt" / "cuda-13.0")}
    dry = run_role(tmp_path, role_vars, check=True, name="dry")
    assert dry["rc"] == 0, dry["failures"]
    assert not (tmp_path / "opt").exists() and not (tmp_path / "facts").exists()

    first = run_role(tmp_path, role_vars)
    assert first["rc"] == 0, first["failures"]
    assert "cuda_toolkit_pypi" in first["role_calls"]
    stats = first["outputs"]
    assert stats["home"] == role_vars["cuda_toolkit_prefix"]
    assert stats["nvcc"] == role_vars["cuda_toolkit_prefix"] + "/bin/nvcc"
    assert stats["cuobjdump"] == role_vars["cuda_toolkit_prefix"] + "/bin/cuobjdump"
    assert stats["steps"][-1]["status"] == "done" and "installed" in stats["steps"][-1]["detail"]
    fact = json.loads((tmp_path / "facts" / "epforge_cuda_toolkit.fact").read_text())
    assert fact["method"] == "pypi" and fact["archs"] == ["12.0"] and fact["nvcc_release"] == "13.0.88"
    assert fact["source"] == "pypi wheels from the configured pip index"

    second = run_role(tmp_path, role_vars)
    assert second["rc"] == 0 and second["changed"] == []
    assert second["role_calls"] == ["cuda_toolkit_verify"]
    assert_no_op_path(second)
    assert "unchanged" in second["outputs"]["steps"][-1]["detail"]
    print(
        f"role pypi: first run {first['seconds']:.1f} s, no-op rerun {second['seconds']:.1f} s "
        f"({len(second['role_calls'])} module call)"
    )

    # the same prefix under another CUDA version is refused before anything changes
    before = sorted(p.name for p in (tmp_path / "opt" / "cuda-13.0").iterdir())
    bad = run_role(
        tmp_path,
        {
            **role_vars,
            "cuda_toolkit_version": "13.2",
            "cuda_toolkit_pypi_packages": ["nvidia-cuda-nvcc==13.2.51"],
        },
        name="bad",
    )
    assert bad["rc"] != 0 and any("never replaced by CUDA 13.2" in m for m in bad["failures"])
    assert sorted(p.name for p in (tmp_path / "opt" / "cuda-13.0").iterdir()) == before
    shutil.rmtree(tmp_path / "opt")
