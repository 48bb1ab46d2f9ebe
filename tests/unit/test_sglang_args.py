"""The SGLang flag model (plugins/module_utils/sglang_args.py): settings -> launch_server argv, shape checks.

Flag names are checked against the option strings of real SGLang releases (tests/fixtures/sglang/README.md).
The parser of the installed SGLang itself is exercised in test_sglang_flags_real.py.
"""

from __future__ import annotations

import json
import sys

import moduletools
import pytest
import sglang_install
from conftest import FIXTURES

from ansible_collections.epforge.ep.plugins.module_utils import sglang_flags as epforge_sglang_flags
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest, stamp_of
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    FLAG_ORDER,
    SETTINGS_KINDS,
    SETTINGS_SCHEMA,
    build_server_argv,
    build_server_env,
    flag_name,
    validate_settings,
    with_defaults,
)
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

SGLANG_FIX = FIXTURES / "sglang"
OPTIONS_0523 = json.loads((SGLANG_FIX / "sglang-0.5.23-options.json").read_text())
OPTIONS_0510 = set((SGLANG_FIX / "sglang-0.5.10.post1-options.txt").read_text().split())

# The motivating configuration: Kimi-K2.5 on 8 GPUs, EP over DeepEP low-latency, EAGLE3 speculative decoding.
_MOTIVATING = json.loads((SGLANG_FIX / "motivating.json").read_text())
MOTIVATING = _MOTIVATING["settings"]
MOTIVATING_ARGV_0523 = _MOTIVATING["argv_0523"]


def test_motivating_configuration_renders_exact_argv_for_0523():
    assert build_server_argv(MOTIVATING, sglang_version="0.5.23") == MOTIVATING_ARGV_0523
    # None means the newest naming known, which is 0.5.23's.
    assert build_server_argv(MOTIVATING) == MOTIVATING_ARGV_0523
    assert validate_settings(MOTIVATING) == []


def test_cuda_graph_max_bs_keeps_its_old_name_before_0520():
    argv = build_server_argv(MOTIVATING, sglang_version="0.5.10.post1")
    index = argv.index("--cuda-graph-max-bs")
    assert argv[index + 1] == "32"
    assert "--cuda-graph-max-bs-decode" not in argv
    assert flag_name("cuda_graph_max_bs", "0.5.19") == "--cuda-graph-max-bs"
    assert flag_name("cuda_graph_max_bs", "0.5.20") == "--cuda-graph-max-bs-decode"


@pytest.mark.parametrize(
    "version, options",
    [
        ("0.5.23", set(OPTIONS_0523["options"])),
        ("0.5.10.post1", OPTIONS_0510),
    ],
)
def test_every_rendered_flag_exists_in_that_release(version, options):
    missing = [flag_name(key, version) for key in FLAG_ORDER if flag_name(key, version) not in options]
    assert missing == []


def test_old_cuda_graph_flag_is_gone_in_0523():
    # Why the rename table exists: 0.5.23 has no --cuda-graph-max-bs (argparse calls it ambiguous).
    options = OPTIONS_0523["options"]
    assert "--cuda-graph-max-bs" not in options
    assert options["--cuda-graph-max-bs-decode"]["dest"] == "cuda_graph_max_bs_decode"


def test_choice_values_of_the_motivating_config_are_sglang_0523_choices():
    options = OPTIONS_0523["options"]
    assert MOTIVATING["deepep_mode"] in options["--deepep-mode"]["choices"]
    assert MOTIVATING["moe_a2a_backend"] in options["--moe-a2a-backend"]["choices"]


def test_defaults_host_and_port_always_rendered():
    argv = build_server_argv({"model_path": "m"})
    assert argv == ["--model-path", "m", "--host", "127.0.0.1", "--port", "30000"]
    assert with_defaults({"host": "0.0.0.0", "port": 8000})["port"] == 8000
    assert build_server_argv({"model_path": "m", "host": "0.0.0.0", "port": 8000})[2:] == [
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]


def test_api_key_only_with_include_secrets():
    settings = {"model_path": "m", "api_key": "s3cret"}
    assert "s3cret" not in build_server_argv(settings)
    assert "--api-key" not in build_server_argv(settings)
    argv = build_server_argv(settings, include_secrets=True)
    assert argv[argv.index("--api-key") + 1] == "s3cret"
    assert "s3cret" not in redact(argv)
    assert redact(["--api-key=abc", "--port", "1"]) == ["--api-key=<redacted>", "--port", "1"]


def test_booleans_render_as_bare_flags_and_false_or_none_is_left_out():
    argv = build_server_argv(
        {
            "model_path": "m",
            "enable_dp_attention": True,
            "disable_cuda_graph": False,
            "disable_custom_all_reduce": True,
            "enable_torch_symm_mem": None,
            "deepep_mode": None,
        }
    )
    assert "--enable-dp-attention" in argv
    assert "--disable-custom-all-reduce" in argv
    assert "--disable-cuda-graph" not in argv
    assert "--enable-torch-symm-mem" not in argv
    assert "--deepep-mode" not in argv
    assert "True" not in argv


def test_extra_args_appended_verbatim_last():
    argv = build_server_argv({"model_path": "m", "extra_args": ["--mem-fraction-static", "0.8"]})
    assert argv[-2:] == ["--mem-fraction-static", "0.8"]


def test_integer_strings_are_accepted_and_rendered_as_written():
    # "8" from --extra-vars is an integer written as a string; "eight" is refused before SGLang sees it.
    argv = build_server_argv({"model_path": "m", "tp_size": "8"})
    assert argv[argv.index("--tp-size") + 1] == "8"
    assert validate_settings({"model_path": "m", "tp_size": "8"}) == []
    with pytest.raises(ValueError, match="tp_size must be an integer, got str 'eight'"):
        build_server_argv({"model_path": "m", "tp_size": "eight"})


def test_multinode_flags():
    settings = {
        "model_path": "m",
        "tp_size": 2,
        "nnodes": 2,
        "node_rank": 1,
        "dist_init_addr": "10.0.0.1:25000",
    }
    assert validate_settings(settings) == []
    argv = build_server_argv(settings)
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:25000"


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"model_path": "m", "tp_sise": 8}, "unknown server setting 'tp_sise' (did you mean 'tp_size'?)"),
        ({"model_path": "m", "tp_size": True}, "tp_size must be an integer, got bool True"),
        ({"model_path": "m", "tp_size": 8.5}, "tp_size must be an integer, got float 8.5"),
        ({"model_path": "m", "tp_size": [8]}, "tp_size must be an integer, got list"),
        ({"model_path": "m", "enable_dp_attention": "yes"}, "enable_dp_attention must be a boolean"),
        ({"model_path": "m", "extra_args": "--foo 1"}, "extra_args must be a list of strings"),
        ({"model_path": "m", "extra_args": ["--foo", 1]}, "extra_args must hold only strings"),
        (
            {"model_path": "m", "env": {"NCCL ALGO": "x"}},
            "'NCCL ALGO' is not a valid environment variable name",
        ),
        ({"model_path": "m", "env": ["NCCL_ALGO=x"]}, "env must be a mapping"),
        ({"model_path": 3}, "model_path must be a string, got int 3"),
        ({}, "model_path is required"),
        ({"model_path": "m", "nnodes": 2, "node_rank": 0}, "nnodes is 2 but dist_init_addr is not set"),
        ({"model_path": "m", "nnodes": 2, "dist_init_addr": "h:1"}, "nnodes is 2 but node_rank is not set"),
        (
            {"model_path": "m", "nnodes": 2, "node_rank": 2, "dist_init_addr": "h:1"},
            "node_rank 2 is outside 0..1",
        ),
        ({"model_path": "m", "dist_init_addr": "10.0.0.1"}, "dist_init_addr must be HOST:PORT"),
        ({"model_path": "m", "extra_args": ["--tp-size", "4"]}, "extra_args repeats --tp-size"),
        (
            {"model_path": "m", "extra_args": ["--cuda-graph-max-bs-decode=4"]},
            "extra_args repeats --cuda-graph-max-bs-decode",
        ),
    ],
)
def test_shape_errors_are_named(settings, expected):
    problems = validate_settings(settings)
    assert any(expected in problem for problem in problems), problems


# The cases of issue 11 and the ranges of the schema: each message names the setting, the value and what
# would be accepted.
@pytest.mark.parametrize(
    "settings, expected",
    [
        (
            {"model_path": "/m", "tpsize": 8},
            "unknown server setting 'tpsize' (did you mean 'tp_size'?) (value 8)",
        ),
        (
            {"model_path": "/m", "port": "30000x"},
            "port must be an integer, got str '30000x' (write it as a number, e.g. 8); "
            "accepted: an integer from 1 to 65535",
        ),
        (
            {"model_path": "/m", "port": 0},
            "port is out of range, got 0; accepted: an integer from 1 to 65535",
        ),
        (
            {"model_path": "/m", "port": 70000},
            "port is out of range, got 70000; accepted: an integer from 1 to 65535",
        ),
        ({"model_path": "/m", "tp_size": 0}, "tp_size is out of range, got 0; accepted: an integer >= 1"),
        ({"model_path": "/m", "tp_size": "0"}, "tp_size is out of range, got '0'; accepted: an integer >= 1"),
        ({"model_path": "/m", "ep_size": -1}, "ep_size is out of range, got -1; accepted: an integer >= 1"),
        ({"model_path": "/m", "dp_size": 0}, "dp_size is out of range, got 0; accepted: an integer >= 1"),
        ({"model_path": "/m", "nnodes": 0}, "nnodes is out of range, got 0; accepted: an integer >= 1"),
        (
            {"model_path": "/m", "node_rank": -1},
            "node_rank is out of range, got -1; accepted: an integer >= 0",
        ),
        ({"model_path": "/m", "cuda_graph_max_bs": 0}, "cuda_graph_max_bs is out of range, got 0"),
        ({"model_path": "/m", "speculative_num_steps": 0}, "speculative_num_steps is out of range, got 0"),
        (
            {"model_path": "/m", "tp_size": 8, "ep_size": 3},
            "ep_size 3 does not divide tp_size 8: "
            "SGLang splits the tensor-parallel group into expert-parallel groups; "
            "accepted: one of 1, 2, 4, 8",
        ),
        ({"model_path": "/m", "tp_size": 4, "ep_size": 8}, "ep_size 8 does not divide tp_size 4"),
        ({"model_path": "/m", "ep_size": 2}, "ep_size 2 does not divide tp_size 1"),
        (
            {"model_path": "/m", "tp_size": 8, "dp_size": 3, "enable_dp_attention": True},
            "dp_size 3 does not divide tp_size 8 with enable_dp_attention",
        ),
        (
            {"model_path": "/m", "tp_size": 8, "nnodes": 3, "node_rank": 0, "dist_init_addr": "h:1"},
            "tp_size 8 cannot be spread evenly over nnodes 3",
        ),
        (
            {"model_path": "/m", "nnodes": 2, "node_rank": 2, "dist_init_addr": "h:1"},
            "node_rank 2 is outside 0..1 (nnodes 2); accepted: an integer from 0 to 1",
        ),
        (
            {"model_path": "/m", "deepep_mode": "lowlatency"},
            "deepep_mode must be one of auto, normal, low_latency, got 'lowlatency' "
            "(did you mean 'low_latency'?)",
        ),
        ({"model_path": "/m", "tp_size": 8.0}, "tp_size must be an integer, got float 8.0"),
    ],
)
def test_ranges_and_relations_are_named_with_what_is_accepted(settings, expected):
    problems = validate_settings(settings)
    assert any(expected in problem for problem in problems), problems


def test_good_settings_pass_the_ranges():
    assert (
        validate_settings(
            {
                "model_path": "/m",
                "tp_size": 8,
                "ep_size": 8,
                "port": 65535,
                "moe_a2a_backend": "deepep",
                "deepep_mode": "low_latency",
            }
        )
        == []
    )
    assert validate_settings({"model_path": "/m", "tp_size": "8", "ep_size": "4", "port": "30000"}) == []
    assert (
        validate_settings({"model_path": "/m", "tp_size": 8, "dp_size": 8, "enable_dp_attention": True}) == []
    )
    # pipeline parallelism (extra_args) changes how ranks spread over nodes: left to SGLang
    assert (
        validate_settings(
            {
                "model_path": "/m",
                "tp_size": 1,
                "nnodes": 2,
                "node_rank": 0,
                "dist_init_addr": "h:1",
                "extra_args": ["--pp-size", "2"],
            }
        )
        == []
    )


def test_schema_agrees_with_the_real_sglang_parser():
    """Every schema key renders to a 0.5.23 option; fixed choices are exactly the parser's choices."""
    options = OPTIONS_0523["options"]
    for key in FLAG_ORDER:
        assert flag_name(key, "0.5.23") in options, key
    assert tuple(sorted(SETTINGS_SCHEMA["deepep_mode"]["choices"])) == tuple(
        sorted(options["--deepep-mode"]["choices"])
    )
    assert set(SETTINGS_KINDS) == set(SETTINGS_SCHEMA)
    for key, spec in SETTINGS_SCHEMA.items():
        assert "min" not in spec or spec["kind"] == "int", key
        assert "choices" not in spec or spec["kind"] == "str", key


def test_build_refuses_what_validate_refuses():
    with pytest.raises(ValueError, match="unknown server setting 'tp_sise'"):
        build_server_argv({"model_path": "m", "tp_sise": 8})
    [problem] = validate_settings("tp=8")
    assert problem.startswith(
        "server settings (epforge_server) must be a mapping of setting names to "
        "values, e.g. {model_path: /models/m, tp_size: 8}, got str 'tp=8'"
    )


def test_every_setting_kind_is_rendered_or_documented_as_not_a_flag():
    assert set(FLAG_ORDER) | {"extra_args", "env"} == set(SETTINGS_KINDS)


def test_env_rendering():
    assert build_server_env({"env": {"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG_SUBSYS": 1, "X": True}}) == {
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_DEBUG_SUBSYS": "1",
        "X": "true",
        "HF_HUB_OFFLINE": "1",
    }
    # every launch is offline, a user's HF_HUB_OFFLINE=0 included: SGLang never downloads at launch
    offline = {"HF_HUB_OFFLINE": "1"}
    assert build_server_env({}) == build_server_env({"env": {"HF_HUB_OFFLINE": "0"}}) == offline


def test_sglang_releases_compare_through_the_one_version_parser():
    assert version_tuple("0.5.10.post1") == (0, 5, 10)
    assert version_tuple("0.5.23") == (0, 5, 23)
    assert version_tuple("v0.5.20rc1") == (0, 5, 20)
    assert version_tuple(None) == ()
    assert version_tuple("0.5.9") < version_tuple("0.5.20")


# --- sglang_install's pure helpers --------------------------------------------------------------------------


def _params(**over):
    params = {
        "python": "/env/bin/python",
        "version": "0.5.23",
        "kernel_package": "sglang-kernel==0.4.10",
        "install_deps": True,
        "parser_deps": ["numpy", "aiohttp"],
        "keep": ["torch==2.14.1"],
        "pip_args": [],
    }
    params.update(over)
    return params


def test_install_full_mode_one_pip_run_with_kernel_and_kept_torch():
    inputs = sglang_install.desired_inputs(_params())
    assert inputs["mode"] == "full"
    assert inputs["parser_deps"] == []
    assert sglang_install.pip_commands("/env/bin/python", inputs) == [
        [
            "/env/bin/python",
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "sglang==0.5.23",
            "sglang-kernel==0.4.10",
            "torch==2.14.1",
        ]
    ]
    assert sglang_install.pinned_checks(inputs) == {
        "sglang": "0.5.23",
        "sglang-kernel": "0.4.10",
        "torch": "2.14.1",
    }


def test_install_parser_only_mode_no_deps_then_parser_deps():
    inputs = sglang_install.desired_inputs(_params(install_deps=False))
    assert inputs["mode"] == "parser-only"
    assert inputs["kernel_package"] == ""
    commands = sglang_install.pip_commands("/env/bin/python", inputs)
    assert commands[0][-2:] == ["--no-deps", "sglang==0.5.23"]
    assert commands[1][5:] == ["aiohttp", "numpy", "torch==2.14.1"]
    assert sglang_install.pinned_checks(inputs) == {"sglang": "0.5.23", "torch": "2.14.1"}


def test_install_stamp_changes_with_every_input():
    base = digest(sglang_install.desired_inputs(_params()))
    for change in (
        {"version": "0.5.22"},
        {"install_deps": False},
        {"keep": ["torch==2.13.0"]},
        {"kernel_package": "sglang-kernel==0.4.11"},
        {"pip_args": ["--pre"]},
        {"python": "/other/bin/python"},
    ):
        assert digest(sglang_install.desired_inputs(_params(**change))) != base
    # parser_deps only matter in parser-only mode; their order never matters.
    same = sglang_install.desired_inputs(_params(parser_deps=["x"]))
    assert digest(same) == base
    one = sglang_install.desired_inputs(_params(install_deps=False, parser_deps=["a", "b"]))
    two = sglang_install.desired_inputs(_params(install_deps=False, parser_deps=["b", "a"]))
    assert stamp_of(one) == stamp_of(two)


def test_requirement_helpers():
    assert sglang_install.requirement_name("sglang-kernel==0.4.10") == "sglang-kernel"
    assert sglang_install.requirement_pin("sglang-kernel==0.4.10") == "0.4.10"
    assert sglang_install.requirement_pin("flashinfer_python[cu13]==0.7.2") == "0.7.2"
    assert sglang_install.requirement_pin("pyzmq>=25") is None


def run_module(module: str, args: dict, check: bool = False) -> tuple[int, dict]:
    return moduletools.run_module(module, args, check=check, diff=True)


def _install_args(tmp_path, **over):
    args = {
        "python": sys.executable,
        "version": "0.5.23",
        "install_deps": False,
        "parser_deps": ["numpy"],
        "keep": ["torch==2.14.1"],
        "log_path": str(tmp_path / "log" / "install.log"),
        "stamp_path": str(tmp_path / "state" / "stamp.json"),
    }
    args.update(over)
    return args


def test_install_module_refuses_bad_input_before_pip(tmp_path):
    rc, res = run_module("sglang_install", _install_args(tmp_path, python=str(tmp_path / "no" / "python")))
    assert rc != 0 and "does not exist" in res["msg"] and "role ml_env" in res["msg"]
    rc, res = run_module("sglang_install", _install_args(tmp_path, parser_deps=[]))
    assert rc != 0 and "parser_deps is empty" in res["msg"]
    rc, res = run_module("sglang_install", _install_args(tmp_path, version="latest"))
    assert rc != 0 and "is not a release number" in res["msg"]
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists()


def test_install_module_check_mode_reports_without_touching_anything(tmp_path):
    # This python has no sglang: check mode says what it would install, with a diff, and changes nothing.
    rc, res = run_module("sglang_install", _install_args(tmp_path), check=True)
    assert rc == 0, res
    assert res["changed"] is True
    assert res["actions"][0].startswith("install sglang==0.5.23") and "(parser-only)" in res["actions"][0]
    assert res["commands"][0][-2:] == ["--no-deps", "sglang==0.5.23"]
    assert '"sglang": null' in res["diff"]["before"] and '"sglang": "0.5.23"' in res["diff"]["after"]
    # A fresh host in check mode: the ML env's python does not exist yet.
    rc, res = run_module(
        "sglang_install", _install_args(tmp_path, python=str(tmp_path / "env/bin/python")), check=True
    )
    assert rc == 0 and res["changed"] is True and "once" in res["actions"][0]
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists()


def test_flags_check_shape_only_and_refusals_without_sglang(tmp_path):
    rc, res = run_module(
        "sglang_flags_check",
        {
            "python": "/nonexistent/python",
            "settings": MOTIVATING,
            "sglang_version": "0.5.23",
            "use_parser": False,
        },
    )
    assert rc == 0, res
    assert res["argv"] == MOTIVATING_ARGV_0523 and res["changed"] is False
    bad = {**MOTIVATING, "tp_sise": 8, "api_key": "sk-test-123456"}
    rc, res = run_module(
        "sglang_flags_check", {"python": "/nonexistent/python", "settings": bad, "use_parser": False}
    )
    assert rc != 0 and "unknown server setting 'tp_sise'" in res["msg"]
    rc, res = run_module("sglang_flags_check", {"python": "/nonexistent/python", "settings": MOTIVATING})
    assert rc != 0 and "does not exist or is not executable" in res["msg"]
    # A python without sglang: named as such, with the command that found out.
    rc, res = run_module("sglang_flags_check", {"python": sys.executable, "settings": MOTIVATING})
    assert rc != 0 and "SGLang is not installed" in res["msg"] and res["cmd"][0] == sys.executable


def test_flags_check_never_returns_the_api_key():
    rc, res = run_module(
        "sglang_flags_check",
        {
            "python": "/x",
            "use_parser": False,
            "sglang_version": "0.5.23",
            "settings": {**MOTIVATING, "api_key": "TOPSECRET"},
            # the invocation record, asked for where ansible-core adds it only when asked (2.21)
            **moduletools.ASK_INVOCATION,
        },
    )
    assert rc == 0
    assert "--api-key" not in res["argv"]
    # Nowhere in the result, the invocation record of the module's arguments included.
    assert "TOPSECRET" not in json.dumps(res)
    assert res["invocation"]["module_args"]["settings"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    rc, res = run_module(
        "sglang_flags_check",
        {"python": "/x", "use_parser": False, "argv": ["--model-path", "m", "--api-key", "TOPSECRET"]},
    )
    assert rc == 0 and "TOPSECRET" not in json.dumps(res)


def test_flags_check_remembered_outcome_needs_the_same_evidence(tmp_path):
    # sys.executable has no SGLang: any answer without an error came from the remembered outcome.
    cache = tmp_path / "flags.json"
    outcome = {
        "sglang_version": "0.5.23",
        "parsed": {"tp_size": 8},
        "constructed": True,
        "notes": [],
        "warnings_sglang": [],
    }
    key = epforge_sglang_flags.cache_key_of(MOTIVATING_ARGV_0523, "0.5.23", sys.executable, True, "stamp-1")
    epforge_sglang_flags.write_cache(str(cache), key, outcome)
    args = {
        "python": sys.executable,
        "settings": MOTIVATING,
        "sglang_version": "0.5.23",
        "cache_path": str(cache),
        "cache_evidence": "stamp-1",
    }
    rc, res = run_module("sglang_flags_check", args)
    assert rc == 0, res
    assert res["cached"] is True and res["parsed"] == {"tp_size": 8}
    # Another install (evidence) or other flags: SGLang must be asked (and here it is missing).
    for change in ({"cache_evidence": "stamp-2"}, {"settings": {**MOTIVATING, "tp_size": 4, "ep_size": 4}}):
        rc, res = run_module("sglang_flags_check", {**args, **change})
        assert rc != 0 and "SGLang's parser failed" in res["msg"], res
        assert "No module named 'sglang'" in res["log_tail"]
    assert [entry["argv_key"] for entry in json.loads(cache.read_text())["verdicts"]] == [key]
