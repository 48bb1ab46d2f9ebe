"""The local facts the stand-in scenarios leave from a clean state, at a given commit, for bench/facts_diff.py
(issue 40: behaviour does not change across the refactor).

The commit's product code (roles, modules, plugins, playbooks: `git archive REF`) runs under THIS checkout's
test harness (molecule/ and tests/ copied over it), with this checkout's venv and caches, so that two commits
meet the same scenarios, containers and stand-in - only the code under test differs:
- tune: tests/unit/test_tune.py, the stand-in tune that picks the fastest candidate and leaves it serving;
- sweep: tests/unit/test_sweep.py, five configurations and the server restored;
- gateway, multinode: Molecule's steps one at a time (create, prepare, converge, idempotence, verify), the
  facts read from every container and from this machine's facts folders of the scenario before its cleanup
  and destroy.
Writes one JSON per scenario, {"HOST:FILE.fact": content}, into --out (a folder).

    .venv/bin/python bench/scenario_facts.py --ref f0d31b9 --out /tmp/facts-before   # before issue 40
    .venv/bin/python bench/scenario_facts.py --ref HEAD --out /tmp/facts-after
    for s in tune sweep gateway multinode; do
      .venv/bin/python bench/facts_diff.py /tmp/facts-before/$s.json /tmp/facts-after/$s.json; done

Needs podman (the molecule image, tests/test_molecule.py builds it). About 10 minutes per commit here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
PYTEST_SCENARIOS = {
    "tune": "tests/unit/test_tune.py::test_tune_picks_the_fastest_valid_candidate_and_leaves_it_serving",
    "sweep": (
        "tests/unit/test_sweep.py::test_sweep_records_ok_refused_and_failed_and_restores_the_server_before_it"
    ),
}
MOLECULE_SCENARIOS = ("gateway", "multinode")
MOLECULE_STEPS = ("create", "prepare", "converge", "idempotence", "verify")
HARNESS = ("molecule", "tests")


def checkout(ref: str, into: Path) -> None:
    """REF's tree with this checkout's harness over it, and this checkout's caches linked in."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for name in HARNESS:
        shutil.rmtree(into / name, ignore_errors=True)
        shutil.copytree(ROOT / name, into / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (into / ".cache").symlink_to(ROOT / ".cache")


def read_facts(files: dict[str, str]) -> dict[str, object]:
    out = {}
    for key, text in sorted(files.items()):
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


def local_facts(folder: Path, prefix: str) -> dict[str, str]:
    return {f"{prefix}{p.relative_to(folder)}": p.read_text() for p in sorted(folder.rglob("*.fact"))}


def pytest_scenario(tree: Path, test: str, work: Path) -> tuple[int, dict]:
    kept = work / "facts"
    env = dict(
        os.environ,
        CONTAINERS_CONF=str(tree / "molecule" / "_podman" / "containers.conf"),
        EPFORGE_KEEP_FACTS_DIR=str(kept),  # bench_env.service_base_dir copies the test's facts there
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n0", test]
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    (work / "pytest.log").write_text(proc.stdout + proc.stderr)
    return proc.returncode, read_facts(local_facts(kept, "")) if kept.is_dir() else {}


def molecule_hosts(tree: Path, scenario: str) -> tuple[list[str], list[Path]]:
    """(the scenario's containers, the facts folders its localhost uses on this machine)."""
    config = yaml.safe_load((tree / "molecule" / scenario / "molecule.yml").read_text())
    containers = [p["name"] for p in config.get("platforms", [])]
    host_vars = config.get("provisioner", {}).get("inventory", {}).get("host_vars", {})
    folders = [Path(v["epforge_facts_dir"]) for v in host_vars.values() if "epforge_facts_dir" in v]
    return containers, folders


def container_facts(name: str) -> dict[str, str]:
    script = "find /etc/ansible/facts.d /var/lib -name '*.fact' -type f 2>/dev/null | sort"
    found = subprocess.run(
        ["podman", "exec", name, "sh", "-c", script], capture_output=True, text=True, check=False
    )
    out = {}
    for path in found.stdout.split():
        text = subprocess.run(
            ["podman", "exec", name, "cat", path], capture_output=True, text=True, check=False
        )
        out[f"{name}:{path}"] = text.stdout
    return out


def molecule_scenario(tree: Path, scenario: str, work: Path) -> tuple[int, dict]:
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        CONTAINERS_CONF=str(tree / "molecule" / "_podman" / "containers.conf"),
        MOLECULE_PROJECT_DIRECTORY=str(tree),
        MOLECULE_EPHEMERAL_DIRECTORY=str(work / "molecule"),
        NO_COLOR="1",
        ANSIBLE_NOCOLOR="1",
    )
    if scenario == "gateway":  # the fleet benchmark's client, as tests/test_molecule.py gives it
        sys.path.insert(0, str(tree / "tests" / "fixtures" / "bench_serving"))
        import bench_env  # noqa: PLC0415 - test support

        python = bench_env.bench_client_python()
        env["EPFORGE_BENCH_CLIENT_PYTHON"] = str(python)
        env["EPFORGE_BENCH_TOKENIZER"] = str(bench_env.make_tokenizer_with(python, work / "tokenizer"))
    base = [str(VENV_BIN / "molecule"), "--base-config", str(tree / "molecule" / "_podman" / "base.yml")]
    rc = 0
    with (work / "molecule.log").open("w") as log:
        for step in MOLECULE_STEPS:
            rc = subprocess.run(
                [*base, step, "--scenario-name", scenario],
                check=False,
                cwd=tree,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
            if rc:
                break
        containers, folders = molecule_hosts(tree, scenario)
        files = {}
        for name in containers:
            files.update(container_facts(name))
        for folder in folders:
            if folder.is_dir():
                files.update(local_facts(folder, f"localhost:{folder}/"))
        for step in ("cleanup", "destroy"):
            subprocess.run(
                [*base, step, "--scenario-name", scenario],
                check=False,
                cwd=tree,
                env=env,
                stdout=log,
                stderr=log,
            )
    return rc, read_facts(files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenarios", default="tune,sweep,gateway,multinode")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work_root = Path(tempfile.mkdtemp(prefix="epforge-scenario-facts-"))
    work_root.chmod(0o755)  # the stand-in server runs as an unprivileged account from the tree's tests/
    tree = work_root / "tree"
    checkout(args.ref, tree)
    failed = []
    for scenario in args.scenarios.split(","):
        work = work_root / scenario
        work.mkdir()
        if scenario in PYTEST_SCENARIOS:
            rc, facts = pytest_scenario(tree, PYTEST_SCENARIOS[scenario], work)
        else:
            rc, facts = molecule_scenario(tree, scenario, work)
        (args.out / f"{scenario}.json").write_text(json.dumps(facts, indent=1, sort_keys=True))
        print(f"{scenario}: rc {rc}, {len(facts)} fact files (log in {work})", flush=True)
        if rc:
            failed.append(scenario)
    print(f"facts in {args.out}; work in {work_root}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
