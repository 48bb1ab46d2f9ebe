"""Plain podman test hosts for tests and benches that need a remote-like host without systemd: the project's
test-host image (molecule/_podman/build-image.sh) running `sleep`, reached with the containers.podman.podman
connection. Scenarios that need systemd use the Molecule harness instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

CONNECTION = {
    "ansible_connection": "containers.podman.podman",
    "ansible_python_interpreter": "/usr/bin/python3",
}


def start_host(name: str, image: str, seconds: int = 3600) -> None:
    """A fresh container `name` (any leftover of that name removed first) that sleeps `seconds`."""
    remove_hosts(name)
    started = subprocess.run(
        ["podman", "run", "-d", "--name", name, "--entrypoint", "sleep", image, str(seconds)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr


def remove_hosts(*names: str) -> None:
    subprocess.run(["podman", "rm", "-f", "-t", "0", *names], capture_output=True, check=False)


def write_inventory(path: Path, names: list[str]) -> Path:
    """An inventory with each container as a host reached through podman."""
    path.write_text(yaml.safe_dump({"all": {"hosts": {name: dict(CONNECTION) for name in names}}}))
    return path
