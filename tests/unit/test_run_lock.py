"""Issue 'nothing let in' (8): one epforge run per host at a time. Preflight's host call takes a lock the
kernel releases (plugins/module_utils/epforge_preflight_checks/run_lock.py): real holder processes, real
flock, real ansible-playbook
runs through the action plugin (plugins/action/epforge_preflight_checks.py); nothing is faked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from podman_hosts import remove_hosts, start_host, write_inventory

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import run_lock
from playbooks import ROOT, run_playbook, write_vars

CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]


def sleeper() -> subprocess.Popen:
    """A process standing in for a controller's ansible-playbook process (a real process, killed at will)."""
    return subprocess.Popen(["sleep", "600"])


def controller_of(proc: subprocess.Popen) -> dict:
    return run_lock.controller_identity(proc.pid, "controller-a")


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def lock_path(tmp_path):
    path = tmp_path / "state" / "run.lock"
    yield str(path)
    holder = run_lock.read_holder(str(path))
    if run_lock.holder_alive(holder):
        os.kill(holder["holder_pid"], signal.SIGKILL)


def take(path: str, controller: dict, wait_s: float = 0, **extra) -> dict:
    return run_lock.take_lock(
        path,
        controller=controller,
        python=sys.executable,
        wait_s=wait_s,
        lease_s=extra.pop("lease_s", 600),
        info={"user": "tester", "playbook": "site"},
        **extra,
    )


def test_a_second_run_is_refused_naming_the_holder_and_a_sigkilled_controller_frees_the_lock(lock_path):
    first, second = sleeper(), sleeper()
    try:
        taken = take(lock_path, controller_of(first))
        assert taken["taken"] == "new" and taken["watching"] is True
        assert run_lock.is_held(lock_path)
        # The same run again: re-entrant, no second holder.
        assert take(lock_path, controller_of(first))["taken"] == "already"
        started = time.monotonic()
        with pytest.raises(run_lock.LockBusy) as busy:
            take(lock_path, controller_of(second), wait_s=1.0)
        waited = time.monotonic() - started
        assert 1.0 <= waited < 6, waited
        holder = busy.value.args[0]
        words = run_lock.describe_holder(holder)
        assert f"pid {first.pid}" in words and "controller-a" in words and "user tester" in words, words
        # SIGKILL of the holding controller: the holder sees it gone and the kernel drops the lock.
        first.kill()
        first.wait()
        assert wait_for(lambda: not run_lock.is_held(lock_path), 5), "the lock outlived its controller"
        assert take(lock_path, controller_of(second))["taken"] == "new"
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_a_holder_killed_with_sigkill_never_blocks_the_next_run(lock_path):
    controller = sleeper()
    try:
        holder = take(lock_path, controller_of(controller))["holder"]
        os.kill(holder["holder_pid"], signal.SIGKILL)
        assert wait_for(lambda: not run_lock.is_held(lock_path), 5)
        other = sleeper()
        try:
            assert take(lock_path, controller_of(other))["taken"] == "new"
        finally:
            other.kill()
            other.wait()
    finally:
        controller.kill()
        controller.wait()


def test_an_unwatchable_controller_holds_until_its_lease_or_a_stale_break(lock_path):
    """A controller on another machine (another boot id): the holder cannot watch it and keeps the lock for
    its lease; the same controller's next run breaks it by token (what the action plugin does)."""
    remote = {"host": "controller-b", "boot_id": "another-machine", "pid": 4242, "start": "17"}
    taken = take(lock_path, remote, lease_s=2)
    assert taken["watching"] is False
    local = sleeper()
    try:
        with pytest.raises(run_lock.LockBusy):
            take(lock_path, controller_of(local), wait_s=0.3)
        assert wait_for(lambda: not run_lock.is_held(lock_path), 6), "the lease did not end the lock"
        take(lock_path, remote, lease_s=600)
        broken = take(lock_path, controller_of(local), break_stale=run_lock.token_of(remote))
        assert broken["taken"] == "new"
        assert run_lock.read_holder(lock_path)["controller"]["pid"] == local.pid
    finally:
        local.kill()
        local.wait()


# A holder caught between fork and exec: it holds the locked descriptor, but its cmdline is not yet a
# holder's (here: for 0.5 s), then it becomes the real holder with a long lease.
LATE_EXEC = r"""
import fcntl, os, sys, time
from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import run_lock
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(int(sys.argv[2]), b"locked")
time.sleep(0.5)
holder = [run_lock.HOST_SCRIPT, "hold", run_lock.HOLDER_MARK, str(fd), "600", "0", ""]
os.execv(sys.executable, [sys.executable, "-c", *holder])
"""


@pytest.fixture
def late_holder(lock_path):
    """A process that holds the lock and has not exec'd into the holder yet (for 0.5 s): its cmdline lacks the
    holder's mark. Yields (it, a sleeper standing for this machine's ansible-playbook)."""
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    ready_r, ready_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", LATE_EXEC, lock_path, str(ready_w)],
        pass_fds=(ready_w,),
        env=dict(os.environ, PYTHONPATH=str(ROOT / "collections")),
    )
    os.close(ready_w)
    local = sleeper()
    try:
        assert os.read(ready_r, 16) == b"locked"
        yield child, local
    finally:
        os.close(ready_r)
        for proc in (local, child):
            proc.kill()
            proc.wait()


def record_holder(lock_path: str, controller: dict, child) -> dict:
    """The lock file naming the child as the holder of the run of controller."""
    record = {"token": run_lock.token_of(controller), "controller": controller, "holder_pid": child.pid}
    Path(lock_path).write_text(json.dumps(record) + "\n")
    assert not run_lock.holder_alive(record)  # what the old code went by (no mark yet)
    return record


def test_a_stale_holder_not_yet_exec_d_is_broken_too(lock_path, late_holder):
    """CI caught it: the stale break signalled nothing because the holder it named had not exec'd yet."""
    child, local = late_holder
    remote = {"host": "controller-b", "boot_id": "another-machine", "pid": 4242, "start": "17"}
    record_holder(lock_path, remote, child)
    broken = take(lock_path, controller_of(local), break_stale=run_lock.token_of(remote))
    assert broken["taken"] == "new"
    assert run_lock.read_holder(lock_path)["controller"]["pid"] == local.pid


def test_this_runs_own_holder_not_yet_exec_d_is_taken_as_held_by_this_run(lock_path, late_holder):
    """CI caught it under load (two test workers): the same run asking again while its holder was still
    exec'ing (no mark in /proc/PID/cmdline yet) got LockBusy from its own lock instead of "already"."""
    child, local = late_holder
    mine = controller_of(local)
    record_holder(lock_path, mine, child)
    again = take(lock_path, mine)
    assert again["taken"] == "already" and again["holder"]["holder_pid"] == child.pid


LOCKING_PLAY = """
- name: Take the run lock through preflight's host call, then keep the run going
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Preflight's host call with the run lock
      epforge.ep.epforge_preflight_checks:
        stack: "{{ stack }}"
        gpu_facts: {}
        python: "{{ ansible_playbook_python }}"
        disk_path: "{{ state }}"
        min_free_gib: 0.01
        run_lock: {path: "{{ state }}/run.lock", wait_s: "{{ wait_s }}", playbook: lock-test}
    - name: Mark that the lock is held
      ansible.builtin.copy:
        content: "held\\n"
        dest: "{{ state }}/{{ marker }}"
        mode: "0644"
    - name: Keep the run going
      ansible.builtin.command: sleep {{ hold_s }}
      changed_when: false
"""


def test_two_playbook_runs_at_once_and_a_sigkilled_one(tmp_path):
    """Real ansible-playbook runs: the second is refused naming the first; after SIGKILL of the first
    ansible-playbook, the next run takes the lock at once."""
    state = tmp_path / "state"
    state.mkdir()
    book = tmp_path / "lock.yml"
    book.write_text(LOCKING_PLAY)

    def vars_for(name: str, wait_s: float, hold_s: int) -> Path:
        values = {"stack": CU130, "state": str(state), "wait_s": wait_s, "hold_s": hold_s, "marker": name}
        return write_vars(tmp_path / f"{name}.json", values)

    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(ROOT / "inventory" / "local.yml"),
        str(book),
        "-e",
        f"@{vars_for('first', 0, 117)}",
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    first = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for((state / "first").exists, 90), "the first run never took the lock"
        second = run_playbook(book, vars_file=vars_for("second", 1, 0), timeout=120)
        assert second.returncode != 0
        assert "another epforge run holds this host's run lock" in second.stdout, second.stdout[-3000:]
        assert f"ansible-playbook pid {first.pid}" in second.stdout and "lock-test" in second.stdout
        assert not (state / "second").exists()
        first.send_signal(signal.SIGKILL)
        first.wait()
        started = time.monotonic()
        third = run_playbook(book, vars_file=vars_for("third", 30, 0), timeout=120)
        assert third.returncode == 0, third.stdout[-3000:]
        assert (state / "third").exists()
        # The holder saw its controller gone: the lock was free, not waited for (30 s) or broken.
        assert time.monotonic() - started < 25
        assert json.loads((state / "run.lock").read_text())["playbook"] == "lock-test"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        subprocess.run(["pkill", "-f", "sleep 117"], check=False)


PODMAN_PLAY = """
- name: A long module command on a podman host, started after preflight took the run lock
  hosts: all
  gather_facts: false
  tasks:
    - name: Preflight's host call with the run lock
      epforge.ep.epforge_preflight_checks:
        stack: "{{ stack }}"
        gpu_facts: {}
        python: /usr/bin/python3
        disk_path: /var/lib/epforge
        min_free_gib: 0.01
        run_lock: {path: /var/lib/epforge/run.lock, wait_s: 5, playbook: reap-test}
    - name: Make the slow package's directory
      ansible.builtin.file:
        path: /opt/slowpkg/slowpkg
        state: directory
        mode: "0755"
    - name: Put the slow package in place
      ansible.builtin.copy:
        content: "import subprocess, time\\nsubprocess.Popen(['sleep', '3581'])\\ntime.sleep(3582)\\n"
        dest: /opt/slowpkg/slowpkg/__init__.py
        mode: "0644"
    - name: Import it (a long command with a grandchild, like a JIT build)
      epforge.ep.python_import_check:
        python: /usr/bin/python3
        name: slowpkg
        environment: {PYTHONPATH: /opt/slowpkg}
        timeout: 600
"""

# One test host per parametrization: pytest-xdist may run both at once, and a shared name let one remove
# the other's host mid-test (CI at 9a6b9d7: "container state improper").
CONTAINER_PREFIX = "epforge-reap-test"


def in_container(container: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", "exec", container, *argv], capture_output=True, text=True, timeout=60, check=False
    )


def container_state(container: str) -> str:
    """The test host's state as podman reports it (status, exit code, when it finished)."""
    inspect = subprocess.run(
        [
            "podman",
            "inspect",
            "--format",
            "{{.State.Status}} exit {{.State.ExitCode}} at {{.State.FinishedAt}}",
            container,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (inspect.stdout or inspect.stderr).strip()


def container_commands(container: str) -> list[str]:
    script = (
        "import os\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try: print(open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0', b' ').decode())\n"
        "        except OSError: pass\n"
    )
    return in_container(container, "python3", "-c", script).stdout.splitlines()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_an_interrupted_ansible_playbook_ends_the_command_on_a_podman_host(tmp_path, signum, molecule_image):
    """A podman host cannot see the controller, and `podman exec` forwards no signal: the controller's
    watchdog (started with the run lock) runs the reaper there when ansible-playbook is killed; the command's
    whole group ends and the lock is free for the next run."""
    host = f"{CONTAINER_PREFIX}-{int(signum)}"
    start_host(host, molecule_image)
    inventory = write_inventory(tmp_path / "hosts.yml", [host])
    book = tmp_path / "reap.yml"
    book.write_text(PODMAN_PLAY)
    vars_file = write_vars(tmp_path / "vars.json", {"stack": CU130})
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(book)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    try:
        playbook = subprocess.Popen(
            [*argv, "-e", f"@{vars_file}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_for(lambda: any(c.startswith("sleep 3581") for c in container_commands(host)), 120), (
            "the command never started in the container"
        )
        playbook.send_signal(signum)
        playbook.wait(timeout=60)
        # A stopped container lists no command at all: the checks below mean something only while it runs.
        assert container_state(host).startswith("running"), f"the test host stopped: {container_state(host)}"
        assert wait_for(
            lambda: not [c for c in container_commands(host) if "3581" in c or "slowpkg" in c], 10
        ), container_commands(host)
        lock_free = (
            "import fcntl, os; fd = os.open('/var/lib/epforge/run.lock', os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')"
        )
        assert wait_for(
            lambda: in_container(host, "python3", "-c", lock_free).stdout.strip() == "free", 10
        ), f"the run lock is still held; test host {container_state(host)}"
    finally:
        remove_hosts(host)
