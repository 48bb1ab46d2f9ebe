#!/usr/bin/env python3
"""Build the collection epforge.ep from this checkout: lay its content out as a collection, then run
`ansible-galaxy collection build` on that layout.

The checkout keeps modules in library/ (the layout the project was specified with) and plugins/modules is a
link to it, so that the checkout itself serves as the collection (collections/ links back here). A collection
tarball must hold real files: ansible-test refuses a linked directory, and skips linked modules in
validate-modules. So the build copies CONTENT with links resolved into a staging folder and builds there.

Usage: scripts/build_collection.py [--output-path dist]   (prints the tarball's path)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the collection carries: its metadata, plugins (modules from library/), roles, and the stacks, data
# and extension sources roles read, and ansible-test's ignore files (tests/sanity: each line with its reason).
# Playbooks, inventories, the other tests and the CLI stay in the checkout.
CONTENT = (
    "galaxy.yml",
    "README.md",
    "CHANGELOG.md",
    "meta",
    "plugins",
    "roles",
    "stacks",
    "data",
    "extensions",
    "docs",
    "tests/sanity",
)
NEVER = shutil.ignore_patterns("__pycache__", "*.pyc")


def stage(into: Path) -> Path:
    """The collection laid out under `into`/ansible_collections/epforge/ep, links resolved."""
    root = into / "ansible_collections" / "epforge" / "ep"
    root.mkdir(parents=True)
    for name in CONTENT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, symlinks=False, ignore=NEVER)
        else:
            shutil.copy2(source, root / name)
    return root


def build(output: Path) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    ansible_galaxy = Path(sys.executable).parent / "ansible-galaxy"
    with tempfile.TemporaryDirectory(prefix="epforge-collection-") as tmp:
        root = stage(Path(tmp))
        proc = subprocess.run(
            [str(ansible_galaxy), "collection", "build", str(root), "--output-path", str(output), "--force"],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    if proc.returncode != 0:
        sys.exit(
            f"ansible-galaxy collection build failed (rc {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    built = proc.stdout.strip().splitlines()[-1].rpartition(" at ")[2]
    return Path(built)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-path", type=Path, default=ROOT / "dist")
    print(build(parser.parse_args().output_path.resolve()))


if __name__ == "__main__":
    main()
