"""The README's first command on clean controllers with other Pythons: Debian 12 (python 3.11, ansible-core
2.19) and Debian 13 (python 3.13, ansible-core 2.21). Each runs in a fresh podman container from a
debootstrap image built locally (molecule/_podman/build-image.sh with EPFORGE_DEBIAN_SUITE): a copy of this
checkout (tracked and untracked-but-not-ignored files), `scripts/bootstrap.sh` (its controller profile, as
the README's first command: apt + the venv from PyPI, so the container needs the network), then
`ansible-playbook site.yml --check` against the embedded localhost inventory. The play must end with
failed=0 and print the per-host summary. On Debian 13 (ansible-core 2.21, the newest controller users run)
site.yml runs for real instead - the toolkit, torch, the canary build, FlashInfer's JIT, SGLang's parser and
the checks, as on a user's first run - and then again, which must report changed=0 (issue 41). The container
then runs ansible-test sanity on the collection built from that copy (scripts/collection_sanity.py --all:
the whole default set) with Python 3.13 and ansible-core 2.21.

CI cost (measured 2026-12-01 on the 2-core machine, the suites one after the other, images already built:
trixie's image build takes about 5 min once per recipe; bookworm's is the Molecule image): both suites in
335 s. Debian 12: bootstrap 115 s (controller profile: apt gcc/git/headers, the venv from PyPI), check run of
site.yml 55 s; Debian 13: 104 s and 32 s; each ok=92 changed=13 failed=0. (With the test extra in the
bootstrap, before the controller profile existed, each suite took about 20 min under load.) The figure per run
is in the JUnit property `duration_s`. On 2026-12-04 with ansible-core 2.21.5 on Debian 13 (the sanity
set now whole, 24 tests): bootstrap 31 s, check run 5 s, sanity 61 s, 100 s in all. On 2026-12-05 with the
real run on Debian 13: bootstrap 23 s, site.yml 149 s (changed=17), its rerun 7 s (changed=0), sanity 55 s,
245 s in all. A third container (Debian 13 again) runs the unit tests under 2.21 (see UNIT_NEEDS below):
240 s on 2026-12-05 (bootstrap 70 s, 1579 tests 161 s). `-m "not controller"`
leaves them out of a quick local run, never out of the test command.
Logs: .cache/controller-logs/<suite>.log.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "molecule" / "_podman"
LOG_DIR = ROOT / ".cache" / "controller-logs"
TIMEOUT = int(os.environ.get("EPFORGE_CONTROLLER_TIMEOUT", "1500"))
SUITES = {"bookworm": ("3.11", "2.19"), "trixie": ("3.13", "2.21")}
# Where ansible-test sanity also runs on the built collection (scripts/collection_sanity.py): the newest
# Python and ansible-core users run; the test command runs it with this machine's Python too
# (tests/test_collection.py).
SANITY_SUITES = ("trixie",)
# Where site.yml runs for real (then its no-op rerun) instead of in check mode: the newest controller users
# run (issue 41); Debian 12's leg keeps the check run, and the real provisioning on 2.19 / 3.11 is this
# machine's own (the Molecule scenarios and bench/first_run.py).
REAL_RUN_SUITES = ("trixie",)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TMPFS_GIB = 24  # above preflight's default 20 GiB for a building run
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)

# Inside the container: the checkout arrives on stdin as a tar; the README's first command, in check mode.
SCRIPT = r"""
set -euo pipefail
mkdir -p /root/epforge && tar -x -C /root/epforge && cd /root/epforge
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
scripts/bootstrap.sh
echo "EPFORGE_BOOTSTRAP_SECONDS $(( $(date +%s) - start ))"
.venv/bin/python -c 'import sys; from ansible.release import __version__ as v
print("EPFORGE_VERSIONS", sys.version.split()[0], v)'
start=$(date +%s)
if [ "${EPFORGE_REAL_RUN:-0}" = 1 ]; then
  # the README's first command as a user runs it: real installs, builds and checks, then its no-op rerun
  .venv/bin/ansible-playbook site.yml
  echo "EPFORGE_REAL_SECONDS $(( $(date +%s) - start ))"
  start=$(date +%s)
  echo "EPFORGE_RERUN"
  .venv/bin/ansible-playbook site.yml
  echo "EPFORGE_RERUN_SECONDS $(( $(date +%s) - start ))"
else
  .venv/bin/ansible-playbook site.yml --check
  echo "EPFORGE_CHECK_SECONDS $(( $(date +%s) - start ))"
fi
if [ "${EPFORGE_SANITY:-0}" = 1 ]; then
  start=$(date +%s)
  # ansible-test runs pip with an environment of its own (no PIP_CERT): the CA bundle goes in pip's config
  if [ -n "${PIP_CERT:-}" ]; then printf '[global]\ncert = %s\n' "$PIP_CERT" > /etc/pip.conf; fi
  .venv/bin/python scripts/collection_sanity.py --all
  echo "EPFORGE_SANITY_SECONDS $(( $(date +%s) - start ))"
fi
"""


def checkout_tar() -> bytes:
    """This checkout as a fresh clone would hold it, plus uncommitted files git does not ignore."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in filter(None, names):
            path = ROOT / name.decode()
            if path.is_file() or path.is_symlink():
                archive.add(path, arcname=name.decode(), recursive=False)
    return buffer.getvalue()


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(HARNESS / "containers.conf")}


def suite_image_built(suite: str) -> str:
    """The suite's debootstrap image, built once (build-image.sh serialises parallel callers)."""
    image = f"localhost/epforge-molecule-{suite}:latest"
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = {**podman_env(), "EPFORGE_DEBIAN_SUITE": suite}
    proc = subprocess.run(
        [str(HARNESS / "build-image.sh")], env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    (LOG_DIR / f"build-image-{suite}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"building the {suite} image failed:\n{proc.stderr[-4000:]}"
    return image


@pytest.fixture(scope="module", params=sorted(SUITES))
def suite_image(request) -> tuple[str, str]:
    return request.param, suite_image_built(request.param)


def ca_bundle_args() -> list[str]:
    """This machine's CA bundle (it may sit behind a TLS-inspecting proxy) for apt, pip and Ansible."""
    if not CA_BUNDLE.exists():
        return []
    return [
        "-v",
        f"{CA_BUNDLE}:/etc/epforge-ca.crt:ro",
        "-e",
        "PIP_CERT=/etc/epforge-ca.crt",
        "-e",
        "SSL_CERT_FILE=/etc/epforge-ca.crt",
        "-e",
        "REQUESTS_CA_BUNDLE=/etc/epforge-ca.crt",
    ]


def run_container(argv: list[str], log: Path) -> tuple[int | None, str, float]:
    """podman run ARGV with this checkout on stdin: (rc or None on timeout, output, seconds); log written."""
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, input=checkout_tar(), capture_output=True, timeout=TIMEOUT, env=podman_env(), check=False
        )
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        rc = proc.returncode
    except subprocess.TimeoutExpired as exc:
        subprocess.run(
            ["podman", "rm", "-f", argv[argv.index("--name") + 1]],
            capture_output=True,
            timeout=120,
            check=False,
            env=podman_env(),
        )
        out, rc = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace"), None
    log.write_text(out)
    return rc, out, time.monotonic() - started


@pytest.mark.controller
def test_readme_first_command_on_a_clean_controller(suite_image, record_property):
    suite, image = suite_image
    python, core = SUITES[suite]
    argv = ["podman", "run", "--rm", "-i", "--name", f"epforge-controller-{suite}-{os.getpid()}"]
    argv += ca_bundle_args()
    if suite in SANITY_SUITES:
        argv += ["-e", "EPFORGE_SANITY=1"]
    if suite in REAL_RUN_SUITES:
        argv += ["-e", "EPFORGE_REAL_RUN=1"]
    # site.yml builds, so preflight wants 20 GiB free on /var/lib/epforge; the free disk of a CI machine
    # during the suite varies (16.9 GiB on 2026-12-03 refused both suites). A tmpfs of that size gives the
    # check run a filesystem of known size (check mode writes nothing there); the disk check itself is
    # tested in tests/unit/test_preflight_checks.py.
    argv += ["--mount", f"type=tmpfs,destination=/var/lib/epforge,tmpfs-size={TMPFS_GIB}g"]
    argv += [image, "bash", "-c", SCRIPT]
    log = LOG_DIR / f"{suite}.log"
    rc, out, seconds = run_container(argv, log)
    record_property("duration_s", round(seconds, 1))
    tail = "\n".join(out.splitlines()[-60:])
    assert rc == 0, f"{suite}: rc {rc} after {seconds:.0f} s (log {log}):\n{tail}"
    versions = re.search(r"^EPFORGE_VERSIONS (\S+) (\S+)", out, re.MULTILINE)
    assert versions, tail
    assert versions.group(1).startswith(python + "."), f"{suite} ran python {versions.group(1)}, not {python}"
    assert versions.group(2).startswith(core + "."), f"{suite} resolved ansible-core {versions.group(2)}"
    recap = RECAP.findall(out)
    assert recap, tail
    assert all(int(failed) == 0 and int(unreachable) == 0 for _h, _o, _c, unreachable, failed in recap), tail
    # ansible-core 2.21 warns of a module result whose `failed` is not a bool (the preflight's list of failed
    # checks was one until 2026-12-05)
    assert "must be of type bool" not in out and "was converted to bool" not in out, tail
    if suite in REAL_RUN_SUITES:
        first, rerun = out.split("EPFORGE_RERUN\n", 1)
        assert "EPFORGE_REAL_SECONDS" in first and "EPFORGE_RERUN_SECONDS" in rerun, tail
        # the first run did real work (torch, the toolkit, the canary, FlashInfer's JIT); the rerun none
        assert int(RECAP.findall(first)[-1][2]) > 0, tail
        assert [int(changed) for _h, _o, changed, _u, _f in RECAP.findall(rerun)] == [0], tail
        assert "canary" in first and "DONE  cuda_extension:epforge_canary" in first, tail
    else:
        assert "EPFORGE_CHECK_SECONDS" in out
    if suite in SANITY_SUITES:
        # the whole default set, each test it lists run, none failing (the rc of the script is the run's)
        assert "EPFORGE_SANITY_SECONDS" in out, tail
        assert f'Running sanity test "import" on Python {python}' in out, tail
        listed = re.search(r"^sanity tests: (.+)$", out, re.M).group(1).split()
        assert "pylint" in listed and all(f'Running sanity test "{name}"' in out for name in listed), tail
        assert "ERROR:" not in out, tail
    print(f"{suite}: python {versions.group(1)}, ansible-core {versions.group(2)}, {seconds:.0f} s")


# The unit tests under the newest ansible-core users run (issue 41), in a Debian 13 container of their own
# (beside the leg above, on another worker): every test of tests/unit except those that need what only this
# machine's test setup holds - the tests that use a fixture of MACHINE_SETUP_FIXTURES (tests/conftest.py:
# CUDA 13, torch envs, the bench client, SGLang's parser envs, the Molecule image; marked machine_setup), the
# files that start podman hosts, Chromium, the SGLang stand-in server or the Hub mirror (UNIT_NEEDS) - and the
# files that provision this machine itself (THIS_MACHINE_FILES, playbooks against localhost: on 2.21 the leg
# above runs site.yml for real). What those left out test of ansible-core (module arguments and results,
# action plugins, role argument specs) the tests kept test too; all of them run here under 2.19.
UNIT_NEEDS = ("podman", "chromium", "standin", "hub_mirror")
UNIT_SUITE = "trixie"

UNIT_SCRIPT = r"""
set -euo pipefail
mkdir -p /root/epforge && tar -x -C /root/epforge && cd /root/epforge
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
scripts/bootstrap.sh
# the test extra (pytest and what the kept files import) and the two tools they run beyond the controller
# profile: lspci (the fabric tests read this machine's) and ninja (extension builds)
.venv/bin/pip install -q -e '.[test]'
apt-get install -y -qq pciutils ninja-build > /dev/null
echo "EPFORGE_BOOTSTRAP_SECONDS $(( $(date +%s) - start ))"
.venv/bin/python -c 'import sys; from ansible.release import __version__ as v
print("EPFORGE_VERSIONS", sys.version.split()[0], v)'
start=$(date +%s)
git init -q && git add -A  # test_layout reads the tracked files, as in a clone
.venv/bin/python -m pytest -p no:cacheprovider -n 0 -q -ra -m "not machine_setup" "$@"
echo "EPFORGE_UNIT_SECONDS $(( $(date +%s) - start ))"
"""


def unit_files_for_the_newest_controller() -> list[str]:
    """The files of tests/unit the newest controller's leg runs (the rule above UNIT_NEEDS)."""
    from conftest import THIS_MACHINE_FILES  # noqa: PLC0415 - the test suite's own rule, one owner

    return [
        f"tests/unit/{path.name}"
        for path in sorted((ROOT / "tests" / "unit").glob("test_*.py"))
        if path.name not in THIS_MACHINE_FILES and not any(need in path.read_text() for need in UNIT_NEEDS)
    ]


def test_the_unit_tests_on_the_newest_controller_pick_the_ansible_facing_files():
    files = unit_files_for_the_newest_controller()
    # the module docs and argument specs, the action and callback plugins, module results: kept
    for kept in (
        "test_module_docs.py",
        "test_module_result.py",
        "test_payload_store.py",
        "test_installer.py",
    ):
        assert f"tests/unit/{kept}" in files
    # the stand-in's and this machine's own: left out
    assert "tests/unit/test_tune.py" not in files and "tests/unit/test_ml_env.py" not in files
    assert len(files) >= 50, files


@pytest.mark.controller
def test_unit_tests_under_the_newest_controller(record_property):
    python, core = SUITES[UNIT_SUITE]
    image = suite_image_built(UNIT_SUITE)
    files = unit_files_for_the_newest_controller()
    argv = ["podman", "run", "--rm", "-i", "--name", f"epforge-unit-{UNIT_SUITE}-{os.getpid()}"]
    # test_files mounts a tiny tmpfs to fill a disk; the container is this test's alone
    argv += ["--privileged", *ca_bundle_args()]
    argv += [image, "bash", "-c", UNIT_SCRIPT, "unit", *files]
    rc, out, seconds = run_container(argv, LOG_DIR / f"unit-{UNIT_SUITE}.log")
    record_property("duration_s", round(seconds, 1))
    tail = "\n".join(out.splitlines()[-80:])
    assert rc == 0, f"unit tests on {UNIT_SUITE}: rc {rc} after {seconds:.0f} s:\n{tail}"
    versions = re.search(r"^EPFORGE_VERSIONS (\S+) (\S+)", out, re.MULTILINE)
    assert (
        versions and versions.group(1).startswith(python + ".") and versions.group(2).startswith(core + ".")
    )
    summary = re.search(r"^(\d+) passed(?:, (\d+) skipped)?", out, re.MULTILINE)
    assert summary and int(summary.group(1)) > 500, tail
    assert "failed" not in summary.group(0) and "error" not in summary.group(0), tail
    print(f"unit tests on {UNIT_SUITE}: {summary.group(0)}, {len(files)} files, {seconds:.0f} s")
