"""epforge's launcher for `python -m sglang.launch_server` (shipped by the sglang_server role).

Usage: PYTHON epforge_sglang_launch.py [launch_server flags ...]

Why it exists: SGLang takes its API key only as the --api-key flag (it has no environment fallback), and
a flag is visible to every local user in the unit file and in /proc/PID/cmdline. So the key travels in
the environment instead (EPFORGE_SGLANG_API_KEY, from a root-only 0600 EnvironmentFile that systemd
reads before dropping to the service user), and this launcher:

1. removes the key from the environment (the server's children never inherit it),
2. forks: the child runs sglang.launch_server in-process (runpy) with --api-key appended to its
   sys.argv only, so the key is in no command line;
3. the parent copies the server's stdout/stderr to its own, line by line, replacing the key with
   <redacted> (SGLang 0.5.23 logs every server argument, the key included, at startup), forwards
   SIGTERM/SIGINT/SIGHUP to the server's process group, and exits with the server's exit status.
   The unit's KillMode=mixed sends systemd's SIGTERM to this process only, so the server receives each
   stop signal exactly once (control-group would signal it twice: directly and forwarded).

Standard library only; no shell is involved anywhere.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

KEY_VAR = "EPFORGE_SGLANG_API_KEY"
MODULE_VAR = "EPFORGE_SGLANG_MODULE"
REDACTED = b"<redacted>"


def run_server(args: list[str], key: str) -> None:
    """In the child: become sglang.launch_server's __main__ with the key in sys.argv only."""
    module = os.environ.pop(MODULE_VAR, "sglang.launch_server")
    sys.argv = [module, *args] + (["--api-key", key] if key else [])
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            os._exit(0)
        if isinstance(code, int):
            os._exit(code)
        sys.stderr.write(f"{code}\n")
        sys.stderr.flush()
        os._exit(1)
    except BaseException:  # the traceback must reach the log before the child ends
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def copy_redacted(read_fd: int, key: bytes) -> None:
    """Copy the pipe to stdout until every writer closed it, hiding the key.

    Output is written up to the last complete line (a key holds no newline, so it cannot straddle that
    cut); a very long line is cut keeping len(key)-1 bytes back, so no key is ever split by a cut.
    """
    pending = b""
    out = sys.stdout.buffer
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        if key:
            pending = pending.replace(key, REDACTED)
        if b"\n" in pending:
            cut = pending.rfind(b"\n") + 1
        elif len(pending) > 65536:
            cut = len(pending) - max(len(key) - 1, 0)
        else:
            cut = 0
        if cut:
            out.write(pending[:cut])
            out.flush()
            pending = pending[cut:]
    if pending:
        out.write(pending)
        out.flush()


def main() -> int:
    args = sys.argv[1:]
    key = os.environ.pop(KEY_VAR, "")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.setpgid(0, 0)
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        run_server(args, key)
    os.close(write_fd)
    # Both sides set the group (the usual fork idiom): whichever runs first, the group exists before a
    # signal is forwarded to it.
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child is already its own group leader, or has ended

    def forward(signum, _frame):
        # One signal from systemd (the unit's KillMode=mixed signals only this process) reaches the
        # server's whole group once; a server that has already left its group still gets it.
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    copy_redacted(read_fd, key.encode())
    while True:
        try:
            _unused, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
