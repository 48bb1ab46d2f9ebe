"""The one hash of content (plugins/module_utils/content_hashes.py): a file's, and a tree's with one exclusion
list, which the build's copy obeys too."""

from __future__ import annotations

import hashlib
import os
import shutil

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import (
    bytes_sha256,
    file_sha256,
    tree_files,
    tree_hash,
    tree_ignore,
)


def make_tree(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("print('a')\n")
    (root / "setup.py").write_text("setup()\n")
    for left_out in ("build", ".git", "__pycache__", "x.egg-info"):
        (root / left_out).mkdir()
        (root / left_out / "f").write_text("product\n")
    (root / "pkg" / "a.cpython-311.so").write_bytes(b"\x7fELF")
    (root / "pkg" / "a.pyc").write_bytes(b"\x00")
    (root / "dist").write_text("a file named like an excluded folder is source\n")


def test_file_hash_is_sha256_of_the_bytes(tmp_path):
    path = tmp_path / "f.bin"
    data = os.urandom(3 << 20)  # more than one read block
    path.write_bytes(data)
    assert file_sha256(str(path)) == hashlib.sha256(data).hexdigest() == bytes_sha256(data)


def test_a_tree_is_its_source_files_only(tmp_path):
    make_tree(tmp_path)
    assert tree_files(str(tmp_path)) == ["dist", "pkg/a.py", "setup.py"]


def test_a_tree_hash_changes_with_content_mode_and_names_but_not_build_products(tmp_path):
    make_tree(tmp_path)
    before = tree_hash(str(tmp_path))
    (tmp_path / "build" / "g").write_text("more product\n")
    (tmp_path / "pkg" / "b.o").write_bytes(b"obj")
    assert tree_hash(str(tmp_path)) == before
    os.chmod(tmp_path / "setup.py", 0o755)  # noqa: S103 - the executable bit is what the hash must see
    assert tree_hash(str(tmp_path)) != before
    os.chmod(tmp_path / "setup.py", 0o644)
    assert tree_hash(str(tmp_path)) == before
    (tmp_path / "pkg" / "a.py").write_text("print('b')\n")
    assert tree_hash(str(tmp_path)) != before


def test_a_build_copies_exactly_the_files_the_hash_names(tmp_path):
    make_tree(tmp_path / "src")
    shutil.copytree(tmp_path / "src", tmp_path / "copy", ignore=tree_ignore)
    copied = sorted(
        os.path.relpath(os.path.join(d, f), tmp_path / "copy")
        for d, _, fs in os.walk(tmp_path / "copy")
        for f in fs
    )
    assert copied == tree_files(str(tmp_path / "src"))
    assert tree_hash(str(tmp_path / "copy")) == tree_hash(str(tmp_path / "src"))
