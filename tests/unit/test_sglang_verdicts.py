"""The parser's verdicts, one per settings object's digest (issue 34 item 2), judged by SGLang's REAL parser
(the cached parser-only venv of tests/sglang_parser_env.py). The stand-in tuner and sweep tests (test_tune.py,
test_sweep.py) judge every candidate with it too.

On a real H200 run, 4 of 5 tuner candidates that differed only in `env` were refused "SGLang's parser has not
judged this argv": the judge answered them from the verdict of the first candidate's argv (the parser never
sees the environment) and recorded nothing under their digests, which is what role sglang_server checks. And
a plan larger than the verdict file's 32 entries pushed out its own first verdicts.
"""

from __future__ import annotations

import json

import pytest
import sglang_parser_env
from sglang_parser_env import SGLANG_VERSION, run_module

from ansible_collections.epforge.ep.plugins.module_utils import sglang_flags
from ansible_collections.epforge.ep.plugins.module_utils.server_object import digest_of

sglang_env = sglang_parser_env.sglang_env

ARGV = ["--model-path", "/models/demo-moe", "--tp-size", "1", "--host", "127.0.0.1", "--port", "30000"]


def env_only_objects(count: int, tag: str = "plan") -> list[dict]:
    """Server settings objects with one argv that differ only in their environment (as tuner candidates
    over NCCL variables or the stand-in's knobs do)."""
    objects = []
    for index in range(count):
        env = {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG_SUBSYS": f"{tag},{index}"}
        objects.append(
            {
                "schema": 1,
                "sglang_version": SGLANG_VERSION,
                "settings": {"model_path": "/models/demo-moe", "tp_size": 1, "env": env},
                "adjustments": [],
                "argv": list(ARGV),
                "env": env,
                "digest": digest_of(SGLANG_VERSION, ARGV, env),
            }
        )
    return objects


class Judge:
    """What check_flags needs of an Ansible module (in-process: a plan of 40 costs no 40 module starts)."""

    check_mode = False

    def fail_json(self, **result):
        pytest.fail(f"the parser refused: {result}")


def test_each_digest_gets_its_verdict_from_one_parser_run_and_a_plan_keeps_all_its_own(sglang_env, tmp_path):
    cache = str(tmp_path / "sglang-flags-check.json")
    python, kept = sglang_env["python"], sglang_flags.VERDICTS_KEPT

    # Objects that differ only in env, judged as role sglang_server judges them (module sglang_flags_check):
    # one parser run (the parser never sees env), and every digest - what a launch checks - has its verdict.
    objects = env_only_objects(3, tag="first")
    cached = []
    for obj in objects:
        args = {"python": python, "server_object": obj, "sglang_version": SGLANG_VERSION, "cache_path": cache}
        rc, result = run_module("sglang_flags_check", args)
        assert rc == 0, result
        cached.append(result["cached"])
    assert cached == [False, True, True]
    assert sglang_flags.judged_digests(cache) == {obj["digest"] for obj in objects}

    def judge(obj: dict, plan: str) -> dict:
        return sglang_flags.check_flags(
            Judge(), python, obj["argv"], SGLANG_VERSION, cache_path=cache, digest=obj["digest"],
            reuse_digest=True, plan=plan,
        )  # fmt: skip

    # A plan larger than the file's 32 entries, after an earlier run's verdicts filled it (no parser run:
    # the argv was judged above).
    earlier = env_only_objects(kept, tag="earlier")
    assert all(judge(obj, "")["cached"] for obj in earlier)
    plan = env_only_objects(kept + 8)
    assert all(judge(obj, "tune-a")["cached"] for obj in plan)
    judged = sglang_flags.judged_digests(cache)
    assert {obj["digest"] for obj in plan} <= judged, "the plan dropped verdicts of its own"
    # bounded by the plan: its own entries and the newest 32 others
    assert {obj["digest"] for obj in earlier} <= judged and len(judged) == 2 * kept + 8
    # the winner's relaunch (the plan's first candidate) finds its verdict
    assert judge(plan[0], "tune-a")["cached"] is True
    # the next plan's first write: the finished plan's verdicts are ordinary ones, the newest 32 of them kept
    judge(env_only_objects(1, tag="next")[0], "tune-b")
    with open(cache, encoding="utf-8") as handle:
        verdicts = json.load(handle)["verdicts"]
    assert len(verdicts) == kept + 1
    assert [entry["plan"] for entry in verdicts] == ["tune-a"] * kept + ["tune-b"]
