"""sglang_server: unit rendering (pure functions) and the module's `process` manager end to end against the
SGLang stand-in (tests/sglang_standin, a TEST DOUBLE): real processes, real HTTP, real log files.

The systemd manager is exercised by the Molecule scenario molecule/sglang-server (a real systemd)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from gpu_fact_samples import NO_GPU, gpu_facts
from moduletools import run_module_in

from ansible_collections.epforge.ep.plugins.module_utils.server_env import (
    ACCOUNT_ENV_NAMES,
    LOCALE_ENV_NAMES,
    SERVICE_PATH,
)
from ansible_collections.epforge.ep.plugins.module_utils.service_unit import (
    UnitError,
    mask_secrets,
    quote_exec_word,
    render_env_file,
    render_exec_start,
    render_unit,
    split_exec_start,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "library" / "sglang_server.py"
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "epforge_sglang_launch.py"
STANDIN = ROOT / "tests" / "sglang_standin"
KEY = "sk-test-6f1d0c9e-never-print-me"


def run_module(
    module: Path, args: dict, tmp_path: Path, *, check: bool = False, diff: bool = False, timeout: float = 120
) -> dict:
    return run_module_in(tmp_path, module, args, check=check, diff=diff, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------ unit


@pytest.mark.parametrize(
    "word",
    ["--model-path", "/models/Kimi K2.5", 'say "hi"', "100%", "$HOME", "a\\b", "", "--x=a b", "'single'"],
)
def test_exec_quoting_round_trips(word):
    rendered = render_exec_start(["/usr/bin/python3", word])
    assert split_exec_start(rendered) == ["/usr/bin/python3", word]


def test_exec_quoting_escapes_systemd_specials():
    assert quote_exec_word("100%") == '"100%%"'
    assert quote_exec_word("$HOME") == '"$$HOME"'
    assert quote_exec_word("--tp-size") == "--tp-size"
    with pytest.raises(UnitError):
        quote_exec_word("a\nb")
    with pytest.raises(UnitError):
        render_exec_start(["python3", "-m", "x"])


def test_unit_refuses_root_and_renders_required_lines():
    with pytest.raises(UnitError):
        render_unit(description="x", argv=["/bin/true"], user="root")
    unit = render_unit(
        description="SGLang",
        argv=["/venv/bin/python", "/l.py", "--port", "30000"],
        user="sglang",
        env_file="/etc/epforge/s.env",
        log_path="/var/log/epforge/s.log",
        limits={"NOFILE": 65535},
    )
    lines = unit.splitlines()
    for expected in (
        "User=sglang",
        "EnvironmentFile=/etc/epforge/s.env",
        "Restart=on-failure",
        "StartLimitBurst=3",
        "KillMode=mixed",
        "StandardOutput=append:/var/log/epforge/s.log",
        "LimitNOFILE=65535",
        "ExecStart=/venv/bin/python /l.py --port 30000",
    ):
        assert expected in lines
    journal = render_unit(description="SGLang", argv=["/bin/true"], user="sglang", log_path=None)
    assert "StandardOutput=journal" in journal.splitlines()


# What a GPU server needs and the sandbox must keep (issue 20): measured in Molecule, checked here.
NEVER_IN_THE_UNIT = (
    "MemoryDenyWriteExecute",
    "PrivateDevices",
    "PrivateNetwork",
    "IPAddressDeny",
    "ProcSubset",
)


def hardened_unit(**kwargs) -> list[str]:
    args = {"description": "SGLang", "argv": ["/venv/bin/python", "/l.py"], "user": "sglang"}
    return render_unit(**(args | kwargs)).splitlines()


def test_unit_is_sandboxed_but_keeps_what_a_gpu_server_needs():
    lines = hardened_unit(working_dir="/var/lib/epforge/sglang", read_write_paths=["/srv/cache"])
    for expected in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "PrivateTmp=yes",
        "RestrictSUIDSGID=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "RestrictNamespaces=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service pidfd_getfd",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK",
        "DevicePolicy=closed",
        # the working directory (the account's HOME: JIT caches) and the extra paths stay writable
        "ReadWritePaths=/var/lib/epforge/sglang",
        "ReadWritePaths=/srv/cache",
    ):
        assert expected in lines
    for name in NEVER_IN_THE_UNIT:
        assert not any(line.startswith(f"{name}=") for line in lines), name
    # /dev/shm is NCCL's: nothing makes /dev private or read-only
    assert not any("/dev/shm" in line or line.startswith("TemporaryFileSystem=") for line in lines)
    assert not any(line.startswith("DeviceAllow=") for line in lines)
    assert lines.index("DevicePolicy=closed") < lines.index("[Install]")


def test_devices_become_device_allow_lines():
    lines = hardened_unit(
        devices=["/dev/nvidiactl", "/dev/nvidia0", "char-nvidia-uvm", "/dev/nvidia-uvm-tools r"]
    )
    assert [line for line in lines if line.startswith("DeviceAllow=")] == [
        "DeviceAllow=/dev/nvidiactl rw",
        "DeviceAllow=/dev/nvidia0 rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "DeviceAllow=/dev/nvidia-uvm-tools r",
    ]
    for bad in ("nvidia0", "/dev/nvidia0 rwx", "/dev/a b", "char-", "/dev/x\nUser=root"):
        with pytest.raises(UnitError, match="DeviceAllow specifiers"):
            hardened_unit(devices=[bad])
    with pytest.raises(UnitError, match="absolute path"):
        hardened_unit(read_write_paths=["cache"])


def test_hardening_overrides_replace_drop_and_add():
    lines = hardened_unit(
        hardening={
            "ProtectHome": "yes",
            "PrivateUsers": None,
            "MemoryDenyWriteExecute": True,
            "UMask": "0077",
        }
    )
    assert "ProtectHome=yes" in lines and "ProtectHome=read-only" not in lines
    assert not any(line.startswith("PrivateUsers=") for line in lines)
    assert "MemoryDenyWriteExecute=yes" in lines
    assert "UMask=0077" in lines and "UMask=0027" not in lines
    # the defaults themselves are untouched by an override
    assert "PrivateUsers=yes" in hardened_unit()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"protectHome": "yes"}, "directive names"),
        ({"Protect-Home": "yes"}, "directive names"),
        ({"ProtectHome\nUser": "root"}, "directive names"),
        ({"User": "root"}, "not a hardening directive"),
        ({"ExecStartPre": "+/bin/sh"}, "not a hardening directive"),
        ({"Environment": "A=1"}, "not a hardening directive"),
        ({"DeviceAllow": "/dev/sda rw"}, "not a hardening directive"),
        ({"LimitNOFILE": "1"}, "not a hardening directive"),
        ({"ProtectHome": "yes\nUser=root"}, "newline"),
    ],
)
def test_bad_hardening_overrides_are_refused(overrides, message):
    with pytest.raises(UnitError, match=message):
        hardened_unit(hardening=overrides)


DEVICES_PLAY = """\
- name: The device list the role derives from GPU facts
  hosts: localhost
  gather_facts: false
  vars_files: [{defaults}]
  tasks:
    - name: Derive it for each sample
      ansible.builtin.set_fact:
        devices: "{{{{ sglang_server_devices }}}}"
      vars:
        sglang_server_gpu_facts: "{{{{ item }}}}"
      loop: {samples}
"""


def test_role_derives_the_device_list_from_gpu_facts(tmp_path):
    """Role sglang_server's sglang_server_devices: one /dev/nvidiaN per GPU of preflight's facts, the
    control node, the uvm and MIG capability groups; nothing on a host without GPU."""
    from playbooks import JSON_CALLBACK, json_report, run_playbook  # noqa: PLC0415

    book = tmp_path / "devices.yml"
    samples = [gpu_facts(count=2), NO_GPU, {}]
    defaults = ROOT / "roles" / "sglang_server" / "defaults" / "main.yml"
    book.write_text(DEVICES_PLAY.format(defaults=defaults, samples=json.dumps(samples)))
    report = json_report(run_playbook(book, env=JSON_CALLBACK, timeout=120))
    results = report["plays"][0]["tasks"][0]["hosts"]["localhost"]["results"]
    found = [result["ansible_facts"]["devices"] for result in results]
    assert found == [
        ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "char-nvidia-uvm", "char-nvidia-caps"],
        [],
        [],
    ]
    # every derived entry is one render_unit accepts
    hardened_unit(devices=found[0])


def test_a_gpu_launch_without_gpu_facts_is_refused_before_anything_changes(tmp_path):
    """With DevicePolicy=closed a unit without a device list lets in no GPU: the role refuses a systemd
    launch that requires a GPU when preflight's GPU facts are not in the play (so the list is empty)."""
    from playbooks import run_playbook, write_vars  # noqa: PLC0415

    book = tmp_path / "serve.yml"
    book.write_text(
        "- name: Launch without preflight\n  hosts: localhost\n  gather_facts: false\n"
        "  roles: [sglang_server]\n"
    )
    user = "epforge-nodevices"
    extra = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "sglang_server_manager": "systemd",
        "sglang_server_user": user,
        "sglang_server_group": user,
        "sglang_server_object": {"schema": 1},
    }
    proc = run_playbook(book, vars_file=write_vars(tmp_path / "vars.json", extra), timeout=300)
    assert proc.returncode != 0
    assert "sglang_server_devices is empty" in proc.stdout, proc.stdout[-3000:]
    assert subprocess.run(["getent", "passwd", user], capture_output=True, check=False).returncode != 0
    assert not (tmp_path / "state").exists()


def test_env_file_quoting_and_masking():
    text = render_env_file(
        {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple", "X": 'a "b" $c'},
        {"EPFORGE_SGLANG_API_KEY": KEY},
    )
    assert "NCCL_P2P_LEVEL=SYS\n" in text
    assert "NCCL_PROTO=LL,LL128,Simple\n" in text
    assert 'X="a \\"b\\" \\$c"\n' in text
    masked = mask_secrets(text, ["EPFORGE_SGLANG_API_KEY"])
    assert KEY not in masked
    assert "EPFORGE_SGLANG_API_KEY=<secret sha256:" in masked
    assert (
        mask_secrets(render_env_file({}, {"EPFORGE_SGLANG_API_KEY": "other"}), ["EPFORGE_SGLANG_API_KEY"])
        != masked.split("NCCL")[0] + masked.split("\n", 1)[1]
    )
    with pytest.raises(UnitError):
        render_env_file({"BAD-NAME": "1"})


# ---------------------------------------------------------------------------------- process manager e2e


@pytest.fixture
def server(tmp_path):
    """Module arguments for a stand-in server managed as a process; stops it afterwards."""
    port = free_port()
    args = {
        "name": "standin-test",
        "manager": "process",
        "settings": {
            "model_path": "/models/standin",
            "tp_size": 2,
            "ep_size": 2,
            "port": port,
            "moe_a2a_backend": "deepep",
            "deepep_mode": "low_latency",
            "env": {"PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_LOAD_SECONDS": "0.6"},
        },
        "python": sys.executable,
        "launcher": str(LAUNCHER),
        "api_key": KEY,
        "log_path": str(tmp_path / "log" / "server.log"),
        "state_dir": str(tmp_path / "state"),
        "timeout": 20,
        "poll_interval": 0.1,
        # never this machine's own toolkit record (/etc/ansible/facts.d)
        "toolkit_fact": str(tmp_path / "no-toolkit.fact"),
    }
    yield args
    run_module(MODULE, {**args, "state": "absent"}, tmp_path)


def test_process_lifecycle(server, tmp_path):
    first = run_module(MODULE, server, tmp_path)
    assert first["_rc"] == 0, first
    assert first["changed"] is True
    assert first["running"]["tp_size"] == 2 and first["running"]["moe_a2a_backend"] == "deepep"
    assert first["settings_mismatch"] == []
    assert first["polls"] >= 2  # it answered 503 while loading, then 200
    assert 0.4 < first["ready_s"] < 5
    pid = first["pid"]
    # The key is nowhere: not in the result, not in the process's command line, not in the log.
    assert KEY not in first["_stdout"]
    assert first["server_info"]["api_key"] == "<redacted>"
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert KEY not in cmdline and "--api-key" not in cmdline
    log = Path(server["log_path"]).read_text()
    assert "server_args=" in log and KEY not in log and "<redacted>" in log
    # The server binds loopback only.
    listening = Path("/proc/net/tcp").read_text()
    assert f"0100007F:{server['settings']['port']:04X}" in listening
    assert f"00000000:{server['settings']['port']:04X}" not in listening

    second = run_module(MODULE, server, tmp_path)
    assert second["_rc"] == 0 and second["changed"] is False and second["pid"] == pid

    restarted = run_module(MODULE, {**server, "state": "restarted"}, tmp_path)
    assert restarted["changed"] is True and restarted["restarted"] is True and restarted["pid"] != pid
    pid = restarted["pid"]

    check = run_module(
        MODULE, {**server, "settings": {**server["settings"], "tp_size": 4}}, tmp_path, check=True, diff=True
    )
    assert check["changed"] is True and "--tp-size\n4\n" in check["diff"][0]["after"]
    assert run_module(MODULE, server, tmp_path)["changed"] is False  # check mode changed nothing

    changed = run_module(MODULE, {**server, "settings": {**server["settings"], "tp_size": 4}}, tmp_path)
    assert changed["_rc"] == 0 and changed["changed"] is True and changed["restarted"] is True
    assert changed["running"]["tp_size"] == 4 and changed["pid"] != pid
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()

    stopped = run_module(MODULE, {**server, "state": "stopped"}, tmp_path)
    assert stopped["changed"] is True
    time.sleep(0.2)
    assert (
        not Path(f"/proc/{changed['pid']}/cmdline").exists()
        or not Path(f"/proc/{changed['pid']}/cmdline").read_bytes()
    )
    assert run_module(MODULE, {**server, "state": "stopped"}, tmp_path)["changed"] is False
    removed = run_module(MODULE, {**server, "state": "absent"}, tmp_path)
    assert removed["changed"] is True
    assert not any(Path(server["state_dir"]).iterdir())
    assert run_module(MODULE, {**server, "state": "absent"}, tmp_path)["changed"] is False


def test_process_crash_is_classified_fast(server, tmp_path):
    env = {
        **server["settings"]["env"],
        "SGLANG_STANDIN_CRASH_AFTER": "0.3",
        "SGLANG_STANDIN_CRASH_LINE": "KeyError: 12",
    }
    args = {**server, "settings": {**server["settings"], "env": env, "enable_torch_symm_mem": True}}
    started = time.monotonic()
    result = run_module(MODULE, args, tmp_path)
    elapsed = time.monotonic() - started
    assert result["_rc"] != 0 and result["failed"] is True
    assert result["reason"] == "died"
    assert result["classification"][0]["id"] == "torch_symm_mem_keyerror"
    assert "enable-torch-symm-mem" in result["msg"]
    assert "KeyError: 12" in result["log_tail"]
    assert elapsed < 10  # seconds, not the 20 s timeout
    assert KEY not in result["_stdout"]


def test_unknown_crash_names_its_final_exception_line(server, tmp_path):
    line = "ModuleNotFoundError: No module named 'sglang_no_such_helper'"
    env = {
        **server["settings"]["env"],
        "SGLANG_STANDIN_CRASH_AFTER": "0.3",
        "SGLANG_STANDIN_CRASH_LINE": "AssertionError: forward_deepgemm_masked is deprecated",
    }
    result = run_module(MODULE, {**server, "settings": {**server["settings"], "env": env}}, tmp_path)
    assert result["failed"] is True and result["reason"] == "died"
    assert result["classification"][0]["id"] == "unclassified"
    assert result["classification"][0]["line"] == "AssertionError: forward_deepgemm_masked is deprecated"
    assert (
        "[unclassified] no known failure signature matched; the log's final exception is: "
        "AssertionError: forward_deepgemm_masked is deprecated"
    ) in result["msg"]
    env["SGLANG_STANDIN_CRASH_LINE"] = line
    result = run_module(MODULE, {**server, "settings": {**server["settings"], "env": env}}, tmp_path)
    assert result["classification"][0]["id"] == "python_module_missing"
    assert "sglang_no_such_helper" in result["msg"]


def test_process_hang_times_out_bounded(server, tmp_path):
    env = {**server["settings"]["env"], "SGLANG_STANDIN_HANG": "1"}
    args = {**server, "timeout": 2, "poll_interval": 0.2, "settings": {**server["settings"], "env": env}}
    started = time.monotonic()
    result = run_module(MODULE, args, tmp_path)
    elapsed = time.monotonic() - started
    assert result["failed"] is True and result["reason"] == "timeout"
    assert 2 <= elapsed < 8
    # Bounded poll rate: about timeout / interval probes, never more.
    assert 5 <= result["polls"] <= 12
    # stop_on_failure: the hung server was stopped.
    assert not Path(server["state_dir"], "standin-test.pid").exists()


def test_bad_flag_exits_2_and_is_classified(server, tmp_path):
    args = {**server, "settings": {**server["settings"], "extra_args": ["--no-such-flag", "1"]}}
    result = run_module(MODULE, args, tmp_path)
    assert result["failed"] is True and result["reason"] == "died"
    assert "status 2" in result["msg"]
    assert result["classification"][0]["id"] == "bad_cli_flag"


def test_bad_input_fails_before_anything_changes(server, tmp_path):
    result = run_module(MODULE, {**server, "settings": {**server["settings"], "tp_sise": 2}}, tmp_path)
    assert result["failed"] is True and "did you mean 'tp_size'" in result["msg"]
    result = run_module(MODULE, {**server, "settings": {**server["settings"], "api_key": KEY}}, tmp_path)
    assert result["failed"] is True and "api_key" in result["msg"] and KEY not in result["_stdout"]
    assert not Path(server["log_path"]).exists()
    assert not os.path.exists(Path(server["state_dir"]) / "standin-test.pid")


def test_settings_mismatch_is_reported(server, tmp_path):
    # The stand-in reports ep_size 1 although 2 was asked for (as when SGLang adjusts a setting).
    env = {**server["settings"]["env"], "SGLANG_STANDIN_ADJUST": '{"ep_size": 1}'}
    args = {**server, "settings": {**server["settings"], "env": env}}
    strict = run_module(MODULE, args, tmp_path)
    assert strict["failed"] is True
    assert strict["settings_mismatch"] == [{"key": "ep_size", "requested": 2, "running": 1}]
    assert "ep_size: requested 2, running 1" in strict["msg"]
    warn = run_module(MODULE, {**args, "settings_check": "warn"}, tmp_path)
    assert warn["_rc"] == 0 and warn["settings_mismatch"][0]["key"] == "ep_size"
    assert "ep_size" in json.dumps(warn.get("warnings"))


def test_unconfirmed_critical_setting_fails_strict_and_is_listed_in_warn(server, tmp_path):
    # The stand-in reports tp_size as null (as a release that stopped reporting it would): the requested
    # tp_size 2 cannot be confirmed.
    env = {**server["settings"]["env"], "SGLANG_STANDIN_ADJUST": '{"tp_size": null}'}
    args = {**server, "settings": {**server["settings"], "env": env}}
    strict = run_module(MODULE, args, tmp_path)
    assert strict["failed"] is True
    assert "tp_size: requested 2 (unconfirmed: the running server reports 'tp_size' as null)" in strict["msg"]
    warn = run_module(MODULE, {**args, "settings_check": "warn"}, tmp_path)
    assert warn["_rc"] == 0
    confirmation = warn["settings_confirmation"]
    unconfirmed = {e["key"]: e["reason"] for e in confirmation["unconfirmed"]}
    assert unconfirmed["tp_size"] == "the running server reports 'tp_size' as null"
    # the environment is listed, not dropped; the confirmed ones are there too
    assert unconfirmed["env.SGLANG_STANDIN_ADJUST"].startswith("an environment variable")
    assert {e["key"] for e in confirmation["confirmed"]} >= {
        "ep_size",
        "moe_a2a_backend",
        "deepep_mode",
        "port",
        "model_path",
    }
    requested = {k for k in args["settings"] if k != "env"} | {f"env.{k}" for k in env} | {"host"}
    assert {e["key"] for kind in confirmation.values() for e in kind} == requested
    assert "tp_size" in json.dumps(warn.get("warnings"))


def test_taken_port_is_refused_before_a_start(server, tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", server["settings"]["port"]))
        other.listen()
        result = run_module(MODULE, server, tmp_path)
    assert result["failed"] is True and "already taken by another process" in result["msg"]
    assert not Path(server["state_dir"], "standin-test.pid").exists()


def test_launcher_redacts_the_key_across_reads_and_long_lines(monkeypatch):
    import importlib.util  # noqa: PLC0415
    import io  # noqa: PLC0415
    import threading  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("epforge_sglang_launch", LAUNCHER)
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    key = KEY.encode()
    payload = (
        b"server_args={'api_key': '" + key + b"'}\n" + b"x" * 70000 + key + b"y" * 10 + b"\npartial " + key
    )
    read_fd, write_fd = os.pipe()

    def writer():
        # Small writes, so the key is split across reads.
        for i in range(0, len(payload), 7):
            os.write(write_fd, payload[i : i + 7])
        os.close(write_fd)

    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", type("S", (), {"buffer": out})())
    thread = threading.Thread(target=writer)
    thread.start()
    launcher.copy_redacted(read_fd, key)
    thread.join()
    os.close(read_fd)
    text = out.getvalue()
    assert key not in text
    assert text.count(b"<redacted>") == 3
    assert len(text) == len(payload) - 3 * len(key) + 3 * len(b"<redacted>")


# ------------------------------------------------------------------------------- launcher stop signals


def start_launched_standin(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """The launcher running the stand-in (real processes) until /health answers 200; (process, port)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_LOAD_SECONDS": "0.2"}
    argv = [sys.executable, str(LAUNCHER), "--model-path", "/models/standin", "--port", str(port)]
    log = (tmp_path / "launcher.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                if answer.status == 200:
                    return proc, port
        except OSError:
            pass
        assert proc.poll() is None, (tmp_path / "launcher.log").read_text()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the launched stand-in never answered 200 on /health")


def server_pids(launcher_pid: int) -> list[int]:
    """The launcher's children (the server), read from /proc."""
    children = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []


def test_launcher_forwards_one_sigterm_and_exits_clean(tmp_path):
    """What systemd's KillMode=mixed does on stop: SIGTERM to the launcher alone. The server, in its own
    process group, gets it once through the launcher; both end with status 0, which systemd records as a
    clean stop (inactive, not failed)."""
    proc, _port = start_launched_standin(tmp_path)
    (server,) = server_pids(proc.pid)
    assert os.getpgid(server) == server != proc.pid  # the server leads its own group
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    log = (tmp_path / "launcher.log").read_text()
    assert log.count("Received signal 15") == 1, log
    assert not Path(f"/proc/{server}").exists()


def test_standin_stops_clean_when_a_second_signal_lands_in_the_first_ones_log_write(tmp_path):
    """The stand-in must stop with status 0 however many stop signals arrive. Its stop handler once
    logged through sys.stderr: a second SIGTERM landing while that write waited on a full pipe re-entered
    the buffered writer (RuntimeError: reentrant call), the double exited 1 and a CI stop ended 'failed'.
    Here the pipe is full on purpose (this test holds its write end too), so the second signal always
    lands inside the first one's write."""
    port = free_port()
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(STANDIN), "SGLANG_STANDIN_LOAD_SECONDS": "0.2"}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/x", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=write_fd, stderr=write_fd, env=env)
    output = b""
    try:
        os.set_blocking(read_fd, False)
        deadline = time.monotonic() + 20
        while b"Uvicorn running" not in output and time.monotonic() < deadline:
            assert proc.poll() is None, output
            try:
                output += os.read(read_fd, 65536)
            except BlockingIOError:
                time.sleep(0.05)
        assert b"Uvicorn running" in output, output
        time.sleep(0.2)
        try:
            output += os.read(read_fd, 65536)  # the pipe is empty now (the idle server writes nothing)
        except BlockingIOError:
            pass
        size = fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)
        # Exactly full, written blocking (O_NONBLOCK would be shared with the server's descriptor).
        assert os.write(write_fd, b"." * size) == size
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)  # lands inside the first handler's blocked write
        time.sleep(0.5)
        assert proc.poll() is None  # still blocked on the full pipe
    finally:
        os.close(write_fd)
        os.set_blocking(read_fd, True)
        rest = b""
        while chunk := os.read(read_fd, 65536):  # drain until the server closed its end
            rest += chunk
        os.close(read_fd)
    assert proc.wait(timeout=20) == 0, rest.replace(b".", b"")[-2000:]
    assert rest.count(b"Received signal 15") == 1


def test_the_server_environment_is_allow_listed(server, tmp_path, monkeypatch):
    """Issue 'nothing let in': secrets in the controller's environment never reach the server process; it
    gets its settings' env, the launcher's needs, HOME, and a PATH of the env's bin/, the toolkit's bin/ and
    the service PATH (issue 34: ninja lives in the env's bin/), nothing else of the caller's."""
    monkeypatch.setenv("MY_TOKEN", "x-controller-only")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y-controller-only")
    monkeypatch.setenv("PATH", f"/root/.pyenv/shims:{os.environ['PATH']}")
    started = run_module(MODULE, {**server, "cuda_home": "/opt/cuda-test"}, tmp_path)
    assert started["_rc"] == 0, started
    raw = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
    environ = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    assert "MY_TOKEN" not in environ and "AWS_SECRET_ACCESS_KEY" not in environ
    assert environ["PATH"] == f"{os.path.dirname(sys.executable)}:/opt/cuda-test/bin:{SERVICE_PATH}"
    assert environ["CUDA_HOME"] == "/opt/cuda-test"
    assert environ["PYTHONPATH"] == str(STANDIN) and environ["SGLANG_STANDIN_LOAD_SECONDS"] == "0.6"
    assert environ["HOME"] == os.path.expanduser("~")
    # HF_HUB_OFFLINE=1: every launch (sglang_args.build_server_env), so SGLang never downloads at launch
    assert environ["HF_HUB_OFFLINE"] == "1"
    allowed = {
        "PATH",
        "CUDA_HOME",
        *ACCOUNT_ENV_NAMES,
        *LOCALE_ENV_NAMES,
        *server["settings"]["env"],
        "EPFORGE_SGLANG_API_KEY",
        "HF_HUB_OFFLINE",
    }
    assert set(environ) <= allowed


def test_the_toolkit_comes_from_the_host_record_when_the_play_names_none(server, tmp_path):
    """A serve-only run (no cuda_toolkit role in the play) gives the server the toolkit role cuda_toolkit
    recorded, so it runs with the environment site.yml gave it (no restart between the two)."""
    fact = tmp_path / "epforge_cuda_toolkit.fact"
    fact.write_text(json.dumps({"home": "/opt/cuda-recorded", "nvcc_release": "13.0"}))
    started = run_module(MODULE, {**server, "toolkit_fact": str(fact)}, tmp_path)
    assert started["_rc"] == 0, started
    raw = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
    environ = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    assert environ["CUDA_HOME"] == "/opt/cuda-recorded"
    assert environ["PATH"].split(":")[:2] == [os.path.dirname(sys.executable), "/opt/cuda-recorded/bin"]
    again = run_module(MODULE, {**server, "cuda_home": "/opt/cuda-recorded"}, tmp_path)
    assert again["_rc"] == 0 and again["changed"] is False, again


def test_binding_every_interface_without_a_key_is_warned_about(server, tmp_path):
    """Issue 'nothing let in' (11): host 0.0.0.0 without an API key serves anyone who reaches the host."""
    open_args = {k: v for k, v in server.items() if k != "api_key"}
    open_args["settings"] = {**server["settings"], "host": "0.0.0.0"}
    warned = "without an API key"
    result = run_module(MODULE, open_args, tmp_path, check=True)
    # ansible-core 2.19 wraps module warnings in events
    assert result["_rc"] == 0 and warned in json.dumps(result.get("warnings")), result["_stdout"][-2000:]
    keyed = run_module(MODULE, {**server, "settings": open_args["settings"]}, tmp_path, check=True)
    assert warned not in json.dumps(keyed.get("warnings"))
    local = run_module(MODULE, {k: v for k, v in server.items() if k != "api_key"}, tmp_path, check=True)
    assert warned not in json.dumps(local.get("warnings"))


SERVER_NAMES_PLAY = """\
- name: Stop or remove one named server
  hosts: localhost
  gather_facts: false
  roles:
    - role: sglang_server
"""


@pytest.mark.parametrize("state", ["absent", "stopped"])
def test_stopping_or_removing_one_server_leaves_the_record_of_another(tmp_path, state):
    """Issue 'nothing let in' (10): one fact per server name; B's stop or removal never touches A's record."""
    from playbooks import run_playbook, write_vars  # noqa: PLC0415

    facts = tmp_path / "facts"
    facts.mkdir()
    record_a = facts / "epforge_sglang_server.fact"
    record_a.write_text(json.dumps({"schema": 1, "name": "sglang-server", "state": "started"}) + "\n")
    book = tmp_path / "names.yml"
    book.write_text(SERVER_NAMES_PLAY)
    extra = {
        "epforge_facts_dir": str(facts),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "sglang_server_name": "other-model",
        "sglang_server_state": state,
        "sglang_server_manager": "process",
    }
    proc = run_playbook(book, vars_file=write_vars(tmp_path / "vars.json", extra), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert json.loads(record_a.read_text())["state"] == "started"
    record_b = facts / "epforge_sglang_server_other_model.fact"
    if state == "stopped":
        assert json.loads(record_b.read_text())["name"] == "other-model"
    else:
        assert not record_b.exists()


def serve_vars(tmp_path: Path, user: str) -> dict:
    """playbooks/serve.yml's variables for a run in tmp_path with its own service account."""
    return {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "epforge_log_dir": str(tmp_path / "log"),
        "preflight_min_free_gib": 1,
        "sglang_server_user": user,
        "sglang_server_group": user,
    }


def test_serve_playbook_alone_skips_a_host_without_gpu_before_any_user_exists(tmp_path):
    """Issue 'nothing let in' (9): playbooks/serve.yml alone builds the settings object in preflight, so it
    consults the GPU facts itself: on this GPU-less machine the launch is skipped with the reason, and no
    service account, unit or server is created."""
    from playbooks import run_playbook, write_vars  # noqa: PLC0415

    user = "epforge-serve-nogpu"
    extra = {
        **serve_vars(tmp_path, user),
        "sglang_server_manager": "process",
    }
    proc = run_playbook(
        ROOT / "playbooks" / "serve.yml", vars_file=write_vars(tmp_path / "vars.json", extra), timeout=300
    )
    try:
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert subprocess.run(["getent", "passwd", user], capture_output=True, check=False).returncode != 0
        assert not (tmp_path / "state" / "sglang_server").exists()
        assert (
            "TASK [sglang_server : Decide whether this host launches, and record a skipped launch]"
            in proc.stdout
        )
        assert (
            "Create the service account" not in proc.stdout and "Start the SGLang server" not in proc.stdout
        )
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)


def test_a_pid_that_cannot_be_recorded_stops_the_server_it_belongs_to(server, monkeypatch):
    """Issue 'nothing let in' (6): a full state dir (ENOSPC on the pidfile) must not leave a server running
    that no later run can find: the pidfile is written (reserved) before the spawn, so a full disk fails
    before any server runs, naming the path and the cause."""
    import errno  # noqa: PLC0415

    import sglang_server as module  # noqa: PLC0415 - library/ is on sys.path (tests/conftest.py)
    from moduletools import run_main  # noqa: PLC0415

    from ansible_collections.epforge.ep.plugins.module_utils import service_managers as managers  # noqa: PLC0415

    real_write = managers.write_atomic

    def full_disk(path, *args, **kwargs):
        if str(path).endswith(".pid"):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_write(path, *args, **kwargs)

    monkeypatch.setattr(managers, "write_atomic", full_disk)
    spawned = []
    real_start = managers.start_detached
    monkeypatch.setattr(
        managers, "start_detached", lambda *a, **k: spawned.append(real_start(*a, **k)) or spawned[-1]
    )
    kind, result = run_main(module, {**server, "timeout": 5})
    assert kind == "fail", result
    assert server["state_dir"] in result["msg"] and "No space left on device" in result["msg"], result
    assert "nothing was started" in result["msg"]
    assert spawned == [], "a server was spawned although its pid could not be recorded"
    assert not list(Path(server["state_dir"]).glob("standin-test.*"))
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", server["settings"]["port"])) != 0


def health_and_tp(port: int) -> tuple[int, int]:
    """The stand-in's /health status and the tp_size its /get_server_info reports (0 when it is down)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            status = answer.status
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/get_server_info", headers={"Authorization": f"Bearer {KEY}"}
        )
        with urllib.request.urlopen(request, timeout=2) as answer:
            return status, json.load(answer)["tp_size"]
    except OSError:
        return 0, 0


def test_a_failed_relaunch_brings_the_previous_server_back(server, tmp_path):
    """Issue 'nothing let in' (5): new settings that die while starting do not cost the healthy server: the
    previous launch is started again and verified, and the result says which settings run."""
    port = server["settings"]["port"]
    first = run_module(MODULE, server, tmp_path)
    assert first["_rc"] == 0, first
    crashing = {
        **server["settings"],
        "tp_size": 4,
        "env": {**server["settings"]["env"], "SGLANG_STANDIN_CRASH_AFTER": "0.2"},
    }
    failed = run_module(MODULE, {**server, "settings": crashing}, tmp_path)
    assert failed["failed"] is True and failed["reason"] == "died", failed
    assert failed["rolled_back"] is True and failed["server_running"] is True, failed
    assert "previous settings" in failed["msg"] and "were relaunched" in failed["msg"], failed["msg"]
    assert "--tp-size" in failed["running_argv"] and failed["running_argv"] == first["argv"]
    assert health_and_tp(port) == (200, 2)
    assert Path(server["state_dir"], "standin-test.pid").read_text().strip() == str(failed["pid"])
    # The previous settings run and are recorded as running: the same request again changes nothing.
    again = run_module(MODULE, server, tmp_path)
    assert again["_rc"] == 0 and again["changed"] is False and again["pid"] == failed["pid"], again
    assert KEY not in failed["_stdout"]


def test_when_the_previous_settings_fail_too_the_result_says_no_server_runs(server, tmp_path):
    port = server["settings"]["port"]
    own_copy = tmp_path / "standin-copy"
    shutil.copytree(STANDIN, own_copy, ignore=shutil.ignore_patterns("__pycache__"))
    first_settings = {**server["settings"], "env": {**server["settings"]["env"], "PYTHONPATH": str(own_copy)}}
    first = run_module(MODULE, {**server, "settings": first_settings}, tmp_path)
    assert first["_rc"] == 0, first
    shutil.rmtree(own_copy)  # the previous launch can no longer import its "SGLang"
    crashing = {
        **server["settings"],
        "env": {**server["settings"]["env"], "SGLANG_STANDIN_CRASH_AFTER": "0.2"},
    }
    failed = run_module(MODULE, {**server, "settings": crashing}, tmp_path)
    assert failed["failed"] is True and failed["rolled_back"] is False, failed
    assert failed["server_running"] is False and "failed too" in failed["msg"], failed["msg"]
    assert "no server runs" in failed["msg"]
    assert health_and_tp(port) == (0, 0)


def test_a_first_start_that_fails_says_no_server_ran_before(server, tmp_path):
    env = {**server["settings"]["env"], "SGLANG_STANDIN_CRASH_AFTER": "0.2"}
    failed = run_module(MODULE, {**server, "settings": {**server["settings"], "env": env}}, tmp_path)
    assert failed["failed"] is True and failed["rolled_back"] is False and failed["server_running"] is False
    assert "no server runs (none ran before this start)" in failed["msg"], failed["msg"]


def test_stopped_removes_a_stale_pidfile(server, tmp_path):
    """Issue 'nothing let in' (12): a pidfile whose process is gone does not outlive `state: stopped`."""
    pidfile = Path(server["state_dir"]) / f"{server['name']}.pid"
    pidfile.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    pidfile.write_text(f"{dead.pid}\n")
    result = run_module(MODULE, {**server, "state": "stopped"}, tmp_path)
    assert result["_rc"] == 0 and result["changed"] is True, result
    assert not pidfile.exists()
    assert run_module(MODULE, {**server, "state": "stopped"}, tmp_path)["changed"] is False


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_server_whose_launcher_was_killed_is_found_stopped_and_reported_whole(server, tmp_path):
    """Issue 35 (1): `kill -9 $(cat NAME.pid)` kills the launcher only; the server it forked (a process group
    of its own) keeps the port. The manager finds that group by the launch's recorded identity (session,
    start time), never by name: the next start stops it and starts afresh, state absent stops it too, and
    the result names every process group of the launch."""
    server = {**server, "stop_timeout": 5}
    port = server["settings"]["port"]
    first = run_module(MODULE, server, tmp_path)
    assert first["_rc"] == 0, first
    (child,) = server_pids(first["pid"])
    assert os.getpgid(child) == child != first["pid"]  # the server leads its own group
    os.kill(first["pid"], signal.SIGKILL)
    assert wait_for(lambda: not alive(first["pid"]), 5)
    with socket.socket() as sock:  # the defect's state: an untracked server holds the port
        assert alive(child) and sock.connect_ex(("127.0.0.1", port)) == 0

    second = run_module(MODULE, server, tmp_path)
    assert second["_rc"] == 0, second.get("msg")
    assert second["changed"] is True and second["pid"] != first["pid"]
    assert second["stopped_leftovers"] == [{"pgid": child, "pids": [child]}], second
    assert "was gone but its launch still ran" in json.dumps(second.get("warnings")), second
    assert not alive(child)
    (child,) = server_pids(second["pid"])
    assert second["process_groups"] == [
        {"pgid": pgid, "pids": [pgid]} for pgid in sorted((second["pid"], child))
    ], second

    os.kill(second["pid"], signal.SIGKILL)
    assert wait_for(lambda: not alive(second["pid"]), 5)
    removed = run_module(MODULE, {**server, "state": "absent"}, tmp_path)
    assert removed["_rc"] == 0 and removed["changed"] is True, removed
    assert not alive(child), "state absent removed the records but left the server running"
    assert removed["process_groups"] == []
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_python_the_service_account_cannot_run_is_refused_before_the_account_exists(tmp_path):
    """Issue 'nothing let in' (9): the env's python under a directory the service account cannot enter
    (pytest's tmp dirs are 0700, like a pyenv python in root's home) is refused by playbooks/serve.yml with
    the blocking directory named, before the account, its home or any unit is created."""
    from playbooks import run_playbook, write_vars  # noqa: PLC0415

    user = "epforge-noaccess"
    private = tmp_path / "env" / "bin"
    private.mkdir(parents=True)
    (private / "python").symlink_to(sys.executable)
    extra = {
        **serve_vars(tmp_path, user),
        "sglang_server_home": str(tmp_path / "home"),
        "sglang_server_manager": "process",
        "sglang_server_require_gpu": False,
        "sglang_server_require_verdict": False,
        "sglang_server_python": str(private / "python"),
        "epforge_server": {"model_path": "/models/standin"},
    }
    proc = run_playbook(
        ROOT / "playbooks" / "serve.yml", vars_file=write_vars(tmp_path / "vars.json", extra), timeout=300
    )
    try:
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert f"the service account '{user}' could not run the env's python" in proc.stdout, proc.stdout[
            -3000:
        ]
        blocking = next(p for p in reversed(tmp_path.parents) if p.stat().st_mode & 0o001 == 0)
        assert f"{blocking} (mode 0o700" in " ".join(proc.stdout.split()), proc.stdout[-3000:]
        assert subprocess.run(["getent", "passwd", user], capture_output=True, check=False).returncode != 0
        assert not (tmp_path / "home").exists() and "Create the service account" not in proc.stdout
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)


@pytest.mark.parametrize(
    ("mode", "blocked"),
    [(0o755, False), (0o700, True), (0o750, True), (0o711, False)],
)
def test_service_access_follows_the_mode_bits(tmp_path, mode, blocked):
    """The module on real directories: 'nobody' is judged by the other bits (it owns nothing here)."""
    base = Path("/var/tmp") / f"epforge-access-{os.getpid()}-{mode:o}"
    inner = base / "env" / "bin"
    inner.mkdir(parents=True)
    try:
        os.chmod(base, mode)
        (inner / "python").symlink_to("/usr/bin/env")  # a binary everyone can run, outside root's home
        result = run_module(
            ROOT / "library" / "service_access_check.py",
            {"user": "nobody", "paths": [str(inner / "python")]},
            tmp_path,
        )
        assert (result["_rc"] != 0) is blocked, result
        if blocked:
            assert result["blocked"][0]["path"] == str(base) and result["blocked"][0]["needs"] == "x"
    finally:
        os.chmod(base, 0o755)  # noqa: S103 - back to removable
        shutil.rmtree(base)
