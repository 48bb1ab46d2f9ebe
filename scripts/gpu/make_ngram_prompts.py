"""Write scripts/gpu/h200-ngram-prompts.jsonl: a prompt file of the `custom` kind (one JSON object a line,
two turns) for the H200 sweep's NGRAM configuration. Text an n-gram draft can match (the same phrases come
back within a prompt), written here by the project, deterministic: rerunning gives the same bytes.

    python scripts/gpu/make_ngram_prompts.py > scripts/gpu/h200-ngram-prompts.jsonl
"""

from __future__ import annotations

import json
import random

SUBJECTS = ("the scheduler", "the expert router", "the KV cache", "the gateway", "the tokenizer", "the tuner")
VERBS = ("reads", "writes", "checks", "records", "sends", "waits for")
OBJECTS = ("the batch", "the next request", "its journal", "the prefix cache", "the GPU memory", "a verdict")


def prompt(rng: random.Random, index: int) -> dict:
    phrases = [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}" for _ in range(6)]
    body = ". ".join(phrases[rng.randrange(6)] for _ in range(40))
    question = f"Request {index}: repeat the log below line by line, then say which step came last.\n{body}."
    return {"conversations": [{"content": question}, {"content": "Understood. " + body[:200]}]}


def main() -> None:
    rng = random.Random(20261204)  # noqa: S311 - reproducible text, not a secret
    for index in range(64):
        print(json.dumps(prompt(rng, index), sort_keys=True))


if __name__ == "__main__":
    main()
