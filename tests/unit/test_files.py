"""The one atomic write (plugins/module_utils/files.py) on real files: the mode set before the file appears,
unique temp names (concurrent writers never share one), no partial file after a failed write, equal content
not rewritten, stale temps cleared. Kill-safety under a writer process: tests/unit/test_bench_history.py."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import threading

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.files import (
    atomic_output,
    read_json,
    remove_stale_temps,
    replace_dir,
    write_atomic,
    write_json_atomic,
)


def test_write_json_atomic_reports_changes_only(tmp_path):
    path = tmp_path / "s" / "stamp.json"
    assert write_json_atomic(str(path), {"key": "a"}) is True
    mtime = path.stat().st_mtime_ns
    assert write_json_atomic(str(path), {"key": "a"}) is False
    assert path.stat().st_mtime_ns == mtime
    assert write_json_atomic(str(path), {"key": "b"}) is True
    assert read_json(str(path)) == {"key": "b"}
    assert path.read_text() == '{\n  "key": "b"\n}\n'
    assert [p.name for p in path.parent.iterdir()] == ["stamp.json"]  # no temp files left
    path.write_text("{truncated")
    assert read_json(str(path)) is None
    path.write_text("[1, 2]")
    assert read_json(str(path)) is None  # a stamp or fact is an object


def test_mode_is_set_before_the_file_appears(tmp_path):
    secret = tmp_path / "env"
    write_atomic(str(secret), "API_KEY=x\n", 0o600)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.read_text() == "API_KEY=x\n"
    seen = []
    with atomic_output(str(tmp_path / "unit"), 0o640) as tmp:
        seen.append(stat.S_IMODE(os.stat(tmp).st_mode))
        assert not (tmp_path / "unit").exists()
    assert seen == [0o640] and stat.S_IMODE((tmp_path / "unit").stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "fact.json"
    write_json_atomic(str(path), {"v": 1})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        write_json_atomic(str(path), {"v": float("nan")})  # NaN is no JSON: refused before writing
    with pytest.raises(RuntimeError), atomic_output(str(path)) as tmp:
        open(tmp, "w").write("partial")
        raise RuntimeError("killed half-way")
    assert read_json(str(path)) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["fact.json"]


def test_concurrent_writers_use_unique_temp_names(tmp_path):
    """A fixed `.tmp` name would let two writers interleave into one temp file; unique names cannot."""
    path = tmp_path / "cache.json"
    errors = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                write_json_atomic(str(path), {"writer": n, "i": i, "pad": "x" * 4096})
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    data = read_json(str(path))
    assert data is not None and data["i"] == 49 and len(data["pad"]) == 4096
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_stale_temps_are_removed_only_when_old(tmp_path):
    path = tmp_path / "epforge_bench.fact"
    old = tmp_path / ".epforge_bench.fact.tmp-abc"
    new = tmp_path / ".epforge_bench.fact.tmp-def"
    other = tmp_path / ".other.tmp-abc"
    for f in (old, new, other):
        f.write_text("partial")
    os.utime(old, (1, 1))
    os.utime(other, (1, 1))
    assert remove_stale_temps(str(path)) == [str(old)]
    assert new.exists() and other.exists()


def staged(parent, name: str, content: str):
    """A complete directory written beside its target, as the three swaps write theirs."""
    staging = parent / name
    staging.mkdir()
    (staging / "manifest.json").write_text(content)
    return staging


def test_replace_dir_puts_a_staging_dir_in_place_and_removes_the_old_one(tmp_path):
    target = tmp_path / "model"
    first = staged(tmp_path, ".model.tmp-1", "one")
    replace_dir(str(first), str(target))  # nothing there yet: a plain rename
    assert (target / "manifest.json").read_text() == "one" and not first.exists()
    second = staged(tmp_path, ".model.tmp-2", "two")
    (target / "extra").mkdir()
    replace_dir(str(second), str(target))
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]
    assert (target / "manifest.json").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging, no retired dir left


def test_replace_dir_retires_under_the_name_given_and_clears_one_a_killed_run_left(tmp_path):
    prefix = tmp_path / "cuda-13.0"
    staged(tmp_path, "cuda-13.0", "old")
    retired = tmp_path / "cuda-13.0.epforge-old"
    (retired / "bin").mkdir(parents=True)  # a run killed between the two renames left it
    staging = staged(tmp_path, "cuda-13.0.epforge-new", "new")
    replace_dir(str(staging), str(prefix), retired=str(retired))
    assert (prefix / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cuda-13.0"]


def test_replace_dir_replaces_a_link_or_a_file_without_following_it(tmp_path):
    elsewhere = staged(tmp_path, "elsewhere", "kept")
    target = tmp_path / "entry"
    target.symlink_to(elsewhere)
    replace_dir(str(staged(tmp_path, ".tmp-a", "new")), str(target))
    assert not target.is_symlink() and (target / "manifest.json").read_text() == "new"
    assert (elsewhere / "manifest.json").read_text() == "kept"  # the link went, not what it pointed to
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "missing")
    replace_dir(str(staged(tmp_path, ".tmp-b", "new")), str(broken))
    assert (broken / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "elsewhere", "entry"]


def test_a_failed_swap_puts_the_old_dir_back_and_removes_staging(tmp_path, monkeypatch):
    target = staged(tmp_path, "entry", "old")
    staging = staged(tmp_path, ".tmp-x", "new")
    real_rename = os.rename

    def rename(src, dst):
        if src == str(staging):
            raise OSError(errno.EXDEV, "Invalid cross-device link", src)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError) as failed:
        replace_dir(str(staging), str(target))
    assert failed.value.errno == errno.EXDEV
    assert (target / "manifest.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


@pytest.fixture
def full_fs(tmp_path):
    """A real 16 KiB tmpfs, filled up (root only, as in CI): writes there fail with ENOSPC."""
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], check=True)
    try:
        with open(mount / "filler", "wb") as handle, contextlib.suppress(OSError):
            handle.write(b"\0" * 65536)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_names_the_file_it_was_for(full_fs, tmp_path):
    """Issue 'nothing let in' (12): ENOSPC named no path; the error names the file, and so does a module."""
    target = full_fs / "epforge_x.fact"
    with pytest.raises(OSError) as failed:
        write_atomic(str(target), "x" * 20000)
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(target)
    assert str(target) in str(failed.value)
    assert not target.exists() and [p.name for p in full_fs.iterdir()] == ["filler"]
    from moduletools import run_module_in  # noqa: PLC0415

    result = run_module_in(
        tmp_path,
        "epforge_local_fact",
        {"name": "epforge_x", "facts_dir": str(full_fs), "content": {"a": "b" * 20000}},
    )
    assert result["_rc"] != 0 and str(target) in result["msg"] and "No space left" in result["msg"], result
