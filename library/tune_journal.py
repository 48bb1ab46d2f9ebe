#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the tuning run's journal on the host - each candidate's result kept as it finishes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tune_journal
short_description: Keep a tuning run's results on the host, rank them, and judge a candidate's first window
description:
  - The journal of one tuning run (issue 22) is a JSON file in O(directory) named by the digest of O(plan)
    (the candidates, the workload, the objective); a rerun of the same plan finds the results of the
    candidates that finished before it was interrupted (Ctrl-C, SIGKILL of the play, a reboot) and re-runs
    none of them; another plan starts another journal.
  - O(state=read) returns the finished results. O(state=record) adds one candidate's result, written
    atomically (temp file, fsync, rename) the moment the candidate finishes. Given an O(objective), both also
    rank the results by it, and O(state=window) judges a candidate's first steady measurement window against
    the incumbent - stop early or go on - and writes nothing.
  - Only steady-state figures at the objective's concurrency rank a candidate; its cold first burst is kept
    apart. The rule is role tuner's own (plugins/module_utils/tune_decision.py, filters
    C(epforge.ep.tune_decision) and C(epforge.ep.tune_verdict)) with its noise defaults - every window that
    completed enough requests ranks, a candidate's value is the median over its launches, candidates closer
    than their spread are a declared tie (C(verdict), C(tie)), broken by the stated rule; the early stop needs
    the margin and the spread.
  - Role tuner passes no objective - it resolves and checks its objective once per run and ranks on the
    controller (filters C(epforge.ep.tune_run), C(epforge.ep.tune_verdict), C(epforge.ep.tune_decision)) -
    so this module only keeps its results.
  - The journal is sealed like the probe cache's records (plugins/module_utils/seal.py) - an HMAC over the
    plan's digest and the results with a key derived from the controller's secret, which the module's action
    plugin passes (O(seal_key)). A journal edited by hand, copied from another controller or cut off is not
    believed - its results are dropped with a warning naming the file and the candidates run again; the next
    record keeps it as C(PATH.rejected) and writes a new one.
  - Supports check mode (a record is reported, not written) and diff mode.
options:
  directory:
    description: Where journals live on the host (C(epforge_state_dir/tuning)); created when missing.
    type: path
    required: true
  plan:
    description: >-
      What identifies the run - the planned candidates' names and settings digests, the workload and the
      objective; its digest names the journal.
    type: dict
    required: true
  objective:
    description:
      - C(metric) (a bench figure such as C(output_throughput) or C(tpot_median_ms)), C(goal) (C(max) or
        C(min)), C(concurrency) (whose steady figures rank; default the largest measured) and C(constraints),
        a list of C({figure, max}) or C({figure, min}).
      - When given, it is checked (a malformed one fails, naming each problem) and the answer ranks the
        results by it; O(state=window) needs it. Without it, the answer has no C(ranking).
    type: dict
  state:
    description: What to do.
    type: str
    choices: [read, record, window]
    default: read
  result:
    description:
      - With O(state=record), one candidate's result - C(name), C(status) (C(ok), C(failed), C(refused),
        C(stopped_early) or C(not_tried)), C(reason), C(cold) (the first burst's figures), C(warmup) (the
        warm-ups' figures by concurrency, never ranked), C(steady) (figures by concurrency), C(repeats) (every
        ranked window's figures by concurrency), C(relaunches) (each re-measure's figures, role tuner's
        tasks/relaunch.yml), C(seconds).
      - With O(state=window), C(name) and C(figures) of its first steady window.
    type: dict
    default: {}
  margin:
    description: >-
      With O(state=window), how much worse than the incumbent (a fraction) a first window may be before the
      candidate is stopped early.
    type: float
    default: 0.1
  seal_key:
    description:
      - The key that seals the journal, derived from the controller's secret. Set by the module's action
        plugin (plugins/action/tune_journal.py); a task does not set it.
    type: str
    required: true
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode reports a record without writing it.
  diff_mode:
    support: full
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Record a candidate's result the moment it finishes
  epforge.ep.tune_journal:
    directory: /var/lib/epforge/tuning
    plan: "{{ tune_plan_identity }}"
    objective: {metric: output_throughput, goal: max, constraints: [{figure: ttft_p99_ms, max: 500}]}
    state: record
    result:
      name: tp8+graph-bs64
      status: ok
      cold: {output_throughput: 310.0, ttft_p99_ms: 2900.0}
      steady: {"64": {output_throughput: 1131.0, ttft_p99_ms: 420.0}}
      seconds: 181.5
"""

RETURN = r"""
path:
  description: The journal file.
  returned: always
  type: str
results:
  description: Every finished candidate's result, in the order they finished.
  returned: always
  type: list
  elements: dict
finished_candidates:
  description:
    - The names of the finished candidates (a resumed run skips them).
    - Not C(finished), a key ansible-core 2.21 reads as a bool of its own (an async job's).
  returned: always
  type: list
  elements: str
ranking:
  description: >-
    C(winner) (or null), its C(value), C(valid) (names, best first), C(invalid) (name to reason), C(verdict)
    (C(clear), C(tie) or C(none)), C(tie) (C(names), C(rule), C(picked)) and C(reason).
  returned: when objective is given
  type: dict
stop_early:
  description: With O(state=window), whether to stop the candidate now.
  returned: when state is window
  type: bool
reason:
  description: With O(state=window), why.
  returned: when state is window
  type: str
"""

import contextlib
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils import tune_decision as decision
from ansible_collections.epforge.ep.plugins.module_utils.bench_figures import FIGURE_KEYS
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest
from ansible_collections.epforge.ep.plugins.module_utils.files import json_text, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.seal import seal, sealed
from ansible_collections.epforge.ep.plugins.module_utils.tune_objective import (
    DEFAULT_GOAL,
    largest,
    objective_problems,
)

SCHEMA = 2  # 2: sealed
STATUSES = ("ok", "failed", "refused", "stopped_early", "not_tried")


class Journal:
    """One plan's journal file: read, record a result, judge a first window."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        p = module.params
        self.objective = p["objective"]
        problems = objective_problems(self.objective, set(FIGURE_KEYS)) if self.objective is not None else []
        if problems:
            module.fail_json(msg="the tuning objective is malformed: " + "; ".join(problems))
        self.plan_digest = digest(p["plan"])
        self.path = os.path.join(p["directory"], f"{self.plan_digest[:16]}.json")
        self.key = p["seal_key"].encode()
        self.rejected = False
        self.results = self.read()

    def read(self) -> list:
        """The journal's results when its seal holds; else none, with a warning naming the file."""
        try:
            with open(self.path, "rb") as handle:
                text = handle.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.module.fail_json(msg=f"the tuning journal {self.path} cannot be read: {exc}")
        try:
            found = json.loads(text)
        except ValueError:  # UnicodeDecodeError included
            found = None
        if not isinstance(found, dict) or not isinstance(found.get("results"), list):
            return self.reject(
                f"is not a whole journal ({len(text)} bytes, no JSON object of results: cut off?)"
            )
        if found.get("plan_digest") != self.plan_digest:
            return self.reject("belongs to another plan")
        results = found["results"]
        if not sealed(self.key, [self.plan_digest, results], found.get("seal")):
            return self.reject(
                f"is not sealed by this controller (edited by hand, written by another controller or by an "
                f"epforge before journals were sealed): its {len(results)} results are not believed"
            )
        return results

    def reject(self, why: str) -> list:
        self.rejected = True
        self.module.warn(
            f"tuning journal {self.path} {why}; its candidates run again, and the next record keeps the file "
            f"as {self.path}.rejected and starts a new journal"
        )
        return []

    def decided(self) -> dict:
        """The results judged by the tuner's own decision rule (plugins/module_utils/tune_decision.py, the
        noise defaults; final: a journal read is no moment to relaunch), its concurrency the objective's or
        the largest measured."""
        objective = {
            "goal": DEFAULT_GOAL,
            "constraints": [],
            **self.objective,
            "concurrency": self.objective.get("concurrency")
            or largest(c for r in self.results for c in (r.get("steady") or {})),
        }
        candidates = [
            c if isinstance(c, dict) else {"name": c[0] if isinstance(c, (list, tuple)) and c else c}
            for c in self.module.params["plan"].get("candidates") or []
        ]
        return {"objective": objective, **decision.decide(self.results, candidates, objective, final=True)}

    def ranking(self) -> dict:
        found = self.decided()
        keys = ("winner", "value", "valid", "invalid", "verdict", "tie", "reason")
        return {key: found[key] for key in keys}

    def answer(self, **extra) -> dict:
        ranked = {"ranking": self.ranking()} if self.objective is not None else {}
        return {
            "path": self.path,
            "results": self.results,
            "finished_candidates": [r["name"] for r in self.results],
            **ranked,
            **extra,
        }

    def record(self, result: dict) -> dict:
        name = result.get("name")
        if not isinstance(name, str) or result.get("status") not in STATUSES:
            self.module.fail_json(
                msg=f"a result needs a name and a status of {', '.join(STATUSES)}, got {result!r}"
            )
        steady = result.get("steady") or {}
        if not isinstance(steady, dict) or not all(str(k).isdigit() for k in steady):
            self.module.fail_json(msg=f"result {name}: steady maps concurrencies to figures, got {steady!r}")
        before = list(self.results)
        self.results = [r for r in self.results if r["name"] != name] + [dict(result, steady=steady)]
        content = {
            "schema": SCHEMA,
            "plan_digest": self.plan_digest,
            "results": self.results,
            "seal": seal(self.key, [self.plan_digest, self.results]),
        }
        changed = before != self.results or self.rejected
        if changed and not self.module.check_mode:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            if self.rejected:
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.path, f"{self.path}.rejected")
            write_json_atomic(self.path, content, mode=0o600)
        diff = {"before": json_text(before), "after": json_text(self.results)} if changed else {}
        return self.answer(changed=changed, diff=diff)

    def window(self, result: dict) -> dict:
        figures = result.get("figures")
        if not isinstance(result.get("name"), str) or not isinstance(figures, dict):
            self.module.fail_json(msg=f"a window needs a name and its figures, got {result!r}")
        found = self.decided()
        incumbent = found["stats"][found["valid"][0]] if found["valid"] else None
        stop, why = decision.stop_early(figures, incumbent, found["objective"], self.module.params["margin"])
        return self.answer(changed=False, stop_early=stop, reason=why)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directory": {"type": "path", "required": True},
            "plan": {"type": "dict", "required": True},
            "objective": {"type": "dict"},
            "state": {"type": "str", "choices": ["read", "record", "window"], "default": "read"},
            "result": {"type": "dict", "default": {}},
            "margin": {"type": "float", "default": 0.1},
            "seal_key": {"type": "str", "required": True, "no_log": True},
        },
        required_if=[("state", "window", ["objective"])],
        supports_check_mode=True,
    )
    journal = Journal(module)
    state = module.params["state"]
    if state == "record":
        module.exit_json(**journal.record(module.params["result"]))
    if state == "window":
        module.exit_json(**journal.window(module.params["result"]))
    module.exit_json(changed=False, **journal.answer())


if __name__ == "__main__":
    main()
