"""Module python_headers and role ml_env's headers step (issue 41): a fresh Debian 12 has no python3.11-dev,
so the canary build failed there with "Python.h: No such file or directory" (bench/first_run.py). The role now
finds the env's headers before anything is built, installs the distribution's package when they are missing,
and refuses with the remedy when there is nothing to install them from.

The module runs against real interpreters: this machine's python (headers present), fake interpreters that
answer the layout payload with an include directory of the test's choosing, and a fresh container of the test
image (no python3-dev) where the role really installs python3.11-dev with apt - once, then changed=0."""

from __future__ import annotations

import json
import subprocess
import sys

from moduletools import run_module
from podman_hosts import remove_hosts, start_host, write_inventory

from playbooks import changed_count, run_playbook


def fake_python(tmp_path, include: str, impl: str = "cpython"):
    """An executable that answers payload python_layout as a python of that include dir would."""
    layout = {"major": 3, "minor": 99, "impl": impl, "machine": "x86_64", "prefix": "/p", "base_prefix": "/p"}
    layout.update(purelib="/p/lib", platlib="/p/lib", include=include, path=[])
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\necho '{json.dumps(layout)}'\n")
    path.chmod(0o755)
    return str(path)


def test_a_python_with_its_headers_needs_nothing():
    rc, res = run_module("python_headers", {"python": sys.executable}, check=True)
    assert rc == 0 and res["present"] is True and res["package"] == "" and res["changed"] is False, res
    assert res["version"] == "{}.{}".format(*sys.version_info[:2])


def test_a_distribution_python_without_headers_names_its_package(tmp_path):
    python = fake_python(tmp_path, "/usr/include/python3.99")
    rc, res = run_module("python_headers", {"python": python})
    assert rc == 0 and res["present"] is False and res["package"] == "python3.99-dev", res
    # the caller said it will not install: refused, the remedy named
    rc, res = run_module("python_headers", {"python": python, "install": False})
    assert rc != 0 and "install python3.99-dev" in res["msg"] and res["cmd"][2] == "<payload python_layout>"


def test_another_python_without_headers_is_refused_with_the_remedy(tmp_path):
    rc, res = run_module("python_headers", {"python": fake_python(tmp_path, str(tmp_path / "include"))})
    assert rc != 0 and res["package"] == "" and "has no Python.h" in res["msg"], res
    assert "development files" in res["msg"]


def test_a_python_that_does_not_run_is_refused(tmp_path):
    rc, res = run_module("python_headers", {"python": str(tmp_path / "missing" / "python")})
    assert rc != 0 and "does not answer" in res["msg"]


HOST = "epforge-headers-test"
PLAYBOOK = """
- name: The headers step of role ml_env
  hosts: all
  gather_facts: false
  tasks:
    - name: Headers
      ansible.builtin.include_role:
        name: ml_env
        tasks_from: headers.yml
      vars:
        ml_env_method: venv
        ml_env_base_python: /usr/bin/python3
"""


def headers_file_exists() -> bool:
    probe = ["podman", "exec", HOST, "test", "-f", "/usr/include/python3.11/Python.h"]
    return subprocess.run(probe, check=False).returncode == 0


def test_the_role_installs_the_missing_headers_once_on_a_fresh_debian(tmp_path, molecule_image):
    start_host(HOST, molecule_image)
    try:
        assert not headers_file_exists()  # the test image, like a fresh Debian 12, has none
        inventory = write_inventory(tmp_path / "hosts.yml", [HOST])
        playbook = tmp_path / "headers.yml"
        playbook.write_text(PLAYBOOK)
        dry = run_playbook(playbook, "--check", inventories=(inventory,), timeout=600)
        assert dry.returncode == 0 and changed_count(dry, HOST) == 1, dry.stdout[-4000:]
        assert not headers_file_exists()
        first = run_playbook(playbook, inventories=(inventory,), timeout=600)
        assert first.returncode == 0 and changed_count(first, HOST) == 1, first.stdout[-4000:]
        assert headers_file_exists()
        again = run_playbook(playbook, inventories=(inventory,), timeout=600)
        assert again.returncode == 0 and changed_count(again, HOST) == 0, again.stdout[-4000:]
    finally:
        remove_hosts(HOST)
