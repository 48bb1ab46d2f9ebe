#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: record a fleet benchmark window with the per-worker request split, judged."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_bench_record
short_description: Record a fleet benchmark window with its per-worker request split, judged
description:
  - The gateway's fleet benchmark runs SGLang's client through the gateway into a pending history
    (O(pending_path)); this takes that run's entry, adds the requests each worker's own access log shows
    (O(counts), module server_access_count from a mark taken before the run), judges it
    (plugins/module_utils/fleet_bench_record/split.py) and appends it to the fleet's history O(fact_path).
  - The window counts for its N workers only when each answered at least O(min_share) of an even share
    (total / N); else the entry is C(invalid) (figures kept) and says how many served
    (C(fleet.served_workers)).
  - Nothing pending (the benchmark was skipped) records nothing.
options:
  pending_path:
    description: The history fact the benchmark wrote this run into; removed once recorded.
    type: path
    required: true
  fact_path:
    description: The fleet's history fact.
    type: path
    required: true
  workers:
    description: Every worker host of the fleet; one without an entry in O(counts) was not counted.
    type: list
    elements: str
    required: true
  counts:
    description: Requests answered 200 per worker host since the mark.
    type: dict
    required: true
  min_share:
    description: The least fraction of an even share each worker must have served.
    type: float
    default: 0.5
  history_max:
    description: Entries the history keeps.
    type: int
    default: 50
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Record the fleet window with its split
  epforge.ep.fleet_bench_record:
    pending_path: /var/lib/epforge/fleet-bench/pending.fact
    fact_path: /etc/ansible/facts.d/epforge_fleet_bench.fact
    workers: [worker1, worker2, worker3]
    counts: {worker1: 80, worker2: 8, worker3: 152}
"""

RETURN = r"""
recorded:
  description: Whether an entry was pending and was recorded.
  returned: always
  type: bool
entry:
  description: The recorded entry (status, figures, fleet with split, served_workers, share_bound).
  returned: when recorded
  type: dict
split:
  description: The judgement (split, total, share, bound, served, served_workers, workers, valid, reason).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.bench_history import BenchError, record_run
from ansible_collections.epforge.ep.plugins.module_utils.fleet_bench_record.split import (
    judge_split,
    judged_entry,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pending_path": {"type": "path", "required": True},
            "fact_path": {"type": "path", "required": True},
            "workers": {"type": "list", "elements": "str", "required": True},
            "counts": {"type": "dict", "required": True},
            "min_share": {"type": "float", "default": 0.5},
            "history_max": {"type": "int", "default": 50},
        },
        supports_check_mode=False,
    )
    p = module.params
    given = {str(host): count for host, count in p["counts"].items()}
    counts = {host: (None if given.get(host) is None else int(given[host])) for host in p["workers"]}
    split = judge_split(counts, p["min_share"])
    try:
        with open(p["pending_path"], encoding="utf-8") as handle:
            entry = (json.load(handle) or {}).get("last")
    except FileNotFoundError:
        module.exit_json(changed=False, recorded=False, split=split)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the pending fleet run {p['pending_path']}: {exc}", split=split)
    if not entry:
        module.exit_json(changed=False, recorded=False, split=split)
    entry = judged_entry(entry, split)
    try:
        record_run(p["fact_path"], entry, p["history_max"])
    except (BenchError, OSError) as exc:
        module.fail_json(msg=f"cannot record the fleet run in {p['fact_path']}: {exc}", split=split)
    os.unlink(p["pending_path"])
    module.exit_json(changed=True, recorded=True, entry=entry, split=split)


if __name__ == "__main__":
    main()
