"""Where a new user's first run goes: the README's first command from a clean clone in a fresh podman
container of the supported Debian, with its breakdown and its floor (issue 41).

The container starts from the debootstrap image the tests build (molecule/_podman/build-image.sh,
EPFORGE_DEBIAN_SUITE=bookworm: Debian 12, Python 3.11), gets `git archive HEAD` of this checkout on stdin
(what a clean clone holds), checks that pip's, uv's, apt's, epforge's and FlashInfer's caches are empty,
then runs `scripts/bootstrap.sh` and `.venv/bin/ansible-playbook site.yml` and reports:
- bootstrap, split at its own progress lines: apt (system packages), venv, controller packages;
- each role of site.yml, from every task's start and end (bench/callback_plugins/task_times.py);
- bytes the container received (its network interfaces' rx counters) and CPU seconds of site.yml's
  processes (user + sys of the shell's children: compiles, pip, Ansible itself);
- the bandwidth, measured before anything runs by reading one large wheel from PyPI for a few seconds;
- the floor: bootstrap + bytes at that bandwidth + site.yml's CPU seconds on 2 cores (the work that cannot
  go faster here), and the run's ratio to it (target: 3 minutes or 1.3x the floor, whichever is larger).

    .venv/bin/python bench/first_run.py [--suite bookworm] [--json out.json] [--ref REF --facts facts.json]

--ref runs another commit; --facts keeps the local facts site.yml recorded, for bench/facts_diff.py.

Needs podman and the network (PyPI, Debian's mirror). Minutes: it downloads the toolkit and torch again.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "molecule" / "_podman"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TARGET_S, TARGET_RATIO = 180, 1.3
CORES = 2

# Inside the container: the checkout arrives on stdin as a tar. Each marker line starts with EPFORGE_.
SCRIPT = r"""
set -uo pipefail
mkdir -p /root/epforge && tar -x -C /root/epforge && cd /root/epforge
export DEBIAN_FRONTEND=noninteractive
if [ -n "${EPFORGE_PREINSTALL:-}" ]; then
  # the same system packages under two commits compared (--preinstall): installed, then apt's cache emptied
  apt-get update -qq && apt-get install -y -qq $EPFORGE_PREINSTALL >/dev/null && apt-get clean || exit 4
  echo "EPFORGE_PREINSTALLED $EPFORGE_PREINSTALL"
fi
for d in /root/.cache/pip /root/.cache/uv /root/.cache/epforge /root/.cache/flashinfer \
         /var/cache/apt/archives; do
  left=$(ls -A "$d" 2>/dev/null | grep -vx -e partial -e lock)
  if [ -n "$left" ]; then echo "EPFORGE_NOT_EMPTY $d"; exit 3; fi
done
echo "EPFORGE_CACHES_EMPTY"
rx() { cat /sys/class/net/*/statistics/rx_bytes 2>/dev/null | awk '{s+=$1} END {printf "%.0f", s}'; }
python3 - <<'PY'
import json, time, urllib.parse, urllib.request
# PyPI's files host, one large wheel read for at most 8 s or 400 MB: the bandwidth a download here gets
# (a mirror may answer with URLs relative to the JSON's own)
index = "https://pypi.org/pypi/torch/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
url = urllib.parse.urljoin(index, max(meta["urls"], key=lambda u: u["size"])["url"])
got, start = 0, time.monotonic()
with urllib.request.urlopen(url, timeout=60) as body:
    while time.monotonic() - start < 8 and got < 400e6:
        chunk = body.read(1 << 20)
        if not chunk:
            break
        got += len(chunk)
print("EPFORGE_BANDWIDTH", got / (time.monotonic() - start))
PY
echo "EPFORGE_RX $(rx) start"
echo "EPFORGE_MARK $(date +%s.%N) bootstrap-start"
scripts/bootstrap.sh 2>&1 | while IFS= read -r line; do echo "EPFORGE_LINE $(date +%s.%N) $line"; done
rc=${PIPESTATUS[0]}
echo "EPFORGE_MARK $(date +%s.%N) bootstrap-end"
echo "EPFORGE_RX $(rx) bootstrap"
[ "$rc" = 0 ] || { echo "EPFORGE_FAILED bootstrap rc=$rc"; exit "$rc"; }
times > /root/times-before
export ANSIBLE_CALLBACK_PLUGINS=/root/epforge/bench/callback_plugins ANSIBLE_CALLBACKS_ENABLED=task_times
export EPFORGE_TASK_TIMES=/root/task-times.jsonl
.venv/bin/ansible-playbook site.yml
rc=$?
echo "EPFORGE_MARK $(date +%s.%N) site-end"
echo "EPFORGE_RX $(rx) site"
times > /root/times-after
sed 's/^/EPFORGE_TIMES before /' /root/times-before; sed 's/^/EPFORGE_TIMES after /' /root/times-after
sed 's/^/EPFORGE_TASK /' /root/task-times.jsonl
# what the run recorded (bench/facts_diff.py compares two runs' facts)
for f in /etc/ansible/facts.d/*.fact; do
  [ -f "$f" ] && echo "EPFORGE_FACT $(basename "$f") $(base64 -w0 "$f")"
done
exit "$rc"
"""

BOOTSTRAP_PHASES = (
    ("apt", "bootstrap: installing system packages"),
    ("venv", "bootstrap: creating .venv"),
    ("controller packages", "bootstrap: installing the"),
)


def checkout_tar(ref: str = "HEAD") -> bytes:
    """The commit as a clean clone holds it."""
    return subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=ROOT, capture_output=True, check=True
    ).stdout


def build_image(suite: str) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(HARNESS / "containers.conf"), "EPFORGE_DEBIAN_SUITE": suite}
    subprocess.run([str(HARNESS / "build-image.sh")], env=env, check=True, timeout=1800, capture_output=True)
    return f"localhost/epforge-molecule-{suite}:latest"


def run_container(
    image: str, timeout: int, ref: str = "HEAD", preinstall: str = ""
) -> tuple[int, str, float]:
    name = f"epforge-first-run-{os.getpid()}"
    argv = ["podman", "run", "--rm", "-i", "--name", name, f"-eEPFORGE_PREINSTALL={preinstall}"]
    if CA_BUNDLE.exists():
        # this machine's CA bundle (it may sit behind a TLS-inspecting proxy) for apt, pip and Ansible
        argv += ["-v", f"{CA_BUNDLE}:/etc/epforge-ca.crt:ro"]
        argv += [f"-e{k}=/etc/epforge-ca.crt" for k in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
    argv += [image, "bash", "-c", SCRIPT]
    env = {**os.environ, "CONTAINERS_CONF": str(HARNESS / "containers.conf")}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, input=checkout_tar(ref), capture_output=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        subprocess.run(["podman", "rm", "-f", name], env=env, capture_output=True, check=False, timeout=120)
        out = (exc.stdout or b"").decode(errors="replace")
        return 124, out, time.monotonic() - started
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace"), time.monotonic() - started


def recorded_facts(out: str) -> dict:
    """{fact file name: its JSON (or text)} from the run's EPFORGE_FACT lines."""
    facts = {}
    for name, encoded in re.findall(r"^EPFORGE_FACT (\S+) (\S*)$", out, re.M):
        text = base64.b64decode(encoded).decode(errors="replace")
        try:
            facts[name] = json.loads(text)
        except ValueError:
            facts[name] = text
    return facts


def children_cpu(lines: list[str]) -> float:
    """user + sys of the shell's children from bash's `times` (its second line), in seconds."""
    total = 0.0
    for minutes, seconds in re.findall(r"(\d+)m([\d.]+)s", lines[1] if len(lines) > 1 else ""):
        total += int(minutes) * 60 + float(seconds)
    return total


def breakdown(out: str) -> dict:
    marks = {m[2]: float(m[1]) for m in re.finditer(r"^EPFORGE_MARK (\S+) (\S+)$", out, re.M)}
    rx = {m[2]: int(m[1]) for m in re.finditer(r"^EPFORGE_RX (\d+) (\S+)$", out, re.M)}
    lines = [(float(m[1]), m[2]) for m in re.finditer(r"^EPFORGE_LINE (\S+) (.*)$", out, re.M)]
    starts = {}
    for name, prefix in BOOTSTRAP_PHASES:
        starts[name] = next((t for t, text in lines if text.startswith(prefix)), None)
    phases, edges = {}, [t for t in starts.values() if t is not None] + [marks.get("bootstrap-end", 0.0)]
    for name, _prefix in BOOTSTRAP_PHASES:
        if starts[name] is not None:
            later = [t for t in edges if t > starts[name]]
            phases[name] = round(min(later) - starts[name], 1) if later else None
    roles: dict[str, float] = defaultdict(float)
    for match in re.finditer(r"^EPFORGE_TASK (\{.*\})$", out, re.M):
        task = json.loads(match[1])
        role = task.get("role") or "(play)"
        roles[role] += task["end"] - task["start"]
    times = {
        kind: [
            line.split(" ", 3)[3] for line in out.splitlines() if line.startswith(f"EPFORGE_TIMES {kind} ")
        ]
        for kind in ("before", "after")
    }
    bandwidth = re.search(r"^EPFORGE_BANDWIDTH (\S+)$", out, re.M)
    return {
        "caches_empty": "EPFORGE_CACHES_EMPTY" in out,
        "bootstrap_s": round(marks.get("bootstrap-end", 0) - marks.get("bootstrap-start", 0), 1),
        "bootstrap_phases_s": phases,
        "site_s": round(marks.get("site-end", 0) - marks.get("bootstrap-end", 0), 1),
        "roles_s": {k: round(v, 1) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
        "bytes": {
            "bootstrap": rx.get("bootstrap", 0) - rx.get("start", 0),
            "site": rx.get("site", 0) - rx.get("bootstrap", 0),
        },
        "site_cpu_s": round(children_cpu(times["after"]) - children_cpu(times["before"]), 1),
        "bandwidth_bps": float(bandwidth[1]) if bandwidth else None,
    }


def floor_of(b: dict) -> float | None:
    if not b["bandwidth_bps"]:
        return None
    download = (b["bytes"]["bootstrap"] + b["bytes"]["site"]) / b["bandwidth_bps"]
    return round(b["bootstrap_s"] + download + b["site_cpu_s"] / CORES, 1)


def verdict_of(rc: int, wall: float, target: float) -> str:
    if rc != 0:
        return "no verdict: the run failed"
    return "met" if wall <= target else "not met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="bookworm", help="Debian suite of the image (default bookworm)")
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--ref", default="HEAD", help="the commit to run (git archive REF; default HEAD)")
    parser.add_argument("--facts", type=Path, help="write the local facts site.yml recorded here (JSON)")
    parser.add_argument(
        "--preinstall", default="", help="apt packages installed first (the same for two commits compared)"
    )
    args = parser.parse_args()
    image = build_image(args.suite)
    rc, out, wall = run_container(image, args.timeout, args.ref, args.preinstall)
    log = ROOT / ".cache" / "first-run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(out)
    figures = {"suite": args.suite, "rc": rc, "wall_s": round(wall, 1), **breakdown(out)}
    figures["floor_s"] = floor_of(figures)
    target = max(TARGET_S, TARGET_RATIO * figures["floor_s"]) if figures["floor_s"] else TARGET_S
    figures["target_s"] = round(target, 1)
    print(f"first run ({args.suite}, rc {rc}): {wall:.0f} s in the container; log {log}")
    print(f"  caches empty at the start: {figures['caches_empty']}")
    print(f"  bootstrap {figures['bootstrap_s']} s: {figures['bootstrap_phases_s']}")
    print(f"  site.yml {figures['site_s']} s, CPU {figures['site_cpu_s']} s; by role:")
    for role, seconds in figures["roles_s"].items():
        print(f"    {role:<28} {seconds:8.1f} s")
    mib = {k: round(v / 2**20, 1) for k, v in figures["bytes"].items()}
    bandwidth = figures["bandwidth_bps"]
    print(
        f"  received: {mib} MiB at {bandwidth / 2**20:.1f} MiB/s measured"
        if bandwidth
        else f"  received: {mib} MiB"
    )
    if figures["floor_s"]:
        print(
            f"  floor {figures['floor_s']} s (bootstrap + bytes at that bandwidth + CPU on {CORES} cores); "
            f"the run is {wall / figures['floor_s']:.2f}x it; target {figures['target_s']} s "
            f"({verdict_of(rc, wall, target)})"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    if args.facts:
        args.facts.write_text(json.dumps(recorded_facts(out), indent=1, sort_keys=True) + "\n")
    if not figures["caches_empty"]:
        print("a cache was not empty: not a first run", file=sys.stderr)
        return 3
    return rc


if __name__ == "__main__":
    sys.exit(main())
