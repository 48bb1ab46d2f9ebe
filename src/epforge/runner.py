"""Run epforge playbooks through ansible-runner, stream progress, and collect results from the run's events.

Results come from events, not from the runner's fact cache (ansible-runner 2.4.3's get_fact_cache() returns {}
on ansible-core 2.19): `ansible_facts` of runner_on_ok / runner_on_failed events, and set_stats data from
the playbook_on_stats event (`artifact_data`).
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import ansible_runner


def project_root() -> Path:
    """The epforge checkout (ansible.cfg, site.yml, roles/): $EPFORGE_HOME, else this package's checkout,
    else the working directory."""
    env = os.environ.get("EPFORGE_HOME")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2]
    if (here / "ansible.cfg").exists() and (here / "roles").is_dir():
        return here
    return Path.cwd()


@dataclass
class RunResult:
    rc: int
    status: str
    facts: dict = field(default_factory=dict)  # host -> ansible_facts gathered from events
    stats: dict = field(default_factory=dict)  # set_stats data (per host, or "_run")
    failures: list = field(default_factory=list)  # {host, task, msg}
    counts: dict = field(default_factory=dict)  # host -> {ok, changed, failed, skipped, unreachable}
    # host -> the per-step summary lines of playbooks/summary.yml, as ansible-playbook prints them
    steps: dict = field(default_factory=dict)
    private_data_dir: str = ""


class Progress:
    """Event handler: one line per task and per host result, as the run goes."""

    def __init__(self, out=None, verbose: bool = False) -> None:
        self.out = out or sys.stdout
        self.verbose = verbose
        self.result = RunResult(rc=-1, status="unstarted")
        self._task = ""
        self._task_printed = False

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            handler(self, kind, data)
        self._show_debug(kind, data)
        return True

    def _show_task(self) -> None:
        """The task's name, once, before its first result line."""
        if not self._task_printed:
            self.say(f"  TASK {self._task}")
            self._task_printed = True

    def _fail(self, host: str, res: dict) -> None:
        self.result.failures.append({"host": host, "task": self._task, "msg": str(res.get("msg", ""))})

    def _on_play_start(self, _kind: str, data: dict) -> None:
        self.say(f"PLAY {data.get('play', '')}")

    def _on_task_start(self, _kind: str, data: dict) -> None:
        self._task = data.get("task", "")
        self._task_printed = False

    def _on_host_result(self, kind: str, data: dict) -> None:
        """A host's result of a task: keep its facts, print one line (skips only when verbose)."""
        host, res = _host(data), data.get("res") or {}
        if isinstance(res.get("ansible_facts"), dict):
            self.result.facts.setdefault(host, {}).update(res["ansible_facts"])
        if kind == "runner_on_skipped" and not self.verbose:
            return
        self._show_task()
        self._RESULT_LINES[kind](self, host, res, data)

    def _ok_line(self, host: str, res: dict, data: dict) -> None:
        state = "changed" if res.get("changed") else "ok"
        # a debug task's message is shown by _show_debug, verbose or not (a list one line per item)
        debug = data.get("task_action") in ("ansible.builtin.debug", "debug")
        msg = res.get("msg") if isinstance(res.get("msg"), str) and self.verbose and not debug else ""
        self.say(f"    {state}: {host}" + (f" - {msg}" if msg else ""))

    def _failed_line(self, host: str, res: dict, data: dict) -> None:
        ignored = data.get("ignore_errors")
        msg = str(res.get("msg", "")).strip().splitlines()
        msg_line = msg[0][:300] if msg else ""
        self.say(f"    {'failed (ignored)' if ignored else 'FAILED'}: {host} - {msg_line}")
        if not ignored:
            self._fail(host, res)

    def _unreachable_line(self, host: str, res: dict, _data: dict) -> None:
        self.say(f"    UNREACHABLE: {host} - {res.get('msg', '')}")
        self._fail(host, res)

    def _skipped_line(self, host: str, _res: dict, _data: dict) -> None:
        self.say(f"    skipped: {host}")

    def _on_stats(self, _kind: str, data: dict) -> None:
        self.result.stats = data.get("artifact_data") or {}
        counts: dict = {}
        for key in ("ok", "changed", "failures", "skipped", "dark", "rescued", "ignored"):
            for h, n in (data.get(key) or {}).items():
                counts.setdefault(h, {})[key] = n
        self.result.counts = counts

    def _show_debug(self, kind: str, data: dict) -> None:
        """Debug messages as ansible-playbook prints them; the summary play's step lines are kept."""
        res = data.get("res") or {}
        if data.get("task_action") not in ("ansible.builtin.debug", "debug") or not res.get("msg"):
            return
        if kind == "runner_item_on_ok":
            # one loop item of a debug task (the summary play loops over epforge_steps): show its message
            # as ansible-playbook does, and keep the step lines for the end of the run
            self._show_task()
            lines = message_lines(res["msg"])
            for line in lines:
                self.say(f"      {line}")
            item = res.get("item")
            if isinstance(item, dict) and {"step", "status"} <= set(item):
                self.result.steps.setdefault(_host(data), []).extend(lines)
        elif kind == "runner_on_ok" and "results" not in res:
            # a plain debug message (not a loop's closing "All items completed") is the run's plain outcome
            for line in message_lines(res["msg"]):
                self.say(f"      {line}")

    # event kind -> handler; events of other kinds only reach _show_debug
    _HANDLERS: ClassVar[dict] = {
        "playbook_on_play_start": _on_play_start,
        "playbook_on_task_start": _on_task_start,
        "runner_on_ok": _on_host_result,
        "runner_on_failed": _on_host_result,
        "runner_on_unreachable": _on_host_result,
        "runner_on_skipped": _on_host_result,
        "playbook_on_stats": _on_stats,
    }
    _RESULT_LINES: ClassVar[dict] = {
        "runner_on_ok": _ok_line,
        "runner_on_failed": _failed_line,
        "runner_on_unreachable": _unreachable_line,
        "runner_on_skipped": _skipped_line,
    }


def _host(data: dict) -> str:
    """The host an event is about."""
    return data.get("host") or data.get("remote_addr") or ""


def message_lines(msg) -> list[str]:
    """A debug task's msg (a string, a list, or a list rendered as a string) -> its lines."""
    if isinstance(msg, str) and msg.startswith("[") and msg.endswith("]"):
        try:
            msg = ast.literal_eval(msg)
        except (ValueError, SyntaxError):
            pass
    return [str(line) for line in (msg if isinstance(msg, list) else [msg])]


def run_playbook(
    playbook: str | Path,
    *,
    inventory: str | None = None,
    extravars: dict | None = None,
    limit: str | None = None,
    out=None,
    verbose: bool = False,
    private_data_dir: str | None = None,
    extra_cmdline: str = "",
) -> RunResult:
    """Run one playbook of the project with ansible-runner; stream progress to out; collect results."""
    root = project_root()
    playbook = Path(playbook)
    if not playbook.is_absolute():
        playbook = (root / playbook).resolve()
    if not playbook.exists():
        raise FileNotFoundError(f"playbook {playbook} not found (project root {root})")
    inv = inventory or str(root / "inventory" / "local.yml")
    if os.path.exists(inv):
        inv = str(Path(inv).resolve())
    pdd = private_data_dir or tempfile.mkdtemp(prefix="epforge-run-")
    progress = Progress(out=out, verbose=verbose)
    envvars = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(root / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    # the ansible-playbook of this environment, also when the environment is not activated
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
    runner = ansible_runner.run(
        private_data_dir=pdd,
        project_dir=str(root),
        playbook=str(playbook),
        inventory=inv,
        extravars=extravars or {},
        limit=limit,
        envvars=envvars,
        quiet=True,
        event_handler=progress,
        cmdline=extra_cmdline or None,
    )
    result = progress.result
    result.rc = runner.rc
    result.status = runner.status
    result.private_data_dir = pdd
    return result


def parse_extravars(items: list[str] | None) -> dict:
    """-e KEY=VALUE (VALUE parsed as JSON when it is JSON) and -e @FILE (JSON or YAML)."""
    out: dict = {}
    for item in items or []:
        if item.startswith("@"):
            text = Path(item[1:]).read_text()
            try:
                data = json.loads(text)
            except ValueError:
                import yaml  # noqa: PLC0415 - only for YAML var files

                data = yaml.safe_load(text)
            if not isinstance(data, dict):
                raise ValueError(f"{item[1:]} does not hold a mapping of variables")
            out.update(data)
            continue
        if "=" not in item:
            raise ValueError(f"extra var {item!r} is not KEY=VALUE or @FILE")
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out
