"""Read and save the recorded results: epforge's local facts from ansible_local or from a directory of saved
facts (DIR/HOST/epforge_NAME.fact), as {host: {NAME: fact}} with NAME the fact's name without `epforge_`."""

from __future__ import annotations

import json
from pathlib import Path


def load_fact_dir(directory: str | Path) -> dict[str, dict]:
    """Facts saved as DIR/HOST/epforge_NAME.fact (or .json) -> {host: {NAME: fact}}."""
    hosts: dict[str, dict] = {}
    base = Path(directory)
    if not base.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory of saved facts (DIR/HOST/epforge_NAME.fact)")
    for host_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        facts = {}
        for path in sorted(host_dir.iterdir()):
            if path.suffix not in (".fact", ".json") or not path.stem.startswith("epforge_"):
                continue
            facts[path.stem[len("epforge_") :]] = json.loads(path.read_text())
        if facts:
            hosts[host_dir.name] = facts
    return hosts


def from_ansible_local(ansible_local: dict) -> dict:
    """ansible_local (setup's local facts) -> {NAME: fact} for the epforge_* facts."""
    return {k[len("epforge_") :]: v for k, v in (ansible_local or {}).items() if k.startswith("epforge_")}


def save_fact_dir(hosts: dict[str, dict], directory: str | Path) -> None:
    for host, facts in hosts.items():
        host_dir = Path(directory) / host
        host_dir.mkdir(parents=True, exist_ok=True)
        for name, fact in facts.items():
            (host_dir / f"epforge_{name}.fact").write_text(json.dumps(fact, indent=1, sort_keys=True) + "\n")
