# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of role tuner: its rules applied on the controller, one call where the role had Jinja.

- tune_run: the objective resolved and checked once per run (its defaults, plugins/module_utils/
  tune_objective.py), the order of a candidate's steady windows and one window's workload;
- tune_verdict: a candidate's first window judged against the best finished so far (stop early or go on,
  beyond the margin and the spread: plugins/module_utils/tune_decision.py);
- tune_decision: the finished candidates ranked under noise (median and spread, re-measure, tie;
  plugins/module_utils/tune_decision.py), and the winner picked from the plan;
- tune_spent: the seconds a journal's results spent, relaunches included (the budget's count on a resume);
- tune_settings: a request with a candidate's variation over it (plugins/module_utils/tune_settings.py),
  for a host of tuner_group that serves the group's winner over its own request.

The journal on the host (module tune_journal) keeps the results; ranking them here needs no host call and
takes the objective already resolved, so it is checked once per run, not on each of the 2 + 2n calls the
journal used to rank with.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils import tune_decision as decision_rules
from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import PromptFileError, staged_workload
from ansible_collections.epforge.ep.plugins.module_utils.tune_objective import (
    DEFAULT_MARGIN,
    ObjectiveError,
    resolved,
    window_order,
)
from ansible_collections.epforge.ep.plugins.module_utils.tune_settings import settings_of


def tune_run(objective, workload, staged="") -> dict:
    """{objective: resolved (goal, constraints and concurrency filled in), concurrencies: the steady windows'
    order (the objective's first), workload: one window's workload (the workload without its concurrencies:
    each window sets its own; a prompt_file becomes dataset_path, the host path it was copied to: staged),
    identity: the workload as it names the run (the staged path holds the file's sha256, so a changed file
    is another run)}; a malformed objective fails naming every problem."""
    if not isinstance(workload, dict):
        raise AnsibleFilterError(f"tuner_workload must be a mapping, got {workload!r}")
    try:
        objective = resolved(objective, workload.get("concurrencies"))
    except ObjectiveError as exc:
        raise AnsibleFilterError(str(exc)) from None
    try:
        identity = staged_workload(workload, staged, "tuner_workload")
    except PromptFileError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return {
        "objective": objective,
        "concurrencies": window_order(objective["concurrency"], workload["concurrencies"]),
        "workload": {key: value for key, value in identity.items() if key != "concurrencies"},
        "identity": identity,
    }


def tune_verdict(results, figures, objective, margin=DEFAULT_MARGIN, noise=None) -> dict:
    """{stop_early, reason}: a first steady window's figures against the best of the finished results, beyond
    the margin and the spread (noise: role tuner's window and spread settings, defaults from the H200 run)."""
    ranked = decision_rules.decide(results or [], [], objective, noise)
    incumbent = ranked["stats"][ranked["valid"][0]] if ranked["valid"] else None
    stop, reason = decision_rules.stop_early(figures or {}, incumbent, objective, float(margin), noise)
    return {"stop_early": stop, "reason": reason}


def tune_decision(results, candidates, objective, noise=None, final=False) -> dict:
    """{ranking: the decision (verdict clear|remeasure|tie|none, winner, value, valid, invalid, stats with
    each candidate's median, spread and interval, remeasure, tie, reason), winner: the planned candidate it
    names ({} when none qualified or a re-measure is due), figures: the winner's median steady figures}.
    final: the re-measures are over (their rounds ran or the budget is spent): close leaders are a tie."""
    ranked = decision_rules.decide(results or [], candidates or [], objective, noise, bool(final))
    name = ranked["winner"]
    winner = next((c for c in candidates or [] if c.get("name") == name), None) if name else {}
    if winner is None:
        raise AnsibleFilterError(f"the journal's winner {name!r} is not a candidate of this plan")
    figures = ranked["stats"][name]["figures"] if name else {}
    return {"ranking": ranked, "winner": winner, "figures": figures}


def tune_spent(results) -> float:
    """Seconds the journal's results spent: each candidate's and each of its relaunches'."""
    return decision_rules.spent_s(results or [])


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
            "tune_spent": tune_spent,
            "tune_settings": tune_settings,
        }
