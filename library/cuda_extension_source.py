#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: resolve a CUDA extension's source (git, directory, archive) to a tree and a revision."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_source
short_description: Resolve a PyTorch CUDA extension source to a directory, a revision and a shippable archive
description:
  - Runs where the source is (the controller, in role C(cuda_extension)).
  - C(git) sources (an C(https://), C(git@), C(file://) URL or a path ending in C(.git)) are cloned once
    into O(work_dir) and resolved to a commit; the network is not used when O(commit) is already in the
    clone. The tree of that commit is exported to O(work_dir)C(/<name>/<commit>/). Submodules are not
    fetched.
  - A directory is used in place; its revision is the sha256 over the content of its source files (build
    products, C(.git) and caches excluded), so an edit of any source file changes the revision.
  - An archive (C(.tar.gz), C(.tgz), C(.tar.xz), C(.tar.bz2), C(.tar), C(.zip)) is identified by its sha256
    and unpacked once; a single top-level directory inside it is descended into.
  - With O(make_archive), a C(.tar.gz) of the resolved tree is written once per revision (to ship the source
    to a remote build host).
  - Fails when the directory has no C(setup.py) or C(pyproject.toml) (in O(subdir)), or when O(commit) is
    set and the ref resolves to another commit.
options:
  name:
    description: Extension name (directory names under O(work_dir)).
    type: str
    required: true
  source:
    description: git URL, directory, or archive file.
    type: str
    required: true
  kind:
    description:
      - What O(source) is. C(auto) tells by its form (a URL or a path ending in C(.git) is git, an archive
        suffix an archive, anything else a directory used in place); C(git) also takes the path of a local
        (non-bare) repository or mirror and resolves O(ref) in it (role C(deepep)).
    type: str
    choices: [auto, git, dir, archive]
    default: auto
  ref:
    description: git ref (tag, branch or commit); empty = the remote's HEAD.
    type: str
    default: ""
  commit:
    description: Expected commit (prefix) of O(ref); git only.
    type: str
    default: ""
  subdir:
    description: Directory of C(setup.py) inside the source.
    type: str
    default: ""
  work_dir:
    description: Where clones, exported trees, unpacked archives and source archives are kept.
    type: path
    required: true
  make_archive:
    description: Write a C(.tar.gz) of the resolved tree (once per revision) and return its path.
    type: bool
    default: false
  timeout:
    description: Seconds a git command may take.
    type: int
    default: 600
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: partial
    details: >-
      An archive source is unpacked into O(work_dir) in check mode too (the tree must exist to be checked),
      and that is reported as a change. A git source is neither cloned nor fetched - check mode reports a
      change without looking at the clone, and returns no C(source_dir). With O(make_archive) the directory is
      made but no tarball is written, and none is counted as a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Resolve the canary's source
  epforge.ep.cuda_extension_source:
    name: canary
    source: "{{ playbook_dir }}/../extensions/canary"
    work_dir: "{{ epforge_controller_cache_dir }}/src"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
kind:
  description: C(git), C(dir) or C(archive).
  returned: success
  type: str
source_dir:
  description: Directory holding the tree to build (O(subdir) not included).
  returned: success
  type: str
revision:
  description: Git commit, or C(sha256:<hex>) of the directory's content or of the archive file.
  returned: success
  type: str
archive:
  description: C(.tar.gz) of the tree when O(make_archive) is true, else empty.
  returned: success
  type: str
"""

import hashlib
import os
import shutil
import tarfile
import tempfile
import zipfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import (
    file_sha256,
    safe_extract,
    source_kind,
    tree_files,
    tree_hash,
)
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.files import atomic_output
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


def run_git(module, argv, timeout):
    """Run git with a bound; never prompt for credentials."""
    proc = run_bounded(argv, timeout=timeout, env_update={"GIT_TERMINAL_PROMPT": "0"})
    return proc.rc, proc.out, proc.err


def git_resolve(module, p, base):
    url = p["source"]
    clone = os.path.join(base, "git-" + hashlib.sha256(url.encode()).hexdigest()[:12])
    changed = False
    if not os.path.isdir(os.path.join(clone, "objects")):
        tmp = tempfile.mkdtemp(prefix=".tmp-clone-", dir=base)
        argv = ["git", "clone", "--bare", "--quiet", url, tmp]
        rc, out, err = run_git(module, argv, p["timeout"])
        if rc != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            module.fail_json(msg=f"git clone of {url} failed", cmd=argv, rc=rc, log_tail=tail(err or out))
        os.rename(tmp, clone)
        changed = True

    def resolve(ref):
        spec = f"{ref}^{{commit}}" if ref else "HEAD"
        rc, out, _err = run_git(
            module, ["git", "--git-dir", clone, "rev-parse", "--verify", "--quiet", spec], p["timeout"]
        )
        return out.strip() if rc == 0 else None

    commit = None
    # A pinned commit that the clone already holds needs no network.
    if p["commit"] and resolve(p["commit"]):
        commit = resolve(p["ref"] or p["commit"])
    if commit is None or (p["commit"] and not commit.startswith(p["commit"])):
        argv = [
            "git",
            "--git-dir",
            clone,
            "fetch",
            "--quiet",
            "--force",
            "--tags",
            url,
            "+refs/heads/*:refs/heads/*",
        ]
        rc, out, err = run_git(module, argv, p["timeout"])
        if rc != 0:
            module.fail_json(msg=f"git fetch of {url} failed", cmd=argv, rc=rc, log_tail=tail(err or out))
        commit = resolve(p["ref"])
    if commit is None:
        module.fail_json(msg=f"ref '{p['ref']}' is not in {url}: name an existing tag, branch or commit")
    if p["commit"] and not commit.startswith(p["commit"]):
        module.fail_json(
            msg=f"ref '{p['ref']}' of {url} resolves to {commit}, not the expected commit "
            f"{p['commit']}: the tag moved or the stack names the wrong commit"
        )
    tree = os.path.join(base, commit)
    if not os.path.isdir(tree):
        tmp = tempfile.mkdtemp(prefix=".tmp-tree-", dir=base)
        tar_path = os.path.join(tmp, "tree.tar")
        argv = ["git", "--git-dir", clone, "archive", "--format=tar", "-o", tar_path, commit]
        rc, out, err = run_git(module, argv, p["timeout"])
        if rc != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            module.fail_json(msg="git archive failed", cmd=argv, rc=rc, log_tail=tail(err or out))
        safe_extract(tar_path, os.path.join(tmp, "tree"))
        os.rename(os.path.join(tmp, "tree"), tree)
        shutil.rmtree(tmp, ignore_errors=True)
        changed = True
    return tree, commit, changed


def unpack(module, path, base):
    digest = file_sha256(path)
    dest = os.path.join(base, "archive-" + digest[:20])
    changed = False
    if not os.path.isdir(dest):
        tmp = tempfile.mkdtemp(prefix=".tmp-unpack-", dir=base)
        try:
            if path.lower().endswith(".zip"):
                with zipfile.ZipFile(path) as archive:
                    for member in archive.namelist():
                        target = os.path.realpath(os.path.join(tmp, member))
                        if not target.startswith(os.path.realpath(tmp) + os.sep):
                            module.fail_json(msg=f"archive {path} holds a path outside its root: {member}")
                    archive.extractall(tmp)  # noqa: S202  (every member checked above)
            else:
                safe_extract(path, tmp)
        except (OSError, ValueError, tarfile.TarError, zipfile.BadZipFile) as err:
            shutil.rmtree(tmp, ignore_errors=True)
            module.fail_json(msg=f"cannot unpack {path}: {err}")
        os.rename(tmp, dest)
        changed = True
    entries = [e for e in os.listdir(dest) if not e.startswith(".")]
    tree = (
        os.path.join(dest, entries[0])
        if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0]))
        else dest
    )
    return tree, "sha256:" + digest, changed


def make_tarball(tree, target):
    if os.path.exists(target):
        return False
    with atomic_output(target) as tmp, tarfile.open(tmp, "w:gz") as archive:
        for rel in tree_files(tree):
            archive.add(os.path.join(tree, rel), arcname=os.path.join("src", rel), recursive=False)
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "source": {"type": "str", "required": True},
            "kind": {"type": "str", "default": "auto", "choices": ["auto", "git", "dir", "archive"]},
            "ref": {"type": "str", "default": ""},
            "commit": {"type": "str", "default": ""},
            "subdir": {"type": "str", "default": ""},
            "work_dir": {"type": "path", "required": True},
            "make_archive": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    p = module.params
    kind = source_kind(p["source"]) if p["kind"] == "auto" else p["kind"]
    base = os.path.join(p["work_dir"], p["name"])
    changed = False
    if kind == "dir":
        tree = os.path.abspath(os.path.expanduser(p["source"]))
        if not os.path.isdir(tree):
            module.fail_json(
                msg=f"source directory {tree} does not exist (a directory on the controller, "
                "a git URL, or a .tar.gz/.zip archive)"
            )
        revision = "sha256:" + tree_hash(tree)
    elif module.check_mode and kind == "git":
        module.exit_json(
            changed=True,
            kind=kind,
            source_dir="",
            revision="",
            archive="",
            msg="check mode: the git source would be cloned/fetched",
        )
    else:
        os.makedirs(base, exist_ok=True)
        if kind == "git":
            tree, revision, changed = git_resolve(module, p, base)
        else:
            path = os.path.abspath(os.path.expanduser(p["source"]))
            if not os.path.isfile(path):
                module.fail_json(msg=f"source archive {path} does not exist")
            tree, revision, changed = unpack(module, path, base)

    build_dir = os.path.join(tree, p["subdir"]) if p["subdir"] else tree
    if not any(os.path.isfile(os.path.join(build_dir, f)) for f in ("setup.py", "pyproject.toml")):
        module.fail_json(
            msg=f"{build_dir} has no setup.py or pyproject.toml: is subdir ('{p['subdir']}') right?",
            source_dir=tree,
            revision=revision,
        )

    archive = ""
    if p["make_archive"]:
        os.makedirs(base, exist_ok=True)
        archive = os.path.join(base, revision.replace("sha256:", "")[:40] + ".tar.gz")
        if not module.check_mode:
            changed = make_tarball(tree, archive) or changed
    module.exit_json(changed=changed, kind=kind, source_dir=tree, revision=revision, archive=archive)


if __name__ == "__main__":
    main()
