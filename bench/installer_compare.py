"""pip or uv for the ML env's torch? Both install the stack's torch into fresh venvs side by side in one fresh
container of the supported Debian (issue 41: the first run's largest step is role ml_env's pip install), with
empty caches, and the installed sets are compared.

    .venv/bin/python bench/installer_compare.py [--torch 2.14.1] [--suite bookworm]

Prints each installer's seconds, their ratio, and whether `pip freeze` of the two envs is the same set. Needs
podman and the network (PyPI: a 3.5 GB download per installer).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.epforge.ep.plugins.module_utils.installer import (  # noqa: E402 - after the path
    UV_OWN_FLAGS,
    UV_REQUIREMENT,
)

HARNESS = ROOT / "molecule" / "_podman"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

# Inside the container: uv in a tools venv of its own; pip's and uv's caches empty before each install.
SCRIPT = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null
python3 -m venv /tmp/tools && /tmp/tools/bin/pip install -q --no-cache-dir "$UV_PIN"
echo "EPFORGE_UV $(/tmp/tools/bin/uv --version)"
clock() { python3 -c 'import time; print(time.monotonic())'; }
rm -rf /root/.cache/pip /root/.cache/uv
python3 -m venv /tmp/pip-env
s=$(clock); /tmp/pip-env/bin/python -m pip install -q --no-input "torch==$TORCH"; e=$(clock)
echo "EPFORGE_SECONDS pip $s $e"
rm -rf /root/.cache/pip /root/.cache/uv
python3 -m venv /tmp/uv-env
# the installer owner's own flags (installer.py UV_OWN_FLAGS: bytecode written as pip writes it)
s=$(clock); /tmp/tools/bin/uv pip install -q $OWN_FLAGS --python /tmp/uv-env/bin/python "torch==$TORCH"
e=$(clock)
echo "EPFORGE_SECONDS uv $s $e"
# one lister for both envs (each venv's own pip, --all: pip and setuptools count too)
/tmp/pip-env/bin/python -m pip freeze --all | sort > /tmp/pip.txt
/tmp/uv-env/bin/python -m pip freeze --all | sort > /tmp/uv.txt
if diff /tmp/pip.txt /tmp/uv.txt > /tmp/diff.txt; then echo "EPFORGE_SAME $(wc -l < /tmp/pip.txt)"; fi
sed 's/^/EPFORGE_DIFF /' /tmp/diff.txt
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="2.14.1", help="torch version (default: the cu130 stack's)")
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("--timeout", type=int, default=1800)
    args = parser.parse_args()
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(HARNESS / "containers.conf"),
        "EPFORGE_DEBIAN_SUITE": args.suite,
    }
    subprocess.run([str(HARNESS / "build-image.sh")], env=env, check=True, timeout=1800, capture_output=True)
    argv = ["podman", "run", "--rm", "-i", "--name", f"epforge-installer-compare-{os.getpid()}"]
    if CA_BUNDLE.exists():
        argv += ["-v", f"{CA_BUNDLE}:/etc/epforge-ca.crt:ro"]
        argv += [f"-e{k}=/etc/epforge-ca.crt" for k in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
    argv += [f"-eTORCH={args.torch}", f"-eUV_PIN={UV_REQUIREMENT}", f"-eOWN_FLAGS={' '.join(UV_OWN_FLAGS)}"]
    argv += [f"localhost/epforge-molecule-{args.suite}:latest", "bash"]
    proc = subprocess.run(
        argv, input=SCRIPT, text=True, capture_output=True, env=env, timeout=args.timeout, check=False
    )
    out = proc.stdout + proc.stderr
    seconds = {
        m[0]: float(m[2]) - float(m[1]) for m in re.findall(r"^EPFORGE_SECONDS (\S+) (\S+) (\S+)$", out, re.M)
    }
    if proc.returncode != 0 or set(seconds) != {"pip", "uv"}:
        print(out[-4000:], file=sys.stderr)
        return proc.returncode or 1
    uv = re.search(r"^EPFORGE_UV (.+)$", out, re.M)
    same = re.search(r"^EPFORGE_SAME (\d+)$", out, re.M)
    tool = uv[1] if uv else "uv"
    print(f"torch=={args.torch} into a fresh venv, caches empty, {args.suite} container ({tool}):")
    ratio = seconds["uv"] / seconds["pip"]
    print(f"  pip {seconds['pip']:.1f} s, uv {seconds['uv']:.1f} s: uv takes {ratio:.2f}x pip's time")
    if same:
        print(f"  the same {same[1]} distributions installed (pip freeze of both envs)")
    else:
        print("  the installed sets differ:")
        for line in re.findall(r"^EPFORGE_DIFF (.*)$", out, re.M):
            print(f"    {line}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
