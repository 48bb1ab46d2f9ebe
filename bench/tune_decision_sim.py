"""How often the tuner names the right winner under the H200's noise (issue 38): proof by simulation.

    .venv/bin/python bench/tune_decision_sim.py [--seeds 1000] [--json]

Both rules run over the same simulated runs:

- old: the rule as it was at commit fd7466e (before be783dd moved it to plugins/module_utils/
  tune_objective.py), reimplemented below as it was: one launch per candidate, one steady window at the
  objective's concurrency, an early stop when that window is more than tuner_margin (10 %) below the best so
  far, and the best single window wins (a tie to the one tried first). It never declares a tie.
- new: plugins/module_utils/tune_decision.py as role tuner calls it: `windows` rankable windows per launch,
  the early stop beyond margin and spread, alternating relaunches of close leaders (bounded by
  max_relaunches), a declared TIE broken by the stated rule.

Noise model, fitted to the H200 run (docs/gpu-runs.md, issue 38): an observed value is
true x exp(L + W), L ~ N(0, 0.10) drawn once per launch (graphs-bs16 8403 then 6923 and graphs-bs64 7802
then 8277 tok/s: sqrt(mean(ln(a/b)^2) / 2) = 0.101), W ~ N(0, 0.03) drawn per 1-s window (one warm window
varies by a few percent; three candidates of that run 1.2 % apart). TTFT p99 is 40 ms x exp(same draws).

Candidates: the true best (1.0), the second (1 - gap), two more at 0.80 and 0.55 (the space's also-rans),
in a random plan order per seed; each candidate changes one setting, so the tie rule falls through to TTFT
p99 and the plan order: deterministic given the measurements.

Outcome of a seed: correct = a clear winner (not a tie) that is the true best; tie = a declared tie whose set
holds the true best; wrong = anything else: a clear winner that is not the true best, a tie without it, and
at a 0 % gap EVERY clear winner (two candidates are equally best, so claiming one is a wrong claim; only a
declared tie, whose pick the tie rule makes deterministically, is right).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.epforge.ep.plugins.module_utils import tune_decision  # noqa: E402

LAUNCH_SIGMA = 0.10
WINDOW_SIGMA = 0.03
GAPS = (0.15, 0.05, 0.0)
OTHERS = (0.80, 0.55)
MARGIN = 0.10
WINDOWS = 3
OBJECTIVE = {"metric": "output_throughput", "goal": "max", "concurrency": 16, "constraints": []}


class Stand:
    """One simulated host: a launch draws its part of the noise, each window its own."""

    def __init__(self, rng: random.Random, truth: dict):
        self.rng, self.truth, self.launches = rng, truth, 0

    def launch(self, name: str) -> float:
        self.launches += 1
        return self.rng.gauss(0.0, LAUNCH_SIGMA)

    def window(self, name: str, launch_noise: float) -> dict:
        noise = math.exp(launch_noise + self.rng.gauss(0.0, WINDOW_SIGMA))
        return {
            "output_throughput": 8000.0 * self.truth[name] * noise,
            "ttft_p99_ms": 40.0 * noise,
            "duration_s": 1.0,
            "completed": 64,
        }


def old_rule(stand: Stand, plan: list[str]) -> dict:
    """fd7466e: one window per candidate, early stop beyond tuner_margin of the best so far, argmax."""
    best_name, best_value = None, None
    for name in plan:
        value = stand.window(name, stand.launch(name))["output_throughput"]
        if best_value is not None and value < best_value * (1 - MARGIN):
            continue  # stopped early: status stopped_early, never ranked
        if best_value is None or value > best_value:  # a tie keeps the one tried first
            best_name, best_value = name, value
    return {"verdict": "clear", "winner": best_name, "tie": None}


def new_rule(stand: Stand, plan: list[str], noise: dict | None = None) -> dict:
    """plugins/module_utils/tune_decision.py as role tuner runs it."""
    candidates = [{"name": name, "changes": {"setting": name}, "env": {}} for name in plan]
    results = []
    for name in plan:
        launch = stand.launch(name)
        first = stand.window(name, launch)
        incumbent = tune_decision.decide(results, candidates, OBJECTIVE, noise)
        best = incumbent["stats"].get(incumbent["valid"][0]) if incumbent["valid"] else None
        stop, reason = tune_decision.stop_early(first, best, OBJECTIVE, MARGIN, noise)
        if stop:
            results.append(
                {"name": name, "status": "stopped_early", "reason": reason, "steady": {"16": first}}
            )
            continue
        windows = [first] + [stand.window(name, launch) for _ in range(WINDOWS - 1)]
        results.append({"name": name, "status": "ok", "steady": {"16": windows}})
    while True:
        decision = tune_decision.decide(results, candidates, OBJECTIVE, noise)
        if decision["verdict"] != "remeasure":
            return decision
        for name in decision["remeasure"]:  # one round: each relaunched once, in turn
            launch = stand.launch(name)
            result = next(r for r in results if r["name"] == name)
            result.setdefault("relaunches", []).append(
                {"steady": {"16": [stand.window(name, launch) for _ in range(WINDOWS)]}}
            )


def outcome(decision: dict, truth: dict) -> str:
    top = max(truth.values())
    best = {name for name, value in truth.items() if value == top}
    if decision["verdict"] == "tie":
        return "tie" if best & set(decision["tie"]["names"]) else "wrong"
    if len(best) > 1:
        return "wrong"
    return "correct" if decision["winner"] in best else "wrong"


def simulate(seeds: int, gaps=GAPS, noise: dict | None = None) -> list[dict]:
    rows = []
    for gap in gaps:
        truth = {"best": 1.0, "second": 1.0 - gap, "third": OTHERS[0], "fourth": OTHERS[1]}
        for rule_name, rule in (("old (fd7466e)", old_rule), ("new", new_rule)):
            counts = {"correct": 0, "tie": 0, "wrong": 0}
            launches = 0
            for seed in range(seeds):
                rng = random.Random(f"{seed}-{gap}")  # noqa: S311 - a simulation, seeded; the same plan order and draws per seed for both rules
                plan = list(truth)
                rng.shuffle(plan)
                stand = Stand(rng, truth)
                decision = rule(stand, plan, noise) if rule is new_rule else rule(stand, plan)
                counts[outcome(decision, truth)] += 1
                launches += stand.launches
            rows.append(
                {
                    "gap": gap,
                    "rule": rule_name,
                    "seeds": seeds,
                    **{f"p_{key}": value / seeds for key, value in counts.items()},
                    "launches_mean": launches / seeds,
                }
            )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| gap | rule | P(correct winner) | P(tie declared) | P(wrong winner claimed) | launches per run |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['gap']:.0%} | {row['rule']} | {row['p_correct']:.1%} | {row['p_tie']:.1%} | "
            f"{row['p_wrong']:.1%} | {row['launches_mean']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="the rows as JSON instead of the table")
    args = parser.parse_args()
    rows = simulate(args.seeds)
    noise = tune_decision.noise_of(None)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    print(
        f"\nnoise: launch sigma {LAUNCH_SIGMA}, window sigma {WINDOW_SIGMA}, {WINDOWS} windows per launch; "
        f"new rule: z {noise['z']:g}, max_relaunches {noise['max_relaunches']} rounds, margin {MARGIN:.0%}"
    )


if __name__ == "__main__":
    main()
