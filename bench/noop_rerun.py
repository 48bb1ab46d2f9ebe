#!/usr/bin/env python3
"""How much does a no-op rerun of provisioning cost, compared with a play that only gathers facts?

Runs a provisioning playbook on localhost once to converge (not timed; it may install and build), then, in
the same run, alternates timed repetitions of
  - the same playbook again (must report changed=0: the no-op rerun), and
  - a setup-only play (hosts: localhost, gather_facts: true, no tasks),
and prints the median of each and their ratio (target: no-op rerun <= 6x setup-only).

Default playbook: the toolchain chain (cuda_toolkit pypi -> ml_env -> cuda_extension canary) with the paths of
the Molecule scenario `toolchain` (/opt/epforge-molecule/{cuda-13.0,ml-env}; its state under
/tmp/epforge-bench-noop), so the first converge reuses what that scenario installed. --playbook times another
one (e.g. playbooks/provision.yml);
--extra-vars passes vars to it.

    .venv/bin/python bench/noop_rerun.py [--repeat 5] [--playbook playbooks/provision.yml] [-e k=v ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
STATE = "/tmp/epforge-bench-noop"

TOOLCHAIN_PLAY = f"""---
- name: Provision the CUDA extension toolchain (bench)
  hosts: localhost
  gather_facts: false
  vars:
    epforge_facts_dir: {STATE}/facts
    epforge_state_dir: {STATE}/state
    epforge_log_dir: {STATE}/log
    epforge_controller_cache_dir: {STATE}/cache
    cuda_toolkit_method: pypi
    cuda_toolkit_prefix: /opt/epforge-molecule/cuda-13.0
    ml_env_path: /opt/epforge-molecule/ml-env
  roles:
    - role: cuda_toolkit
    - role: ml_env
  tasks:
    - name: Canary extension
      ansible.builtin.include_role:
        name: cuda_extension
      vars:
        cuda_extension_name: canary
        cuda_extension_source: {ROOT}/extensions/canary
        cuda_extension_import: [epforge_canary]
        cuda_extension_max_jobs: 2
"""

SETUP_PLAY = """---
- name: Gather facts only
  hosts: localhost
  gather_facts: true
  tasks: []
"""

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def run(playbook: Path, extra: list[str], timeout: int) -> tuple[float, str]:
    argv = [str(ANSIBLE_PLAYBOOK), str(playbook)]
    for item in extra:
        argv += ["-e", item]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(
            f"{' '.join(argv)} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        )
    return seconds, proc.stdout


def changed_total(output: str) -> int:
    hosts = RECAP.findall(output)
    if not hosts:
        sys.exit(f"no PLAY RECAP in the output:\n{output[-2000:]}")
    return sum(int(h[2]) for h in hosts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--playbook", help="provisioning playbook (default: the toolchain chain, see above)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], help="passed to ansible-playbook")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions of each play (median)")
    parser.add_argument("--converge-timeout", type=int, default=3600, help="seconds for the first converge")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="epforge-bench-") as tmp:
        setup = Path(tmp) / "setup_only.yml"
        setup.write_text(SETUP_PLAY)
        if args.playbook:
            playbook = Path(args.playbook).resolve()
        else:
            playbook = Path(tmp) / "toolchain.yml"
            playbook.write_text(TOOLCHAIN_PLAY)

        print(f"converging once (not timed): {playbook}", flush=True)
        seconds, out = run(playbook, args.extra_vars, args.converge_timeout)
        print(f"  converge: {seconds:.1f} s, changed={changed_total(out)}", flush=True)

        rerun, setup_only = [], []
        for i in range(args.repeat):
            seconds, out = run(playbook, args.extra_vars, 600)
            changed = changed_total(out)
            if changed:
                sys.exit(f"rerun {i + 1} was not a no-op: changed={changed}\n{out[-4000:]}")
            rerun.append(seconds)
            seconds, _ = run(setup, [], 300)
            setup_only.append(seconds)
            print(
                f"  round {i + 1}: no-op rerun {rerun[-1]:.2f} s, setup-only {setup_only[-1]:.2f} s",
                flush=True,
            )

    med_rerun, med_setup = statistics.median(rerun), statistics.median(setup_only)
    ratio = med_rerun / med_setup
    print(
        f"no-op rerun median {med_rerun:.2f} s (changed=0), setup-only median {med_setup:.2f} s, "
        f"ratio {ratio:.2f}x (target <= 6x): {'OK' if ratio <= 6 else 'OVER TARGET'}"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the end: {load} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
