"""Facts only under ansible_facts (issue 41): the top-level ansible_* copies of facts are deprecated in
ansible-core 2.20 and removed in 2.24, so every run of the project sets inject_facts_as_vars false (its
ansible.cfg, the Molecule base config, a user's project in tests/test_collection.py) and no play, role,
scenario or template reads a top-level fact variable."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# The facts the project's plays could read (setup's local facts, and the ones a play most often reaches for);
# the inventory's own ansible_* variables (ansible_host, ansible_python_interpreter, ...) are not facts.
FACT_NAMES = (
    "local",
    "distribution",
    "distribution_version",
    "distribution_major_version",
    "os_family",
    "architecture",
    "machine",
    "hostname",
    "fqdn",
    "nodename",
    "kernel",
    "system",
    "env",
    "user_id",
    "pkg_mgr",
    "service_mgr",
    "processor_vcpus",
    "processor_count",
    "memtotal_mb",
    "default_ipv4",
    "date_time",
    "python_version",
    "virtualization_type",
)
TOP_LEVEL = re.compile(r"(?<![\w'\".\[])ansible_(" + "|".join(FACT_NAMES) + r")\b")
# setup's own fact filter names the fact, it does not read it
SETUP_FILTER = re.compile(r"^\s*filter:\s*ansible_local\s*$")


def play_files() -> list[Path]:
    found = [ROOT / "site.yml"]
    for folder in ("roles", "playbooks", "molecule", "inventory"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".yml", ".yaml", ".j2")]
    return sorted(found)


def test_every_run_of_the_project_keeps_facts_under_ansible_facts():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.getboolean("defaults", "inject_facts_as_vars") is False
    base = yaml.safe_load((ROOT / "molecule" / "_podman" / "base.yml").read_text())
    assert base["ansible"]["cfg"]["defaults"]["inject_facts_as_vars"] is False
    assert 'env["ANSIBLE_INJECT_FACT_VARS"] = "false"' in (ROOT / "tests" / "test_collection.py").read_text()


def test_no_play_reads_a_top_level_fact_variable():
    found = []
    for path in play_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            text = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
            if SETUP_FILTER.match(text):
                continue
            for match in TOP_LEVEL.finditer(text):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert found == [], "read ansible_facts['...'] instead:\n" + "\n".join(found)


def test_the_scan_sees_a_top_level_fact_and_passes_the_namespaced_one():
    assert TOP_LEVEL.search("when: ansible_os_family == 'Debian'")
    assert TOP_LEVEL.search("x: '{{ ansible_local.epforge_bench }}'")
    assert not TOP_LEVEL.search("when: ansible_facts['os_family'] == 'Debian'")
    assert not TOP_LEVEL.search("x: \"{{ ansible_facts['ansible_local'].epforge_bench }}\"")
    assert not TOP_LEVEL.search("ansible_python_interpreter: /usr/bin/python3")
