"""What the tuner optimises (issue 22): an objective over bench_serving's figures, with constraints.

    objective = {metric: output_throughput, goal: max, concurrency: 64,
                 constraints: [{figure: ttft_p99_ms, max: 500}, {figure: tpot_p99_ms, max: 50}]}

The one owner of the objective's rules: what a well-formed objective is, its defaults (goal max, no
constraints, the concurrency the largest of the workload's), the order of a candidate's steady windows (the
objective's concurrency first) and which constraints figures break. Role tuner resolves its objective once per
run (filter tune_run); module tune_journal checks an objective it is given directly. Ranking and the early
stop are the decision's (plugins/module_utils/tune_decision.py: filters tune_decision and tune_verdict, and
module tune_journal): one rule, under the noise it sees.

Only a candidate's steady-state figures at the objective's concurrency rank it: the cold first burst (JIT
compiles, CUDA-graph capture) is recorded apart and never ranks. Pure functions: no Ansible, no I/O.
"""

from __future__ import annotations

from ansible.module_utils.common.validation import check_type_float, check_type_int

from ansible_collections.epforge.ep.plugins.module_utils.bench_figures import FIGURE_KEYS

GOALS = ("max", "min")
DEFAULT_GOAL = "max"
DEFAULT_MARGIN = 0.10


class ObjectiveError(ValueError):
    """A malformed objective or workload concurrencies: the message names every problem."""


def objective_problems(objective: dict, known_figures=frozenset(FIGURE_KEYS)) -> list[str]:
    """What is wrong with an objective (empty: nothing), each naming the key and what is accepted."""
    if not isinstance(objective, dict):
        return [f"the objective must be a mapping (metric, goal, concurrency, constraints): {objective!r}"]
    problems = []
    if objective.get("metric") not in known_figures:
        problems.append(
            f"objective.metric {objective.get('metric')!r} is not a bench figure: one of "
            + ", ".join(sorted(known_figures))
        )
    if objective.get("goal", DEFAULT_GOAL) not in GOALS:
        problems.append(f"objective.goal must be max or min, got {objective.get('goal')!r}")
    concurrency = objective.get("concurrency")
    if concurrency is not None and (not _positive_int(concurrency)):
        problems.append(f"objective.concurrency must be a positive integer, got {concurrency!r}")
    for index, rule in enumerate(objective.get("constraints") or []):
        where = f"objective.constraints[{index}]"
        if not isinstance(rule, dict) or rule.get("figure") not in known_figures:
            problems.append(f"{where} must name a bench figure (figure: ttft_p99_ms, ...), got {rule!r}")
            continue
        bounds = [key for key in ("max", "min") if rule.get(key) is not None]
        if len(bounds) != 1 or not _number(rule[bounds[0]]):
            problems.append(f"{where} needs exactly one number bound, max or min, got {rule!r}")
    return problems


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def largest(concurrencies) -> int | None:
    """The default concurrency of an objective that names none: the largest (of the workload's before a run,
    of the windows measured when a journal is ranked with such an objective). None without any."""
    return max((int(c) for c in concurrencies or []), default=None)


def resolved(objective: dict, concurrencies: list) -> dict:
    """The objective with its defaults (goal max, no constraints, the concurrency the largest of the
    workload's concurrencies), numbers as numbers (what Ansible's int and float types accept, as the role's
    argument spec does); raises ObjectiveError naming every problem of either."""
    objective, concurrencies = _as_numbers(objective, concurrencies)
    problems = objective_problems(objective)
    if not concurrencies or not all(_positive_int(c) for c in concurrencies):
        problems.append(
            f"the workload's concurrencies must be a non-empty list of positive integers: {concurrencies!r}"
        )
    if problems:
        raise ObjectiveError("the tuning objective is malformed: " + "; ".join(problems))
    constraints = [
        {key: rule[key] for key in ("figure", "max", "min") if rule.get(key) is not None}
        for rule in objective.get("constraints") or []
    ]
    return {
        **objective,
        "goal": objective.get("goal", DEFAULT_GOAL),
        "concurrency": objective.get("concurrency") or largest(concurrencies),
        "constraints": constraints,
    }


def _as_numbers(objective, concurrencies) -> tuple:
    """(objective, concurrencies) with a concurrency or a bound given as a string (`-e key=value`) converted
    as Ansible's int and float types convert it; numbers stay as given, and what does not convert stays as
    it was for objective_problems to name."""

    def converted(value, check):
        if not isinstance(value, str):
            return value
        try:
            return check(value)
        except TypeError:
            return value

    if not isinstance(objective, dict):
        return objective, concurrencies
    objective = dict(objective)
    if objective.get("concurrency") is not None:
        objective["concurrency"] = converted(objective["concurrency"], check_type_int)
    if isinstance(objective.get("constraints"), list):
        objective["constraints"] = [
            {k: converted(v, check_type_float) if k in ("max", "min") else v for k, v in rule.items()}
            if isinstance(rule, dict)
            else rule
            for rule in objective["constraints"]
        ]
    if isinstance(concurrencies, list):
        concurrencies = [converted(c, check_type_int) for c in concurrencies]
    return objective, concurrencies


def window_order(concurrency: int, concurrencies: list) -> list[int]:
    """The steady windows of a candidate: the objective's concurrency first (its window is the one judged
    for an early stop), then the workload's others in their order."""
    return [concurrency] + [int(c) for c in concurrencies if int(c) != concurrency]


def broken(
    figures: dict, objective: dict, margin: float = 0.0, *, unmeasured_breaks: bool = True
) -> list[str]:
    """The constraints the figures break (beyond margin, as a fraction of the bound), as sentences; a figure
    that was not measured breaks its constraint unless unmeasured_breaks is false."""
    found = []
    for rule in objective.get("constraints") or []:
        value = figures.get(rule["figure"])
        if value is None:
            if unmeasured_breaks:
                found.append(f"{rule['figure']} was not measured")
        elif rule.get("max") is not None and value > rule["max"] * (1 + margin):
            found.append(f"{rule['figure']} {value:g} > {rule['max']:g}")
        elif rule.get("min") is not None and value < rule["min"] * (1 - margin):
            found.append(f"{rule['figure']} {value:g} < {rule['min']:g}")
    return found
