"""Issue 35 (9): the host's run lock is never opened through a link. A run.lock that is a symlink (to a file
or dangling) is refused with a message naming the link, and neither the link's target is truncated or written
nor a dangling link's target created. Real files, the real holder process when a lock is taken."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import run_lock


def take(path: str) -> dict:
    return run_lock.take_lock(
        path,
        controller=run_lock.controller_identity(os.getpid(), "controller-a"),
        python=sys.executable,
        wait_s=0,
        lease_s=30,
        info={"user": "tester", "playbook": "site"},
    )


def end_holder_in(path) -> None:
    """Whatever holder a (wrong) take wrote into path: ended, so no holder outlives the test."""
    try:
        record = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and run_lock.holder_alive(record):
        os.kill(record["holder_pid"], signal.SIGKILL)


def test_a_run_lock_that_is_a_symlink_is_refused_and_its_target_left_alone(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    precious = tmp_path / "precious.conf"
    precious.write_text("keep me\n")
    lock = state / "run.lock"
    lock.symlink_to(precious)
    try:
        with pytest.raises(OSError) as refused:
            take(str(lock))
    finally:
        end_holder_in(precious)
    words = str(refused.value)
    assert "symbolic link" in words and str(lock) in words and str(precious) in words, words
    assert f"rm {lock}" in words
    assert precious.read_text() == "keep me\n"
    assert lock.is_symlink()
    # nothing looks through the link either
    assert run_lock.read_holder(str(lock)) == {}
    with pytest.raises(run_lock.LockRefused):
        run_lock.is_held(str(lock))


def test_a_dangling_run_lock_link_creates_nothing(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "elsewhere" / "created-through-the-link"
    target.parent.mkdir()
    lock = state / "run.lock"
    lock.symlink_to(target)
    try:
        with pytest.raises(OSError, match="symbolic link"):
            take(str(lock))
    finally:
        end_holder_in(target)
        created = target.exists()
    assert not created and lock.is_symlink()


def test_a_plain_run_lock_is_still_taken_and_released(tmp_path):
    lock = tmp_path / "state" / "run.lock"
    controller = run_lock.controller_identity(os.getpid(), "controller-a")
    taken = take(str(lock))
    try:
        assert taken["taken"] == "new" and run_lock.is_held(str(lock))
        assert run_lock.read_holder(str(lock))["holder_pid"] == taken["holder"]["holder_pid"]
        assert oct(lock.stat().st_mode & 0o777) == "0o600"
    finally:
        # a holder spawned an instant ago may not have exec'd yet (run_lock.HOLDER_EXEC_S)
        assert run_lock.holder_alive_within(taken["holder"], run_lock.HOLDER_EXEC_S)
        assert run_lock.release(str(lock), controller)
    deadline = time.monotonic() + 10
    while run_lock.is_held(str(lock)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not run_lock.is_held(str(lock))
