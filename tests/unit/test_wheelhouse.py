"""Wheelhouse: the requirement computation from real stack files, and module wheelhouse_build with the real
pip of this venv against real wheel files built here (tiny, valid wheels). The build (downloads on, but every
wheel is already here, so no registry is asked) records a complete wheelhouse and its manifest's digest; the
same wheelhouse offline, with that digest given, runs no pip; a removed wheel is refused naming its
requirement, a replaced one naming the file, a wheel replaced together with its manifest naming the manifest;
what the env holds is not fetched, and a protected torch is never replaced."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_install
import yaml
from moduletools import run_module_in
from tiny_wheels import build_wheel

from ansible_collections.epforge.ep.plugins.module_utils.installer import UV_REQUIREMENT
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    pin_from_metadata,
    requirement_groups,
    target_args,
    wheel_requires_dist,
)
from playbooks import JSON_CALLBACK, json_report, run_playbook, write_vars

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "wheelhouse"
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
# Captured: `unzip -p sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl '*/METADATA' | grep ^Requires-Dist:`
# (the wheel from PyPI, 2026-12-01).
SGLANG_0516_REQUIRES = [
    line.split(":", 1)[1].strip()
    for line in (FIXTURES / "sglang-0.5.16-requires-dist.txt").read_text().splitlines()
]


def args_for(directory: Path, tmp_path: Path, requirements: list[str], **over) -> dict:
    """Only an extra pip run of our own wheels: no CUDA wheels, no torch, no FlashInfer, no SGLang."""
    args = {
        "directory": str(directory),
        "stack": {"torch": {"version": "2.11.0"}, "cuda": {"default_method": "existing"}},
        "choice": {
            "ml_env_method": "existing",
            "flashinfer": False,
            "sglang": False,
            "ml_env_build_packages": [],
            "extra": [{"name": "app", "requirements": requirements}],
        },
        "python_version": "3.11.2",
        "machine": "x86_64",
        "glibc": "2.36",
        "installed": {},
        "download": True,
        "log_path": str(tmp_path / "wheelhouse.log"),
        # Outside the wheelhouse, as the role keeps it (epforge_controller_cache_dir).
        "hash_cache": str(tmp_path / "hashes.json"),
    }
    args.update(over)
    return args


@pytest.fixture
def house(tmp_path) -> Path:
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    build_wheel(directory, "alpha", "1.0", ("beta>=1.0",))
    build_wheel(directory, "beta", "1.2")
    build_wheel(directory, "torch", "2.99.0")
    return directory


def build(house: Path, tmp_path: Path, requirements: tuple[str, ...] = ("alpha",)) -> dict:
    """The build on a connected controller (downloads on; every wheel is already here, so no registry is
    asked): it writes the manifest and returns its digest."""
    result = run_module_in(
        tmp_path,
        "wheelhouse_build",
        args_for(house, tmp_path, list(requirements), download=True),
        timeout=300,
    )
    assert result["_rc"] == 0, result
    return result


def offline(house: Path, tmp_path: Path, digest, requirements: tuple[str, ...] = ("alpha",)) -> dict:
    """The carried wheelhouse on a controller with no registry, with the digest given (None: not given)."""
    over = {"download": False} if digest is None else {"download": False, "manifest_sha256": digest}
    return run_module_in(
        tmp_path, "wheelhouse_build", args_for(house, tmp_path, list(requirements), **over), timeout=300
    )


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under directory with its bytes (what "nothing changed" compares)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_groups_cu130_default_roles():
    groups = requirement_groups(CU130, {"ml_env_build_packages": ["ninja"], "sglang_profile": "full"})
    by_name = {g["name"]: g for g in groups}
    assert [g["name"] for g in groups] == [
        "cuda_toolkit",
        "ml_env torch",
        "ml_env build tools",
        "flashinfer",
        "sglang full",
    ]
    assert by_name["cuda_toolkit"]["requirements"] == CU130["cuda"]["pypi_packages"]
    assert by_name["cuda_toolkit"]["no_deps"] and by_name["cuda_toolkit"]["env"] == "download"
    assert by_name["ml_env torch"]["requirements"] == ["torch==2.14.1"]
    assert by_name["flashinfer"]["requirements"] == ["flashinfer-python==0.7.2"]
    assert by_name["sglang full"]["requirements"] == [
        "sglang==0.5.23",
        "sglang-kernel==0.4.10",
        "torch==2.14.1",
    ]


def test_uvs_wheel_is_in_the_wheelhouse_when_the_installer_must_be_uv():
    """installer uv: an offline host gets uv's wheel (installer.py installs it from the wheelhouse into its
    tools venv), fetched alone. auto adds nothing: a registry or mirror without uv's wheel must not fail the
    wheelhouse (2026-12-05: the h200 inventory's test registry has none), the host falls back to pip."""
    stack = {"torch": {"version": "2.14.1"}, "cuda": {"default_method": "apt"}}
    groups = requirement_groups(
        stack, {"installer": "uv", "sglang": False, "flashinfer": False, "deepep": False}
    )
    uv = [g for g in groups if g["name"] == "installer"]
    assert uv == [
        {
            "name": "installer",
            "requirements": [UV_REQUIREMENT],
            "no_deps": True,
            "index_url": "",
            "env": "download",
            "pin_from": "",
        }
    ]
    for choice in ({"installer": "auto"}, {"installer": "pip"}, {}):
        assert not [
            g for g in requirement_groups(stack, {**choice, "sglang": False}) if g["name"] == "installer"
        ]


def test_groups_adopted_env_server_profile_overrides_deepep():
    stack = {
        **CU130,
        "sglang": {
            **CU130["sglang"],
            "version": "0.5.16",
            "kernel_package": "sglang-kernel==0.4.5",
            "package_overrides": ["transformers==5.12.1"],
        },
        "torch": {**CU130["torch"], "version": "2.11.0"},
    }
    groups = requirement_groups(
        stack,
        {
            "ml_env_method": "existing",
            "flashinfer": False,
            "deepep": True,
            "sglang_profile": "server",
            "sglang_deps": ["xgrammar", "fastapi"],
            "sglang_overrides": ["transformers==5.12.1", "tokenizers==0.22.2"],
            "ml_env_build_packages": [],
        },
    )
    names = [g["name"] for g in groups]
    # No torch anywhere: the adopted env has it; the sglang runs keep it.
    assert "ml_env torch" not in names
    assert all("torch==2.11.0" == r for g in groups for r in g["requirements"] if r.startswith("torch"))
    by_name = {g["name"]: g for g in groups}
    assert by_name["deepep nvshmem"]["requirements"] == ["nvidia-nvshmem-cu13==3.4.5"]
    assert by_name["deepep prebuilt"]["requirements"] == ["sgl-deep-ep==0.1.2.post1"]
    assert by_name["deepep prebuilt"]["no_deps"]
    assert by_name["sglang"] == {
        "name": "sglang",
        "requirements": ["sglang==0.5.16", "sglang-kernel==0.4.5"],
        "no_deps": True,
        "index_url": "",
        "env": "ml",
        "pin_from": "",
    }
    assert by_name["sglang server deps"]["requirements"] == ["xgrammar", "fastapi", "torch==2.11.0"]
    assert by_name["sglang server deps"]["pin_from"] == "sglang"
    assert by_name["sglang overrides"]["requirements"] == [
        "transformers==5.12.1",
        "tokenizers==0.22.2",
        "torch==2.11.0",
    ]
    assert names.index("sglang overrides") > names.index("sglang server deps")


def test_groups_of_a_gateway_host():
    """smg for role gateway: its own venv, so resolved alone; with ml false (a gateway-only host) nothing of
    the ML env is covered."""
    both = requirement_groups(CU130, {"ml_env_build_packages": [], "gateway": True})
    assert [g["name"] for g in both] == [
        "cuda_toolkit",
        "ml_env torch",
        "flashinfer",
        "sglang full",
        "gateway",
    ]
    only = requirement_groups(CU130, {"ml": False, "gateway": True})
    assert only == [
        {
            "name": "gateway",
            "requirements": [f"smg=={CU130['gateway']['version']}"],
            "no_deps": False,
            "index_url": "",
            "env": "venv",
            "pin_from": "",
        }
    ]
    assert requirement_groups(CU130, {"ml": False}) == []


def test_target_args_for_another_python_and_glibc():
    args = target_args("3.12.3", "x86_64", "2.39")
    assert args[:3] == ["--only-binary=:all:", "--python-version", "3.12"]
    assert ["--abi", "cp312"] == args[5:7]
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_39_x86_64"
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(platforms)
    assert "manylinux_2_40_x86_64" not in platforms
    arm = target_args("3.11", "aarch64", "2.31")
    aarch = [arm[i + 1] for i, a in enumerate(arm) if a == "--platform"]
    assert "manylinux2014_aarch64" in aarch and "manylinux1_aarch64" not in aarch
    with pytest.raises(ValueError):
        target_args("three", "x86_64", "2.36")


def test_server_deps_pinned_from_sglang_0516_metadata():
    pinned = pin_from_metadata(
        SGLANG_0516_REQUIRES,
        [
            "xgrammar",
            "openai",
            "soundfile",
            "apache-tvm-ffi",
            "starlette",
            "IPython",
            "pyzmq",
            "transformers",
            "fastapi>=0.100",
        ],
    )
    # Pins as the release declares them; extras dropped; names it does not declare (starlette) as given.
    assert pinned == [
        "xgrammar==0.2.1",
        "openai==2.6.1",
        "soundfile==0.13.1",
        "apache-tvm-ffi==0.1.11",
        "starlette",
        "IPython",
        "pyzmq>=25.1.2",
        "transformers==5.12.1",
        "fastapi>=0.100",
    ]
    # Only base requirements count, never one of an extra.
    assert pin_from_metadata(['addict==2.4.0; extra == "diffusion"'], ["addict"]) == ["addict"]


def test_sglang_install_server_profile_commands():
    params = {
        "python": "/env/bin/python",
        "version": "0.5.16",
        "kernel_package": "sglang-kernel==0.4.5",
        "install_deps": False,
        "parser_deps": ["numpy"],
        "keep": ["torch==2.11.0"],
        "pip_args": [],
        "profile": "server",
        "server_deps": ["xgrammar", "openai"],
        "overrides": ["transformers==5.12.1", "tokenizers==0.22.2"],
    }
    inputs = sglang_install.desired_inputs(params)
    assert inputs["mode"] == "server" and inputs["parser_deps"] == []
    commands = sglang_install.pip_commands(
        "/env/bin/python", inputs, pin_from_metadata(SGLANG_0516_REQUIRES, inputs["server_deps"])
    )
    assert [c[5:] for c in commands] == [
        ["--no-deps", "sglang==0.5.16", "sglang-kernel==0.4.5"],
        ["openai==2.6.1", "xgrammar==0.2.1", "torch==2.11.0"],
        ["transformers==5.12.1", "tokenizers==0.22.2", "torch==2.11.0"],
    ]
    # Overrides are checked like the release itself.
    assert sglang_install.pinned_checks(inputs)["transformers"] == "5.12.1"
    # A parser or full stamp written before profiles existed keeps its inputs (no reinstall on upgrade).
    old = sglang_install.desired_inputs({**params, "profile": None, "overrides": []})
    assert "server_deps" not in old and "overrides" not in old and old["mode"] == "parser-only"


def test_complete_wheelhouse_recorded_then_rerun_runs_no_pip(house, tmp_path):
    first = build(house, tmp_path)
    assert first["changed"] and first["downloaded"] == []
    assert first["files"] == ["alpha-1.0-py3-none-any.whl", "beta-1.2-py3-none-any.whl"]
    manifest = json.loads(Path(first["manifest"]).read_text())
    sha = hashlib.sha256((house / "beta-1.2-py3-none-any.whl").read_bytes()).hexdigest()
    assert (
        manifest["files"]["beta-1.2-py3-none-any.whl"]["sha256"]
        == sha
        == first["hashes"]["beta-1.2-py3-none-any.whl"]
    )
    log_size = (tmp_path / "wheelhouse.log").stat().st_size
    again = offline(house, tmp_path, first["manifest_sha256"])
    assert again["_rc"] == 0 and not again["changed"], again
    assert again["files"] == first["files"]
    # No pip ran: nothing was appended to the log.
    assert (tmp_path / "wheelhouse.log").stat().st_size == log_size


def test_removed_wheel_fails_naming_the_requirement(house, tmp_path):
    first = build(house, tmp_path)
    (house / "beta-1.2-py3-none-any.whl").unlink()
    result = offline(house, tmp_path, first["manifest_sha256"])
    assert result["_rc"] != 0
    assert result["missing"] == "beta>=1.0"
    assert "has no wheel for requirement beta>=1.0" in result["msg"]
    assert "the manifest expected beta-1.2-py3-none-any.whl" in result["msg"]
    assert "nothing was changed on any host" in result["msg"]
    assert "--no-index" in result["cmd"]


def test_a_replaced_wheel_is_refused_naming_it(house, tmp_path):
    """Issue 'nothing let in' (1): a wheel replaced by another build of the same name (other content) is not
    installed and its manifest entry is not rewritten: the run fails before any change, naming the file."""
    first = build(house, tmp_path)
    old_sha = first["hashes"]["beta-1.2-py3-none-any.whl"]
    manifest = Path(first["manifest"]).read_bytes()
    (house / "beta-1.2-py3-none-any.whl").unlink()
    build_wheel(house, "beta", "1.2", payload="trimmed")
    result = offline(house, tmp_path, first["manifest_sha256"])
    assert result["_rc"] != 0, result
    assert "beta-1.2-py3-none-any.whl" in result["msg"] and old_sha[:12] in result["msg"], result["msg"]
    assert result["mismatched"] == ["beta-1.2-py3-none-any.whl"]
    assert Path(first["manifest"]).read_bytes() == manifest


def test_a_replacement_that_keeps_size_and_mtime_is_still_rehashed(house, tmp_path):
    first = build(house, tmp_path)
    # The hash cache (outside the wheelhouse) holds the wheel with its identity: only ctime and inode differ.
    assert "beta-1.2-py3-none-any.whl" in json.loads((tmp_path / "hashes.json").read_text())[str(house)]
    wheel = house / "beta-1.2-py3-none-any.whl"
    before = wheel.stat()
    content = bytearray(wheel.read_bytes())
    content[-1] ^= 0xFF  # same size, other content
    wheel.unlink()
    wheel.write_bytes(bytes(content))
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert wheel.stat().st_size == before.st_size and wheel.stat().st_mtime_ns == before.st_mtime_ns
    result = offline(house, tmp_path, first["manifest_sha256"])
    assert result["_rc"] != 0 and result["mismatched"] == ["beta-1.2-py3-none-any.whl"], result


def test_a_manifest_naming_a_path_outside_the_wheelhouse_is_refused(house, tmp_path):
    """Issue 'nothing let in' (2): manifest names are file names of the wheelhouse, nothing else: refused by
    the build, and offline even with the edited manifest's own digest given."""
    first = build(house, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = build_wheel(outside, "evil", "1.0")
    manifest = json.loads(Path(first["manifest"]).read_text())
    sha = hashlib.sha256(evil.read_bytes()).hexdigest()
    manifest["files"]["../outside/evil-1.0-py3-none-any.whl"] = {"sha256": sha, "size": evil.stat().st_size}
    Path(first["manifest"]).write_text(json.dumps(manifest))
    for result in (
        run_module_in(tmp_path, "wheelhouse_build", args_for(house, tmp_path, ["alpha"]), timeout=300),
        offline(house, tmp_path, sha256_of(Path(first["manifest"]))),
    ):
        assert result["_rc"] != 0, result
        assert "'../outside/evil-1.0-py3-none-any.whl' is not a plain wheel file name" in result["msg"], (
            result
        )


def test_what_the_env_holds_is_not_needed(house, tmp_path):
    result = run_module_in(
        tmp_path,
        "wheelhouse_build",
        args_for(house, tmp_path, ["alpha"], installed={"Beta": "1.5"}),
        timeout=300,
    )
    assert result["_rc"] == 0, result
    assert result["files"] == ["alpha-1.0-py3-none-any.whl"]


def test_protected_torch_is_never_replaced(house, tmp_path):
    args = args_for(house, tmp_path, ["torch==2.99.0"], installed={"torch": "2.11.0+cu130"})
    result = run_module_in(tmp_path, "wheelhouse_build", args, timeout=300)
    assert result["_rc"] != 0
    assert "would replace torch 2.11.0+cu130 (already in the env) with 2.99.0" in result["msg"]
    # The same torch as the env's (local label aside) is kept, not fetched.
    ok = run_module_in(
        tmp_path,
        "wheelhouse_build",
        args_for(house, tmp_path, ["torch==2.99.0"], installed={"torch": "2.99.0+cpu"}),
        timeout=300,
    )
    assert ok["_rc"] == 0 and ok["files"] == [], ok


def test_wheel_requires_dist_reads_the_zip(tmp_path):
    path = build_wheel(tmp_path, "gamma", "3.0", ("delta==1.0", 'eps; extra == "x"'))
    assert wheel_requires_dist(str(path)) == ["delta==1.0", 'eps; extra == "x"']


def test_sglang_install_pins_match_local_builds():
    # An image's torch carries a local label; torch==2.11.0 (sglang_keep) is met by it, as pip says.
    assert sglang_install.version_matches("2.11.0+cu130", "2.11.0")
    assert sglang_install.version_matches("2.13.0+cpu", "2.13.0")
    assert not sglang_install.version_matches("2.13.0+cpu", "2.13.0+cu130")
    assert not sglang_install.version_matches("2.14.1", "2.11.0")
    assert not sglang_install.version_matches(None, "2.11.0")


ROLE_PLAY = """---
- name: The wheelhouse role with no wheelhouse set
  hosts: localhost
  gather_facts: false
  roles:
    - role: wheelhouse
  post_tasks:
    - name: Show the steps
      ansible.builtin.debug:
        var: epforge_steps
"""


def test_role_without_a_wheelhouse_is_one_skipped_include_and_one_step(tmp_path):
    """Unset epforge_wheelhouse: the step says pip uses the registry, and the whole converge chain (probe,
    controller build, copy, fact) is one skipped include, nothing on the host and nothing written."""
    (tmp_path / "play.yml").write_text(ROLE_PLAY)
    facts = tmp_path / "facts"
    vars_file = write_vars(
        tmp_path / "vars.json",
        {"epforge_facts_dir": str(facts), "epforge_log_dir": str(tmp_path / "log"), "epforge_wheelhouse": ""},
    )
    proc = run_playbook(tmp_path / "play.yml", vars_file=vars_file, env=JSON_CALLBACK)
    assert proc.returncode == 0, proc.stdout[-3000:]
    tasks = [t for p in json_report(proc)["plays"] for t in p["tasks"]]
    role_tasks = [
        t
        for t in tasks
        if t["task"]["name"].startswith("wheelhouse : ") and "Validating arguments" not in t["task"]["name"]
    ]
    assert [t["task"]["name"] for t in role_tasks] == [
        "wheelhouse : Build the host's wheelhouse and copy it over"
    ]
    assert role_tasks[0]["hosts"]["localhost"]["skipped"] is True
    steps = tasks[-1]["hosts"]["localhost"]["epforge_steps"]
    (step,) = [s for s in steps if s["step"] == "wheelhouse"]
    assert step["status"] == "skipped" and "every pip run uses the registry" in step["detail"]
    assert not facts.exists() or not (facts / "epforge_wheelhouse.fact").exists()


def test_a_manifest_with_file_identities_is_rewritten_once_without_them(house, tmp_path):
    """A manifest of an older epforge held each wheel's inode and ctime, which differ on every copy: the build
    rewrites it once with hashes only (the identities stay in the hash cache, outside the wheelhouse), so its
    digest holds from then on; the next run changes nothing."""
    first = build(house, tmp_path)
    manifest = json.loads(Path(first["manifest"]).read_text())
    for name, item in manifest["files"].items():
        stat = (house / name).stat()
        item.update(
            size=stat.st_size, mtime_ns=stat.st_mtime_ns, ctime_ns=stat.st_ctime_ns, inode=stat.st_ino
        )
    Path(first["manifest"]).write_text(json.dumps(manifest))
    completed = build(house, tmp_path)
    assert completed["changed"] and completed["manifest_sha256"] == first["manifest_sha256"], completed
    assert sha256_of(Path(first["manifest"])) == first["manifest_sha256"]
    assert all(
        set(i) == {"sha256"} for i in json.loads(Path(first["manifest"]).read_text())["files"].values()
    )
    again = build(house, tmp_path)
    assert not again["changed"], again


# Issue 20 "nothing let in" (3): a manifest beside the wheels can be replaced together with them, so an
# offline run trusts only the manifest whose digest the build printed and the user carried apart from the
# wheelhouse.


def test_a_wheel_and_its_manifest_replaced_together_are_refused_offline(house, tmp_path):
    """The wheel replaced by another build AND its manifest rewritten with that build's correct hash: the
    wheel matches its manifest, but the manifest is not the one the build's digest names. Refused before any
    pip run or write, naming the manifest file and both digests."""
    first = build(house, tmp_path)
    manifest_file = Path(first["manifest"])
    (house / "beta-1.2-py3-none-any.whl").unlink()
    forged = build_wheel(house, "beta", "1.2", payload="forged")
    manifest = json.loads(manifest_file.read_text())
    manifest["files"]["beta-1.2-py3-none-any.whl"] = {"sha256": sha256_of(forged)}
    manifest_file.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    before = tree(house)
    log_size = (tmp_path / "wheelhouse.log").stat().st_size
    result = offline(house, tmp_path, first["manifest_sha256"])
    assert result["_rc"] != 0, result
    assert str(manifest_file) in result["msg"], result["msg"]
    assert first["manifest_sha256"] in result["msg"] and sha256_of(manifest_file) in result["msg"], result[
        "msg"
    ]
    assert "nothing was used or changed" in result["msg"].lower(), result["msg"]
    assert result["manifest_sha256"] == sha256_of(manifest_file)
    assert tree(house) == before
    assert (tmp_path / "wheelhouse.log").stat().st_size == log_size


def test_offline_without_the_manifest_digest_is_refused_saying_where_to_find_it(house, tmp_path):
    first = build(house, tmp_path)
    before = tree(house)
    result = offline(house, tmp_path, None)
    assert result["_rc"] != 0, result
    msg = result["msg"]
    assert "wheelhouse_manifest_sha256" in msg and Path(first["manifest"]).name in msg, msg
    # Where the build recorded it, apart from the wheelhouse.
    assert "local fact epforge_wheelhouse" in msg and "manifest_sha256" in msg, msg
    assert "nothing was used or changed" in msg.lower(), msg
    assert tree(house) == before
    # A carried directory with wheels but no manifest for this host has nothing to trust, digest or not.
    bare = tmp_path / "bare"
    bare.mkdir()
    for wheel in house.glob("*.whl"):
        (bare / wheel.name).write_bytes(wheel.read_bytes())
    refused = offline(bare, tmp_path, first["manifest_sha256"])
    assert refused["_rc"] != 0 and "has no manifest" in refused["msg"], refused
    assert not (bare / "manifests").exists()


def test_a_carried_wheelhouse_is_used_with_the_digest_its_build_printed(house, tmp_path):
    first = build(house, tmp_path)
    digest = sha256_of(Path(first["manifest"]))
    assert first["manifest_sha256"] == digest
    # Carried: a copy, so every wheel has a new inode and ctime and is hashed again.
    carried = tmp_path / "carried"
    shutil.copytree(house, carried)
    manifest_file = carried / "manifests" / Path(first["manifest"]).name
    ok = offline(carried, tmp_path, digest)
    assert ok["_rc"] == 0 and not ok["changed"], ok
    assert ok["files"] == first["files"] and ok["manifest_sha256"] == digest
    # Used read-only: the manifest's bytes (and so its digest) stay what the build wrote.
    assert sha256_of(manifest_file) == digest
    # Several kinds of hosts share a wheelhouse: a mapping manifest file name -> digest.
    mapped = offline(carried, tmp_path, {manifest_file.name: digest.upper(), "0" * 16 + ".json": "1" * 64})
    assert mapped["_rc"] == 0, mapped
    unlisted = offline(carried, tmp_path, {"0" * 16 + ".json": digest})
    assert unlisted["_rc"] != 0 and manifest_file.name in unlisted["msg"], unlisted


def test_role_offline_needs_the_digest_its_build_printed(house, tmp_path):
    """The role end to end on localhost: the build prints and records the manifest's digest; the same run
    with downloads off and no wheelhouse_manifest_sha256 fails in the build task, saying where the digest
    is, before anything changes (the host's copy and facts as they were); with the recorded digest it runs
    and changes nothing."""
    (tmp_path / "play.yml").write_text(ROLE_PLAY)
    facts, host_dir = tmp_path / "facts", tmp_path / "host-wheels"
    base = {
        "epforge_facts_dir": str(facts),
        "epforge_log_dir": str(tmp_path / "log"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_controller_cache_dir": str(tmp_path / "cache"),
        "epforge_probe_cache": False,
        "epforge_wheelhouse": str(house),
        "epforge_wheelhouse_host_dir": str(host_dir),
        "wheelhouse_env_python": sys.executable,
        "wheelhouse_ml_env_method": "existing",
        "wheelhouse_cuda_toolkit_method": "existing",
        "wheelhouse_flashinfer": False,
        "wheelhouse_sglang": False,
        "wheelhouse_extra_requirements": [{"name": "app", "requirements": ["alpha"]}],
    }

    def play(name: str, **over) -> subprocess.CompletedProcess:
        vars_file = write_vars(tmp_path / f"{name}.json", {**base, **over})
        return run_playbook(tmp_path / "play.yml", vars_file=vars_file, env=JSON_CALLBACK)

    built = play("build")
    assert built.returncode == 0, built.stdout[-3000:]
    tasks = [t for p in json_report(built)["plays"] for t in p["tasks"]]
    (shown,) = [
        t
        for t in tasks
        if t["task"]["name"].endswith("Show the manifest digest to carry apart from the wheelhouse")
    ]
    fact = json.loads((facts / "epforge_wheelhouse.fact").read_text())
    digest = fact["manifest_sha256"]
    assert digest == sha256_of(Path(fact["manifest"])) and digest in shown["hosts"]["localhost"]["msg"]
    before = {**tree(host_dir), **{f"facts/{k}": v for k, v in tree(facts).items()}}

    refused = play("offline", wheelhouse_download=False)
    assert refused.returncode != 0, refused.stdout[-3000:]
    tasks = [t for p in json_report(refused)["plays"] for t in p["tasks"]]
    (failed,) = [t for t in tasks if t["hosts"]["localhost"].get("failed")]
    assert failed["task"]["name"].startswith("wheelhouse : Ensure the wheelhouse covers the host"), failed
    msg = failed["hosts"]["localhost"]["msg"]
    assert "wheelhouse_manifest_sha256" in msg and "local fact epforge_wheelhouse" in msg, msg
    assert {**tree(host_dir), **{f"facts/{k}": v for k, v in tree(facts).items()}} == before

    used = play("anchored", wheelhouse_download=False, wheelhouse_manifest_sha256=digest)
    assert used.returncode == 0, used.stdout[-3000:]
    assert json_report(used)["stats"]["localhost"]["changed"] == 0, used.stdout[-3000:]


def test_check_mode_reports_the_manifest_digest_and_writes_nothing(house, tmp_path):
    """Check (and diff) mode: the build reports the digest its manifest will have, writing neither the
    manifest nor the hash cache; offline, the digest check runs as in a real run."""
    checked = run_module_in(
        tmp_path, "wheelhouse_build", args_for(house, tmp_path, ["alpha"]), check=True, diff=True, timeout=300
    )
    assert checked["_rc"] == 0 and checked["changed"], checked
    assert not (house / "manifests").exists() and not (tmp_path / "hashes.json").exists()
    first = build(house, tmp_path)
    assert checked["manifest_sha256"] == first["manifest_sha256"]
    for digest, rc in ((first["manifest_sha256"], 0), ("0" * 64, 1)):
        args = args_for(house, tmp_path, ["alpha"], download=False, manifest_sha256=digest)
        result = run_module_in(tmp_path, "wheelhouse_build", args, check=True, diff=True, timeout=300)
        assert result["_rc"] == rc and not result["changed"], result
