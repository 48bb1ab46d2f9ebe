#!/usr/bin/env bash
# Install what epforge's controller needs on a fresh Debian/Ubuntu machine, idempotently: system packages
# (gcc for the CUDA link stub, libibverbs-dev for DeepEP's headers, git, rsync) and a venv at .venv with the
# controller's dependencies. `--test` adds what the test suite needs (podman + debootstrap for Molecule test
# hosts, chromium for the report's rendering test, the `test` extra). Safe to run again: it skips what is there.
#
# Usage: scripts/bootstrap.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."

profile=controller
case "${1:-}" in
  "") ;;
  --test) profile=test ;;
  *) echo "bootstrap: unknown argument '$1' (usage: scripts/bootstrap.sh [--test])" >&2; exit 2 ;;
esac

# The controller's Python: EPFORGE_PYTHON, else the newest of python3.13 / 3.12 / 3.11 on PATH (pyproject's
# requires-python; ansible-core 2.19 runs on all three, 2.21 on 3.12+).
pick_python() {
  local candidate
  for candidate in "${EPFORGE_PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null || continue
    if "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else 1)'; then
      echo "$candidate"; return 0
    fi
    [ -n "${EPFORGE_PYTHON:-}" ] && [ "$candidate" = "$EPFORGE_PYTHON" ] && break
  done
  return 1
}

# python3-dev: the README's first command builds the canary extension and FlashInfer's JIT on this machine
# against its Python's headers (a fresh Debian 12 has none: bench/first_run.py, 2026-12-04, "Python.h: No such
# file or directory"); a remote host's roles do not install them yet (issue 41's note).
apt_packages=(libibverbs-dev rsync gnupg gcc g++ dpkg-dev git python3-venv python3-dev)
if [ "$profile" = test ]; then
  # pciutils: the fabric tests read this machine's own lspci -D -vvv (tests/unit/test_pci_fabric.py)
  # ninja-build: the SGLang stand-in runs ninja at start as FlashInfer's JIT does (tests/sglang_standin);
  # tests that run it with the system python as a service account find it on the service PATH
  apt_packages+=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs chromium pciutils ninja-build)
fi
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing system packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python=$(pick_python) || {
  echo "bootstrap: no Python 3.11-3.13 found${EPFORGE_PYTHON:+ (EPFORGE_PYTHON=$EPFORGE_PYTHON is not one)}: install python3 (3.11-3.13)" >&2
  exit 1
}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
# The stamp holds the pyproject hash and the profile; a test install also serves the controller profile.
stamp=.venv/.epforge-deps
digest=$(sha256sum pyproject.toml | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" != "$digest test" ] && [ "$have" != "$digest $profile" ]; then
  spec=.; [ "$profile" = test ] && spec='.[test]'
  echo "bootstrap: installing the $profile dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e "$spec"
  echo "$digest $profile" > "$stamp"
fi
echo "bootstrap: ready for the $profile profile ($(.venv/bin/ansible --version | sed -n 1p))"  # sed reads it all: no broken pipe
