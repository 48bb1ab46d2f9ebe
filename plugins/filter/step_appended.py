# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter epforge.ep.step_appended: the run summary's steps with one more, its arguments checked.

roles/epforge/tasks/record_step.yml is the one task that records a step; this filter is its rule. Checking
the arguments here, in the same task, costs nothing where an argument-spec entry point would add a validation
task to every step of every run (ten per provision).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

STATUSES = ("done", "skipped", "failed")


def step_appended(steps, name, status, detail):
    """steps + [{step, status, detail}] with the detail's whitespace folded; a clear error on bad input."""
    if steps is None:
        steps = []
    if not isinstance(steps, list):
        raise AnsibleFilterError(f"epforge_steps must be a list of steps, got {type(steps).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise AnsibleFilterError(f"epforge_step_name must be a non-empty string, got {name!r}")
    if status not in STATUSES:
        raise AnsibleFilterError(
            f"epforge_step_status of step {name} must be one of {', '.join(STATUSES)}, got {status!r}"
        )
    if not isinstance(detail, str):
        raise AnsibleFilterError(f"epforge_step_detail of step {name} must be a string, got {detail!r}")
    return [*steps, {"step": name, "status": status, "detail": re.sub(r"\s+", " ", detail).strip()}]


class FilterModule:
    def filters(self):
        return {"step_appended": step_appended}
