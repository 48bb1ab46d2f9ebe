#!/usr/bin/env python3
"""ansible-test sanity on the collection as users get it: built from this checkout, installed into a fresh
collections path, tested there (validate-modules holds each module's DOCUMENTATION to its argument_spec).

ansible-test bootstraps pip into each venv it makes with a script it downloads from
ci-files.testing.ansible.com, which machines behind a registry-only firewall cannot reach. It uses a script
cached at ~/.ansible/test/cache/get_pip_<version>.py instead when there is one: this writes one there that
installs the pip wheel of that version, fetched from the package index pip is configured with (PyPI), into a
wheel folder (--wheels, default .cache/pip-bootstrap). A cached script already there is left as it is.

Usage: scripts/collection_sanity.py [--python 3.11] [--test validate-modules ... | --all] [--work DIR]
Exit status: ansible-test's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from build_collection import build

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TESTS = ("validate-modules", "import", "compile", "yamllint")
BOOTSTRAP = """\
# Written by epforge's scripts/collection_sanity.py: get-pip's job done with a pip wheel already fetched.
import runpy, sys
WHEEL = {wheel!r}
DROP = ("--no-setuptools", "--no-wheel")  # get-pip's options that pip install does not know
args = [a for a in sys.argv[1:] if not a.startswith("pip==") and a not in DROP]
sys.path.insert(0, WHEEL)
sys.argv = ["pip", "install", WHEEL, *args]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""


def wanted_pip() -> str:
    """The pip version this ansible-test bootstraps (its python_requirements' default)."""
    import ansible_test  # noqa: PLC0415 - only this command needs it

    source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    found = re.search(r"pip='([\d.]+)'", source.read_text())
    if not found:
        sys.exit(f"cannot tell which pip {source} bootstraps")
    return found.group(1)


def cache_bootstrap(wheels: Path) -> Path:
    version = wanted_pip()
    script = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    if script.exists():
        return script
    wheel = wheels / f"pip-{version}-py3-none-any.whl"
    if not wheel.is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                f"pip=={version}",
                "-d",
                str(wheels),
            ],
            check=True,
            timeout=600,
        )
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(BOOTSTRAP.format(wheel=str(wheel)))
    return script


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    parser.add_argument("--test", action="append", dest="tests", help=f"default: {', '.join(TESTS)}")
    parser.add_argument("--all", action="store_true", help="every test of ansible-test's default set")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".cache" / "pip-bootstrap")
    parser.add_argument("--work", type=Path, help="where to build and install (default: a temporary folder)")
    args = parser.parse_args()
    print(f"pip bootstrap: {cache_bootstrap(args.wheels.resolve())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="epforge-sanity-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        tarball = build(work / "dist")
        collections = work / "collections"
        subprocess.run(
            [
                str(BIN / "ansible-galaxy"),
                "collection",
                "install",
                "--force",
                str(tarball),
                "-p",
                str(collections),
            ],
            check=True,
            timeout=300,
            cwd=work,  # not the checkout: its ansible.cfg already names a collection epforge.ep
        )
        here = collections / "ansible_collections" / "epforge" / "ep"
        argv = [str(BIN / "ansible-test"), "sanity", "--python", args.python, "--color", "no"]
        if args.all:
            # the default set as this ansible-test names it, so a caller can tell that each one ran
            listed = subprocess.run(
                [*argv, "--list-tests"], cwd=here, capture_output=True, text=True, check=True, timeout=300
            ).stdout.split()
            print("sanity tests:", " ".join(listed), flush=True)
        for name in [] if args.all else args.tests or TESTS:
            argv += ["--test", name]
        print("+", " ".join(argv), flush=True)
        return subprocess.run(argv, cwd=here, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
