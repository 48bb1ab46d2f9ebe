"""epforge as the collection users install: built from this checkout, installed into a fresh collections
path, used from a playbook outside the checkout, and judged by ansible-test sanity.

The session fixture builds the tarball (scripts/build_collection.py) and installs it with ansible-galaxy
into a temporary collections path. Every Ansible command here then runs in a temporary directory with an
ansible.cfg of its own and no ANSIBLE_* variable of the checkout: nothing resolves through the checkout's
collections/ link or its roles/ (the tests assert where modules and roles were found).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import sglang_parser_env
import yaml
from conftest import ROOT

from playbooks import changed_count

sglang_env = sglang_parser_env.sglang_env

pytestmark = pytest.mark.molecule

BIN = Path(sys.executable).parent
HOST = "epforge-collection-host"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def outside_env(work: Path) -> dict:
    """The environment of a user's own project in `work`: its ansible.cfg, the installed collections."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env.update(ANSIBLE_CONFIG=str(work / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    # as ansible-core 2.24 will have it: facts only under ansible_facts (no role reads a top-level copy)
    env["ANSIBLE_INJECT_FACT_VARS"] = "false"
    return env


def run(argv: list, work: Path, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=work,
        env=kwargs.pop("env", None) or outside_env(work),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


@pytest.fixture(scope="session")
def collection(tmp_path_factory) -> dict:
    """The tarball built from this checkout, installed under a fresh collections path in a user project."""
    work = tmp_path_factory.mktemp("user-project")
    (work / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {work / 'collections'}\n"
        f"roles_path = {work / 'roles'}\n"
        "interpreter_python = auto_silent\n"
        "host_key_checking = False\n"
        "[connection]\npipelining = True\n"
    )
    built = run(
        [sys.executable, ROOT / "scripts" / "build_collection.py", "--output-path", work / "dist"], work
    )
    assert built.returncode == 0, built.stderr
    tarball = Path(built.stdout.strip().splitlines()[-1])
    installed = run(
        [BIN / "ansible-galaxy", "collection", "install", tarball, "-p", work / "collections"], work
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = work / "collections" / "ansible_collections" / "epforge" / "ep"
    assert (root / "MANIFEST.json").is_file(), installed.stdout
    return {"work": work, "tarball": tarball, "root": root}


def test_the_tarball_holds_real_files_and_what_roles_read(collection):
    with tarfile.open(collection["tarball"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert not [name for name, m in members.items() if m.issym() or m.islnk()]
    library = sorted(p.stem for p in (ROOT / "library").glob("*.py"))
    assert (
        sorted(n[len("plugins/modules/") : -3] for n in members if n.startswith("plugins/modules/"))
        == library
    )
    for carried in ("stacks/cu130.yml", "data/known_issues.yml", "meta/runtime.yml", "roles/sglang_server"):
        assert carried in members, carried
    assert not [n for n in members if n.split("/")[0] in ("library", "molecule", "collections")]
    # of the tests, only ansible-test's ignore files travel (ansible-test reads them in the collection)
    tests = sorted(n for n in members if n.split("/")[0] == "tests")
    assert tests == ["tests", "tests/sanity", "tests/sanity/ignore-2.19.txt", "tests/sanity/ignore-2.21.txt"]


def test_modules_and_roles_resolve_from_the_installed_collection(collection):
    work, root = collection["work"], collection["root"]
    doc = run([BIN / "ansible-doc", "epforge.ep.sglang_server"], work)
    assert doc.returncode == 0, doc.stderr
    assert f"({root}/plugins/modules/sglang_server.py)" in doc.stdout.splitlines()[0]
    roles = run([BIN / "ansible-doc", "-t", "role", "-l", "epforge.ep"], work)
    assert roles.returncode == 0 and "epforge.ep.sglang_server" in roles.stdout, roles.stderr
    assert str(ROOT) not in doc.stdout + roles.stdout


def test_ansible_test_sanity_passes_on_the_built_collection(tmp_path):
    """scripts/collection_sanity.py --all: ansible-test's whole default sanity set (validate-modules holds
    DOCUMENTATION to argument_spec; pylint, shebang, use-argspec-type-path, ...) on the built and installed
    collection, each test it lists run and none failing; the rules broken on purpose are in
    tests/sanity/ignore-<core>.txt, each line with its reason (its pip bootstrap cached in a HOME of its
    own)."""
    env = dict(outside_env(tmp_path), HOME=str(tmp_path))
    argv = [sys.executable, ROOT / "scripts" / "collection_sanity.py", "--all"]
    proc = run(argv, tmp_path, timeout=1800, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    listed = re.search(r"^sanity tests: (.+)$", output, re.M).group(1).split()
    assert len(listed) >= 20 and "pylint" in listed and "validate-modules" in listed, listed
    for name in listed:
        assert re.search(rf'Running sanity test "{re.escape(name)}"', output), (name, output[-3000:])
    assert "ERROR" not in output, output[-6000:]


def test_every_sanity_ignore_line_gives_its_reason_and_each_core_has_one():
    cores = {path.stem.removeprefix("ignore-") for path in (ROOT / "tests" / "sanity").glob("ignore-*.txt")}
    assert cores == {"2.19", "2.21"}, cores
    for path in (ROOT / "tests" / "sanity").glob("ignore-*.txt"):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            entry, _, reason = line.partition(" # ")
            assert len(entry.split()) == 2 and len(reason.split()) >= 5, f"{path.name}:{number}: {line}"


# ---------------------------------------------------------------------- a user's playbook on a podman host

PLAYBOOK = """\
- name: Serve SGLang's stand-in through the installed collection
  hosts: all
  gather_facts: false
  pre_tasks:
    # The stand-in (tests/sglang_standin, a TEST DOUBLE of SGLang: no GPU here) as a venv's sglang package.
    - name: Create the stand-in's venv
      ansible.builtin.command:
        argv: [python3, -m, venv, --without-pip, /opt/standin-env]
        creates: /opt/standin-env/bin/python
    - name: Install the stand-in as that venv's sglang package
      ansible.builtin.copy:
        src: "{{ playbook_dir }}/standin/sglang/"
        dest: /opt/standin-env/lib/python3.11/site-packages/sglang/
        mode: "0644"
        directory_mode: "0755"
    # ninja in the env's bin/, as pip puts it into a real SGLang env: the stand-in runs it at start
    - name: Put ninja into the stand-in env's bin/
      ansible.builtin.copy:
        src: "{{ playbook_dir }}/ninja"
        dest: /opt/standin-env/bin/ninja
        mode: "0755"
  roles:
    - role: epforge.ep.preflight
    - role: epforge.ep.sglang
    - role: epforge.ep.sglang_server
  post_tasks:
    - name: Ask the running server through a module, by FQCN
      epforge.ep.sglang_verify:
        url: "http://127.0.0.1:{{ epforge_server.port }}"
        api_key: "{{ sglang_server_api_key }}"
        model: "{{ epforge_server.served_model_name }}"
      register: verified
    - name: The server answered through the installed collection's module
      ansible.builtin.assert:
        that:
          - ansible_facts['epforge_sglang_verify'] is defined
          - verified is not failed
"""


def host_vars(parser_python: str) -> dict:
    return {
        "ansible_connection": "containers.podman.podman",
        "ansible_python_interpreter": "/usr/bin/python3",
        # role sglang, parser profile: SGLang --no-deps and its parser's deps in an env that has torch (the
        # test suite's cached parser env, mounted into the host at its own path).
        "sglang_python": parser_python,
        "sglang_install_deps": False,
        "sglang_server_python": "/opt/standin-env/bin/python",
        "sglang_server_api_key": "sk-collection-test-not-a-real-key",
        "sglang_server_require_gpu": False,
        "preflight_min_free_gib": 1,
        "epforge_sglang_env_allowed": ["SGLANG_STANDIN_"],  # the test double's knobs
        "sglang_server_limits": {},
        "sglang_server_timeout": 60,
        "sglang_server_poll_interval": 0.2,
        "epforge_server": {
            "model_path": "/models/standin",
            "served_model_name": "standin",
            "tp_size": 2,
            "ep_size": 2,
            "moe_a2a_backend": "deepep",
            "port": 30000,
            "env": {"SGLANG_STANDIN_LOAD_SECONDS": "1"},
        },
    }


@pytest.fixture
def podman_host(sglang_env, molecule_image):
    """A Debian bookworm container with systemd as PID 1 (the Molecule image), the parser env mounted."""
    venv = Path(sglang_env["python"]).parent.parent
    base = Path(venv.joinpath("pyvenv.cfg").read_text().split("home = ", 1)[1].splitlines()[0]).parent
    subprocess.run(["podman", "rm", "-f", "-t", "0", HOST], capture_output=True, check=False)
    started = subprocess.run(
        [
            "podman", "run", "-d", "--name", HOST, "--hostname", HOST, "--systemd", "always",
            # the env is written to by nothing it needs; an overlay keeps the cached env untouched anyway
            "-v", f"{venv}:{venv}:O", "-v", f"{base}:{base}:ro",
            molecule_image, "/sbin/init",
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 60  # systemd's bus appears a moment after the container starts
        while True:
            booted = subprocess.run(
                ["timeout", "60", "podman", "exec", HOST, "systemctl", "is-system-running", "--wait"],
                capture_output=True,
                text=True,
                check=False,
            )
            if booted.stdout.strip() in ("running", "degraded") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert booted.stdout.strip() in ("running", "degraded"), booted.stdout + booted.stderr
        yield sglang_env["python"]
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", HOST], capture_output=True, check=False)


def test_a_playbook_outside_the_checkout_converges_twice_on_a_podman_host(collection, podman_host):
    work = collection["work"]
    shutil.copytree(ROOT / "tests" / "sglang_standin", work / "standin", dirs_exist_ok=True)
    shutil.copy2(Path(sys.executable).parent / "ninja", work / "ninja")  # pip's ninja (the test extra)
    (work / "serve.yml").write_text(PLAYBOOK)
    inventory = {"all": {"hosts": {HOST: host_vars(podman_host)}}}
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    argv = [BIN / "ansible-playbook", "-i", work / "inventory.yml", work / "serve.yml"]
    first = run(argv, work, timeout=1200)
    assert first.returncode == 0, first.stdout[-8000:] + first.stderr[-3000:]
    assert changed_count(first, HOST) > 0
    again = run(argv, work, timeout=1200)
    assert again.returncode == 0, again.stdout[-8000:] + again.stderr[-3000:]
    assert changed_count(again, HOST) == 0, again.stdout[-8000:]
    assert str(ROOT) not in first.stdout + again.stdout  # nothing came from the checkout
