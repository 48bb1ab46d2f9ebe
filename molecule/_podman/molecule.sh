#!/usr/bin/env bash
# Run Molecule the way the test suite does: with the shared base config (molecule/_podman/base.yml), the
# podman settings (containers.conf) and the project's venv. The image is built by create.yml when needed.
# Examples:  molecule/_podman/molecule.sh test -s preflight
#            molecule/_podman/molecule.sh converge -s preflight && molecule/_podman/molecule.sh login -s preflight
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export CONTAINERS_CONF="$root/molecule/_podman/containers.conf"
export MOLECULE_PROJECT_DIRECTORY="$root"
[ -x "$root/.venv/bin/molecule" ] && export PATH="$root/.venv/bin:$PATH"
command -v molecule >/dev/null || { echo "molecule not found: run scripts/bootstrap.sh" >&2; exit 1; }
exec molecule --base-config "$root/molecule/_podman/base.yml" "$@"
