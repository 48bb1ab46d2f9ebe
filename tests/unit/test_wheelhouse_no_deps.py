"""Issue 34 item 5: no-deps declarations hold in every pip run, planned and real.

scripts/gpu/h200-inventory.yml installs FlashInfer without its optional CuTe-DSL/cuDNN dependencies
(flashinfer_pip_extra_args: [--no-deps], a wheelhouse extra run with no_deps), while SGLang's server profile
pins the stack's FlashInfer among its server deps. That pin was resolved - by the wheelhouse, and by pip on
the host - WITH FlashInfer's dependencies (pip asked for an installed distribution again resolves what it
declares).

Here, with real pip and tiny wheels: role wheelhouse with the h200 inventory's own variables, against a local
index (file://) that holds FlashInfer's dependencies too (as PyPI does), fetches flashinfer-python without
them; module sglang_install installs the server profile offline from wheels without them; a plan that would
resolve a distribution declared no_deps with its dependencies is refused naming both runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_install
import yaml
from moduletools import run_module
from test_pip_guard import make_wheel

from ansible_collections.epforge.ep.plugins.module_utils import wheelhouse
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
    requirement_key,
    wheel_name_version,
)
from playbooks import JSON_CALLBACK, run_playbook, write_vars

ROOT = Path(__file__).resolve().parents[2]
H200_VARS = yaml.safe_load((ROOT / "scripts" / "gpu" / "h200-inventory.yml").read_text())["all"]["vars"]
STACK = yaml.safe_load((ROOT / "stacks" / "cu130-torch211.yml").read_text())["epforge_stack_spec"]
SGLANG_0516_REQUIRES = [
    line.split(":", 1)[1].strip()
    for line in (ROOT / "tests" / "fixtures" / "wheelhouse" / "sglang-0.5.16-requires-dist.txt")
    .read_text()
    .splitlines()
]
# flashinfer-python 0.6.14's own Requires-Dist (unzip -p flashinfer_python-0.6.14-py3-none-any.whl
# '*/METADATA', the wheel from PyPI): the base requirements pip resolves unless --no-deps.
FLASHINFER_0614_REQUIRES = [
    "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
    "click",
    "cuda-tile>=1.4.0",
    "einops",
    "ninja",
    "numpy",
    "nvidia-cudnn-frontend>=1.13.0",
    "nvidia-cutlass-dsl>=4.5.0",
    "nvidia-ml-py",
    "packaging>=24.2",
    "requests",
    "tabulate",
    "torch",
    "tqdm",
    'nvidia-cutlass-dsl[cu13]>=4.5.0; extra == "cu13"',
]
# What only FlashInfer brings (the CuTe-DSL and cuDNN frontends and their company): none of it may be fetched.
FLASHINFER_ONLY = {
    "click",
    "cuda-tile",
    "einops",
    "ninja",
    "nvidia-cudnn-frontend",
    "nvidia-cutlass-dsl",
    "nvidia-ml-py",
    "tabulate",
}


def server_dep_names() -> list[str]:
    """sglang_server_deps for 0.5.16 as role sglang lists them (vars/main.yml), without the FlashInfer pin."""
    data = yaml.safe_load((ROOT / "roles" / "sglang" / "vars" / "main.yml").read_text())
    measured = re.findall(r"'([^']+)'", data["__sglang_server_deps_measured"]["0.5.16"])
    return list(dict.fromkeys([*data["__sglang_parser_deps_common"], *measured]))


def version_for(requirement: str) -> str:
    """A version that meets the requirement ('==X' or '>=X': X; none: a high one that meets any '>=')."""
    match = re.search(r"(?:==|>=)\s*([0-9][^,;\s]*)", requirement)
    return match.group(1) if match else "99.0"


def make_index(root: Path) -> Path:
    """A PEP 503 registry on disk (file://.../simple) with a tiny wheel for everything the h200 inventory's
    plan names, and for every dependency of flashinfer-python 0.6.14, as PyPI would offer them."""
    simple = root / "simple"
    wheels: dict[str, tuple[str, list[str]]] = {
        "sglang": ("0.5.16", SGLANG_0516_REQUIRES),
        "sglang-kernel": ("0.4.5", []),
        "flashinfer-python": ("0.6.14", FLASHINFER_0614_REQUIRES),
        "transformers": ("5.12.1", []),
        "tokenizers": ("0.22.2", []),
    }
    for requirement in wheelhouse.pin_from_metadata(SGLANG_0516_REQUIRES, server_dep_names()):
        wheels.setdefault(requirement_key(requirement), (version_for(requirement), []))
    # xgrammar needs apache-tvm-ffi (its real Requires-Dist): run 3 must find run 2's 0.1.11 installed.
    wheels["xgrammar"] = (wheels["xgrammar"][0], ["apache-tvm-ffi>=0.1.9"])
    for requirement in FLASHINFER_0614_REQUIRES:
        if "extra ==" not in requirement:
            wheels.setdefault(requirement_key(requirement), (version_for(requirement), []))
    wheels.pop("torch")  # the image's torch is installed; the registry's is never wanted
    for name, (version, requires) in wheels.items():
        folder = simple / normalize(name)
        folder.mkdir(parents=True, exist_ok=True)
        wheel = make_wheel(folder, name, version, requires)
        (folder / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return simple


def image_env(path: Path) -> Path:
    """An adopted image env: a python whose site-packages holds torch 2.11.0+cu130 (metadata only)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python*/site-packages")
    info = site / "torch-2.11.0+cu130.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n")
    return path / "bin" / "python"


# playbooks/tasks/provision.yml's order: the wheelhouse first; the later roles imported, so their defaults
# (what they will install: sglang_server_deps, sglang_server_no_deps, flashinfer_pip_extra_args) are the
# play's.
PLAY = """---
- name: The wheelhouse step of provision with the h200 inventory's variables
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Gather the wheels
      ansible.builtin.import_role:
        name: wheelhouse
    - name: Install FlashInfer
      ansible.builtin.import_role:
        name: flashinfer
      when: false
    - name: Install SGLang
      ansible.builtin.import_role:
        name: sglang
      when: false
"""


def test_h200_inventory_wheelhouse_fetches_flashinfer_without_its_optional_dependencies(tmp_path):
    """Role wheelhouse with scripts/gpu/h200-inventory.yml's variables as they are (only the paths are this
    machine's), downloads on, against a local registry that also offers FlashInfer's CuTe-DSL/cuDNN
    dependencies: every pip run that names flashinfer-python resolves it --no-deps, and none of what only
    FlashInfer depends on is fetched into the wheelhouse or listed in its manifest."""
    index = make_index(tmp_path / "registry")
    house, facts = tmp_path / "wheelhouse", tmp_path / "facts"
    controller_cache = tmp_path / "cache"
    extra = {
        **H200_VARS,
        "ml_env_existing_python": str(image_env(tmp_path / "image-env")),
        "epforge_wheelhouse": str(house),
        "epforge_wheelhouse_host_dir": str(tmp_path / "host-wheels"),
        "epforge_facts_dir": str(facts),
        "epforge_log_dir": str(tmp_path / "log"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_controller_cache_dir": str(controller_cache),
        "epforge_probe_cache": False,
    }
    (tmp_path / "play.yml").write_text(PLAY)
    vars_file = write_vars(tmp_path / "vars.json", extra)
    # The registry is the local index only (no pip configuration of this machine).
    env = {**JSON_CALLBACK, "PIP_INDEX_URL": index.as_uri(), "PIP_CONFIG_FILE": "/dev/null"}
    proc = run_playbook(tmp_path / "play.yml", vars_file=vars_file, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    fact = json.loads((facts / "epforge_wheelhouse.fact").read_text())
    manifest = json.loads(Path(fact["manifest"]).read_text())

    fetched = {wheel_name_version(f)[0] for f in manifest["files"]}
    assert "flashinfer-python" in fetched and "sglang" in fetched, sorted(fetched)
    assert not FLASHINFER_ONLY & fetched, sorted(FLASHINFER_ONLY & fetched)
    on_disk = {wheel_name_version(p.name)[0] for p in house.glob("*.whl")}
    assert not FLASHINFER_ONLY & on_disk, sorted(FLASHINFER_ONLY & on_disk)

    # Each run that names FlashInfer is a --no-deps run; the server profile's own is among them.
    with_flashinfer = [
        g
        for g in manifest["groups_detail"]
        if any(requirement_key(r) == "flashinfer-python" for r in g["requirements"])
    ]
    assert {g["name"] for g in with_flashinfer} == {"sglang server deps (--no-deps)", "flashinfer"}
    assert all(g["no_deps"] for g in with_flashinfer), with_flashinfer
    server = {g["name"]: g for g in manifest["groups_detail"]}
    assert server["sglang server deps (--no-deps)"]["requirements"] == [
        "apache-tvm-ffi==0.1.11",
        "flashinfer-python==0.6.14",
    ]
    assert "xgrammar==0.2.1" in server["sglang server deps"]["requirements"]
    # pip's own argv, from the controller's log: every resolution of flashinfer-python had --no-deps.
    log = (controller_cache / "wheelhouse.log").read_text()
    argvs = [line for line in log.splitlines() if line.startswith("$ ") and "flashinfer-python==" in line]
    assert argvs and all(" --no-deps " in f"{a} " for a in argvs), argvs
    assert any(" --no-index " not in a for a in argvs), "no resolution against the registry"


def make_flashinfer_wheels(wheels: Path) -> None:
    """What an air-gapped wheelhouse holds: FlashInfer without its optional dependencies."""
    members = {
        "sglang/__init__.py": "__version__ = '0.5.99'\n",
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
    }
    make_wheel(
        wheels, "sglang", "0.5.99", ["fakedep==1.0", "flashinfer_python[cu13]==0.6.14"], members=members
    )
    make_wheel(wheels, "fakedep", "1.0")
    make_wheel(wheels, "flashinfer-python", "0.6.14", FLASHINFER_0614_REQUIRES)
    make_wheel(wheels, "apache-tvm-ffi", "0.1.11")


def test_server_profile_installs_the_no_deps_pins_without_their_dependencies(tmp_path):
    """Module sglang_install, profile server, offline from wheels that lack FlashInfer's optional
    dependencies (the h200 wheelhouse): with flashinfer-python in server_no_deps the install succeeds and
    pulls none of them; the same without it is pip failing on nvidia-cudnn-frontend or its company (what
    the h200 run hit)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_flashinfer_wheels(wheels)
    python = tmp_path / "env" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "env")], check=True)
    args = {
        "python": str(python),
        "version": "0.5.99",
        "profile": "server",
        "server_deps": ["fakedep", "flashinfer-python==0.6.14"],
        "server_no_deps": ["flashinfer-python"],
        "pip_args": ["--no-index", "--find-links", str(wheels)],
        "log_path": str(tmp_path / "log" / "sglang.log"),
        "stamp_path": str(tmp_path / "state" / "sglang.json"),
    }
    rc, result = run_module("sglang_install", args, timeout=300)
    assert rc == 0, result.get("msg")
    prefix = f"--disable-pip-version-check --no-index --find-links {wheels} "
    pip_runs = [a.split(": ", 1)[1] for a in result["actions"] if a.startswith("pip (")]
    assert [a.removeprefix(prefix) for a in pip_runs] == [
        "--no-deps sglang==0.5.99",
        "--no-deps flashinfer-python==0.6.14",
        "fakedep==1.0",
    ], pip_runs
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    names = {normalize(d["name"]) for d in json.loads(listed.stdout)}
    assert {"sglang", "fakedep", "flashinfer-python"} <= names and not names & FLASHINFER_ONLY, names

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True)
    with_deps = {
        **args,
        "python": str(fresh / "bin" / "python"),
        "server_no_deps": [],
        "stamp_path": str(tmp_path / "state" / "fresh.json"),
    }
    rc, failed = run_module("sglang_install", with_deps, timeout=300)
    assert rc != 0, failed
    missing = re.search(r"No matching distribution found for ([^\s(]+)", failed.get("log_tail", ""))
    assert missing and requirement_key(missing.group(1)) in FLASHINFER_ONLY, failed


def test_server_profile_runs_split_the_no_deps_pins():
    """The one rule both roles use: the no-deps pins in a --no-deps run of their own, before the rest; a
    requirement's distribution name decides (normalised), and nothing is split without names."""
    runs = wheelhouse.server_profile_runs(
        "sglang==0.5.16",
        "sglang-kernel==0.4.5",
        ["xgrammar", "Flashinfer_Python==0.6.14", "apache-tvm-ffi"],
        ["torch==2.11.0"],
        ["flashinfer-python", "apache_tvm_ffi==0.1.11"],
    )
    assert runs == [
        {"name": "sglang", "requirements": ["sglang==0.5.16", "sglang-kernel==0.4.5"], "no_deps": True},
        {
            "name": "sglang server deps (--no-deps)",
            "requirements": ["Flashinfer_Python==0.6.14", "apache-tvm-ffi"],
            "no_deps": True,
        },
        {"name": "sglang server deps", "requirements": ["xgrammar", "torch==2.11.0"], "no_deps": False},
    ]
    plain = wheelhouse.server_profile_runs("sglang==0.5.16", "", ["xgrammar"], ["torch==2.11.0"])
    assert [r["name"] for r in plain] == ["sglang", "sglang server deps"]
    # The module's pip argv lists are the same runs (pinned from SGLang's metadata once it is in).
    params = {
        "python": "/env/bin/python",
        "version": "0.5.16",
        "kernel_package": "sglang-kernel==0.4.5",
        "install_deps": False,
        "parser_deps": [],
        "keep": ["torch==2.11.0"],
        "pip_args": [],
        "profile": "server",
        "server_deps": ["xgrammar", "apache-tvm-ffi", "flashinfer-python==0.6.14"],
        "server_no_deps": ["flashinfer-python", "apache-tvm-ffi==0.1.11"],
        "overrides": ["transformers==5.12.1"],
    }
    inputs = sglang_install.desired_inputs(params)
    pinned = wheelhouse.pin_from_metadata(SGLANG_0516_REQUIRES, inputs["server_deps"])
    assert [c[5:] for c in sglang_install.pip_commands("/env/bin/python", inputs, pinned)] == [
        ["--no-deps", "sglang==0.5.16", "sglang-kernel==0.4.5"],
        ["--no-deps", "apache-tvm-ffi==0.1.11", "flashinfer-python==0.6.14"],
        ["xgrammar==0.2.1", "torch==2.11.0"],
        ["transformers==5.12.1", "torch==2.11.0"],
    ]
    # Without no-deps names the stamp's inputs are what they were (no reinstall on upgrade).
    assert "server_no_deps" not in sglang_install.desired_inputs({**params, "server_no_deps": []})


H200_CHOICE = {
    "ml_env_method": "existing",
    "cuda_toolkit_method": "existing",
    "flashinfer": False,
    "sglang_profile": "server",
    "sglang_deps": ["xgrammar", "apache-tvm-ffi", "fastapi", "flashinfer-python==0.6.14"],
    "sglang_no_deps": ["flashinfer-python", "apache-tvm-ffi==0.1.11"],
    "sglang_overrides": STACK["sglang"]["package_overrides"],
    "extra": H200_VARS["wheelhouse_extra_requirements"],
}


def test_h200_plan_resolves_flashinfer_only_without_dependencies():
    groups = wheelhouse.requirement_groups(STACK, H200_CHOICE)
    assert [(g["name"], g["no_deps"]) for g in groups] == [
        ("sglang", True),
        ("sglang server deps (--no-deps)", True),
        ("sglang server deps", False),
        ("sglang overrides", False),
        ("flashinfer", True),
    ]
    for group in groups:
        names = {requirement_key(r) for r in group["requirements"]}
        assert group["no_deps"] or not names & {"flashinfer-python", "apache-tvm-ffi"}, group
    by_name = {g["name"]: g for g in groups}
    assert by_name["sglang server deps (--no-deps)"]["pin_from"] == "sglang"
    assert by_name["sglang server deps"]["requirements"] == ["xgrammar", "fastapi", "torch==2.11.0"]


@pytest.mark.parametrize(
    ("change", "run", "hint"),
    [
        ({"sglang_no_deps": []}, "sglang server deps", "sglang_server_no_deps"),
        ({"sglang_no_deps": [], "flashinfer": True}, "flashinfer", "wheelhouse_flashinfer: false"),
    ],
)
def test_a_no_deps_declaration_resolved_with_deps_elsewhere_is_refused(change, run, hint):
    """The inventory declares FlashInfer no_deps (its extra run), and another run of the ML env would
    resolve it with its dependencies: refused before any pip run, naming both runs and what to set."""
    with pytest.raises(ValueError) as refused:
        wheelhouse.requirement_groups(STACK, {**H200_CHOICE, **change})
    msg = str(refused.value)
    assert f"pip run '{run}' would resolve" in msg, msg
    assert "pip run 'flashinfer' (wheelhouse_extra_requirements) installs" in msg, msg
    assert "flashinfer-python" in msg and hint in msg, msg
