#!/usr/bin/env bash
# Install what epforge's controller and tests need on a fresh Debian/Ubuntu machine, idempotently:
# system packages (podman for Molecule test hosts, libibverbs-dev for DeepEP's headers, chromium for the
# report's rendering test) and a venv at
# .venv with the controller dependencies and the test extra. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs libibverbs-dev rsync gnupg gcc g++ dpkg-dev git chromium)
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

python=${EPFORGE_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
stamp=.venv/.epforge-deps
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing controller and test dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi
echo "bootstrap: ready ($(.venv/bin/ansible --version | head -1))"
