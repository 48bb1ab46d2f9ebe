"""The default space's size (issue 38): the 8x RTX PRO 6000 host's default plan stays within a stated bound.

The host is inventory/examples/rtx-pro-6000.yml (its request epforge_server; its stack cu128 and each other
pinned stack, since SGLang's PCIe-IPC all-reduce joins the NCCL dimension from 0.5.21 on for a bf16 model;
the role's defaults: no tuner_draft_model, tuner_workload's concurrencies) with the GPU facts the project
models it by
(tests/gpu_fact_samples.py sm120_box: 8 SM120 GPUs over PCIe, the fabric of a written sysfs tree with ACS
redirection off, so the fabric refuses nothing and the plan is at its largest). The plan is module
tune_plan's, run as the role runs it, with the real known-issues table and the stack's flag table.

The bound (roles/tuner/README.md, "The default space's size"): at most BUILT candidates built and at most
LAUNCHES planned (what the known issues and the duplicate folding leave to launch). It leaves room for one
more option in the NCCL dimension (a PCIe all-reduce crossed with NCCL as it is): the plan is also made with
that dimension filled up to NCCL_ROOM options by stand-ins that each render a launch of their own.
"""

from __future__ import annotations

import json
import math
import re
from unittest import mock

import moduletools
import pytest
import tune_plan
import yaml
from conftest import ROOT
from gpu_fact_samples import sm120_box

from ansible_collections.epforge.ep.plugins.module_utils.tune_plan import space

BUILT = 36
LAUNCHES = 16
NCCL_ROOM = 3
HOST = yaml.safe_load((ROOT / "inventory" / "examples" / "rtx-pro-6000.yml").read_text())["all"]["vars"]
DEFAULTS = yaml.safe_load((ROOT / "roles" / "tuner" / "defaults" / "main.yml").read_text())
STACKS = {
    p.stem: yaml.safe_load(p.read_text())["epforge_stack_spec"] for p in (ROOT / "stacks").glob("*.yml")
}


def default_plan(stack: dict, nccl_options: int | None = None, draft_model: str | None = None) -> dict:
    """tune_plan's answer for the host; nccl_options fills the NCCL dimension up to that many options."""
    real = space.default_dimensions

    def filled(*args, **kwargs):
        dimensions = real(*args, **kwargs)
        return [
            (
                name,
                options
                + [
                    (f"nccl-room{i}", {}, {f"NCCL_ROOM_{i}": "1"}) for i in range(nccl_options - len(options))
                ],
            )
            if name == "nccl" and nccl_options
            else (name, options)
            for name, options in dimensions
        ]

    args = {
        "server": HOST["epforge_server"],
        "gpu_facts": sm120_box(acs_redirect=False),
        "stack": stack,
        "table": yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text()),
        "sglang_version": stack["sglang"]["version"],
        "flag_table": json.loads(
            (ROOT / "data" / "sglang_flags" / f"{stack['sglang']['version']}.json").read_text()
        ),
        "model_config": json.dumps({"torch_dtype": "bfloat16"}),  # config.json, as role tuner reads it
        "draft_model": DEFAULTS["tuner_draft_model"] if draft_model is None else draft_model,
        "concurrencies": DEFAULTS["tuner_workload"]["concurrencies"],
        "max_candidates": DEFAULTS["tuner_max_candidates"],
    }
    with mock.patch.object(space, "default_dimensions", filled):
        how, answer = moduletools.run_main(tune_plan, args)
    assert how == "exit", answer.get("msg")
    return answer


@pytest.mark.parametrize("room", [False, True], ids=["as-is", "nccl-room"])
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_8x_rtx_pro_6000_default_plan_stays_within_its_bound_and_prints_its_count(stack, room):
    assert HOST["epforge_stack"] in STACKS
    plan = default_plan(STACKS[stack], NCCL_ROOM if room else None)
    counts = plan["counts"]
    built = sum(counts.values())
    assert plan["space"]["kind"] == "default" and "nccl" in plan["space"]["dimensions"]
    assert built <= BUILT and counts["planned"] <= LAUNCHES, (counts, plan["plan"][0])
    assert built <= DEFAULTS["tuner_max_candidates"]
    # printed: each dimension's size, their product, and what is left to launch
    sizes = re.match(r"default space, (.+) = (\d+) candidates \((\d+) planned, ", plan["plan"][0])
    assert sizes, plan["plan"][0]
    factors = [factor.split(" ") for factor in sizes.group(1).split(" x ")]
    assert [name for _size, name in factors] == plan["space"]["dimensions"]
    assert math.prod(int(size) for size, _name in factors) == int(sizes.group(2)) == built
    assert int(sizes.group(3)) == counts["planned"]
    if room:
        assert dict((name, int(size)) for size, name in factors)["nccl"] == NCCL_ROOM


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_with_a_draft_model_the_default_plan_is_within_the_role_s_limit(stack):
    """A draft model triples the space (no speculation, EAGLE3 at the release's two parameter sets): 108
    built on cu130 with PCIe-IPC, which the role's tuner_max_candidates (128) must admit: the limit refuses
    absurd grids, not the default space."""
    plan = default_plan(STACKS[stack], draft_model="/models/Kimi-K2.5-eagle3")
    assert "speculative" in plan["space"]["dimensions"]
    assert sum(plan["counts"].values()) <= DEFAULTS["tuner_max_candidates"]
