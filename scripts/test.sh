#!/usr/bin/env bash
# The whole test suite: lint (ruff, ansible-lint production profile) and pytest, which runs the unit tests
# and every Molecule scenario (podman test hosts, localhost toolchain builds).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
export PATH="$PWD/.venv/bin:$PATH"
export CONTAINERS_CONF="$PWD/molecule/_podman/containers.conf"
# One command per line: under `set -e` a failure before the last command of an && list would not stop the script.
echo "== ruff"
ruff check .
ruff format --check .
echo "== ansible-lint"; ansible-lint --offline -q
# Four workers on the 2-core machine: the Molecule scenarios in podman containers and the other tests that need
# nothing of this machine's own state run beside the tests that do (one group, one worker: tests/conftest.py
# THIS_MACHINE_FILES). Most tests wait on containers, servers and downloads: two workers kept the CPUs 56 % busy
# (2026-12-05, 38 min), three 70 % (27.5 min). EPFORGE_TEST_WORKERS=0 runs everything in this process, in order.
echo "== pytest"; pytest -ra --durations=25 -n "${EPFORGE_TEST_WORKERS:-4}" --dist loadgroup "$@"
