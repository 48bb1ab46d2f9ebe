"""Module model_weights' fetching process: the huggingface_hub side (hub_worker.py, sent on stdin to the
fetching python) started in its own process group, its JSON events read with a bounded wait, stopped with its
group, and the progress log users tail."""

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


def die_with_parent() -> None:
    """In the worker before exec: SIGKILL it when the module dies (a killed play leaves no fetch behind)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Log:
    """The progress log users tail: timestamped lines, appended."""

    def __init__(self, path: str, check_mode: bool = False) -> None:
        self.path = path
        self.quiet = check_mode  # check mode changes nothing, the log included
        if not check_mode:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def line(self, text: str) -> None:
        if self.quiet:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")


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
        with open(os.devnull if log.quiet else log.path, "ab") as stderr:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - the module starts it before any thread
            )
        source = inspect.getsource(worker_source)  # works from Ansible's zipped module_utils too
        self.proc.stdin.write((json.dumps(request) + "\n" + source).encode())
        self.proc.stdin.close()
        self.buffer = b""

    def events(self, wait: float) -> list[dict]:
        """Events that arrived within `wait` seconds ([] when none; the worker may have exited)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], wait)
        if not ready:
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
        self.log.line(f"FAILED: {msg}")
        self.module.fail_json(
            msg=msg,
            cmd=[*self.argv[:2], "<bootstrap>", *self.argv[3:]],
            rc=self.proc.returncode if self.proc.returncode is not None else -1,
            log_path=self.log.path,
            log_tail=tail_file(self.log.path),
            **extra,
        )
