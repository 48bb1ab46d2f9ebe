#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module (controller side): a wheelhouse that covers every pip run a host's roles make."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheelhouse_build
short_description: Download once every wheel a host needs, for its python and platform, into a wheelhouse
description:
  - Runs on the controller (delegate_to localhost). Computes the pip runs the roles will make on a host
    (plugins/module_utils/wheelhouse.py requirement_groups, from the stack and I(choice)), in order.
  - For each run, first asks pip whether the wheelhouse alone satisfies it (C(pip install --dry-run --no-index
    --find-links DIRECTORY --report), for the host's python version, ABI and manylinux platforms, against
    what the host's env already holds, given as I(installed)). pip's configuration files and C(PIP_*)
    variables are ignored for this check, so only the wheelhouse counts.
  - When the wheelhouse falls short and I(download=true), resolves the run against the registry (pip's own
    configuration), then C(pip download --no-deps) only the wheels that are not there. A wheel a user put
    in the directory (a trimmed vendor build, for example) is used when its name and version fit and is
    recorded with its hash.
  - "Every wheel is checked against the hashes the wheelhouse's manifests recorded before anything uses it
    (a file is hashed again whenever its size, mtime, ctime or inode differ from those in I(hash_cache)):
    a recorded wheel replaced by other bytes fails the run with I(download=false), naming the file (returned
    in C(mismatched)), and is removed to be downloaded again with I(download=true) (C(redownloaded)). A
    manifest naming anything but a plain wheel file name (for example C(../outside/x.whl)) is refused."
  - Writes C(DIRECTORY/manifests/DIGEST.json) (the inputs, every wheel's sha256 and which run needs it) and
    returns the sha256 of that file's bytes (C(manifest_sha256)). A rerun with the same inputs and unchanged
    files runs no pip at all (changed=false).
  - "With I(download=false) the wheelhouse was carried in, and a manifest beside the wheels could have been
    replaced together with them: the run uses it only when the sha256 of this host's manifest file equals
    the one given in I(manifest_sha256) (the digest its build returned, carried apart from the wheelhouse).
    Without that digest, without a manifest for this host, or with another digest, it fails naming the
    manifest file (and both digests) before any pip run or write. Only that manifest's hashes count then,
    and the manifest is never rewritten."
  - When it falls short and I(download=false) (a controller with no registry), fails naming the requirement
    pip could not find, before anything changes on any host.
  - Distributions named in I(protect) (torch) that the env already holds must not be replaced by any run;
    the module fails naming what would replace them.
  - Check mode resolves (read-only) and reports what would be downloaded.
options:
  directory:
    description: The wheelhouse on the controller (C(epforge_wheelhouse)).
    type: path
    required: true
  stack:
    description: The stack (C(epforge_stack_spec)).
    type: dict
    required: true
  choice:
    description: The roles' settings that change what they install (keys in requirement_groups' docstring).
    type: dict
    default: {}
  python_version:
    description: The host env's python version (MAJOR.MINOR[.PATCH]).
    type: str
    required: true
  machine:
    description: The host's machine (C(x86_64), C(aarch64)).
    type: str
    required: true
  glibc:
    description: The host's glibc version (decides the manylinux platforms).
    type: str
    required: true
  installed:
    description: Distributions the host's env already holds (name -> version); pip keeps them when they fit.
    type: dict
    default: {}
  protect:
    description: Distributions that no run may replace when the env already holds them.
    type: list
    elements: str
    default: [torch]
  download:
    description: Fetch what the wheelhouse lacks from the registry (false on a controller without one).
    type: bool
    default: true
  pip:
    description: pip as argv on the controller (it must accept C(--dry-run) with C(--platform), pip >= 24).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds each pip run may take.
    type: int
    default: 3600
  manifest_sha256:
    description:
      - The sha256 of the manifest file the build wrote for this host (its C(manifest_sha256)), as one
        digest, or a mapping manifest file name (C(0123456789abcdef.json), C(.json) optional) -> digest for a
        wheelhouse built for several kinds of hosts.
      - Required with I(download=false); ignored otherwise.
    type: raw
  hash_cache:
    description:
      - Controller file that keeps each wheel's sha256 with its size, mtime, ctime and inode, so a rerun reads
        no unchanged wheel. Keep it outside I(directory) (it is trusted; the wheelhouse is not).
      - Empty, every wheel is hashed on every run.
    type: path
    default: ""
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode resolves read-only (pip's dry run), downloads, removes and writes nothing; it reports what
      would be downloaded.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Wheelhouse for the hosts' python and platform
  epforge.ep.wheelhouse_build:
    directory: /srv/epforge-wheelhouse
    stack: "{{ epforge_stack_spec }}"
    choice: {ml_env_method: existing, sglang_profile: server, sglang_deps: [fastapi, uvicorn]}
    python_version: "3.12.3"
    machine: x86_64
    glibc: "2.39"
    installed: {torch: 2.11.0+cu130, numpy: 2.3.1}
    log_path: /root/.cache/epforge/wheelhouse.log
    hash_cache: /root/.cache/epforge/wheelhouse-hashes.json
  delegate_to: localhost

- name: The same wheelhouse carried to a controller with no registry
  epforge.ep.wheelhouse_build:
    directory: /srv/epforge-wheelhouse
    stack: "{{ epforge_stack_spec }}"
    python_version: "3.12.3"
    machine: x86_64
    glibc: "2.39"
    download: false
    # The manifest_sha256 the build above returned, carried apart from the wheelhouse.
    manifest_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    log_path: /root/.cache/epforge/wheelhouse.log
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: Wheel file names (in I(directory)) the host needs.
  returned: success
  type: list
  elements: str
groups:
  description: Each pip run (name, requirements, no_deps) with the wheel files it uses.
  returned: success
  type: list
  elements: dict
manifest:
  description: Path of the manifest for these inputs.
  returned: success
  type: str
manifest_sha256:
  description:
    - sha256 of the manifest file's bytes (the digest to carry apart from the wheelhouse and give as
      I(manifest_sha256) where downloads are off). Empty in check mode while wheels are still to be fetched.
    - On failure, the digest of the manifest found (empty when there is none).
  returned: always
  type: str
expected_manifest_sha256:
  description: The digest I(manifest_sha256) gave for this manifest, when the file's differs.
  returned: failure
  type: str
inputs_digest:
  description: sha256 of the inputs (groups, target python and platform, the env's distributions).
  returned: success
  type: str
hashes:
  description: Wheel file name -> sha256, as the manifest records them.
  returned: success
  type: dict
downloaded:
  description: Wheel files fetched from the registry by this run (would be, in check mode).
  returned: success
  type: list
  elements: str
mismatched:
  description: Recorded wheels whose bytes differ from every hash the manifests recorded (what failed).
  returned: failure
  type: list
  elements: str
redownloaded:
  description: Such wheels removed to be downloaded again (I(download=true)).
  returned: when one was replaced
  type: list
  elements: str
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_command
from ansible_collections.epforge.ep.plugins.module_utils.pynames import (
    normalize,
)
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse import (
    MANIFEST_SCHEMA,
    inputs_digest,
    manifest_files,
    manifest_path,
    requirement_groups,
    stale_files,
    target_args,
)
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse_build.manifest import (
    exit_when_current,
    fail_offline_incomplete,
    finish,
    read_hash_cache,
    refuse_untrusted,
    trusted_manifest,
    write_manifest,
)
from ansible_collections.epforge.ep.plugins.module_utils.wheelhouse_build.resolve import (
    pip_supports_target_dry_run,
    resolve_all,
)

ARGUMENT_SPEC = {
    "directory": {"type": "path", "required": True},
    "stack": {"type": "dict", "required": True},
    "choice": {"type": "dict", "default": {}},
    "python_version": {"type": "str", "required": True},
    "machine": {"type": "str", "required": True},
    "glibc": {"type": "str", "required": True},
    "installed": {"type": "dict", "default": {}},
    "protect": {"type": "list", "elements": "str", "default": ["torch"]},
    "download": {"type": "bool", "default": True},
    "pip": {"type": "list", "elements": "str", "default": []},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 3600},
    "manifest_sha256": {"type": "raw"},
    "hash_cache": {"type": "path", "default": ""},
}


class WheelhouseBuild:
    """The module's one job, split by phase: plan the host's pip runs, trust or refuse what the wheelhouse
    holds, then resolve, download and describe it in a manifest."""

    def __init__(self, module: AnsibleModule) -> None:
        """Plan the inputs first: bad input fails before the wheelhouse is looked at."""
        self.module = module
        p = self.p = module.params
        self.directory = p["directory"]
        self.pip = p["pip"] or pip_command(sys.executable)
        try:
            self.target = target_args(p["python_version"], p["machine"], p["glibc"])
            self.groups = requirement_groups(p["stack"], p["choice"])
        except (ValueError, KeyError, TypeError) as err:
            module.fail_json(msg=f"cannot compute the host's requirements: {err}")
        self.installed = {normalize(k): str(v) for k, v in p["installed"].items()}
        self.inputs = {
            "schema": MANIFEST_SCHEMA,
            "groups": self.groups,
            "target": self.target,
            "installed": self.installed,
            "protect": sorted(normalize(n) for n in p["protect"]),
        }
        self.digest = inputs_digest(self.inputs)
        self.mpath = manifest_path(self.directory, self.digest)
        self.result = {
            "changed": False,
            "manifest": self.mpath,
            "inputs_digest": self.digest,
            "manifest_sha256": "",
            "downloaded": [],
        }

    def run(self) -> None:
        """Refuse what cannot be trusted, answer from a current manifest (no pip run), else build."""
        module, directory, result = self.module, self.directory, self.result
        if not os.path.isdir(directory) and not self.p["download"]:
            module.fail_json(
                msg=f"the wheelhouse {directory} does not exist and downloads are off: carry in a "
                "wheelhouse built on a connected controller, or allow downloads",
                **result,
            )

        old = trusted_manifest(module, self.mpath, self.digest, result)
        known = read_hash_cache(self.p["hash_cache"], directory)
        seen = refuse_untrusted(module, directory, old, known, result)
        known = {**known, **seen}
        if old and old.get("inputs_digest") == self.digest:
            exit_when_current(module, old, known, seen, result)
        self.build(old, known, seen)

    def build(self, old: dict | None, known: dict, seen: dict) -> None:
        """The wheelhouse falls short of (or has no) manifest: resolve every pip run, download what is
        missing (online only), write the manifest and exit."""
        module, directory, result = self.module, self.directory, self.result
        pip_supports_target_dry_run(module, self.pip)
        if not self.p["download"]:
            fail_offline_incomplete(module, self.pip, self.groups, target=self.target, result=result)
        if not module.check_mode:
            os.makedirs(directory, exist_ok=True)
        details, files = resolve_all(
            module, self.pip, self.groups, target=self.target, installed=self.installed, result=result
        )
        result["changed"] = bool(result["downloaded"]) or not old or bool(result.get("stale"))
        present = {f: {"sha256": ""} for f in files if os.path.exists(os.path.join(directory, f))}
        _unused, current = stale_files(directory, {"files": present}, known=known)
        seen.update(current)
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "inputs_digest": self.digest,
            "inputs": self.inputs,
            "groups_detail": details,
            "files": manifest_files(current),
        }
        write_manifest(module, manifest, len(current) == len(files), result)
        finish(
            module,
            seen,
            files=sorted(files),
            groups=details,
            hashes={f: v["sha256"] for f, v in current.items()},
            **result,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    WheelhouseBuild(module).run()


if __name__ == "__main__":
    main()
