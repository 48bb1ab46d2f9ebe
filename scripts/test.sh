#!/usr/bin/env bash
# The whole test suite: lint (ruff, ansible-lint production profile) and pytest, which runs the unit tests
# and every Molecule scenario (podman test hosts, localhost toolchain builds).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
export PATH="$PWD/.venv/bin:$PATH"
export CONTAINERS_CONF="$PWD/molecule/_podman/containers.conf"
echo "== ruff"; ruff check . && ruff format --check .
echo "== ansible-lint"; ansible-lint --offline -q
echo "== pytest"; pytest -ra --durations=25 "$@"
