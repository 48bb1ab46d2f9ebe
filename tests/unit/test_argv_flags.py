"""The one reader of flags in a pass-through argv (plugins/module_utils/argv_flags.py), and a check that no
second one comes back: issue 40 found five modules each reading `extra_args` their own way."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import (
    dest_flag,
    flag_names,
    flag_pairs,
    flag_values,
)
from ansible_collections.epforge.ep.plugins.module_utils.final_env_check.final_env import setting_values
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import validate_settings
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench.workload import expected_output


@pytest.mark.parametrize(
    ("argv", "pairs"),
    [
        (
            ["--a", "1", "--b=2", "--flag", "--c", "x"],
            [("--a", "1"), ("--b", "2"), ("--flag", True), ("--c", "x")],
        ),
        (["--flag"], [("--flag", True)]),
        (["stray", "--x=a=b", "--n", "-1"], [("--x", "a=b"), ("--n", "-1")]),
        ([], []),
        (None, []),
    ],
)
def test_flag_pairs(argv, pairs):
    assert flag_pairs(argv) == pairs


def test_names_and_values_follow_the_pairs():
    argv = ["--attention-backend", "fa3", "--disable-cuda-graph", "--attention-backend=triton"]
    assert flag_names(argv) == ["--attention-backend", "--disable-cuda-graph", "--attention-backend"]
    assert flag_values(argv, {"--attention-backend"}) == ["fa3", "triton"]
    assert flag_values(argv, {"--disable-cuda-graph"}) == []  # a switch has no value


def test_the_modules_read_extra_args_through_it():
    """Each former reader gives the answer of the one reader, spellings included."""
    settings = {"attention_backend": "flashinfer", "extra_args": ["--prefill-attention-backend=fa3"]}
    assert setting_values(settings, "attention_backend") == ["flashinfer", "fa3"]
    assert expected_output({"dataset": "random", "output_len": 8, "range_ratio": 1.0, "num_prompts": 2},
                           ["--disable-ignore-eos=true"])["ignores_eos"] is False  # fmt: skip
    repeated = validate_settings({"model_path": "/m", "tp_size": 1, "extra_args": ["--tp-size=2"]})
    assert any("extra_args repeats --tp-size" in p for p in repeated), repeated


# `name = item.split("=", 1)[0]` / `.partition("=")` over a list of argv items: a reader of flags of its own.
SECOND_READER = re.compile(r"""(split\(\s*["']=["']\s*,\s*1\s*\)\[0\]|partition\(\s*["']=["']\s*\))""")
# Not readers of extra_args: each line's reason.
ALLOWED = {
    # kernel command line words (pci_fabric), systemd unit and env file lines (service_*): not argv
    "plugins/module_utils/pci_fabric.py",
    "plugins/module_utils/service_managers.py",
    "plugins/module_utils/service_unit.py",
    # rewrites argv in place to hide secrets: needs each element's position, not the flags
    "plugins/module_utils/secret_scrub.py",
    # code that runs in SGLang's own python, which cannot import the collection
    "plugins/module_utils/payloads/sglang_flags_check.py",
    "plugins/module_utils/argv_flags.py",
}


def test_no_second_reader_of_flags():
    found = []
    for path in sorted([*ROOT.glob("plugins/**/*.py"), *ROOT.glob("library/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SECOND_READER.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "read flags with module_utils/argv_flags.py:\n" + "\n".join(found)


# `"--" + key.replace("_", "-")`: a setting's flag spelled a second time (argv_flags.dest_flag is the one).
SECOND_SPELLER = re.compile(r"""["']--["']\s*\+\s*\w+\.replace\(\s*["']_["']\s*,\s*["']-["']\s*\)""")


def test_a_setting_s_flag_is_spelled_in_one_place():
    assert dest_flag("cuda_graph_max_bs") == "--cuda-graph-max-bs"
    found = []
    for path in sorted([*ROOT.glob("plugins/**/*.py"), *ROOT.glob("library/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SECOND_SPELLER.search(line) and rel != "plugins/module_utils/argv_flags.py":
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "spell a setting's flag with argv_flags.dest_flag:\n" + "\n".join(found)
    assert SECOND_SPELLER.search('flag = "--" + key.replace("_", "-")')
