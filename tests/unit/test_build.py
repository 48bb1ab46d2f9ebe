"""Build evidence (plugins/module_utils/build.py) and the cuda_extension modules, on real files and processes.

The compiler is the only test double here: `fake_python` stands in for a venv interpreter whose `-m pip wheel`
writes a wheel (with a .so member) or fails/hangs on request, so the build module's temp dir, atomic publish,
timeout and kill handling are exercised for real in seconds. Real nvcc builds of a real extension run in the
Molecule scenario molecule/toolchain.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import moduletools
import pytest
from moduletools import module_argv

from ansible_collections.epforge.ep.plugins.module_utils import build as eb
from ansible_collections.epforge.ep.plugins.module_utils import content_hashes
from ansible_collections.epforge.ep.plugins.module_utils.arch import torch_arch_missing
from ansible_collections.epforge.ep.plugins.module_utils.cuda import parse_nvcc_release
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "build"


def run_module(module: str, args: dict, check: bool = False, timeout: int = 120) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, timeout=timeout)


# ------------------------------------------------------------------ keys

BASE_INPUTS = {
    "name": "canary",
    "source": {"kind": "dir", "revision": "sha256:abc", "subdir": ""},
    "archs": ["12.0"],
    "cuda": "13.0.88",
    "torch": "2.14.1",
    "python": "cp311",
    "machine": "x86_64",
    "build_env": {"DISABLE_AGGRESSIVE_PTX_INSTRS": "1"},
    "include_dirs": ["/usr/include"],
    "key_extra": {"nvshmem": "3.4.5"},
}


def test_key_ignores_dict_order():
    shuffled = dict(reversed(list(BASE_INPUTS.items())))
    assert eb.input_key(shuffled) == eb.input_key(BASE_INPUTS)
    assert len(eb.input_key(BASE_INPUTS)) == eb.KEY_LENGTH


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("source", {"kind": "dir", "revision": "sha256:abd", "subdir": ""}),
        ("archs", ["9.0", "12.0"]),
        ("cuda", "13.0.89"),
        ("torch", "2.14.0"),
        ("python", "cp312"),
        ("machine", "aarch64"),
        ("build_env", {"DISABLE_AGGRESSIVE_PTX_INSTRS": "0"}),
        ("include_dirs", ["/opt/include"]),
        ("key_extra", {"nvshmem": "3.4.6"}),
    ],
)
def test_every_input_changes_the_key(field, value):
    assert eb.input_key({**BASE_INPUTS, field: value}) != eb.input_key(BASE_INPUTS)


def test_torch_arch_coverage_against_a_real_torch_probe():
    probe = json.loads((FIXTURES / "torch-2.14.1-cu130-probe.json").read_text())
    assert torch_arch_missing(probe["archs"], ["12.0", "9.0"]) == []
    assert torch_arch_missing(probe["archs"], ["12.0a", "12.0f"]) == []  # the base sm_120 covers them
    assert torch_arch_missing(probe["archs"], ["10.3", "12.1", "12.0"]) == ["10.3", "12.1"]
    assert eb.cuda_major(probe["cuda"]) == 13


def test_parse_real_nvcc_version():
    parsed = parse_nvcc_release((FIXTURES / "nvcc-13.0-version.txt").read_text())
    assert parsed == ("13.0", "13.0.88")
    assert parse_nvcc_release("gcc (Debian 12.2.0-14) 12.2.0") is None


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("https://github.com/deepseek-ai/DeepEP.git", "git"),
        ("https://github.com/deepseek-ai/DeepEP", "git"),
        ("git@github.com:deepseek-ai/DeepEP.git", "git"),
        ("file:///srv/git/deepep", "git"),
        ("/srv/src/DeepEP.git", "git"),
        ("/srv/src/deepep-1.2.1.tar.gz", "archive"),
        ("/srv/src/deepep.zip", "archive"),
        ("/work/main/extensions/canary", "dir"),
    ],
)
def test_source_kind(source, kind):
    assert eb.source_kind(source) == kind


# ------------------------------------------------------------------ source trees


def make_tree(root: Path) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='fake-ext')\n")
    (root / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    return root


def test_tree_hash_tracks_content_mode_and_ignores_build_products(tmp_path):
    tree = make_tree(tmp_path / "a")
    first = content_hashes.tree_hash(str(tree))
    assert content_hashes.tree_hash(str(make_tree(tmp_path / "b"))) == first  # location does not matter
    for junk in ("build/temp/k.o", "__pycache__/x.pyc", "fake_ext.egg-info/PKG-INFO", "_C.so", ".git/HEAD"):
        path = tree / junk
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("junk")
    assert content_hashes.tree_hash(str(tree)) == first
    (tree / "csrc" / "k.cu").write_text("__global__ void k() { }\n")
    edited = content_hashes.tree_hash(str(tree))
    assert edited != first
    os.chmod(tree / "setup.py", 0o755)  # noqa: S103  (the executable bit is what is tested)
    assert content_hashes.tree_hash(str(tree)) != edited


# ------------------------------------------------------------------ stamps and the cache


def test_stamp_matches_needs_key_and_files(tmp_path):
    so = tmp_path / "_C.so"
    so.write_bytes(b"\x7fELF")
    assert eb.stamp_matches(None, "k") == (False, "no stamp")
    assert eb.stamp_matches({"key": "old"}, "k")[0] is False
    assert eb.stamp_matches({"key": "k"}, "k", [str(so)]) == (True, "stamp matches")
    so.unlink()
    ok, why = eb.stamp_matches({"key": "k"}, "k", [str(so)])
    assert not ok and "missing" in why


def make_wheel(directory: Path, name: str = "fake_ext", with_so: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        if with_so:
            archive.writestr(f"{name}/_C.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        archive.writestr(f"{name}-0.1.0.dist-info/RECORD", "")
    return wheel


def test_wheel_members_and_manifest(tmp_path):
    wheel = make_wheel(tmp_path)
    assert eb.wheel_so_members(str(wheel)) == ["fake_ext/_C.cpython-311-x86_64-linux-gnu.so"]
    manifest = eb.make_manifest(str(wheel), "k1", {"a": 1})
    assert manifest["sha256"] == content_hashes.file_sha256(str(wheel))
    assert manifest["wheel"] == wheel.name


def test_publish_is_atomic_and_first_writer_wins(tmp_path):
    parent = tmp_path / "cache" / "fake_ext"
    first = Path(eb.staging_dir(str(parent), "k1"))
    wheel = make_wheel(first)
    write_json_atomic(str(first / eb.MANIFEST), eb.make_manifest(str(wheel), "k1", {}))
    assert eb.cache_entry(str(parent / "k1")) is None
    assert eb.publish_dir(str(first), str(parent / "k1")) is True
    assert eb.cache_entry(str(parent / "k1"))["key"] == "k1"
    second = Path(eb.staging_dir(str(parent), "k1"))
    make_wheel(second)
    assert eb.publish_dir(str(second), str(parent / "k1")) is False
    assert not second.exists()
    # A corrupted wheel makes the entry invalid (and a rebuild replaces it).
    (parent / "k1" / wheel.name).write_bytes(b"garbage")
    assert eb.cache_entry(str(parent / "k1")) is None


def test_stale_staging_dirs_are_removed(tmp_path):
    stale = Path(eb.staging_dir(str(tmp_path), "k"))
    (stale / "half.whl").write_bytes(b"half")
    keep = tmp_path / "k2"
    keep.mkdir()
    assert eb.clean_stale_staging(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and keep.exists()


def test_auto_max_jobs_bounds():
    gib = 1024**3
    assert eb.auto_max_jobs(2, 24 * gib) == 2
    assert eb.auto_max_jobs(128, 2000 * gib, cap=16) == 16
    assert eb.auto_max_jobs(64, 12 * gib) == 4
    assert eb.auto_max_jobs(None, None) == 1


def test_build_env_layers_caller_env_last():
    env = eb.build_env(
        {"PATH": "/usr/bin", "CPATH": "/old"},
        cuda_home="/opt/cuda",
        archs=["12.0", "9.0"],
        max_jobs=2,
        extra_env={"TORCH_CUDA_ARCH_LIST": "9.0a", "NVSHMEM_DIR": "/n"},
        include_dirs=["/inc"],
    )
    assert env["CUDA_HOME"] == "/opt/cuda"
    assert env["PATH"].split(":")[0] == "/opt/cuda/bin"
    assert env["MAX_JOBS"] == "2"
    assert env["CPATH"] == "/inc:/old"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0a"  # the caller's override wins (and is part of the key)
    assert env["NVSHMEM_DIR"] == "/n"


def test_the_envs_own_ninja_is_found_after_the_toolkits_tools(tmp_path):
    """A host without a ninja of its own (a fresh Debian 12) builds with the env's, not torch's serial
    fallback: the env's bin follows the toolkit's on PATH."""
    venv_bin = tmp_path / "env" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "ninja").write_text("#!/bin/sh\necho 1.13.0\n")
    (venv_bin / "ninja").chmod(0o755)
    empty = tmp_path / "system-bin"
    empty.mkdir()
    env = eb.build_env(
        {"PATH": str(empty)}, cuda_home="/opt/cuda", archs=["12.0"], max_jobs=2, tool_dirs=[venv_bin]
    )
    assert env["PATH"].split(":") == ["/opt/cuda/bin", str(venv_bin), str(empty)]
    assert shutil.which("ninja", path=env["PATH"]) == str(venv_bin / "ninja")
    answer = subprocess.run(["ninja", "--version"], env=env, capture_output=True, text=True, check=True)
    assert answer.stdout == "1.13.0\n"


def test_dist_info_version(tmp_path):
    (tmp_path / "torch-2.14.1+cu130.dist-info").mkdir()
    (tmp_path / "nvidia_cuda_runtime-13.0.96.dist-info").mkdir()
    assert eb.dist_info_version(str(tmp_path), "torch") == "2.14.1+cu130"
    assert eb.dist_info_version(str(tmp_path), "nvidia-cuda-runtime") == "13.0.96"
    assert eb.dist_info_version(str(tmp_path), "ninja") is None


# ------------------------------------------------------------------ the build module (fake compiler)

FAKE_PYTHON = """#!{python}
import json, os, sys, time, zipfile
mode = os.environ.get("FAKE_MODE", "ok")
args = sys.argv[1:]
out = args[args.index("-w") + 1]
print("fake pip wheel", args, flush=True)
if mode == "sleep":
    time.sleep(120)
if mode == "fail":
    print("error: nvcc fatal : Unsupported gpu architecture 'compute_999'", flush=True)
    sys.exit(1)
os.makedirs(out, exist_ok=True)
names = ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CUDA_HOME", "CPATH", "NVSHMEM_DIR")
env = {{k: os.environ.get(k, "") for k in names}}
with zipfile.ZipFile(os.path.join(out, "fake_ext-0.1.0-cp311-cp311-linux_x86_64.whl"), "w") as whl:
    whl.writestr("fake_ext/__init__.py", "")
    whl.writestr("fake_ext/env.json", json.dumps(env))
    whl.writestr("fake_ext/setup_py_seen.txt", str(os.path.exists(os.path.join(args[-1], "setup.py"))))
    if mode != "noso":
        whl.writestr("fake_ext/_C.cpython-311-x86_64-linux-gnu.so", b"\\x7fELF")
"""


@pytest.fixture
def toolchain(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    (cuda / "bin" / "nvcc").chmod(0o755)
    return {
        "python": str(python),
        "cuda_home": str(cuda),
        "source": str(make_tree(tmp_path / "src")),
        "out_dir": str(tmp_path / "cache" / "fake_ext"),
        "log_path": str(tmp_path / "log" / "build.log"),
        "name": "fake_ext",
        "archs": ["12.0", "9.0"],
        "max_jobs": 2,
    }


def entries(out_dir: str) -> list[str]:
    return sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []


def test_build_publishes_once_with_manifest_and_env(toolchain):
    args = {
        **toolchain,
        "key": "k1",
        "inputs": BASE_INPUTS,
        "build_env": {"NVSHMEM_DIR": "/opt/nvshmem"},
        "include_dirs": ["/usr/include/extra"],
    }
    rc, res = run_module("cuda_extension_build", args)
    assert rc == 0, res
    assert res["changed"] is True
    assert entries(toolchain["out_dir"]) == ["k1"]
    manifest = eb.cache_entry(os.path.join(toolchain["out_dir"], "k1"))
    assert manifest["inputs"] == BASE_INPUTS
    assert manifest["so_members"] == ["fake_ext/_C.cpython-311-x86_64-linux-gnu.so"]
    with zipfile.ZipFile(res["wheel"]) as whl:
        env = json.loads(whl.read("fake_ext/env.json"))
        assert whl.read("fake_ext/setup_py_seen.txt") == b"True"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0;12.0"
    assert env["MAX_JOBS"] == "2"
    assert env["CUDA_HOME"] == toolchain["cuda_home"]
    assert env["NVSHMEM_DIR"] == "/opt/nvshmem"
    assert env["CPATH"].startswith("/usr/include/extra")
    log = Path(toolchain["log_path"]).read_text()
    assert "TORCH_CUDA_ARCH_LIST=9.0;12.0" in log and "fake pip wheel" in log
    # The source tree was copied, never built in place.
    assert not (Path(toolchain["source"]) / "build").exists()

    rc, res = run_module("cuda_extension_build", args)
    assert rc == 0 and res["changed"] is False and res["seconds"] == 0.0
    assert Path(toolchain["log_path"]).read_text() == log  # no second build


def test_build_check_mode_builds_nothing(toolchain):
    rc, res = run_module("cuda_extension_build", {**toolchain, "key": "k1"}, check=True)
    assert rc == 0 and res["changed"] is True
    assert entries(toolchain["out_dir"]) == []


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fail", "failed (rc 1)"),
        ("noso", "holds no compiled .so"),
    ],
)
def test_failed_build_leaves_no_entry_and_no_temp_dir(toolchain, mode, message):
    args = {**toolchain, "key": "k1", "build_env": {"FAKE_MODE": mode}}
    rc, res = run_module("cuda_extension_build", args)
    assert rc != 0 and res["failed"]
    assert message in res["msg"]
    assert res["log_path"] == toolchain["log_path"]
    if mode == "fail":
        assert "Unsupported gpu architecture" in res["log_tail"]
    assert entries(toolchain["out_dir"]) == []


def test_build_timeout_kills_the_build_and_leaves_nothing(toolchain):
    args = {**toolchain, "key": "k1", "build_env": {"FAKE_MODE": "sleep"}, "timeout": 2}
    started = time.monotonic()
    rc, res = run_module("cuda_extension_build", args)
    assert time.monotonic() - started < 60
    assert rc != 0 and res["rc"] == 124
    assert "timed out after 2 s" in res["msg"]
    assert entries(toolchain["out_dir"]) == []


def test_killed_build_leaves_no_entry_and_the_next_run_cleans_up(toolchain):
    args = {**toolchain, "key": "k1", "build_env": {"FAKE_MODE": "sleep"}}
    argv, args_file = module_argv("cuda_extension_build", args)
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while "fake pip wheel" not in (
            Path(toolchain["log_path"]).read_text() if Path(toolchain["log_path"]).exists() else ""
        ):
            assert time.monotonic() < deadline, "the fake build never started"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # like a lost SSH connection or Ctrl-C of the whole run
        proc.wait()
    finally:
        os.unlink(args_file)
    left = entries(toolchain["out_dir"])
    assert len(left) == 1 and left[0].startswith(".tmp-k1-")  # only a temp dir: no entry for k1
    assert eb.cache_entry(os.path.join(toolchain["out_dir"], "k1")) is None
    rc, res = run_module("cuda_extension_build", {**toolchain, "key": "k1"})
    assert rc == 0 and res["changed"]
    assert entries(toolchain["out_dir"]) == ["k1"]
    assert "removed stale" in Path(toolchain["log_path"]).read_text()


def test_build_from_a_source_tarball(toolchain, tmp_path):
    # The tree has its own src/ (the canary's src layout): only the archive's top-level src/ is unwrapped.
    (Path(toolchain["source"]) / "src" / "pkg").mkdir(parents=True)
    tarball = tmp_path / "src.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(toolchain["source"], arcname="src")
    rc, res = run_module("cuda_extension_build", {**toolchain, "key": "k2", "source": str(tarball)})
    assert rc == 0, res
    with zipfile.ZipFile(res["wheel"]) as whl:
        assert whl.read("fake_ext/setup_py_seen.txt") == b"True"


# ------------------------------------------------------------------ the cache module


def test_cache_publishes_a_fetched_entry_and_refuses_a_bad_one(tmp_path):
    cache = tmp_path / "cache" / "fake_ext"
    incoming = cache / ".incoming-k1"
    wheel = make_wheel(incoming)
    write_json_atomic(str(incoming / eb.MANIFEST), eb.make_manifest(str(wheel), "k1", {}))
    rc, res = run_module("cuda_extension_cache", {"src": str(incoming), "cache_dir": str(cache), "key": "k2"})
    assert rc != 0 and "holds key k1, not k2" in res["msg"]
    rc, res = run_module("cuda_extension_cache", {"src": str(incoming), "cache_dir": str(cache), "key": "k1"})
    assert rc == 0 and res["changed"] is True
    assert entries(str(cache)) == ["k1"]
    # A fetched copy whose bytes differ from the manifest's sha256 is refused.
    bad = cache / ".incoming-k3"
    wheel = make_wheel(bad)
    manifest = eb.make_manifest(str(wheel), "k3", {})
    manifest["sha256"] = "0" * 64
    write_json_atomic(str(bad / eb.MANIFEST), manifest)
    rc, res = run_module("cuda_extension_cache", {"src": str(bad), "cache_dir": str(cache), "key": "k3"})
    assert rc != 0 and "no complete build" in res["msg"]
    assert entries(str(cache)) == [".incoming-k3", "k1"]


def disk_state(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a directory): what check mode must leave as it was."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


def test_cache_check_mode_predicts_publish_and_the_removal_of_a_second_copy(tmp_path):
    """Publishing src is a change, and so is removing a src beside an entry already complete (a user-given
    directory deleted); a rerun with src gone changes nothing. Check mode predicts each real run's changed
    and leaves the disk as it was."""
    cache = tmp_path / "cache" / "fake_ext"

    def incoming(name: str) -> Path:
        folder = cache / name
        wheel = make_wheel(folder)
        write_json_atomic(str(folder / eb.MANIFEST), eb.make_manifest(str(wheel), "k1", {}))
        return folder

    def check_then_real(src: Path, expected: bool) -> dict:
        args = {"src": str(src), "cache_dir": str(cache), "key": "k1"}
        before = disk_state(tmp_path)
        rc, predicted = run_module("cuda_extension_cache", args, check=True)
        assert rc == 0 and disk_state(tmp_path) == before, predicted
        rc, real = run_module("cuda_extension_cache", args)
        assert rc == 0 and predicted["changed"] == real["changed"] == expected, (predicted, real)
        return real

    first = incoming(".incoming-k1")
    check_then_real(first, True)  # published: src renamed to the entry
    assert entries(str(cache)) == ["k1"] and not first.exists()
    check_then_real(first, False)  # the rerun: entry there, src gone
    second = incoming(".incoming-k1")  # fetched again beside the complete entry
    real = check_then_real(second, True)
    assert not second.exists() and real["diff"] == {"before": {"src": str(second)}, "after": {"src": None}}
    check_then_real(second, False)
    assert entries(str(cache)) == ["k1"]


# ------------------------------------------------------------------ the source module


def git(*args, cwd):
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e",
        },
    )
    if args[0] != "commit":
        return ""
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def tagged_repo(path: Path) -> tuple[Path, str]:
    """A git repository of a buildable tree, its first commit tagged v1: (path, commit)."""
    repo = make_tree(path)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", ".", cwd=repo)
    first = git("commit", "-q", "-m", "one", cwd=repo)
    git("tag", "v1", cwd=repo)
    return repo, first


def test_source_from_git_resolves_tags_and_checks_the_commit(tmp_path):
    repo, first = tagged_repo(tmp_path / "repo")
    (repo / "csrc" / "k.cu").write_text("// two\n")
    git("commit", "-qam", "two", cwd=repo)
    work = tmp_path / "work"
    base = {"name": "fake_ext", "source": f"file://{repo}", "work_dir": str(work)}
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v1", "commit": first[:7]})
    assert rc == 0, res
    assert res["kind"] == "git" and res["revision"] == first and res["changed"] is True
    assert (Path(res["source_dir"]) / "csrc" / "k.cu").read_text() == "__global__ void k() {}\n"
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v1", "commit": first[:7]})
    assert rc == 0 and res["changed"] is False  # pinned commit already there: no network, no export
    rc, res = run_module("cuda_extension_source", {**base, "ref": "main", "commit": first[:7]})
    assert rc != 0 and "not the expected commit" in res["msg"]
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v9"})
    assert rc != 0 and "'v9' is not in" in res["msg"]


def test_kind_git_takes_a_local_repository_path(tmp_path):
    """A mirror's plain path is a directory to `auto` but a repository to `kind: git` (role deepep)."""
    repo, first = tagged_repo(tmp_path / "mirror")
    base = {"name": "git", "source": str(repo), "work_dir": str(tmp_path / "work")}
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v1"})
    assert rc == 0 and res["kind"] == "dir" and res["source_dir"] == str(repo)
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v1", "kind": "git"})
    assert rc == 0, res
    assert res["kind"] == "git" and res["revision"] == first
    assert res["source_dir"] == str(tmp_path / "work" / "git" / first)
    rc, res = run_module("cuda_extension_source", {**base, "ref": "v9.9.9", "kind": "git"})
    assert rc != 0 and "'v9.9.9' is not in" in res["msg"]
    missing = {**base, "source": str(tmp_path / "nowhere.git"), "kind": "git"}
    rc, res = run_module("cuda_extension_source", missing)
    assert rc != 0 and res["msg"].startswith("git clone of") and res["rc"] == 128
    assert "does not exist" in res["log_tail"] or "not found" in res["log_tail"], res


def test_source_dir_and_archive_revisions(tmp_path):
    tree = make_tree(tmp_path / "tree")
    base = {"name": "fake_ext", "work_dir": str(tmp_path / "work")}
    rc, res = run_module("cuda_extension_source", {**base, "source": str(tree)})
    assert rc == 0 and res["kind"] == "dir" and res["source_dir"] == str(tree)
    assert res["revision"] == "sha256:" + content_hashes.tree_hash(str(tree))
    tarball = tmp_path / "fake_ext-0.1.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(tree, arcname="fake_ext-0.1")
    rc, res = run_module("cuda_extension_source", {**base, "source": str(tarball), "make_archive": True})
    assert rc == 0, res
    assert res["kind"] == "archive" and res["revision"] == "sha256:" + content_hashes.file_sha256(
        str(tarball)
    )
    assert Path(res["source_dir"]).name == "fake_ext-0.1" and (Path(res["source_dir"]) / "setup.py").exists()
    with tarfile.open(res["archive"]) as archive:
        assert "src/setup.py" in archive.getnames()
    rc, res = run_module("cuda_extension_source", {**base, "source": str(tmp_path)})
    assert rc != 0 and "no setup.py or pyproject.toml" in res["msg"]


def source_check_then_real(args: dict, work: Path, expected: bool) -> tuple[dict, dict]:
    """cuda_extension_source in check mode, then for real: check mode left work_dir as it was and predicted
    the real run's changed (and its tree, revision and archive)."""
    before = disk_state(work)
    rc, predicted = run_module("cuda_extension_source", args, check=True)
    assert rc == 0, predicted
    assert disk_state(work) == before, "check mode changed work_dir"
    rc, real = run_module("cuda_extension_source", args)
    assert rc == 0, real
    assert predicted["changed"] == real["changed"] == expected, (predicted, real)
    for key in ("kind", "source_dir", "revision", "archive"):
        assert predicted[key] == real[key], key
    return predicted, real


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_source_check_mode_predicts_archive_unpack_and_tarball_without_writing(tmp_path, suffix):
    tree = make_tree(tmp_path / "tree")
    work = tmp_path / "work"
    source = tmp_path / f"fake_ext-0.1{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(source, "w") as archive:
            for path in sorted(tree.rglob("*")):
                archive.write(path, "fake_ext-0.1/" + str(path.relative_to(tree)))
    else:
        with tarfile.open(source, "w:gz") as archive:
            archive.add(tree, arcname="fake_ext-0.1")
    args = {"name": "fake_ext", "source": str(source), "work_dir": str(work)}
    predicted, _ = source_check_then_real(args, work, True)  # unpacked once
    assert Path(predicted["source_dir"]).name == "fake_ext-0.1"
    source_check_then_real(args, work, False)  # the same archive bytes: already unpacked
    source_check_then_real({**args, "make_archive": True}, work, True)  # the tarball of the revision
    source_check_then_real({**args, "make_archive": True}, work, False)
    # A directory source: nothing to unpack, the tarball of its content revision once.
    dir_args = {"name": "fake_ext", "source": str(tree), "work_dir": str(work), "make_archive": True}
    source_check_then_real(dir_args, work, True)
    source_check_then_real(dir_args, work, False)
    source_check_then_real({**dir_args, "make_archive": False}, work, False)


def test_source_check_mode_refuses_what_the_real_run_refuses_without_writing(tmp_path):
    """An archive without setup.py (in subdir) fails in check mode as in a real run, before any unpack."""
    tree = make_tree(tmp_path / "tree")
    (tree / "sub").mkdir()
    (tree / "sub" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    source = tmp_path / "ext.tar.gz"
    with tarfile.open(source, "w:gz") as archive:
        archive.add(tree, arcname="ext")
    work = tmp_path / "work"
    base = {"name": "fake_ext", "source": str(source), "work_dir": str(work)}
    for subdir, ok in (("sub", True), ("csrc", False), ("nowhere", False)):
        rc, checked = run_module("cuda_extension_source", {**base, "subdir": subdir}, check=True)
        assert disk_state(work) == {}, "check mode unpacked"
        assert (rc == 0) is ok, checked
    assert "has no setup.py or pyproject.toml" in checked["msg"]
    rc, real = run_module("cuda_extension_source", {**base, "subdir": "nowhere"})
    assert rc != 0 and real["msg"] == checked["msg"]


def test_source_check_mode_on_git_answers_from_a_clone_holding_the_pinned_commit(tmp_path):
    repo, first = tagged_repo(tmp_path / "repo")
    work = tmp_path / "work"
    base = {"name": "fake_ext", "source": f"file://{repo}", "work_dir": str(work), "ref": "v1"}
    rc, res = run_module("cuda_extension_source", {**base, "commit": first[:7]}, check=True)
    assert rc == 0 and res["changed"] is True and res["source_dir"] == ""  # no clone: it would clone
    assert disk_state(work) == {}
    rc, res = run_module("cuda_extension_source", {**base, "commit": first[:7]})
    assert rc == 0 and res["changed"] is True
    source_check_then_real({**base, "commit": first[:7]}, work, False)  # the clone holds it, tree exported
    source_check_then_real({**base, "commit": first[:7], "make_archive": True}, work, True)
    # The exported tree gone (a cleaned work_dir): the real run exports it again, check mode says so.
    shutil.rmtree(work / "fake_ext" / first)
    source_check_then_real({**base, "commit": first[:7]}, work, True)


# ------------------------------------------------------------------ the plan module (real nvcc)


@pytest.fixture
def plan_env(cuda13_home, tmp_path):
    """A real venv (no pip) naming torch 2.14.1 in a dist-info dir, one extension .so in it, and the plan
    module's arguments for extension fake_ext built from it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "torch-2.14.1.dist-info").mkdir()
    so = site / "fake_ext" / "_C.so"
    so.parent.mkdir()
    so.write_bytes(b"\x7fELF")
    args = {
        "name": "fake_ext",
        "source": "/src",
        "source_kind": "dir",
        "revision": "sha256:abc",
        "archs": ["12.0"],
        "python": str(venv / "bin" / "python"),
        "cuda_home": str(cuda13_home),
        "state_dir": str(tmp_path / "state"),
        "facts_dir": str(tmp_path / "facts"),
    }
    return site, so, args


def test_plan_keys_and_installed_state(plan_env, tmp_path):
    site, so, args = plan_env
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0, res
    assert res["installed"] is False and res["reason"] == "no stamp" and res["changed"] is False
    assert res["inputs"]["cuda"] == "13.0.88" and res["inputs"]["torch"] == "2.14.1"
    assert res["inputs"]["python"] == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    key = res["key"]
    write_json_atomic(str(tmp_path / "state" / "fake_ext.stamp.json"), {"key": key, "so_files": [str(so)]})
    rc, res = run_module("cuda_extension_plan", args)
    assert res["installed"] is True and res["key"] == key
    rc, res = run_module("cuda_extension_plan", {**args, "archs": ["9.0", "12.0"]})
    assert res["installed"] is False and res["key"] != key and "inputs changed" in res["reason"]
    (site / "torch-2.14.1.dist-info").rename(site / "torch-2.14.0.dist-info")
    rc, res = run_module("cuda_extension_plan", args)
    assert res["installed"] is False and res["key"] != key  # a torch change rebuilds
    (site / "torch-2.14.0.dist-info").rename(site / "torch-2.14.1.dist-info")
    so.unlink()
    rc, res = run_module("cuda_extension_plan", args)
    assert res["installed"] is False and "missing" in res["reason"]
    rc, res = run_module("cuda_extension_plan", {**args, "cuda_home": str(tmp_path)})
    assert rc != 0 and "cuda_toolkit" in res["msg"]


def test_plan_records_the_fact_entry_of_an_installed_key_once(plan_env, tmp_path):
    """With record, the plan call that finds the key installed also sets the extension's fact entry (the
    stamp without its inputs), keeping other extensions' entries: never in check mode, once for real, then
    changed=false; a key that is not installed records nothing."""
    _site, so, plan_args = plan_env
    facts = tmp_path / "facts"
    facts.mkdir()
    fact_file = facts / "epforge_cuda_extensions.fact"
    fact_file.write_text(json.dumps({"deep_ep": {"key": "d1"}}))
    args = {**plan_args, "record": True}
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is False and res["changed"] is False and res["fact_changed"] is False
    stamp = {"name": "fake_ext", "key": res["key"], "so_files": [str(so)], "inputs": res["inputs"]}
    write_json_atomic(str(tmp_path / "state" / "fake_ext.stamp.json"), stamp)
    entry = {k: v for k, v in stamp.items() if k != "inputs"}

    rc, res = run_module("cuda_extension_plan", args, check=True)
    assert rc == 0 and res["installed"] is True and res["changed"] is True and res["fact_changed"] is True
    assert json.loads(fact_file.read_text()) == {"deep_ep": {"key": "d1"}}  # check mode wrote nothing
    assert '"fake_ext"' in res["diff"]["after"]
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["changed"] is True
    assert json.loads(fact_file.read_text()) == {"deep_ep": {"key": "d1"}, "fake_ext": entry}
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is True and res["changed"] is False and res["fact_changed"] is False


def test_plan_no_op_answer_watches_what_it_depends_on_and_a_change_there_changes_the_answer(
    plan_env, tmp_path, cuda13_home, monkeypatch
):
    """The probe cache's contract: an installed key's answer names the python (and its realpath), the venv's
    pyvenv.cfg, the site dir, CUDA_HOME and nvcc, the stamp, the .so it lists and the fact; upgrading torch
    (its dist-info renamed), removing the .so or editing the stamp changes a watched path's state and the
    real rerun's answer. A variable that moves the site dirs turns the list off."""
    site, so, plan_args = plan_env
    args = {**plan_args, "record": True}
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is False and res["watch"] == []  # work to do
    stamp_path = tmp_path / "state" / "fake_ext.stamp.json"
    write_json_atomic(str(stamp_path), {"name": "fake_ext", "key": res["key"], "so_files": [str(so)]})
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["changed"] is True and res["watch"] == []  # it recorded the fact entry
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is True and res["changed"] is False
    watch, key = res["watch"], res["key"]
    python, nvcc = Path(args["python"]), cuda13_home / "bin" / "nvcc"
    claimed = {str(python), os.path.realpath(python), str(site.parents[2] / "pyvenv.cfg"), str(site)}
    claimed |= {str(cuda13_home), str(nvcc), os.path.realpath(nvcc), str(stamp_path), str(so)}
    claimed.add(str(tmp_path / "facts" / "epforge_cuda_extensions.fact"))
    assert claimed <= set(watch), sorted(claimed - set(watch))
    assert watch == sorted(set(watch)) and all(os.path.isabs(p) for p in watch)

    # torch upgraded in place of 2.14.1: the site dir changed, the key is another one, not installed
    before = moduletools.watched_states(watch)
    (site / "torch-2.14.1.dist-info").rename(site / "torch-2.14.2.dist-info")
    assert moduletools.changed_paths(before) == [str(site)]
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is False and res["key"] != key and res["watch"] == []
    (site / "torch-2.14.2.dist-info").rename(site / "torch-2.14.1.dist-info")

    # the extension's .so removed: watched, and the rerun finds the key no longer installed
    rc, res = run_module("cuda_extension_plan", args)
    before = moduletools.watched_states(res["watch"])
    so.unlink()
    assert moduletools.changed_paths(before) == [str(so)]
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is False and "missing" in res["reason"] and res["watch"] == []
    so.write_bytes(b"\x7fELF")

    # the stamp edited (a field the fact entry copies): the rerun records the entry again
    rc, res = run_module("cuda_extension_plan", args)
    before = moduletools.watched_states(res["watch"])
    write_json_atomic(
        str(stamp_path), {"name": "fake_ext", "key": key, "so_files": [str(so)], "archs_found": ["sm_120"]}
    )
    assert moduletools.changed_paths(before) == [str(stamp_path)]
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is True and res["fact_changed"] is True and res["watch"] == []

    # the no-op answer again, but with a variable that moves sysconfig's site dirs set: no watch list
    rc, res = run_module("cuda_extension_plan", args)
    assert res["changed"] is False and res["watch"]
    monkeypatch.setenv("PYTHONPLATLIBDIR", "lib")
    rc, res = run_module("cuda_extension_plan", args)
    assert rc == 0 and res["installed"] is True and res["changed"] is False and res["watch"] == []


def test_safe_extract_refuses_escaping_members(tmp_path):
    good = tmp_path / "good.tar.gz"
    make_tree(tmp_path / "tree")
    with tarfile.open(good, "w:gz") as archive:
        archive.add(tmp_path / "tree", arcname="src")
    eb.safe_extract(str(good), str(tmp_path / "out"))
    assert (tmp_path / "out" / "src" / "setup.py").exists()
    (tmp_path / "evil.txt").write_text("x")
    cases = (("../evil.txt", tarfile.REGTYPE), ("/etc/evil", tarfile.REGTYPE), ("link", tarfile.SYMTYPE))
    for name, kind in cases:
        bad = tmp_path / "bad.tar"
        with tarfile.open(bad, "w") as archive:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
                archive.addfile(info)
            else:
                data = b"x"
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        with pytest.raises(ValueError, match="outside the destination"):
            eb.safe_extract(str(bad), str(tmp_path / "out2"))


def test_error_lines_find_the_cause_not_pips_noise():
    log = "\n".join(
        [
            "=== 2026-11-30T12:00:00 cuda_extension canary key old: ...",
            "error: an older build's failure",
            "=== 2026-11-30T13:00:00 cuda_extension canary key new: ...",
            "      /bin/sh: 1: c++: not found",
            "          except ImportError as error:",
            '              "ERROR: Can not execute `setup.py` since setuptools is not available in "',
            "  error: subprocess-exited-with-error",
            'csrc/k.cu(3): error: identifier "x" is undefined',
            "  ERROR: Failed building wheel for epforge-canary",
        ]
    )
    assert eb.error_lines(log) == [
        "/bin/sh: 1: c++: not found",
        'csrc/k.cu(3): error: identifier "x" is undefined',
    ]


def test_failed_build_message_names_the_cause(toolchain):
    args = {**toolchain, "key": "k1", "build_env": {"FAKE_MODE": "fail"}}
    rc, res = run_module("cuda_extension_build", args)
    assert rc != 0
    assert "first error lines: error: nvcc fatal : Unsupported gpu architecture 'compute_999'" in res["msg"]
    assert res["error_lines"] == ["error: nvcc fatal : Unsupported gpu architecture 'compute_999'"]


def test_record_writes_stamp_and_merges_the_fact_idempotently(tmp_path):
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "epforge_cuda_extensions.fact").write_text(json.dumps({"deep_ep": {"key": "d1"}}))
    stamp = {"name": "canary", "key": "k1", "so_files": ["/x/_C.so"], "inputs": {"archs": ["12.0"]}}
    entry = {k: v for k, v in stamp.items() if k != "inputs"}
    args = {
        "name": "canary",
        "state_dir": str(tmp_path / "state"),
        "stamp": stamp,
        "facts_dir": str(facts),
        "entry": entry,
    }
    rc, res = run_module("cuda_extension_record", args, check=True)
    assert rc == 0 and res["changed"] is True and not (tmp_path / "state").exists()
    rc, res = run_module("cuda_extension_record", args)
    assert rc == 0 and res["changed"] is True
    assert json.loads((tmp_path / "state" / "canary.stamp.json").read_text()) == stamp
    fact = json.loads((facts / "epforge_cuda_extensions.fact").read_text())
    assert fact == {"deep_ep": {"key": "d1"}, "canary": entry}
    rc, res = run_module("cuda_extension_record", args)
    assert rc == 0 and res["changed"] is False
    rc, res = run_module("cuda_extension_record", {**args, "stamp": None})  # a no-op run: stamp untouched
    assert rc == 0 and res["changed"] is False
