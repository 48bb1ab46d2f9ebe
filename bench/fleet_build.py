#!/usr/bin/env python3
"""Does a fleet cost one build? Time role cuda_extension (the canary) on 1 podman host vs N (default 4).

Each run starts fresh containers (the Molecule image, molecule/_podman/build-image.sh) and an empty
controller-side wheel cache, so each run builds the canary exactly once - on the first host (run_once +
delegate_to), fetched into the controller cache - and then installs it on every host (copy + pip install
--no-deps), checks its SASS (sm_120) and imports it. Target: N hosts take <= 1.3x the time of 1 host.
Each fleet then runs the play again, which must report changed=0 on every host (timed, not compared).

The containers get the toolchain by bind mounts, not by installing it N times (5.4 GB of torch each):
  /usr and /etc/alternatives (read-only; this machine is Debian bookworm like the image: gcc/g++, system
  libraries),
  the Python the venv was made from (read-only), the CUDA 13.0 toolkit (read-only) and the torch venv as an
  overlay (podman `:O`: every host installs the wheel into its own copy-on-write layer; the host's venv is
  not touched). The toolkit and venv are those of the Molecule scenario `toolchain`
  (/opt/epforge-molecule/{cuda-13.0,ml-env}): run it (or bench/noop_rerun.py) first.

    CONTAINERS_CONF=molecule/_podman/containers.conf .venv/bin/python bench/fleet_build.py [--hosts 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_report import load_line, verdict

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
IMAGE = os.environ.get("EPFORGE_MOLECULE_IMAGE", "localhost/epforge-molecule-bookworm:latest")
CUDA_HOME = "/opt/epforge-molecule/cuda-13.0"
VENV = "/opt/epforge-molecule/ml-env"
PREFIX = "epforge-bench-fleet"

PLAY = f"""---
- name: Build the canary once for the fleet, install it everywhere
  hosts: fleet
  gather_facts: false
  vars:
    epforge_facts_dir: /etc/ansible/facts.d
    epforge_state_dir: /var/lib/epforge
    epforge_log_dir: /var/log/epforge
  tasks:
    - name: Canary extension
      ansible.builtin.include_role:
        name: cuda_extension
      vars:
        cuda_extension_name: canary
        cuda_extension_source: {ROOT}/extensions/canary
        cuda_extension_import: [epforge_canary]
        cuda_extension_python: {VENV}/bin/python
        cuda_extension_cuda_home: {CUDA_HOME}
        cuda_extension_cuobjdump: {CUDA_HOME}/bin/cuobjdump
        cuda_extension_archs: ["12.0"]
        cuda_extension_max_jobs: 2
        cuda_extension_build_timeout: 1800
"""


def podman(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


def base_python() -> str:
    """The interpreter installation the venv links to (pyvenv.cfg 'home' without /bin)."""
    for line in Path(VENV, "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return str(Path(value.strip()).parent)
    sys.exit(f"{VENV}/pyvenv.cfg names no home")


def start(names: list[str]) -> None:
    # /etc/alternatives: Debian's c++/cc links in /usr/bin point there.
    mounts = [
        "-v",
        "/usr:/usr:ro",
        "-v",
        "/etc/alternatives:/etc/alternatives:ro",
        "-v",
        f"{CUDA_HOME}:{CUDA_HOME}:ro",
        "-v",
        f"{VENV}:{VENV}:O",
    ]
    home = base_python()
    if not home.startswith("/usr/"):
        mounts += ["-v", f"{home}:{home}:ro"]
    for name in names:
        podman("rm", "-f", name, check=False)
        podman("run", "-d", "--name", name, "--hostname", name, *mounts, IMAGE, "sleep", "infinity")


def remove(names: list[str]) -> None:
    for name in names:
        podman("rm", "-f", "-t", "0", name, check=False)


def run_fleet(n: int, tmp: Path) -> dict:
    names = [f"{PREFIX}-{i}" for i in range(1, n + 1)]
    cache = tmp / f"cache-{n}"
    inventory = tmp / f"inventory-{n}.json"
    inventory.write_text(
        json.dumps(
            {
                "fleet": {
                    "hosts": {name: {} for name in names},
                    "vars": {
                        "ansible_connection": "containers.podman.podman",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "epforge_controller_cache_dir": str(cache),
                    },
                }
            }
        )
    )
    playbook = tmp / "fleet.yml"
    playbook.write_text(PLAY)
    start(names)
    try:
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        started = time.monotonic()
        argv = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(playbook)]
        proc = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
        )
        seconds = time.monotonic() - started
        (tmp / f"fleet-{n}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            sys.exit(f"the {n}-host run failed (rc {proc.returncode}):\n{proc.stdout[-5000:]}")
        entries = [p.name for p in (cache / "wheels" / "canary").iterdir() if not p.name.startswith(".")]
        stamps = []
        builds = 0
        for name in names:
            stamp_path = "/var/lib/epforge/cuda_extension/canary.stamp.json"
            stamp = json.loads(podman("exec", name, "cat", stamp_path).stdout)
            stamps.append(stamp)
            log_path = "/var/log/epforge/cuda_extension-canary.log"
            log = podman("exec", name, "cat", log_path, check=False).stdout
            builds += len(re.findall(r"^=== \S+ cuda_extension canary key", log, re.M))
        if len(entries) != 1 or builds != 1:
            sys.exit(
                f"{n} hosts: expected one build and one cache entry, found {builds} builds, entries {entries}"
            )
        for name, stamp in zip(names, stamps, strict=True):
            if "sm_120" not in stamp["archs_found"] or stamp["key"] != entries[0]:
                sys.exit(f"{name}: unexpected stamp {stamp}")
        # The same play again on the same fleet: a no-op (changed=0 on every host, no build, no install).
        started = time.monotonic()
        again = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        rerun_seconds = time.monotonic() - started
        (tmp / f"fleet-{n}-rerun.log").write_text(again.stdout + again.stderr)
        recap = {h: int(c) for h, c in re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", again.stdout, re.M)}
        if again.returncode != 0 or len(recap) != n or any(recap.values()):
            sys.exit(
                f"the {n}-host rerun was not a no-op (rc {again.returncode}, changed {recap}):\n"
                f"{again.stdout[-3000:]}"
            )
        return {
            "hosts": n,
            "seconds": seconds,
            "builds": builds,
            "key": entries[0],
            "rerun_seconds": rerun_seconds,
        }
    finally:
        remove(names)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=4, help="fleet size to compare with 1 host")
    parser.add_argument("--keep-logs", help="copy the ansible-playbook logs into this directory")
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "molecule" / "_podman" / "containers.conf"))
    if not Path(VENV, "bin", "python").exists() or not Path(CUDA_HOME, "bin", "nvcc").exists():
        sys.exit(f"{VENV} or {CUDA_HOME} is missing: run the Molecule scenario toolchain first")
    subprocess.run([str(ROOT / "molecule" / "_podman" / "build-image.sh")], check=True, timeout=1200)

    with tempfile.TemporaryDirectory(prefix="epforge-fleet-") as name:
        tmp = Path(name)
        one = run_fleet(1, tmp)
        print(
            f"1 host : {one['seconds']:.1f} s ({one['builds']} build, key {one['key']}); "
            f"no-op rerun {one['rerun_seconds']:.1f} s, changed=0",
            flush=True,
        )
        many = run_fleet(args.hosts, tmp)
        print(
            f"{args.hosts} hosts: {many['seconds']:.1f} s ({many['builds']} build, key {many['key']}); "
            f"no-op rerun {many['rerun_seconds']:.1f} s, changed=0 on every host",
            flush=True,
        )
        if args.keep_logs:
            Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("fleet-*.log"):
                Path(args.keep_logs, log.name).write_text(log.read_text())
    ratio = many["seconds"] / one["seconds"]
    print(
        f"ratio {args.hosts} hosts / 1 host = {verdict(ratio, 1.3)}; one build each time, "
        f"same key: {one['key'] == many['key']}"
    )
    print(load_line())


if __name__ == "__main__":
    main()
