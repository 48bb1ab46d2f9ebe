#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: inspect a DeepEP source tree and refuse one whose build system the role cannot drive."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_source
short_description: Inspect a DeepEP source tree (build system, version, commit, content hash)
description:
  - Reads C(setup.py) of a DeepEP checkout, archive or copy and classifies its build system.
  - The v1.x interface (C(setup.py) building the CUDAExtension C(deep_ep_cpp), reading C(NVSHMEM_DIR) and
    C(TORCH_CUDA_ARCH_LIST); v1.2.1 is what SGLang's deepep backend pins) is supported.
  - The V2 code line of C(main) (JIT kernels over NCCL) and unknown layouts are refused with the reason.
  - Reports the git commit when the tree is a git checkout (C(git rev-parse HEAD)), and always a sha256 of
    the tree's contents, so an archive or a copy without C(.git) still has a precise identity.
  - When O(expect_commit) is given, a tree at another commit is refused (the ref moved, or a wrong ref).
  - Reads only; runs the same in check mode.
options:
  path:
    description: Top of the DeepEP source tree on the host.
    type: path
    required: true
  expect_commit:
    description: Commit (full or abbreviated) the tree must be at; empty to accept any.
    type: str
    default: ""
  commit:
    description:
      - The commit the tree was exported from, for a tree without git data (role C(deepep) passes what
        C(cuda_extension_source) resolved). A tree with git data reports its own C(HEAD).
    type: str
    default: ""
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Inspect the DeepEP checkout
  epforge.ep.deepep_source:
    path: /var/lib/epforge/src/deepep
    expect_commit: 9af0e0d
  register: deepep_src
"""

RETURN = r"""
build_system:
  description: C(setup_v1) (supported); failures report C(jit_v2) or C(unknown).
  returned: always
  type: str
version:
  description: Public version from setup.py.
  returned: success
  type: str
  sample: 1.2.1
commit:
  description: Full commit of a git checkout, else O(commit); empty for a tree without either.
  returned: success
  type: str
tree_sha256:
  description: sha256 over the tree's paths and contents (.git and build outputs left out).
  returned: success
  type: str
reason:
  description: Why the build system was classified so.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import tree_hash
from ansible_collections.epforge.ep.plugins.module_utils.deepep import (
    SUPPORTED,
    UNSUPPORTED_V2,
    classify_source,
    setup_py_version,
)
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


def git_commit(path: str) -> str:
    if not os.path.exists(os.path.join(path, ".git")):
        return ""
    proc = run_bounded(["git", "-C", path, "rev-parse", "HEAD"], timeout=60)
    return proc.out.strip() if proc.rc == 0 else ""


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "expect_commit": {"type": "str", "default": ""},
    "commit": {"type": "str", "default": ""},
}


class DeepEPSource:
    """The module's one job: read a DeepEP source tree (nothing is changed), refuse one this role cannot
    build or one at another commit than the stack pins, else describe it."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.path = module.params["path"]

    def run(self) -> None:
        """Classify the tree, check its commit, then exit with what the build step needs to know."""
        setup_py, files = self.read_tree()
        kind, reason = classify_source(setup_py, files)
        self.refuse_unsupported(kind, reason)
        commit = self.checked_commit(kind, reason)
        self.module.exit_json(
            changed=False,
            build_system=kind,
            reason=reason,
            version=setup_py_version(setup_py) or "",
            commit=commit,
            tree_sha256=tree_hash(self.path),
        )

    def read_tree(self) -> tuple[str | None, set[str]]:
        """(setup.py's text or None, which of the files that tell the build systems apart exist)."""
        path = self.path
        if not os.path.isdir(path):
            self.module.fail_json(
                msg=f"DeepEP source {path} does not exist: the source step did not produce a tree",
                build_system="unknown",
                reason="no tree",
            )
        setup_file = os.path.join(path, "setup.py")
        setup_py = None
        if os.path.isfile(setup_file):
            with open(setup_file, encoding="utf-8", errors="replace") as handle:
                setup_py = handle.read()
        files = set()
        for rel in ("deep_ep/utils/find_pkgs.py", "CMakeLists.txt"):
            if os.path.exists(os.path.join(path, rel)):
                files.add(rel)
        return setup_py, files

    def refuse_unsupported(self, kind: str, reason: str) -> None:
        """Fail for anything but a v1.x tree, naming the V2 line's needs when it is that."""
        path = self.path
        if kind == UNSUPPORTED_V2:
            self.module.fail_json(
                msg=f"DeepEP source at {path} uses a build system this role does not support: {reason}. The "
                "V2 line "
                "(main) is driven by SGLang's `deepep_v2` backend and needs torch >= 2.10 and NCCL >= "
                "2.30.4; "
                "use a v1.x ref such as v1.2.1 (what SGLang's --moe-a2a-backend deepep pins)",
                build_system=kind,
                reason=reason,
            )
        if kind != SUPPORTED:
            self.module.fail_json(
                msg=f"{path} is not a DeepEP v1.x source tree: {reason}. Check the source URL/ref/archive",
                build_system=kind,
                reason=reason,
            )

    def checked_commit(self, kind: str, reason: str) -> str:
        """The tree's commit (git's, else the one given); fails when it is not the expected one."""
        params = self.module.params
        commit = git_commit(self.path) or params["commit"].strip()
        expect = params["expect_commit"].strip().lower()
        if expect and commit and not commit.lower().startswith(expect):
            self.module.fail_json(
                msg=f"DeepEP checkout is at {commit}, not the expected {expect}: the ref moved "
                "or is "
                "not the one the stack pins (set deepep_commit: '' to accept it)",
                build_system=kind,
                reason=reason,
                commit=commit,
            )
        return commit


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    DeepEPSource(module).run()


if __name__ == "__main__":
    main()
