# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of role tuner: its rules applied on the controller, one call where the role had Jinja.

- tune_run: the objective resolved and checked once per run (its defaults, plugins/module_utils/
  tune_objective.py), the order of a candidate's steady windows and one window's workload;
- tune_verdict: a candidate's first window judged against the best finished so far (stop early or go on);
- tune_decision: the finished candidates ranked, and the winner picked from the plan;
- tune_settings: a request with a candidate's variation over it (plugins/module_utils/tune_settings.py),
  for a host of tuner_group that serves the group's winner over its own request.

The journal on the host (module tune_journal) keeps the results; ranking them here needs no host call and
takes the objective already resolved, so it is checked once per run, not on each of the 2 + 2n calls the
journal used to rank with.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.tune_objective import (
    DEFAULT_MARGIN,
    ObjectiveError,
    ranking,
    resolved,
    steady,
    stop_early,
    window_order,
)
from ansible_collections.epforge.ep.plugins.module_utils.tune_settings import settings_of


def tune_run(objective, workload) -> dict:
    """{objective: resolved (goal, constraints and concurrency filled in), concurrencies: the steady windows'
    order (the objective's first), workload: one window's workload (the workload without its concurrencies:
    each window sets its own)}; a malformed objective fails naming every problem."""
    if not isinstance(workload, dict):
        raise AnsibleFilterError(f"tuner_workload must be a mapping, got {workload!r}")
    try:
        objective = resolved(objective, workload.get("concurrencies"))
    except ObjectiveError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return {
        "objective": objective,
        "concurrencies": window_order(objective["concurrency"], workload["concurrencies"]),
        "workload": {key: value for key, value in workload.items() if key != "concurrencies"},
    }


def tune_verdict(results, figures, objective, margin=DEFAULT_MARGIN) -> dict:
    """{stop_early, reason}: a first steady window's figures against the best of the finished results."""
    incumbent = ranking(results or [], objective)["value"]
    stop, reason = stop_early(figures or {}, incumbent, objective, float(margin))
    return {"stop_early": stop, "reason": reason}


def tune_decision(results, candidates, objective) -> dict:
    """{ranking, winner: the planned candidate the ranking names ({} when none qualified), figures: the
    winner's steady figures at the objective's concurrency ({} without a winner)}."""
    ranked = ranking(results or [], objective)
    name = ranked["winner"]
    winner = next((c for c in candidates or [] if c.get("name") == name), None) if name else {}
    if winner is None:
        raise AnsibleFilterError(f"the journal's winner {name!r} is not a candidate of this plan")
    result = next((r for r in results if r["name"] == name), {}) if name else {}
    figures = (steady(result, objective) or {}) if name else {}
    return {"ranking": ranked, "winner": winner, "figures": figures}


def tune_settings(request, variation) -> dict:
    """The request with the variation's changes (None removes a setting) and env over it."""
    if not isinstance(request, dict) or not isinstance(variation, dict):
        raise AnsibleFilterError(
            f"tune_settings needs a request and a variation {{changes, env}}: {request!r}, {variation!r}"
        )
    return settings_of(request, variation)


class FilterModule:
    def filters(self):
        return {
            "tune_run": tune_run,
            "tune_verdict": tune_verdict,
            "tune_decision": tune_decision,
            "tune_settings": tune_settings,
        }
