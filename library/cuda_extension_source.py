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
      Check mode writes nothing under O(work_dir) and reports the change a real run would make. A directory
      or archive source is predicted exactly - an archive not unpacked yet (by its sha256, the real run's
      identity) is a change and its C(setup.py) is looked for in the archive's member list; with
      O(make_archive) the missing tarball of the revision is a change. A git source is never cloned or
      fetched in check mode. Where the clone already holds the pinned O(commit) and O(ref) resolves to it,
      the answer is exact (a change when the commit's tree is not exported yet). Otherwise (no clone, no
      O(commit), or a commit the clone lacks) check mode reports a change and no C(source_dir) without
      resolving the ref, where a real run that fetches and finds the commit's tree already exported reports
      none.
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

import os
import shutil
import tarfile
import tempfile
import zipfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import safe_extract, source_kind
from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import (
    bytes_sha256,
    file_sha256,
    tree_files,
    tree_hash,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import atomic_output
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded


def clone_dir(base: str, url: str) -> str:
    """The bare clone of a git URL under base: named by its hash, so any URL makes a safe name."""
    return os.path.join(base, "git-" + bytes_sha256(url.encode())[:12])


def run_git(module, argv, timeout):
    """Run git with a bound; never prompt for credentials."""
    proc = run_bounded(argv, timeout=timeout, env_update={"GIT_TERMINAL_PROMPT": "0"})
    return proc.rc, proc.out, proc.err


def git_resolve(module, p, base):
    url = p["source"]
    clone = clone_dir(base, url)
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


def held_commit(module, p, base):
    """Check mode's git answer without the network or a write: (tree, commit) when the clone already holds
    the pinned O(commit) and O(ref) resolves to it there (the real run then neither fetches nor clones), else
    None (the real run would clone or fetch first)."""
    clone = clone_dir(base, p["source"])
    if not p["commit"] or not os.path.isdir(os.path.join(clone, "objects")):
        return None

    def resolve(ref):
        spec = f"{ref}^{{commit}}" if ref else "HEAD"
        rc, out, _err = run_git(
            module, ["git", "--git-dir", clone, "rev-parse", "--verify", "--quiet", spec], p["timeout"]
        )
        return out.strip() if rc == 0 else None

    if not resolve(p["commit"]):
        return None
    commit = resolve(p["ref"] or p["commit"])
    if commit is None or not commit.startswith(p["commit"]):
        return None
    return os.path.join(base, commit), commit


def archive_members(module, path):
    """The archive's member paths and its directories, read without unpacking (what unpack() would write);
    a member outside the archive's root is refused as the real unpack refuses it."""
    try:
        if path.lower().endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                listed = [(name, name.endswith("/")) for name in archive.namelist()]
        else:
            with tarfile.open(path) as archive:
                listed = [(member.name, member.isdir()) for member in archive.getmembers()]
    except (OSError, ValueError, tarfile.TarError, zipfile.BadZipFile) as err:
        module.fail_json(msg=f"cannot unpack {path}: {err}")
    files, dirs = set(), set()
    for name, is_dir in listed:
        norm = os.path.normpath(name)
        if os.path.isabs(name) or norm == ".." or norm.startswith(".." + os.sep):
            module.fail_json(msg=f"cannot unpack {path}: archive member {name} lies outside the destination")
        if norm == ".":
            continue
        (dirs if is_dir else files).add(norm)
        parent = os.path.dirname(norm)
        while parent:
            dirs.add(parent)
            parent = os.path.dirname(parent)
    return files, dirs


def predict_unpack(module, path, base):
    """Check mode's unpack(): the tree and revision it would give, without writing, and whether it would
    unpack (changed). With the archive already unpacked (by its sha256), the unpacked tree itself."""
    digest = file_sha256(path)
    dest = os.path.join(base, "archive-" + digest[:20])
    if os.path.isdir(dest):
        entries = [e for e in os.listdir(dest) if not e.startswith(".")]
        single = len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0]))
        return (os.path.join(dest, entries[0]) if single else dest), "sha256:" + digest, False, None
    files, dirs = archive_members(module, path)
    top = {name.split(os.sep, 1)[0] for name in files | dirs if not name.startswith(".")}
    prefix = next(iter(top)) if len(top) == 1 and next(iter(top)) in dirs else ""
    tree = os.path.join(dest, prefix) if prefix else dest
    inside = {os.path.relpath(f, prefix) for f in files if f.startswith(prefix + os.sep)} if prefix else files
    return tree, "sha256:" + digest, True, inside


def make_tarball(tree, target):
    if os.path.exists(target):
        return False
    with atomic_output(target) as tmp, tarfile.open(tmp, "w:gz") as archive:
        for rel in tree_files(tree):
            archive.add(os.path.join(tree, rel), arcname=os.path.join("src", rel), recursive=False)
    return True


def resolve_source(module, p, kind, base):
    """(tree, revision, changed, listed): the tree to build and whether getting it changed work_dir (in check
    mode: would change it, nothing written). listed is, in check mode for an archive not unpacked yet, the
    files it holds relative to the tree it would give; else None."""
    if kind == "dir":
        tree = os.path.abspath(os.path.expanduser(p["source"]))
        if not os.path.isdir(tree):
            module.fail_json(
                msg=f"source directory {tree} does not exist (a directory on the controller, "
                "a git URL, or a .tar.gz/.zip archive)"
            )
        return tree, "sha256:" + tree_hash(tree), False, None
    if kind == "git" and module.check_mode:
        held = held_commit(module, p, base)
        if held is None:
            module.exit_json(
                changed=True,
                kind=kind,
                source_dir="",
                revision="",
                archive="",
                msg="check mode: the git source would be cloned/fetched",
            )
        tree, revision = held
        return tree, revision, not os.path.isdir(tree), None  # a real run exports a missing tree
    if kind == "git":
        os.makedirs(base, exist_ok=True)
        return (*git_resolve(module, p, base), None)
    path = os.path.abspath(os.path.expanduser(p["source"]))
    if not os.path.isfile(path):
        module.fail_json(msg=f"source archive {path} does not exist")
    if module.check_mode:
        return predict_unpack(module, path, base)
    os.makedirs(base, exist_ok=True)
    return (*unpack(module, path, base), None)


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
    tree, revision, changed, listed = resolve_source(module, p, kind, base)
    build_dir = os.path.join(tree, p["subdir"]) if p["subdir"] else tree
    wanted = ("setup.py", "pyproject.toml")
    if listed is not None:  # check mode, an archive not unpacked yet: its member list
        sub = os.path.normpath(p["subdir"]) if p["subdir"] else ""
        found = any((os.path.join(sub, f) if sub else f) in listed for f in wanted)
    elif module.check_mode and changed:  # check mode, a commit's tree not exported yet: the real run looks
        found = True
    else:
        found = any(os.path.isfile(os.path.join(build_dir, f)) for f in wanted)
    if not found:
        module.fail_json(
            msg=f"{build_dir} has no setup.py or pyproject.toml: is subdir ('{p['subdir']}') right?",
            source_dir=tree,
            revision=revision,
        )

    archive = ""
    if p["make_archive"]:
        archive = os.path.join(base, revision.replace("sha256:", "")[:40] + ".tar.gz")
        if module.check_mode:
            changed = changed or not os.path.exists(archive)  # make_tarball writes it when absent
        else:
            os.makedirs(base, exist_ok=True)
            changed = make_tarball(tree, archive) or changed
    module.exit_json(changed=changed, kind=kind, source_dir=tree, revision=revision, archive=archive)


if __name__ == "__main__":
    main()
