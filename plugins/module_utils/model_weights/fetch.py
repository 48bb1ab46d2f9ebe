"""module model_weights' fourth job: talking to the fetching worker (worker_process.py) - a call run to its
end within the bounds (timeout for the whole fetch, file_timeout per file, the controller's play still there),
the worker's error told in the user's terms, and the files it fetches checked against the Hub's hash and
placed in the model directory, with progress in the log. Used by source hub and mirror (hub.py). Tested
through the module in tests/unit/test_model_weights.py and tests/unit/test_model_refusals.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import time

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.report import Report
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.shown import human
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log, Worker
from ansible_collections.epforge.ep.plugins.module_utils.process import (
    Interrupted,
    _stop_group_on_interrupt,
    chain_intact,
    controller_chain,
)


class Fetcher:
    def __init__(self, module, request: Request, log: Log, report: Report) -> None:
        self.module = module
        self.p = module.params
        self.path = request.path
        self.token = request.token
        self.where = request.where
        self.log = log
        self.started = report.started
        self.result = report.result

    def call(self, command: str, request: dict, on_event=None) -> list[dict]:
        """Run the worker to its end (bounded); return its events, failing on its error event."""
        request = {"endpoint": self.p["endpoint"], "token": self.token, "repo": self.p["repo"], **request}
        worker = Worker(self.module, self.log, command, request)
        events = []
        deadline = self.started + self.p["timeout"]
        chain = controller_chain()  # the play that started this module: when it is gone, so is the fetch
        try:
            with _stop_group_on_interrupt(worker.proc):
                return self.follow(worker, events, deadline, chain, on_event)
        except Interrupted as exc:
            self.log.line(f"interrupted ({exc}): the fetch stopped; a rerun resumes it")
            raise
        except BaseException:
            if worker.proc.poll() is None:
                worker.stop()
            raise

    def follow(self, worker: Worker, events: list, deadline: float, chain, on_event) -> list[dict]:
        """Read the worker's events until it ends, enforcing the bounds."""
        while True:
            if chain and not chain_intact(chain):
                worker.stop()
                raise Interrupted("the controller's ansible-playbook run that started this is gone")
            if time.monotonic() > deadline:
                worker.fail(
                    f"fetching {self.p['repo']} took more than timeout={self.p['timeout']} s; completed "
                    "files are kept and a rerun fetches only the rest",
                    timed_out="total",
                )
            for event in worker.events(0.5):
                if event["event"] == "eof":
                    worker.proc.wait(timeout=30)
                    worker.drain_stderr()
                    return self.ended(worker, events)
                if event["event"] == "versions":
                    self.result["libraries"] = {k: v for k, v in event.items() if k != "event"}
                events.append(event)
                if on_event:
                    on_event(worker, event)
            if on_event:
                on_event(worker, {"event": "tick"})

    def ended(self, worker: Worker, events: list[dict]) -> list[dict]:
        errors = [e for e in events if e["event"] == "error"]
        if errors or worker.proc.returncode != 0:
            error = (
                errors[0] if errors else {"kind": "error", "message": "the worker exited without a result"}
            )
            worker.fail(self.error_message(error), kind=error["kind"])
        return events

    def error_message(self, error: dict) -> str:
        repo, rev, where = self.p["repo"], self.p["revision"], self.where
        kind = error["kind"]
        if kind in ("unknown_repo", "unknown_revision"):
            return (
                f"{repo} at revision {rev} was not found at {where} (unknown repository or revision; a "
                f"private or gated repository answers the same without a token): {error['message']}"
            )
        if kind == "missing_revision":
            return (
                f"{repo} at revision {rev} was not found at {where}: the repository answers at its branch "
                f"main, this revision does not ({error['message']}); set model_revision to a branch, a tag "
                f"or a full commit id of {repo}"
            )
        if kind == "gated":
            return f"{repo} is gated: its files need a token with access (model_token or model_token_file)"
        if kind == "missing_library":
            return (
                f"{self.p['python']} has no huggingface_hub: install it there (role sglang does) or set "
                "model_python"
            )
        if kind == "unreachable":
            return f"{where} could not be reached: {error['message']}"
        return f"fetching {repo} failed: {error['message']}"

    def fetch(self, manifest: dict, names: list[str]) -> None:
        files = manifest["files"]
        names = sorted(names, key=lambda n: (-files[n]["size"], n))
        staging = os.path.join(self.path, model_files.PARTIAL)
        os.makedirs(staging, mode=0o700, exist_ok=True)
        # A part cut off midway is fetched again whole (resume per file: a mirror may ignore HTTP Range).
        shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
        total = sum(files[n]["size"] for n in names)
        self.log.line(
            f"fetching {len(names)} of {len(files)} files ({human(total)}) of {self.p['repo']} at "
            f"{manifest['commit']} into {self.path}"
        )
        state = {"started": {}, "done": 0, "bytes": 0, "last": time.monotonic(), "t0": time.monotonic()}

        def on_event(worker: Worker, event: dict) -> None:
            now = time.monotonic()
            if event["event"] == "start":
                state["started"][event["file"]] = now
            elif event["event"] == "done":
                name = event["file"]
                state["started"].pop(name, None)
                self.place(worker, os.path.join(staging, name), name, files[name])
                state["done"] += 1
                state["bytes"] += files[name]["size"]
            for name, since in state["started"].items():
                if now - since > self.p["file_timeout"]:
                    worker.fail(
                        f"{name} took more than file_timeout={self.p['file_timeout']} s; completed files are "
                        "kept and a rerun fetches only the rest",
                        timed_out="file",
                        file=name,
                    )
            if now - state["last"] >= self.p["progress_interval"] or event["event"] == "done":
                state["last"] = now
                partial = self.partial_bytes(staging)
                moved = state["bytes"] + partial
                rate = moved / max(now - state["t0"], 1e-6)
                eta = (total - moved) / rate if rate > 0 else float("inf")
                self.log.line(
                    f"progress: files {state['done']}/{len(names)}, {human(moved)}/{human(total)}, "
                    f"{human(rate)}/s, ETA {eta:.0f} s"
                )

        self.call(
            "fetch",
            {
                "commit": manifest["commit"],
                "staging": staging,
                "files": names,
                "concurrency": self.p["concurrency"],
            },
            on_event,
        )
        self.result["fetched"] += names
        self.result["bytes_fetched"] += total
        shutil.rmtree(staging, ignore_errors=True)
        # so far in this run (the indexes are fetched first, alone)
        fetched, moved = len(self.result["fetched"]), human(self.result["bytes_fetched"])
        self.log.line(f"fetched {fetched} files, {moved}")

    @staticmethod
    def partial_bytes(staging: str) -> int:
        size = 0
        for root, _dirs, files in os.walk(staging):
            for name in files:
                with contextlib.suppress(OSError):
                    size += os.path.getsize(os.path.join(root, name))
        return size

    def place(self, worker: Worker, fetched: str, name: str, expected: dict) -> None:
        """A fetched file is checked against the Hub's hash, then moved into the model directory."""
        problem, _found = model_files.file_problem(fetched, expected)
        if problem:
            os.unlink(fetched)
            worker.fail(f"{name} as fetched from {self.where} does not match its metadata: {problem}")
        target = os.path.join(self.path, name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.chmod(fetched, 0o644)
        os.replace(fetched, target)
        self.result["verified"] += 1
