"""The default space's speculative dimension (issue 39): EAGLE3 with a draft model at the two parameter sets
the release itself picks from, NGRAM where the workload is real text and the release has it, nothing
speculative on random ids without a draft. The release facts are read from both pinned wheels and the
committed flag tables (data/sglang_flags), never restated."""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

import pytest
from test_sglang_bench_windows import RELEASES, WHEELS, flag_data

from ansible_collections.epforge.ep.plugins.module_utils.tune_plan.space import (
    EAGLE_PARAMETER_SETS,
    NGRAM_FLAG,
    NGRAM_RUNNING_REQUESTS,
    SPECULATIVE_KEYS,
    default_dimensions,
    speculative_options,
)

ROOT = Path(__file__).resolve().parents[2]
ONE_GPU = {"gpu_count": 1, "interconnect": "none"}


def flag_table(release: str) -> dict:
    return json.loads((ROOT / "data" / "sglang_flags" / f"{release}.json").read_text())


def hook_source(release: str) -> str:
    wheel = flag_data().download_wheel(sys.executable, release, WHEELS)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("sglang/srt/arg_groups/speculative_hook.py").decode()


@pytest.mark.parametrize("release", RELEASES)
def test_the_parameter_sets_are_the_ones_the_release_picks_from(release):
    """_auto_choose_speculative_params returns only these tuples (by architecture) in both releases."""
    tree = ast.parse(hook_source(release))
    chooser = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "_auto_choose_speculative_params"
    )
    returned = {
        ast.literal_eval(node.value)
        for node in ast.walk(chooser)
        if isinstance(node, ast.Return) and node.value
    }
    assert returned == set(EAGLE_PARAMETER_SETS)


@pytest.mark.parametrize("release", RELEASES)
def test_ngram_is_there_and_caps_running_requests_when_unset(release):
    source = hook_source(release)
    assert "def _handle_ngram(server_args: ServerArgs)" in source
    # 0.5.16 assigns it; 0.5.23 declares it as a resolution; both warn in the same words
    assert f"Max running requests is reset to {NGRAM_RUNNING_REQUESTS} for speculative decoding" in source
    assert (
        f"server_args.max_running_requests = {NGRAM_RUNNING_REQUESTS}" in source
        or f"max_running_requests={NGRAM_RUNNING_REQUESTS}," in source
    )
    assert NGRAM_FLAG in flag_table(release)["flags"]
    # every speculative setting the candidates set or clear is a flag of the release
    assert set(SPECULATIVE_KEYS) <= set(flag_table(release)["flags"])


def test_with_a_draft_model_eagle3_is_tried_at_both_sets_and_off():
    dims = dict(
        default_dimensions(ONE_GPU, flag_table=flag_table("0.5.16"), draft_model="/d", concurrencies=[16])
    )
    labels = [label for label, *_ in dims["speculative"]]
    assert labels == ["nospec", "eagle3-s3k1d4", "eagle3-s5k4d8"]
    tree = dict((label, changes) for label, changes, *_ in dims["speculative"])["eagle3-s5k4d8"]
    assert tree["speculative_eagle_topk"] == 4 and tree["speculative_draft_model_path"] == "/d"


def test_ngram_is_tried_on_a_prompt_file_only():
    table = flag_table("0.5.23")
    on_file = dict(default_dimensions(ONE_GPU, flag_table=table, concurrencies=[16], prompt_file=True))
    assert [label for label, *_ in on_file["speculative"]] == ["nospec", "ngram"]
    _label, changes, env, note = on_file["speculative"][1]
    assert changes["speculative_algorithm"] == "NGRAM" and changes["speculative_draft_model_path"] is None
    assert env == {} and "max_running_requests to 48" in note
    # random ids: an n-gram draft matches nothing there, so no speculative dimension at all
    on_random = dict(default_dimensions(ONE_GPU, flag_table=table, concurrencies=[16]))
    assert "speculative" not in on_random


def test_a_release_without_ngram_gets_no_ngram_candidate():
    table = flag_table("0.5.16")
    flags = {name: spec for name, spec in table["flags"].items() if not name.startswith("speculative_ngram")}
    assert speculative_options({**table, "flags": flags}, "", prompt_file=True) == []
    assert [o[0] for o in speculative_options(table, "/d", prompt_file=True)] == [
        "eagle3-s3k1d4",
        "eagle3-s5k4d8",
        "ngram",
    ]
