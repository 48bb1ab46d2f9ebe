"""Role model, source controller: one download per fleet. Three podman hosts (the project's test-host image,
rsync in it); the controller fetches once from a real olah mirror, rsync (ansible.posix.synchronize) sends the
files, each host verifies every file against the controller's manifest. The mirror's access log proves one
download per file for the whole fleet; a rerun moves nothing and changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_mirror import Olah, git_repo
from podman_hosts import remove_hosts, start_host, write_inventory

from playbooks import ROOT, changed_count, write_vars

pytestmark = pytest.mark.xdist_group("model_controller")

HOSTS = [f"epforge-model-fleet-{i}" for i in range(1, 4)]
PLAY = """
- name: Fetch the model once and send it to every host
  hosts: all
  gather_facts: false
  tasks:
    - name: Run role model
      ansible.builtin.import_role:
        name: model
"""


def in_container(host: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", "exec", host, *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_controller_fetches_once_and_every_host_gets_a_verified_copy(tmp_path, molecule_image):
    olah = Olah(tmp_path / "olah")
    try:
        source, _commit = git_repo(olah.mirrors, "acme/fleet", shards=4, shard_bytes=8 << 20)
        names = sorted(p.name for p in source.iterdir() if p.is_file())
        for host in HOSTS:
            start_host(host, molecule_image)
        inventory = write_inventory(tmp_path / "hosts.yml", HOSTS)
        from ansible_collections.epforge.ep.plugins.module_utils.server_object import build  # noqa: PLC0415

        verdict = {
            "adjusted_settings": {"model_path": "acme/fleet", "tp_size": 2},
            "findings": {"adjustments": []},
        }
        variables = write_vars(
            tmp_path / "vars.json",
            {
                "preflight_server_object": build(verdict, "0.5.23"),
                "model_source": "controller",
                "model_endpoint": olah.endpoint,
                "model_controller_dir": str(tmp_path / "controller-cache"),
                "model_controller_python": sys.executable,
                "model_require_gpu": False,
                "model_space_margin_mb": 1,
            },
        )
        play = tmp_path / "play.yml"
        play.write_text(PLAY)
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)]
        argv += ["-e", f"@{variables}"]
        env = dict(
            os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles")
        )
        first = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
        # One download per file for the whole fleet.
        assert len(olah.downloads("acme/fleet")) == len(names), olah.downloads("acme/fleet")
        expected = {n: hashlib.sha256((source / n).read_bytes()).hexdigest() for n in names}
        target = "/var/lib/epforge/models/acme/fleet"
        for host in HOSTS:
            script = (
                "import hashlib, json, os, sys; d = sys.argv[1]; "
                "print(json.dumps({n: [hashlib.sha256(open(os.path.join(d, n), 'rb').read()).hexdigest(), "
                "oct(os.stat(os.path.join(d, n)).st_mode & 0o777)] for n in os.listdir(d)}))"
            )
            found = json.loads(in_container(host, "python3", "-c", script, target).stdout)
            assert {n: found[n][0] for n in names} == expected, host
            assert {found[n][1] for n in names} == {"0o644"}, host
            assert ".epforge-verified.json" in found and ".epforge-model.json" in found
            fact = json.loads(in_container(host, "cat", "/etc/ansible/facts.d/epforge_model.fact").stdout)
            assert fact["model_path"]["source"] == "controller" and fact["model_path"]["verified"] == len(
                names
            )
        for host in HOSTS:
            assert f"{host}" in first.stdout and changed_count(first, host) >= 2

        again = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert again.returncode == 0, again.stdout[-4000:]
        for host in HOSTS:
            assert changed_count(again, host) == 0, again.stdout[-4000:]
        assert len(olah.downloads("acme/fleet")) == len(names)
        assert "Send the missing files" not in again.stdout or "skipping" in again.stdout
    finally:
        olah.stop()
        remove_hosts(*HOSTS)
