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
        host = data.get("host") or data.get("remote_addr") or ""
        res = data.get("res") or {}
        if kind == "playbook_on_play_start":
            self.say(f"PLAY {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            self._task = data.get("task", "")
            self._task_printed = False
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"):
            if isinstance(res.get("ansible_facts"), dict):
                self.result.facts.setdefault(host, {}).update(res["ansible_facts"])
            if kind == "runner_on_skipped" and not self.verbose:
                return True
            if not self._task_printed:
                self.say(f"  TASK {self._task}")
                self._task_printed = True
            if kind == "runner_on_ok":
                state = "changed" if res.get("changed") else "ok"
                msg = res.get("msg") if isinstance(res.get("msg"), str) and self.verbose else ""
                self.say(f"    {state}: {host}" + (f" - {msg}" if msg else ""))
            elif kind == "runner_on_failed":
                ignored = data.get("ignore_errors")
                msg = str(res.get("msg", "")).strip().splitlines()
                msg_line = msg[0][:300] if msg else ""
                self.say(f"    {'failed (ignored)' if ignored else 'FAILED'}: {host} - {msg_line}")
                if not ignored:
                    self.result.failures.append(
                        {"host": host, "task": self._task, "msg": str(res.get("msg", ""))}
                    )
            elif kind == "runner_on_unreachable":
                self.say(f"    UNREACHABLE: {host} - {res.get('msg', '')}")
                self.result.failures.append(
                    {"host": host, "task": self._task, "msg": str(res.get("msg", ""))}
                )
            else:
                self.say(f"    skipped: {host}")
        elif kind == "runner_on_ok_debug":  # pragma: no cover - not an ansible event, kept for symmetry
            pass
        elif kind == "playbook_on_stats":
            self.result.stats = data.get("artifact_data") or {}
            counts: dict = {}
            for key in ("ok", "changed", "failures", "skipped", "dark", "rescued", "ignored"):
                for h, n in (data.get(key) or {}).items():
                    counts.setdefault(h, {})[key] = n
            self.result.counts = counts
        is_debug = data.get("task_action") in ("ansible.builtin.debug", "debug")
        if kind == "runner_item_on_ok" and is_debug and res.get("msg"):
            # one loop item of a debug task (the summary play loops over epforge_steps): show its message as
            # ansible-playbook does, and keep the step lines for the end of the run
            if not self._task_printed:
                self.say(f"  TASK {self._task}")
                self._task_printed = True
            lines = message_lines(res["msg"])
            for line in lines:
                self.say(f"      {line}")
            item = res.get("item")
            if isinstance(item, dict) and {"step", "status"} <= set(item):
                self.result.steps.setdefault(host, []).extend(lines)
        elif (
            kind == "runner_on_ok"
            and not self.verbose
            and is_debug
            and res.get("msg")
            and "results" not in res
        ):
            # a plain debug message (not a loop's closing "All items completed") is the run's plain outcome
            for line in message_lines(res["msg"]):
                self.say(f"      {line}")
        return True


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
        "ANSIBLE_LIBRARY": str(root / "library"),
        "ANSIBLE_MODULE_UTILS": str(root / "module_utils"),
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
