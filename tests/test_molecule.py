"""Run every Molecule scenario: molecule/*/molecule.yml (molecule/_podman is the shared harness, not one).

Each scenario runs `molecule test` with the shared base config (molecule/_podman/base.yml): create (podman
containers with systemd, from the locally built image), prepare, converge, idempotence (a second converge
that fails on changed > 0), verify, destroy. The image is built first by molecule/_podman/build-image.sh,
a no-op when the image exists with the same recipe. Full logs: .cache/molecule-logs/<scenario>.log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import THIS_MACHINE_GROUP

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "molecule" / "_podman"
BASE_CONFIG = HARNESS / "base.yml"
BUILD_IMAGE = HARNESS / "build-image.sh"
LOG_DIR = ROOT / ".cache" / "molecule-logs"
SCENARIOS = sorted(
    path.parent.name
    for path in (ROOT / "molecule").glob("*/molecule.yml")
    if not path.parent.name.startswith("_")
)
# Seconds: a scenario should take a few minutes.
SCENARIO_TIMEOUT = int(os.environ.get("EPFORGE_MOLECULE_TIMEOUT", "900"))
TAIL_LINES = 120
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def molecule_env(ephemeral_dir: Path | None = None, extra: dict | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    if ephemeral_dir is not None:
        # Molecule keys its state directory on the checkout's folder *name* only, so two runs of one
        # scenario (another checkout, a developer's converge) would share and prune each other's files.
        env["MOLECULE_EPHEMERAL_DIRECTORY"] = str(ephemeral_dir)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["CONTAINERS_CONF"] = str(HARNESS / "containers.conf")
    env["MOLECULE_PROJECT_DIRECTORY"] = str(ROOT)
    env.update(NO_COLOR="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PY_COLORS="0")
    return env


def run_bounded(
    argv: list[str], timeout: int, log: Path, ephemeral_dir: Path | None = None, extra_env: dict | None = None
) -> tuple[int | None, str, float]:
    """Run argv in its own process group; kill the group on timeout. Returns (rc or None, output, seconds)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w+") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=molecule_env(ephemeral_dir, extra_env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        out.seek(0)
        text = ANSI.sub("", out.read())
    return rc, text, time.monotonic() - start


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last lines, preceded by the first Ansible failure when it lies before them."""
    all_lines = text.splitlines()
    start = max(0, len(all_lines) - lines)
    first_failure = next(
        (i for i, line in enumerate(all_lines) if line.startswith(("fatal:", "failed:", "[ERROR]"))), None
    )
    head = []
    if first_failure is not None and first_failure < start:
        head = [*all_lines[first_failure : min(first_failure + 20, start)], "[...]"]
    return "\n".join(head + all_lines[start:])


def scenario_config(scenario: str) -> dict:
    return yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text()) or {}


def uses_podman(scenario: str) -> bool:
    """The base config's driver is podman; a scenario on this machine itself sets another one."""
    return scenario_config(scenario).get("driver", {}).get("name", "podman") == "podman"


def uses_this_machine(scenario: str) -> bool:
    """A scenario that runs on this machine itself, whole (another driver) or in part (localhost in its
    inventory, as the gateway scenario's controller-side gateway)."""
    inventory = scenario_config(scenario).get("provisioner", {}).get("inventory", {})
    return not uses_podman(scenario) or "localhost" in yaml.safe_dump(inventory.get("hosts", {}))


# Scenarios whose verify runs SGLang's real bench_serving client on this machine (the fleet benchmark through
# the gateway): the client venv and a tokenizer come from tests/fixtures/bench_serving/bench_env.py.
BENCH_CLIENT_SCENARIOS = {"gateway"}


def bench_client_env(tmp_path: Path) -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
    import bench_env  # noqa: PLC0415 - test support, only for these scenarios

    python = bench_env.bench_client_python()
    tokenizer = bench_env.make_tokenizer_with(python, tmp_path / "tokenizer")
    return {"EPFORGE_BENCH_CLIENT_PYTHON": str(python), "EPFORGE_BENCH_TOKENIZER": str(tokenizer)}


def test_scenarios_found():
    assert "preflight" in SCENARIOS, f"scenarios found: {SCENARIOS}"


def test_scenario_and_container_names_are_unique():
    """`-s NAME` must find the folder's scenario, and podman platform names must not collide: create.yml
    removes any container of a platform's name before starting it."""
    owners: dict[str, str] = {}
    for scenario in SCENARIOS:
        config = scenario_config(scenario)
        assert config.get("scenario", {}).get("name", scenario) == scenario, (
            f"molecule/{scenario}/molecule.yml renames its scenario; keep the folder name"
        )
        if not uses_podman(scenario):
            continue  # localhost scenarios (delegated driver) start no containers
        for platform in config.get("platforms", []):
            name = platform["name"]
            assert name not in owners, f"platform {name} is used by scenarios {owners[name]} and {scenario}"
            owners[name] = scenario


@pytest.mark.molecule
def test_image_build_is_idempotent(molecule_image):
    """A second build with the same recipe is a no-op (the session fixture did the first one)."""
    rc, text, _seconds = run_bounded([str(BUILD_IMAGE)], 120, LOG_DIR / "build-image-again.log")
    assert rc == 0, tail(text)
    assert "is up to date" in text and "nothing to do" in text, tail(text)
    assert "debootstrap" not in text, f"rebuilt although the recipe did not change:\n{tail(text)}"


@pytest.mark.molecule
@pytest.mark.parametrize(
    "scenario",
    [
        # a scenario on this machine itself shares its state with the other such tests (conftest.py)
        pytest.param(s, marks=pytest.mark.xdist_group(THIS_MACHINE_GROUP)) if uses_this_machine(s) else s
        for s in SCENARIOS
    ],
)
def test_molecule_scenario(scenario, request, record_property, tmp_path):
    if uses_podman(scenario):
        request.getfixturevalue("molecule_image")  # localhost scenarios need no image
    argv = [
        str(Path(sys.executable).parent / "molecule"),
        "--base-config",
        str(BASE_CONFIG),
        "test",
        "--scenario-name",
        scenario,
    ]
    log = LOG_DIR / f"{scenario}.log"
    extra_env = bench_client_env(tmp_path) if scenario in BENCH_CLIENT_SCENARIOS else None
    rc, text, seconds = run_bounded(argv, SCENARIO_TIMEOUT, log, tmp_path, extra_env)
    record_property("duration_s", round(seconds, 1))
    if rc is None:
        # The containers outlive a killed run: remove them so the next run starts clean.
        destroy = [*argv[:3], "destroy", "--scenario-name", scenario]
        run_bounded(destroy, 120, LOG_DIR / f"{scenario}-destroy.log", tmp_path)
        pytest.fail(f"molecule test -s {scenario} ran past {SCENARIO_TIMEOUT} s; output tail:\n{tail(text)}")
    assert rc == 0, (
        f"molecule test -s {scenario} failed (rc {rc}) after {seconds:.0f} s "
        f"(full log: {log.relative_to(ROOT)}); output tail:\n{tail(text)}"
    )
    # The shared sequence must really have converged twice (idempotence) and verified.
    for step in ("create", "converge", "idempotence", "verify", "destroy"):
        assert re.search(rf"\b{re.escape(scenario)}\W+{step}\W+Executed: Successful", text), (
            f"step {step} did not run successfully in scenario {scenario}:\n{tail(text)}"
        )
