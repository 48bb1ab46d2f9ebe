"""The two ways epforge keeps a long-running service up (an SGLang server, module sglang_server; the smg
gateway, module smg_gateway): a systemd unit (SystemdManager) or a daemonized process with a pidfile, for
hosts without systemd (ProcessManager). Both services start through epforge's launcher (the key from the
environment, never on a command line); `what` names the service in units, logs and messages.

Each manager owns its lifecycle primitives: whether the service runs, its main pid, whether it died while
starting, its log, how it is started (idempotently: a restart only when the unit, the environment file or
the launch fingerprint changed), stopped and removed. The module validates the request, hands the rendered
argv and environment to the manager (request()), then waits for readiness and confirms what runs itself.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import signal
import socket
import time

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    digest,
    digest_matches,
    is_older_layout,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import write_atomic
from ansible_collections.epforge.ep.plugins.module_utils.process import (
    Completed,
    boot_id,
    process_start,
    run_bounded,
    session_members,
    start_detached,
)
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_address import DEFAULT_HOST
from ansible_collections.epforge.ep.plugins.module_utils.server_env import child_env
from ansible_collections.epforge.ep.plugins.module_utils.service_unit import (
    UnitError,
    mask_secrets,
    render_env_file,
    render_unit,
)

KEY_VAR = "EPFORGE_SGLANG_API_KEY"
SYSTEMD_RUNTIME = "/run/systemd/system"
ACTIVE_STATES = ("active", "activating", "reloading")
# A server that already runs: its failure report shows the last part of the log, not the whole history.
RECENT_LOG_BYTES = 256 * 1024


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def file_size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def read_from(path: str, offset: int, max_bytes: int = 512 * 1024) -> str:
    """The text a log gained since offset (at most max_bytes from its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = offset if offset <= size else 0
            start = max(start, size - max_bytes)
            handle.seek(start)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def public_result(result: dict, api_key: str) -> dict:
    """The result fields a failure carries: everything but 'changed', the key redacted."""
    out = dict(result)
    out.pop("changed", None)
    return redact(out, [api_key])


def file_diff(path: str, before: str, after: str, after_header: str | None = None) -> dict:
    """One entry of the module's diff list."""
    return {"before_header": path, "after_header": after_header or path, "before": before, "after": after}


def systemd_running() -> bool:
    return os.path.isdir(SYSTEMD_RUNTIME)


def remove_files(*paths: str) -> None:
    for path in paths:
        if os.path.exists(path):
            os.unlink(path)


class ServerManager:
    """What both managers share: the request they run, the log the server writes, the port it takes."""

    def __init__(
        self, module, result: dict, diffs: list, what: str = "SGLang server", owner: str = "sglang_server"
    ) -> None:
        self.module = module
        self.what, self.owner = what, owner
        self.p = module.params
        self.name = self.p["name"]
        self.api_key = self.p["api_key"] or ""
        self.log_path = self.p["log_path"] or ""
        self.state_dir = self.p["state_dir"]
        self.result = result
        self.diffs = diffs
        self.log_offset = 0
        self.argv: list[str] = []
        self.env: dict = {}
        self.secrets: dict = {}
        self.host = DEFAULT_HOST
        self.port = 0
        self.uid = self.gid = -1

    def request(self, argv: list[str], env: dict, *, host: str, port: int, uid: int, gid: int) -> None:
        """What to run: argv, its environment (the key apart, as a secret), where it answers, as whom."""
        self.argv, self.env, self.host, self.port, self.uid, self.gid = argv, env, host, port, uid, gid
        self.secrets = {KEY_VAR: self.api_key} if self.api_key else {}

    def fail(self, msg: str, **fields) -> None:
        self.module.fail_json(msg=msg, **fields, **public_result(self.result, self.api_key))

    def refuse_taken_port(self) -> None:
        """Before a start: another process answering on the port would pass the readiness probe."""
        try:
            with socket.create_connection((self.host, int(self.port)), timeout=1.0):
                pass
        except OSError:
            return
        self.fail(
            f"port {self.port} on {self.host} is already taken by another "
            f"process, not {self.name}: stop it (or choose another port) before "
            "starting this server"
        )

    def chown_to_server_user(self, path: str) -> None:
        if os.geteuid() == 0 and self.uid >= 0:
            os.chown(path, self.uid, self.gid)

    def prepare_log(self) -> None:
        """Create the log (owned by the server's user) and mark where this start's output begins."""
        if not self.log_path:
            return
        os.makedirs(os.path.dirname(self.log_path), mode=0o755, exist_ok=True)
        if not os.path.exists(self.log_path):
            fd = os.open(self.log_path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o640)
            os.close(fd)
        self.chown_to_server_user(self.log_path)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(
                f"=== {stamp} epforge: starting {self.what} {self.name}: "
                f"{' '.join(redact(self.argv, [self.api_key]))}\n"
            )
        self.log_offset = file_size(self.log_path)

    def follow_recent_log(self) -> None:
        """The server already runs: a later failure report shows the last part of its log."""
        self.log_offset = max(0, file_size(self.log_path) - RECENT_LOG_BYTES)

    def log_text(self) -> str:
        if self.log_path:
            return read_from(self.log_path, self.log_offset)
        return ""

    def ensure_stopped(self) -> None:
        """state stopped: a service that runs is stopped; one that is gone leaves no pidfile behind."""
        if self.is_running() or self.stale_files():
            self.result["changed"] = True
            if not self.module.check_mode:
                self.stop_server()

    def exit(self) -> None:
        """The module's answer: the result, key redacted; the diffs in diff mode; the state reached."""
        result = redact(self.result, [self.api_key])
        if self.module._diff and self.diffs:
            result["diff"] = self.diffs
        result["state"] = self.p["state"]
        self.module.exit_json(**result)

    # Lifecycle primitives, implemented by each manager.
    def is_running(self) -> bool:
        raise NotImplementedError

    def main_pid(self) -> int:
        raise NotImplementedError

    def ended_at(self, since: float = 0.0) -> float | None:
        """When the service's main process first exited after `since`; None where the manager cannot know (a
        daemonized process leaves no exit time behind)."""
        return None

    def death(self) -> str | None:
        """Why the server is not starting any more (None while it may still become ready)."""
        raise NotImplementedError

    def stop_server(self) -> None:
        raise NotImplementedError

    def stale_files(self) -> list[str]:
        """Files a server that is gone left behind (a pidfile naming a dead process); none by default."""
        return []

    def ensure_started(self, force_restart: bool) -> None:
        """Start or restart the server when needed (nothing in check mode); the caller waits for it."""
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    # Rollback (used by smg_gateway only; ensure_started itself never calls these).
    def snapshot(self) -> dict | None:
        """What runs now, for restore() after a new configuration failed; None when nothing runs."""
        return None

    def restore(self, snapshot: dict) -> None:
        """Start the configuration snapshot() saw again, in place of the one that failed (stopped first)."""
        raise NotImplementedError


class SystemdManager(ServerManager):
    """A systemd unit run as an unprivileged user, its environment (and key) in a root-only 0600 file."""

    def __init__(self, module, result: dict, diffs: list, **service) -> None:
        super().__init__(module, result, diffs, **service)
        self.unit = f"{self.name}.service"
        self.unit_path = os.path.join(self.p["unit_dir"], self.unit)
        self.env_file = self.p["env_file"] or f"/etc/epforge/{self.name}.env"
        self.restarts0 = 0
        self.invocation = ""
        self.result.update(unit_path=self.unit_path, env_file=self.env_file)
        # Check mode on a host without systemd still shows what would be written.
        if not module.check_mode and not systemd_running():
            module.fail_json(
                msg="systemd is not running on this host (no /run/systemd/system): use manager: process"
            )

    def systemctl(self, *args: str, check: bool = True) -> Completed:
        argv = ["systemctl", *args]
        proc = run_bounded(argv, timeout=120)
        if check and proc.rc != 0:
            self.fail(f"systemctl {' '.join(args)} failed", cmd=argv, rc=proc.rc, log_tail=tail(proc.output))
        return proc

    def show(self) -> dict:
        proc = self.systemctl(
            "show",
            self.unit,
            "--property=ActiveState,SubState,NRestarts,MainPID,"
            "ExecMainStatus,Result,InvocationID,UnitFileState,LoadState",
            check=False,
        )
        props = {}
        for line in proc.out.splitlines():
            key, _unused, value = line.partition("=")
            props[key] = value
        return props

    def is_running(self) -> bool:
        return self.show().get("ActiveState") in ACTIVE_STATES

    def ended_at(self, since: float = 0.0) -> float | None:
        """When the unit's main process first exited after `since` (epoch seconds, microseconds), or None:
        systemd's own "Main process exited" journal entry (ExecMainExitTimestamp is cleared when
        Restart=on-failure starts the next process, the journal keeps it)."""
        argv = ["journalctl", "-u", self.unit, "-o", "json", "--no-pager", "--since", f"@{int(since)}"]
        proc = run_bounded(argv, timeout=60)
        for line in proc.out.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            message = str(entry.get("MESSAGE", ""))
            stamp = int(entry.get("__REALTIME_TIMESTAMP") or 0) / 1e6
            if "Main process exited" in message and stamp >= since:
                return stamp
        return None

    def main_pid(self) -> int:
        try:
            return int(self.show().get("MainPID") or 0)
        except ValueError:
            return 0

    def death(self) -> str | None:
        props = self.show()
        active, sub = props.get("ActiveState"), props.get("SubState")
        if sub == "auto-restart" or active in ("failed", "inactive", "deactivating"):
            return (
                f"unit {self.unit} is {active}/{sub}, result {props.get('Result')}, "
                f"exit status {props.get('ExecMainStatus')}"
            )
        restarts = int(props.get("NRestarts") or 0)
        if restarts > self.restarts0:
            return f"unit {self.unit} restarted {restarts - self.restarts0} time(s) while starting"
        return None

    def log_text(self) -> str:
        """The log file since this start, or (no log file) this invocation's journal."""
        if self.log_path:
            return super().log_text()
        argv = ["journalctl", "-u", self.unit, f"_SYSTEMD_INVOCATION_ID={self.invocation}", "-o", "cat"]
        return run_bounded([*argv, "--no-pager", "-n", "400"], timeout=60).out

    def stop_server(self) -> None:
        self.systemctl("stop", self.unit, check=False)

    def render(self) -> tuple[str, str]:
        """The unit and the environment file this request needs."""
        try:
            unit = render_unit(
                description=f"{self.what} {self.name} (epforge)",
                argv=self.argv,
                user=self.p["user"] or "",
                group=self.p["group"],
                env_file=self.env_file,
                log_path=self.log_path or None,
                working_dir=self.p["working_dir"] or self.state_dir,
                restart_sec=self.p["restart_sec"],
                start_limit_burst=self.p["start_limit_burst"],
                start_limit_interval=self.p["start_limit_interval"],
                stop_timeout=self.p["stop_timeout"],
                limits=self.p["limits"],
                hardening=self.p["unit_hardening"],
                devices=self.p["devices"],
                read_write_paths=self.p["read_write_paths"],
                what=self.owner,
            )
            env_text = render_env_file(self.env, self.secrets, what=self.owner)
        except UnitError as exc:
            self.module.fail_json(msg=f"cannot render the unit: {exc}")
        return unit, env_text

    def refuse_root_user(self) -> None:
        if not self.p["user"] or self.p["user"] == "root":
            self.module.fail_json(
                msg="user is required with manager systemd and must not be root: the "
                "service runs as an unprivileged user (its role creates it)"
            )

    def diff_files(self, unit_text: str, env_text: str) -> tuple[bool, bool]:
        """Whether the unit and the environment file change; their diffs (secrets as fingerprints)."""
        old_unit = read_text(self.unit_path)
        old_env = read_text(self.env_file)
        unit_changed = old_unit != unit_text
        env_changed = old_env != env_text
        if unit_changed:
            self.diffs.append(file_diff(self.unit_path, old_unit or "", unit_text))
        if env_changed:
            masked = [mask_secrets(text, [KEY_VAR]) for text in (old_env or "", env_text)]
            self.diffs.append(file_diff(self.env_file, *masked))
        return unit_changed, env_changed

    def write_files(self, unit_text: str | None, env_text: str | None) -> None:
        """Write the files that changed (None: unchanged); a new unit makes systemd reload."""
        os.makedirs(self.state_dir, exist_ok=True)
        self.chown_to_server_user(self.state_dir)
        if env_text is not None:
            env_dir = os.path.dirname(self.env_file)
            if not os.path.isdir(env_dir):
                os.makedirs(env_dir, mode=0o700)
            write_atomic(self.env_file, env_text, 0o600)
        if unit_text is not None:
            write_atomic(self.unit_path, unit_text, 0o644)
            self.systemctl("daemon-reload")

    def sync_enabled(self, enabled_now: bool) -> None:
        """Enable or disable the unit at boot as the enabled option asks."""
        if self.p["enabled"] and not enabled_now:
            self.systemctl("enable", self.unit)
        elif not self.p["enabled"] and enabled_now:
            self.systemctl("disable", self.unit)
            self.result["changed"] = True

    def remember_invocation(self) -> None:
        """The restart count and invocation this start is judged by (death(), the journal)."""
        props = self.show()
        self.restarts0 = int(props.get("NRestarts") or 0)
        self.invocation = props.get("InvocationID", "")

    def start_unit(self, active: bool) -> None:
        if not active:
            self.refuse_taken_port()
        self.prepare_log()
        self.systemctl("reset-failed", self.unit, check=False)
        self.restarts0 = 0
        self.systemctl("restart" if active else "start", self.unit)
        self.remember_invocation()

    def ensure_started(self, force_restart: bool) -> None:
        self.refuse_root_user()
        unit_text, env_text = self.render()
        unit_changed, env_changed = self.diff_files(unit_text, env_text)
        props = self.show() if systemd_running() else {}
        active = props.get("ActiveState") in ACTIVE_STATES
        enabled_now = props.get("UnitFileState") == "enabled"
        need_enable = self.p["enabled"] and not enabled_now
        need_start = force_restart or unit_changed or env_changed or not active
        self.result["changed"] = bool(need_start or need_enable)
        self.result["restarted"] = bool(active and need_start)
        if self.module.check_mode:
            return
        self.write_files(unit_text if unit_changed else None, env_text if env_changed else None)
        self.sync_enabled(enabled_now)
        if need_start:
            self.start_unit(active)
        else:
            self.follow_recent_log()
            self.remember_invocation()

    def remove(self) -> None:
        exists = os.path.exists(self.unit_path) or os.path.exists(self.env_file)
        running = systemd_running() and self.is_running()
        if exists or running:
            self.result["changed"] = True
            old_unit = read_text(self.unit_path)
            if old_unit is not None:
                self.diffs.append(file_diff(self.unit_path, old_unit, "", after_header="(absent)"))
        if self.module.check_mode or not (exists or running):
            return
        self.systemctl("disable", "--now", self.unit, check=False)
        remove_files(self.unit_path, self.env_file)
        self.systemctl("daemon-reload")
        self.systemctl("reset-failed", self.unit, check=False)

    def snapshot(self) -> dict | None:
        """The unit and environment file (key included) of the unit that runs now."""
        if not systemd_running() or not self.is_running():
            return None
        return {"unit": read_text(self.unit_path), "env": read_text(self.env_file)}

    def restore(self, snapshot: dict) -> None:
        self.stop_server()
        if snapshot.get("env") is not None:
            write_atomic(self.env_file, snapshot["env"], 0o600)
        if snapshot.get("unit") is not None:
            write_atomic(self.unit_path, snapshot["unit"], 0o644)
        self.systemctl("daemon-reload")
        self.log_offset = file_size(self.log_path)
        self.systemctl("reset-failed", self.unit, check=False)
        self.restarts0 = 0
        self.systemctl("start", self.unit)
        self.remember_invocation()


# A pidfile holds a pid padded to this width (pids are at most 7 digits: /proc/sys/kernel/pid_max <= 2^22).
PIDFILE_WIDTH = 16
# Room reserved in the launch stamp for the launch's identity (written in place after the spawn).
SESSION_RESERVE = 256


class ProcessManager(ServerManager):
    """A daemonized process with a pidfile and a stamp of its launch settings (hosts without systemd).

    What it tracks is the launch's whole session, not one pid: the launcher (start_detached: it leads a new
    session, sid = its pid) forks the server into a process group of its own, and the server's workers may
    make more. The stamp records the launch's identity (session id, the launcher's start time, the boot id,
    the uid), so every process group of that launch is found again - also the ones a launcher killed with
    SIGKILL left behind - by that identity, never by a process name: it is stopped whole (stop_server) and
    reported (process_groups, stopped_leftovers)."""

    def __init__(self, module, result: dict, diffs: list, **service) -> None:
        super().__init__(module, result, diffs, **service)
        self.pidfile = os.path.join(self.state_dir, f"{self.name}.pid")
        self.stamp_path = os.path.join(self.state_dir, f"{self.name}.json")
        self.proc = None
        self.launched: dict = {}
        self.result.update(pidfile=self.pidfile)

    def read_pid(self) -> int:
        try:
            return int((read_text(self.pidfile) or "0").strip() or 0)
        except ValueError:
            return 0

    def pid_alive(self, pid: int) -> bool:
        """Whether pid is a live (not zombie) process of our launcher, not a pid reused by another: by the
        launch's recorded identity (its start time, this boot); a stamp written before identities were
        recorded falls back to the launcher's name in the command line."""
        if pid <= 0:
            return False
        identity = self.identity()
        if identity:
            return self.launcher_alive(identity) and pid == identity["sid"]
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                stat = handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().split(b"\0")
        except OSError:
            return False
        if stat.rpartition(")")[2].split()[0] == "Z":
            return False
        launcher = (self.p["launcher"] or "epforge_sglang_launch.py").encode()
        return any(part.endswith(os.path.basename(launcher)) for part in cmdline)

    def identity(self) -> dict:
        """The launch's identity {sid, start, boot, uid}: this run's spawn, else the one the stamp recorded
        ({} for none)."""
        if self.launched:
            return self.launched
        identity = self.read_stamp().get("session")
        if isinstance(identity, dict) and isinstance(identity.get("sid"), int) and identity.get("start"):
            return identity
        return {}

    @staticmethod
    def launcher_alive(identity: dict) -> bool:
        """Whether the launcher (the session leader) is the live process of that pid, in this boot."""
        sid = identity["sid"]
        if identity.get("boot") != boot_id() or process_start(sid) != identity["start"]:
            return False
        fields = (read_text(f"/proc/{sid}/stat") or "").rpartition(")")[2].split()
        return bool(fields) and fields[0] not in ("Z", "X")

    def session_groups(self) -> dict[int, list[int]]:
        """{process group: [pids]} of every live process of the recorded launch: its session's members, each
        started no earlier than the launcher, as the recorded uid, in this boot. A pid is not reused while it
        is a live process's session id, so a session id whose leader is another process than the launcher
        (another start time) means the launch ended whole: nothing of it is left."""
        identity = self.identity()
        if not identity or identity.get("boot") != boot_id():
            return {}
        leader_start = process_start(identity["sid"])
        if leader_start is not None and leader_start != identity["start"]:
            return {}
        groups: dict[int, list[int]] = {}
        for member in session_members(identity["sid"]):
            if int(member.start) >= int(identity["start"]) and member.uid == identity.get("uid", member.uid):
                groups.setdefault(member.pgid, []).append(member.pid)
        return {pgid: sorted(pids) for pgid, pids in sorted(groups.items())}

    def is_running(self) -> bool:
        return self.pid_alive(self.read_pid())

    def main_pid(self) -> int:
        return self.read_pid()

    def death(self) -> str | None:
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is not None:
                return f"process {self.proc.pid} exited with status {rc}"
            return None
        if not self.is_running():
            return f"process {self.read_pid()} is gone"
        return None

    def fingerprint(self) -> str:
        """A hash of everything the launch depends on: a new one means a restart."""
        return digest(self.launch_inputs())

    def launch_inputs(self) -> dict:
        return {
            "argv": self.argv,
            "env": render_env_file(self.env, self.secrets),
            "user": self.p["user"],
            "group": self.p["group"],
            "log": self.log_path,
            "cwd": self.p["working_dir"],
        }

    def ours_alive(self, pid: int) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid_alive(pid)

    def wait_gone(self, pid: int) -> bool:
        """Wait up to stop_timeout for the launcher and every process of its launch to end; whether so."""
        deadline = time.monotonic() + self.p["stop_timeout"]
        while time.monotonic() < deadline:
            if not self.ours_alive(pid) and not self.session_groups():
                return True
            time.sleep(0.05)
        return False

    @staticmethod
    def signal_groups(groups, signum: int) -> None:
        for pgid in groups:
            try:
                os.killpg(pgid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_group(self, pid: int) -> None:
        """SIGKILL the launcher's group and every group of its launch; reap the launcher when it is ours."""
        self.signal_groups([pid, *self.session_groups()], signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while self.session_groups() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop_server(self) -> None:
        """Stop the launch whole: SIGTERM to the launcher (it forwards it to the server's group once) or, when
        the launcher is gone, to each process group its launch left; SIGKILL to all of them after
        stop_timeout; drop the pidfile."""
        pid = self.proc.pid if self.proc is not None else self.read_pid()
        launcher = self.pid_alive(pid) or (self.proc is not None and self.proc.poll() is None)
        groups = self.session_groups()
        if launcher:
            self.signal_groups([pid], signal.SIGTERM)
        elif groups:
            self.report_leftovers(groups)
            self.signal_groups(groups, signal.SIGTERM)
        if (launcher or groups) and not self.wait_gone(pid):
            self.kill_group(pid)
        remove_files(self.pidfile)

    def report_leftovers(self, groups: dict[int, list[int]]) -> None:
        """A launch whose launcher is gone (killed with SIGKILL) but whose server still runs: say so."""
        self.result["stopped_leftovers"] = [{"pgid": pgid, "pids": pids} for pgid, pids in groups.items()]
        pids = ", ".join(str(pid) for members in groups.values() for pid in members)
        self.module.warn(
            f"{self.what} {self.name}: its launcher (pid {self.identity()['sid']}) was gone but its launch "
            f"still ran (process groups {', '.join(map(str, groups))}: pids {pids}); stopped them"
        )

    def stale_files(self) -> list[str]:
        stale = [self.pidfile] if os.path.exists(self.pidfile) and not self.is_running() else []
        return stale or ([self.stamp_path] if self.session_groups() else [])

    def refuse_bad_user(self) -> None:
        if self.p["user"] == "root":
            self.module.fail_json(msg="the server must not run as root: set user to an unprivileged user")
        if self.p["user"] and os.geteuid() != 0:
            self.module.fail_json(msg="switching to another user needs root (become: true)")

    def read_stamp(self) -> dict:
        old = read_text(self.stamp_path)
        try:
            stamp = json.loads(old) if old else {}
        except ValueError:
            return {}
        return stamp if isinstance(stamp, dict) else {}

    def child_env(self) -> dict:
        """The server's environment, allow-listed (server_env.child_env: the locale, the account's HOME, USER
        and LOGNAME, a service PATH unless the request's env sets one), then the key; nothing else of the
        controller's (tokens, cloud credentials, root's PATH)."""
        account = pwd.getpwuid(self.uid if self.p["user"] else os.geteuid())
        return {**child_env(self.env, account), **self.secrets}

    @staticmethod
    def stamp_text(stamp: dict, size: int = 0) -> str:
        """The stamp as JSON, blank-padded to size (JSON allows blanks) so that a rewrite fits in place."""
        text = json.dumps(stamp, indent=1, sort_keys=True)
        return text.ljust(max(size - 1, len(text))) + "\n"

    def reserve_records(self, stamp: dict) -> None:
        """Before the spawn: write the launch stamp with room for the launch's identity, and a pidfile of its
        final size, so that recording them later rewrites bytes the disk already holds; a full disk fails
        here, before any server runs."""
        text = self.stamp_text({**stamp, "session": None})
        try:
            write_atomic(self.stamp_path, self.stamp_text(stamp, len(text) + SESSION_RESERVE), 0o600)
            write_atomic(self.pidfile, "0".ljust(PIDFILE_WIDTH - 1) + "\n", 0o644)
        except OSError as exc:
            self.fail_unrecorded(
                f"cannot record the server's pid and launch stamp in {self.state_dir} "
                f"({exc.strerror or exc}: {exc.filename or self.pidfile}); nothing was started"
            )

    def fail_unrecorded(self, why: str) -> None:
        """No record may name a server that does not run: drop both, then fail with why and the remedy."""
        remove_files(self.pidfile, self.stamp_path)
        self.module.fail_json(msg=f"{why}: free space there or set state_dir elsewhere", cmd=self.argv, rc=1)

    @staticmethod
    def rewrite_in_place(path: str, text: str) -> None:
        """text over the file's bytes (same size or smaller, blank-padded: no new block is needed)."""
        fd = os.open(path, os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            if len(text) > size:
                raise OSError(errno.EFBIG, "no room reserved for the record", path)
            os.pwrite(fd, (text[:-1].ljust(size - 1) + "\n").encode(), 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def record_pid(self, pid: int, stamp: dict) -> None:
        """The pid into the reserved pidfile and the launch's identity into the reserved stamp, in place
        (the identity first: a pidfile that names a pid is never without it)."""
        self.rewrite_in_place(self.stamp_path, self.stamp_text({**stamp, "session": self.launched}))
        self.rewrite_in_place(self.pidfile, f"{pid}".ljust(PIDFILE_WIDTH - 1) + "\n")

    def launch_uid(self) -> int:
        return self.uid if self.p["user"] else os.geteuid()

    def spawn(self, stamp: dict) -> None:
        as_user = bool(self.p["user"])
        self.reserve_records(stamp)
        try:
            self.proc = start_detached(
                self.argv,
                self.log_path or None,
                env=self.child_env(),
                cwd=self.p["working_dir"] or self.state_dir,
                user=self.uid if as_user else None,
                group=self.gid if as_user else None,
            )
        except OSError as exc:
            remove_files(self.pidfile, self.stamp_path)
            self.module.fail_json(msg=f"cannot start {self.argv[0]}: {exc}", cmd=self.argv, rc=127)
        pid = self.proc.pid  # it leads a new session (start_detached): its groups are the session's
        self.launched = {"sid": pid, "start": process_start(pid), "boot": boot_id(), "uid": self.launch_uid()}
        try:
            self.record_pid(self.proc.pid, stamp)
        except OSError as exc:
            # A server no record names would outlive this run unseen (a rerun calls it "another process",
            # state absent cannot stop it): stop what was spawned, then say where and why.
            self.kill_group(pid)
            self.fail_unrecorded(
                f"cannot record the server's pid in {self.pidfile} ({exc.strerror or exc}); the server it "
                f"started (pid {pid}) was stopped so that none runs unrecorded"
            )

    def ensure_started(self, force_restart: bool) -> None:
        self.refuse_bad_user()
        stamp = {"fingerprint": self.fingerprint(), "argv": self.argv}
        old_stamp = self.read_stamp()
        changed_settings = not digest_matches(old_stamp.get("fingerprint"), self.launch_inputs())
        running = self.is_running()
        # a launch whose launcher is gone but whose server still runs is stopped whole, then started again
        leftovers = {} if running else self.session_groups()
        need_start = force_restart or changed_settings or not running
        self.result["changed"] = bool(need_start)
        self.result["restarted"] = bool(running and need_start)
        if changed_settings:
            before = "\n".join(old_stamp.get("argv") or []) + "\n" if old_stamp else ""
            self.diffs.append(file_diff(self.stamp_path, before, "\n".join(self.argv) + "\n"))
        if self.module.check_mode:
            return
        if not need_start:
            if is_older_layout(old_stamp.get("fingerprint"), self.launch_inputs()):
                # an older epforge's fingerprint of the same launch: rewritten once (same length, in place);
                # bookkeeping of the running server, not a change to it
                self.rewrite_in_place(self.stamp_path, self.stamp_text({**old_stamp, **stamp}))
            self.follow_recent_log()
            return
        if running or leftovers:
            self.stop_server()
        if not running:
            self.refuse_taken_port()
        os.makedirs(self.state_dir, exist_ok=True)
        self.prepare_log()
        self.spawn(stamp)

    def remove(self) -> None:
        running = self.is_running()
        leftovers = {} if running else self.session_groups()
        exists = os.path.exists(self.stamp_path) or os.path.exists(self.pidfile)
        self.result["changed"] = bool(running or leftovers or exists)
        if self.module.check_mode:
            return
        if running or leftovers:
            self.stop_server()
        remove_files(self.pidfile, self.stamp_path)

    def snapshot(self) -> dict | None:
        """The command line of the launch that runs now (its stamp's argv); the key is not recorded, so a
        restore runs it with the current one."""
        if not self.is_running():
            return None
        argv = self.read_stamp().get("argv")
        return {"argv": list(argv)} if isinstance(argv, list) and argv else None

    def restore(self, snapshot: dict) -> None:
        self.stop_server()
        self.proc, self.launched = None, {}
        self.argv = list(snapshot["argv"])
        self.prepare_log()
        self.spawn({"fingerprint": self.fingerprint(), "argv": self.argv})

    def exit(self) -> None:
        """The answer names every process group the launch runs in (none once it is stopped)."""
        groups = self.session_groups() if os.path.exists(self.stamp_path) else {}
        self.result["process_groups"] = [{"pgid": pgid, "pids": pids} for pgid, pids in groups.items()]
        super().exit()


MANAGERS = {"systemd": SystemdManager, "process": ProcessManager}

# The options every managed service takes (documented once in plugins/doc_fragments/service.py).
SERVICE_ARGUMENT_SPEC = {
    "manager": {"type": "str", "default": "systemd", "choices": ["systemd", "process"]},
    "launcher": {"type": "path"},
    "user": {"type": "str"},
    "group": {"type": "str"},
    "env_file": {"type": "path"},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "working_dir": {"type": "path"},
    "enabled": {"type": "bool", "default": True},
    "restart_sec": {"type": "int", "default": 10},
    "start_limit_burst": {"type": "int", "default": 3},
    "start_limit_interval": {"type": "int", "default": 600},
    "stop_timeout": {"type": "int", "default": 60},
    "limits": {"type": "dict", "default": {"NOFILE": 65535, "MEMLOCK": "infinity"}},
    "devices": {"type": "list", "elements": "str", "default": []},
    "read_write_paths": {"type": "list", "elements": "path", "default": []},
    "unit_hardening": {"type": "dict", "default": {}},
}


def resolve_account(module, creator: str) -> tuple[int, int]:
    """The uid and gid the service runs as: the user option's (its group, or the group option's), else this
    process's own; an account that does not exist fails (check mode: -1, -1, as the role creates it later)."""
    params = module.params
    if not params["user"]:
        return os.geteuid(), os.getegid()
    try:
        entry = pwd.getpwnam(params["user"])
    except KeyError:
        if module.check_mode:
            return -1, -1
        module.fail_json(msg=f"user {params['user']!r} does not exist (the {creator} role creates it)")
    gid = entry.pw_gid
    if params["group"]:
        try:
            gid = grp.getgrnam(params["group"]).gr_gid
        except KeyError:
            module.fail_json(msg=f"group {params['group']!r} does not exist")
    return entry.pw_uid, gid


def refuse_bad_service_request(module) -> None:
    """The checks on the service options both modules share, before anything changes."""
    params = module.params
    name = params["name"]
    if not name or "/" in name or name.startswith(".") or any(c.isspace() for c in name):
        module.fail_json(msg=f"name {name!r} must be a plain unit name (no slash, no whitespace)")
    if params["log_path"] and not os.path.isabs(params["log_path"]):
        module.fail_json(msg="log_path must be an absolute path (or empty for the journal)")
    if params["manager"] == "process" and not params["log_path"]:
        module.fail_json(msg="manager process needs a log_path (there is no journal for it)")
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be positive (seconds)")
