"""The parser's verdicts, one per settings object's digest (issue 34 item 2), judged by SGLang's REAL parser
(the cached parser-only venv of tests/sglang_parser_env.py).

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


def env_only_objects(count: int, argv: list[str] = ARGV) -> list[dict]:
    """Server settings objects with one argv that differ only in their environment (as tuner candidates
    over NCCL variables or the stand-in's knobs do)."""
    objects = []
    for index in range(count):
        env = {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG_SUBSYS": f"INIT,{index}"}
        objects.append(
            {
                "schema": 1,
                "sglang_version": SGLANG_VERSION,
                "settings": {"model_path": "/models/demo-moe", "tp_size": 1, "env": env},
                "adjustments": [],
                "argv": list(argv),
                "env": env,
                "digest": digest_of(SGLANG_VERSION, argv, env),
            }
        )
    return objects


class Judge:
    """What check_flags needs of an Ansible module (in-process: a plan of 40 costs no 40 module starts)."""

    check_mode = False

    def fail_json(self, **result):
        pytest.fail(f"the parser refused: {result}")


def test_objects_that_differ_only_in_env_each_get_their_verdict_from_one_parser_run(sglang_env, tmp_path):
    cache = tmp_path / "sglang-flags-check.json"
    objects = env_only_objects(3)
    cached = []
    for obj in objects:
        args = {"python": sglang_env["python"], "server_object": obj, "sglang_version": SGLANG_VERSION}
        rc, result = run_module("sglang_flags_check", {**args, "cache_path": str(cache)})
        assert rc == 0, result
        cached.append(result["cached"])
    # one parser run (the parser never sees env), and every digest - what a launch checks - has its verdict
    assert cached == [False, True, True]
    assert sglang_flags.judged_digests(str(cache)) == {obj["digest"] for obj in objects}


def test_a_plan_larger_than_the_verdict_file_keeps_every_verdict_of_its_own(sglang_env, tmp_path):
    cache = str(tmp_path / "sglang-flags-check.json")
    python, kept = sglang_env["python"], sglang_flags.VERDICTS_KEPT

    def judge(obj: dict, plan: str) -> dict:
        return sglang_flags.check_flags(
            Judge(), python, obj["argv"], SGLANG_VERSION, cache_path=cache, digest=obj["digest"],
            reuse_digest=True, plan=plan,
        )  # fmt: skip

    # an earlier run's verdicts (role sglang's object, an older tune) fill the file
    earlier = env_only_objects(kept, argv=[*ARGV, "--mem-fraction-static", "0.8"])
    assert [judge(obj, "")["cached"] for obj in earlier] == [False] + [True] * (kept - 1)
    plan = env_only_objects(kept + 8)
    assert [judge(obj, "tune-a")["cached"] for obj in plan] == [False] + [True] * (kept + 7)
    judged = sglang_flags.judged_digests(cache)
    assert {obj["digest"] for obj in plan} <= judged, "the plan dropped verdicts of its own"
    # bounded by the plan: its own entries and the newest 32 others
    assert {obj["digest"] for obj in earlier} <= judged and len(judged) == 2 * kept + 8
    # the winner's relaunch (the plan's first candidate) needs no parser run
    assert judge(plan[0], "tune-a")["cached"] is True
    # the next plan's first write: the finished plan's verdicts are ordinary ones, the newest 32 of them kept
    judge(env_only_objects(kept + 9)[-1], "tune-b")
    with open(cache, encoding="utf-8") as handle:
        verdicts = json.load(handle)["verdicts"]
    assert len(verdicts) == kept + 1
    assert [entry["plan"] for entry in verdicts] == ["tune-a"] * kept + ["tune-b"]
