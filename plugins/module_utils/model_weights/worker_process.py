"""Module model_weights' fetching process: the huggingface_hub side (hub_worker.py, sent on stdin to the
fetching python) started in its own process group, its JSON events read with a bounded wait, stopped with its
group, and the progress log users tail: the one place model_weights writes text to a file, so the one place a
line is redacted (the token, the credentials of the mirror's URL: plugins/module_utils/secret_scrub.py), the
worker's own stderr (huggingface_hub's messages, which name URLs) included; the log is 0600."""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import json
import os
import select
import signal
import subprocess
import time

from ansible_collections.epforge.ep.plugins.module_utils.common import tail_file
from ansible_collections.epforge.ep.plugins.module_utils.model_weights import hub_worker as worker_source
from ansible_collections.epforge.ep.plugins.module_utils.process import _stop_group
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact


def die_with_parent() -> None:
    """In the worker before exec: SIGKILL it when the module dies (a killed play leaves no fetch behind)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Log:
    """The progress log users tail: timestamped lines, appended, redacted, 0600 (it may name what a secret
    guards: the mirror, the repo)."""

    def __init__(
        self, path: str, check_mode: bool = False, secrets: list[str] | tuple[str, ...] = ()
    ) -> None:
        self.path = path
        self.secrets = [s for s in secrets if s]
        self.quiet = check_mode  # check mode changes nothing, the log included
        if not check_mode:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def redact(self, text: str) -> str:
        return str(redact(text, self.secrets))

    def line(self, text: str) -> None:
        self.append(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def append(self, text: str) -> None:
        if self.quiet:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a log an older epforge wrote 0644 is closed too
            handle.write(self.redact(text))


class Worker:
    """The huggingface_hub side (plugins/module_utils/model_weights/hub_worker.py) in O(python): started with
    the request (token included) on stdin, read as JSON events; stopped with its process group."""

    def __init__(self, module, log: Log, command: str, request: dict) -> None:
        self.module, self.log = module, log
        self.argv = [module.params["python"], "-c", worker_source.BOOTSTRAP, command]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_ETAG_TIMEOUT=str(min(60, module.params["file_timeout"])),
            HF_HUB_DOWNLOAD_TIMEOUT=str(min(60, module.params["file_timeout"])),
        )
        # huggingface_hub's messages (stderr) come through a pipe: into the log, redacted (Log.append)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - the module starts it before any thread
        )
        source = inspect.getsource(worker_source)  # works from Ansible's zipped module_utils too
        self.proc.stdin.write((json.dumps(request) + "\n" + source).encode())
        self.proc.stdin.close()
        self.buffer = b""
        self.err_buffer = b""
        self.err_open = True

    def read_stderr(self) -> None:
        """What the worker wrote to stderr so far, into the log line by line (redacted there)."""
        chunk = os.read(self.proc.stderr.fileno(), 65536)
        if not chunk:
            self.err_open = False
        self.err_buffer += chunk
        *lines, self.err_buffer = self.err_buffer.split(b"\n")
        if not chunk and self.err_buffer:
            lines.append(self.err_buffer)
            self.err_buffer = b""
        if lines:
            self.log.append("".join(line.decode(errors="replace") + "\n" for line in lines))

    def drain_stderr(self, timeout: float = 5.0) -> None:
        """The rest of the worker's stderr once it ended (bounded: a stray holder of the pipe cannot hang)."""
        deadline = time.monotonic() + timeout
        while self.err_open and time.monotonic() < deadline:
            ready, _unused, _unused = select.select(
                [self.proc.stderr], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                break
            self.read_stderr()
        if self.err_buffer:
            self.log.append(self.err_buffer.decode(errors="replace") + "\n")
            self.err_buffer = b""

    def events(self, wait: float) -> list[dict]:
        """Events that arrived within `wait` seconds ([] when none; the worker may have exited)."""
        watched = [self.proc.stdout] + ([self.proc.stderr] if self.err_open else [])
        ready, _unused, _unused = select.select(watched, [], [], wait)
        if self.proc.stderr in ready:
            self.read_stderr()
        if self.proc.stdout not in ready:
            return []
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return [{"event": "eof"}]
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> None:
        _stop_group(self.proc)

    def fail(self, msg: str, **extra) -> None:
        self.stop()
        self.drain_stderr()
        msg = self.log.redact(msg)
        self.log.line(f"FAILED: {msg}")
        self.module.fail_json(
            msg=msg,
            cmd=[*self.argv[:2], "<bootstrap>", *self.argv[3:]],
            rc=self.proc.returncode if self.proc.returncode is not None else -1,
            log_path=self.log.path,
            log_tail=tail_file(self.log.path),
            **extra,
        )
