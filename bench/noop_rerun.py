"""How much does a no-op rerun of provisioning cost, compared with a play that only gathers facts?

Runs the full provision (playbooks/provision.yml with the default inventory of ansible.cfg) on localhost once
to converge (not timed; it may install and build), then, in the same run, alternates timed repetitions of
  - the same playbook again (must report changed=0: the no-op rerun), and
  - a setup-only play (hosts: localhost, gather_facts: true, no tasks),
and prints the median of each, their ratio (target: no-op rerun <= 2.8x setup-only, issue 41), the spread of
the rounds' own ratios, first round apart (it warms the page cache), and the number of tasks the no-op rerun
ran (ok + skipped of its PLAY RECAP). --playbook times another playbook; --extra-vars passes vars to it.
localhost is a provisioned host: hold the lock that every run against it holds.

    flock /tmp/epforge-localhost.lock .venv/bin/python bench/noop_rerun.py [--repeat 5] [-e k=v ...]
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

from bench_report import load_line, verdict

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PROVISION = ROOT / "playbooks" / "provision.yml"
TARGET = 2.8  # issue 41 (3x before, issue 21)

SETUP_PLAY = """---
- name: Gather facts only
  hosts: localhost
  gather_facts: true
  tasks: []
"""

RECAP = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M
)


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


def recap(output: str) -> tuple[int, int]:
    """(changed, tasks run) summed over the hosts of the PLAY RECAP; tasks run = ok + skipped."""
    hosts = RECAP.findall(output)
    if not hosts:
        sys.exit(f"no PLAY RECAP in the output:\n{output[-2000:]}")
    changed = sum(int(h[2]) for h in hosts)
    tasks = sum(int(h[1]) + int(h[5]) for h in hosts)
    return changed, tasks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--playbook", default=str(PROVISION), help="playbook to time (default: %(default)s)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], help="passed to ansible-playbook")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions of each play (median)")
    parser.add_argument("--converge-timeout", type=int, default=3600, help="seconds for the first converge")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="epforge-bench-") as tmp:
        setup = Path(tmp) / "setup_only.yml"
        setup.write_text(SETUP_PLAY)
        playbook = Path(args.playbook).resolve()

        print(f"converging once (not timed): {playbook}", flush=True)
        seconds, out = run(playbook, args.extra_vars, args.converge_timeout)
        print(f"  converge: {seconds:.1f} s, changed={recap(out)[0]}", flush=True)

        rerun, setup_only, tasks = [], [], 0
        for i in range(args.repeat):
            seconds, out = run(playbook, args.extra_vars, 600)
            changed, tasks = recap(out)
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
        f"no-op rerun median {med_rerun:.2f} s (changed=0, {tasks} tasks: ok + skipped), "
        f"setup-only median {med_setup:.2f} s, ratio {verdict(ratio, TARGET)}"
    )
    # each round's ratio (its rerun over its setup-only play): the noise the median's verdict sits in
    rounds = [r / s for r, s in zip(rerun, setup_only, strict=True)]
    later = rounds[1:] or rounds
    print(
        f"round ratios {', '.join(f'{x:.2f}' for x in rounds)}; after the first: "
        f"{min(later):.2f}-{max(later):.2f}x (spread {max(later) / min(later) - 1:.0%})"
    )
    print(load_line())


if __name__ == "__main__":
    main()
