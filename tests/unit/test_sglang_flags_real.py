"""SGLang's own parser judges epforge's server flags; module sglang_install and role sglang on a real venv.

Every test here needs a real SGLang: a venv with the stack's torch (from this machine's local wheels) and
SGLang installed by module sglang_install in parser-only mode (`--no-deps` plus the role's
sglang_parser_deps). The venv is built once and cached under .cache/sglang-parser/<key> (gitignored, the
key holds the SGLang, torch and Python versions and a hash of the parser deps); a fresh machine builds it in
about 3 minutes (torch about 1.5 min and 5.4 GB, SGLang and its parser deps about 1.5 min and 0.36 GB).
EPFORGE_SGLANG_PYTHON=/path/to/python uses an existing environment with the stack's SGLang instead.
The venv's fixture (sglang_env) lives in tests/sglang_parser_env.py, shared with test_sglang_flag_data.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sglang_parser_env
import yaml
from sglang_parser_env import ROOT, SGLANG_VERSION, STACK, TORCH_PIN, install_args, parser_runs, run_module

from ansible_collections.epforge.ep.plugins.module_utils import sglang_flags as epforge_sglang_flags
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import build_server_argv, flag_name

# The cached venv's session fixture, shared with test_sglang_flag_data.py: pytest finds it by this name.
sglang_env = sglang_parser_env.sglang_env

PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

pytestmark = pytest.mark.build

_MOTIVATING = json.loads((ROOT / "tests" / "fixtures" / "sglang" / "motivating.json").read_text())
MOTIVATING = _MOTIVATING["settings"]
MOTIVATING_ARGV = _MOTIVATING["argv_0523"]


# ------------------------------------------------------------------------------ module sglang_install


def test_install_module_first_run_installs_and_verifies(sglang_env):
    if not sglang_env["built_now"]:
        # The cache was built by an earlier session: its record of the first run is kept beside it.
        if sglang_env["state"] is None:
            pytest.skip("EPFORGE_SGLANG_PYTHON given: no first install to inspect")
        first = json.loads((sglang_env["state"] / "first-install.json").read_text())
    else:
        first = sglang_env["first_install"]
    assert first["changed"] is True
    assert first["version"] == SGLANG_VERSION
    assert first["mode"] == "parser-only"
    assert first["installed"]["sglang"] == SGLANG_VERSION
    assert first["installed"]["torch"] == STACK["torch"]["version"]
    assert any(action.startswith("verified: import sglang") for action in first["actions"])
    assert any("--no-deps sglang==" + SGLANG_VERSION in action for action in first["actions"])


def test_install_module_rerun_is_a_cheap_noop(sglang_env, tmp_path):
    if sglang_env["state"] is None:
        pytest.skip("EPFORGE_SGLANG_PYTHON given: the module's stamp lives elsewhere")
    python = sglang_env["python"]
    stamp = sglang_env["state"] / "sglang.stamp.json"
    before = stamp.read_text()
    started = time.monotonic()
    rc, res = run_module("sglang_install", install_args(python, sglang_env["state"]))
    seconds = time.monotonic() - started
    assert rc == 0, res
    assert res["changed"] is False and res["actions"] == []
    assert stamp.read_text() == before
    # No pip and no import of torch/SGLang: metadata reads only.
    assert seconds < 20, seconds

    # A changed input (full mode) is reported in check mode, and nothing changes.
    rc, res = run_module(
        "sglang_install", install_args(python, sglang_env["state"], install_deps=True), check=True
    )
    assert rc == 0, res
    assert res["changed"] is True
    assert res["commands"] == [
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            f"sglang=={SGLANG_VERSION}",
            STACK["sglang"]["kernel_package"],
            TORCH_PIN,
        ]
    ]
    assert '"mode": "full"' in res["diff"]["after"] and '"mode": "parser-only"' in res["diff"]["before"]
    assert stamp.read_text() == before


# ------------------------------------------------------------------------- SGLang's parser, directly


def test_motivating_configuration_passes_sglang_parser(sglang_env):
    # One process per check, exactly as the module runs it.
    argv = build_server_argv(MOTIVATING, sglang_version=SGLANG_VERSION)
    assert argv == MOTIVATING_ARGV
    res = epforge_sglang_flags.run_parser(sglang_env["python"], argv)
    assert res["ok"], res["output"][-3000:]
    assert res["sglang_version"] == SGLANG_VERSION
    assert res["parsed"] == {
        "model_path": "/models/Kimi-K2.5",
        "host": "127.0.0.1",
        "port": 30000,
        "tp_size": 8,
        "ep_size": 8,
        "moe_a2a_backend": "deepep",
        "deepep_mode": "low_latency",
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/models/Kimi-K2.5-eagle3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "cuda_graph_max_bs_decode": 32,
    }
    # 0.5.23 builds ServerArgs without resolving it (no GPU needed), so construction was checked too.
    assert res["constructed"] is True
    assert res["notes"] == []


INVALID = [
    (
        {"deepep_mode": "lowlatency"},
        2,
        "error: argument --deepep-mode: invalid choice: 'lowlatency' "
        "(choose from 'auto', 'normal', 'low_latency')",
    ),
    ({"moe_a2a_backend": "deep_ep"}, 2, "error: argument --moe-a2a-backend: invalid choice: 'deep_ep'"),
    ({"extra_args": ["--enable-ep-moe"]}, 2, "error: unrecognized arguments: --enable-ep-moe"),
    ({"tp_size": "eight"}, 2, "error: argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'"),
    (
        {"speculative_num_steps": "3.5"},
        2,
        "error: argument --speculative-num-steps: invalid int value: '3.5'",
    ),
    # 0.5.23's parser takes any name here; SGLang's SpeculativeAlgorithm.from_string refuses it.
    ({"speculative_algorithm": "EAGLE4"}, 3, "Unknown speculative algorithm name: EAGLE4"),
]
IDS = ["deepep_mode", "moe_a2a_backend", "unknown_flag", "tp_size", "num_steps", "speculative_algorithm"]


def argv_with(change: dict) -> list[str]:
    """The motivating argv with these values written in as they are. epforge's flag model refuses some of
    them itself (e.g. tp_size 'eight', deepep_mode 'lowlatency'); written in directly they prove that
    SGLang's own parser, the final judge, refuses them too."""
    argv = build_server_argv(MOTIVATING, sglang_version=SGLANG_VERSION)
    for key, value in change.items():
        if key == "extra_args":
            argv += value
            continue
        flag = flag_name(key, SGLANG_VERSION)
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


@pytest.fixture(scope="module")
def batch(sglang_env) -> dict:
    """Every variant below checked by SGLang in one process (one import of torch and SGLang)."""
    argvs = {name: argv_with(change) for name, (change, _, _) in zip(IDS, INVALID, strict=True)}
    argvs["motivating"] = build_server_argv(MOTIVATING, sglang_version=SGLANG_VERSION)
    argvs["old_name"] = build_server_argv(MOTIVATING, sglang_version="0.5.10.post1")
    argvs["abbreviated"] = [*argvs["motivating"], "--mem-fraction", "0.8"]
    # graphs off without the graph batch size (both together are refused since issue 34 item 3)
    graphs_off = {k: v for k, v in MOTIVATING.items() if k != "cuda_graph_max_bs"}
    argvs["deprecated"] = build_server_argv({**graphs_off, "disable_cuda_graph": True})
    results = epforge_sglang_flags.run_parser_batch(sglang_env["python"], list(argvs.values()))
    return dict(zip(argvs, results, strict=True))


@pytest.mark.parametrize(
    "name, change, rc, message", [(i, *v) for i, v in zip(IDS, INVALID, strict=True)], ids=IDS
)
def test_invalid_variants_refused_with_sglang_messages(batch, name, change, rc, message):
    res = batch[name]
    assert not res["ok"]
    assert res["rc"] == rc, res["output"][-2000:]
    assert message in res["parser_error"], res["parser_error"]
    if rc == 2:
        # argparse's own text, printed by SGLang's parser (its prog name, its usage).
        assert res["parser_error"].startswith("sglang serve: error: ")
        assert "usage: sglang serve" in res["output"]


def test_batch_agrees_with_single_process_on_the_motivating_config(batch):
    res = batch["motivating"]
    assert res["ok"] and res["rc"] == 0
    assert res["parsed"]["deepep_mode"] == "low_latency" and res["parsed"]["cuda_graph_max_bs_decode"] == 32


def test_flag_name_of_an_older_release_is_refused_by_0523(batch):
    # The reason build_server_argv takes sglang_version: 0.5.10's spelling is ambiguous in 0.5.23.
    res = batch["old_name"]
    assert res["rc"] == 2
    expected = "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode"
    assert expected in res["parser_error"]


def test_abbreviated_flag_passes_but_is_noted(batch):
    res = batch["abbreviated"]
    assert res["ok"]
    assert res["parsed"]["mem_fraction_static"] == 0.8
    assert res["notes"] == [
        "--mem-fraction is an abbreviation of --mem-fraction-static: write the flag in "
        "full, a later SGLang may refuse it"
    ]


def test_deprecated_flag_passes(batch):
    res = batch["deprecated"]
    assert res["ok"], res["output"][-2000:]
    assert res["parsed"]["disable_cuda_graph"] is True


# ---------------------------------------------------------------------------------------- role sglang


def run_role(
    tmp_path: Path,
    python: str,
    server: dict,
    *,
    check: bool = False,
    name: str = "run",
    state: Path | None = None,
    hosts: dict | None = None,
    group: str = "",
) -> dict:
    """Run role sglang on local hosts with a JSON stdout callback; return a summary of the run."""
    playbook = tmp_path / f"{name}.yml"
    state = state or tmp_path / "state"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "sglang test",
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": {
                        "epforge_state_dir": str(state),
                        "epforge_log_dir": str(tmp_path / "log"),
                        "sglang_python": python,
                        "sglang_install_deps": False,
                        "epforge_server": server,
                        "epforge_node_group": group,
                        # this machine's disk is not under test here
                        "preflight_min_free_gib": 1,
                    },
                    # preflight builds the server settings object role sglang judges
                    "roles": ["preflight", "sglang"],
                }
            ]
        )
    )
    hosts = hosts or {"localhost": {}}
    inventory = tmp_path / f"{name}-inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        host: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "epforge_facts_dir": str(tmp_path / f"facts-{host}"),
                            **extra,
                        }
                        for host, extra in hosts.items()
                    },
                    "children": {"nodes": {"hosts": {host: {} for host in hosts}}},
                }
            }
        )
    )
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"
    )
    # One host at a time: hosts of one machine share one venv.
    argv = [str(PLAYBOOK_BIN), "-i", str(inventory), "--forks", "1", str(playbook)]
    argv += ["--check", "--diff"] if check else []
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    out = json.loads(proc.stdout[proc.stdout.index("{") :])
    changed, failures, results = [], [], {}
    for play in out["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                results[(host, task["task"]["name"])] = res
                if res.get("changed"):
                    changed.append((host, task["task"]["name"]))
                if res.get("failed"):
                    failures.append(res.get("msg", ""))
    return {
        "rc": proc.returncode,
        "seconds": time.monotonic() - started,
        "changed": changed,
        "failures": failures,
        "stats": out.get("stats", {}),
        "results": results,
    }


ONE_CALL = "sglang : Install SGLang (once), judge the server flags with its parser, record the fact"


def one_call(run: dict, host: str = "localhost") -> dict:
    """The result of the role's one module call (install, flags, fact) on host."""
    (result,) = [res for (h, name), res in run["results"].items() if h == host and name.startswith(ONE_CALL)]
    return result


def flags_result(run: dict, host: str = "localhost") -> dict:
    """The flag check of the role's module call on host."""
    return one_call(run, host)["flags"]


def module_calls(run: dict, role: str = "sglang") -> list[str]:
    """The role's tasks that ran a module on a host (their result holds the module's invocation)."""
    return [
        name
        for (_, name), res in run["results"].items()
        if name.startswith(f"{role} : ") and "invocation" in res and not res.get("skipped")
    ]


def test_role_installs_validates_and_reruns_with_no_change(sglang_env, tmp_path):
    python = sglang_env["python"]
    first = run_role(tmp_path, python, MOTIVATING, name="first")
    assert first["rc"] == 0, first["failures"]
    fact = json.loads((tmp_path / "facts-localhost" / "epforge_sglang.fact").read_text())
    assert fact["version"] == SGLANG_VERSION
    assert fact["mode"] == "parser-only" and fact["can_serve"] is False
    assert fact["server_flags"]["validated"] is True
    assert fact["server_flags"]["argv"] == MOTIVATING_ARGV
    assert (tmp_path / "state" / "sglang.stamp.json").exists()
    assert "sglang_install" in (tmp_path / "log" / "sglang-install.log").read_text()
    assert flags_result(first)["cached"] is False

    second = run_role(tmp_path, python, MOTIVATING, name="second")
    assert second["rc"] == 0, second["failures"]
    assert second["changed"] == []
    assert second["stats"]["localhost"]["changed"] == 0
    # Nothing changed, so neither pip nor SGLang's parser ran again: the remembered outcome was returned.
    assert flags_result(second)["cached"] is True
    assert flags_result(second)["parsed"] == flags_result(first)["parsed"]
    # The no-op path is one module call: the directories, the install probe, the flags, the fact.
    assert [name.startswith(ONE_CALL) for name in module_calls(second)] == [True], module_calls(second)

    # Other settings are checked by SGLang again, not answered from the remembered outcome.
    third = run_role(tmp_path, python, {**MOTIVATING, "cuda_graph_max_bs": 16}, name="third")
    assert third["rc"] == 0, third["failures"]
    assert flags_result(third)["cached"] is False
    assert flags_result(third)["parsed"]["cuda_graph_max_bs_decode"] == 16


def test_role_refuses_bad_settings_with_sglangs_message(sglang_env, tmp_path):
    # The cached venv's stamp matches the role's inputs, so only the parser runs.
    # moe_a2a_backend's choices move between releases, so only SGLang's parser judges them.
    bad = run_role(
        tmp_path,
        sglang_env["python"],
        {**MOTIVATING, "moe_a2a_backend": "deep_ep"},
        name="bad",
        state=sglang_env["state"],
    )
    assert bad["rc"] != 0
    assert any("argument --moe-a2a-backend: invalid choice: 'deep_ep'" in msg for msg in bad["failures"]), bad
    assert not (tmp_path / "facts-localhost" / "epforge_sglang.fact").exists()

    # A shape error is refused before anything is installed (no stamp, no log).
    shape = run_role(
        tmp_path,
        sglang_env["python"],
        {**MOTIVATING, "tp_sise": 8},
        name="shape",
        state=tmp_path / "shape-state",
    )
    assert shape["rc"] != 0
    expected = "unknown server setting 'tp_sise' (did you mean 'tp_size'?)"
    assert any(expected in msg for msg in shape["failures"]), shape
    assert not (tmp_path / "shape-state").exists()


def test_role_check_mode_changes_nothing(sglang_env, tmp_path):
    run = run_role(tmp_path, sglang_env["python"], MOTIVATING, check=True, name="check")
    assert run["rc"] == 0, run["failures"]
    assert not (tmp_path / "state" / "sglang.stamp.json").exists()
    assert not (tmp_path / "facts-localhost" / "epforge_sglang.fact").exists()


def test_role_derives_multinode_settings_from_the_group(sglang_env, tmp_path):
    server = {key: value for key, value in MOTIVATING.items() if not key.startswith("speculative")}
    hosts = {"node-a": {"ansible_host": "10.1.2.3"}, "node-b": {}}
    run = run_role(
        tmp_path,
        sglang_env["python"],
        server,
        name="multi",
        hosts=hosts,
        group="nodes",
        state=sglang_env["state"],
    )
    assert run["rc"] == 0, run["failures"]
    # The role's default parser deps are the list the cached venv was built with: its stamp matched.
    assert [one_call(run, host)["actions"] for host in hosts] == [[], []]
    for rank, host in enumerate(hosts):
        fact = json.loads((tmp_path / f"facts-{host}" / "epforge_sglang.fact").read_text())
        assert fact["server_flags"]["nnodes"] == 2
        assert fact["server_flags"]["node_rank"] == rank
        argv = fact["server_flags"]["argv"]
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.1.2.3:25000"


# ------------------------------------------------------------------- one settings path, end to end

OBJECT_PLAY = """\
- name: Preflight, SGLang, final env and the server on a fake 8x PCIe host
  hosts: localhost
  gather_facts: false
  roles:
    - role: preflight
    - role: sglang
    - role: final_env
    - role: sglang_server
"""


def object_run_vars(base: Path, sglang_env: dict, port: int, user: str, key: str) -> dict:
    """The fake 8x PCIe host's request (deepep_mode auto, which preflight adjusts) and the roles' variables:
    role sglang on the cached parser venv, role sglang_server on the stand-in (a TEST DOUBLE)."""
    import bench_env  # noqa: PLC0415 - tests/fixtures/bench_serving, put on sys.path by the caller
    from test_cuda_binary_archs import ensure_cuobjdump  # noqa: PLC0415

    model = base / "model"
    model.mkdir()
    request = {
        "model_path": str(model),
        "tp_size": 8,
        "ep_size": 8,
        "moe_a2a_backend": "deepep",
        "deepep_mode": "auto",
        "host": "127.0.0.1",
        "port": port,
    }
    return {
        **bench_env.standin_server_vars(base, model, port, user),
        "epforge_server": request,
        "preflight_min_free_gib": 1,
        "sglang_python": sglang_env["python"],
        "sglang_install_deps": False,
        # the cached venv's stamp: SGLang is installed there already
        "sglang_stamp_file": str(sglang_env["state"] / "sglang.stamp.json"),
        "final_env_python": sglang_env["python"],
        "final_env_cuobjdump": str(ensure_cuobjdump()),
        # only an argv SGLang's parser accepted is launched (the verdict of role sglang, by digest)
        "sglang_server_require_verdict": True,
        "sglang_server_api_key": key,
    }


def assert_one_argv_and_one_digest(base: Path, key: str) -> int:
    """The argv judged, recorded and running are one; every fact names its digest; no key anywhere.
    Returns the server's pid."""
    facts = {
        name: json.loads((base / "facts" / f"epforge_{name}.fact").read_text())
        for name in ("preflight", "sglang", "final_env", "sglang_server")
    }
    obj = facts["preflight"]["server"]
    judged = facts["sglang"]["server_flags"]
    launched = facts["sglang_server"]
    assert judged["validated"] is True and judged["argv"] == obj["argv"]
    assert launched["argv"][2:] == obj["argv"]
    pid = int((base / "state" / "sglang_server" / "sglang-server.pid").read_text())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    assert [item.decode() for item in cmdline] == launched["argv"]
    flags = " ".join(obj["argv"])
    assert "--deepep-mode low_latency" in flags and "--disable-custom-all-reduce" in flags
    ids = {a["id"] for a in obj["adjustments"]}
    assert {"deepep_normal_mode_needs_nvlink", "custom_allreduce_pcie_multi_gpu"} <= ids
    digest = obj["digest"]
    assert judged["digest"] == digest and facts["final_env"]["settings_digest"] == digest
    assert launched["settings_digest"] == digest and launched["api_key_set"] is True
    assert key not in json.dumps(facts) and key.encode() not in b" ".join(cmdline)
    confirmed = {e["key"] for e in launched["settings_confirmation"]["confirmed"]}
    assert {"tp_size", "ep_size", "moe_a2a_backend", "deepep_mode"} <= confirmed
    return pid


def assert_unjudged_relaunch_keeps_the_server(tmp_path, extra, env, base: Path, *, pid: int) -> None:
    from playbooks import run_playbook, write_vars  # noqa: PLC0415

    fact = base / "facts" / "epforge_sglang_server.fact"
    before = fact.read_bytes()
    # A flag the release's table knows (an unknown one is refused even earlier, in preflight): a new argv
    # that no parser has judged.
    changed = {**extra["epforge_server"], "extra_args": ["--enable-metrics"]}
    relaunch = write_vars(tmp_path / "relaunch.json", {**extra, "epforge_server": changed})
    serve = tmp_path / "serve.yml"
    serve.write_text(OBJECT_PLAY.replace("    - role: sglang\n    - role: final_env\n", ""))
    proc = run_playbook(serve, vars_file=relaunch, env=env, timeout=600)
    assert proc.returncode != 0
    assert "Judge the settings object's argv with SGLang's parser before anything changes" in proc.stdout
    assert int((base / "state" / "sglang_server" / "sglang-server.pid").read_text()) == pid
    assert Path(f"/proc/{pid}").exists() and fact.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="the server role creates a service account (needs root)")
def test_one_settings_object_is_judged_recorded_and_launched_byte_identical(sglang_env, tmp_path):
    """Issue 'one settings path': on a fake 8x RTX PRO 6000 PCIe host, preflight adjusts deepep_mode and
    custom allreduce; SGLang's real parser judges the object's argv once, the facts of preflight, sglang,
    final_env and sglang_server carry its digest, and the stand-in server (a TEST DOUBLE, process manager)
    runs exactly that argv, the API key appended by the launcher only. A rerun judges nothing again."""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "bench_serving"))
    import bench_env  # noqa: PLC0415 - tests/fixtures/bench_serving, put on sys.path above
    from test_preflight_checks import sm120_pcie_host  # noqa: PLC0415

    from playbooks import JSON_CALLBACK, json_report, run_playbook, write_vars  # noqa: PLC0415

    user, key = "epforge-object-test", "sk-object-test-launcher-only"
    counting, count_file = sglang_parser_env.parser_run_counter(tmp_path)
    book = tmp_path / "object.yml"
    book.write_text(OBJECT_PLAY)
    env = {
        "PATH": sm120_pcie_host(tmp_path),
        **counting,
        **JSON_CALLBACK,
    }
    with bench_env.service_base_dir("epforge-object-", user) as base:
        extra = object_run_vars(base, sglang_env, bench_env.free_port(), user, key)
        vars_file = write_vars(tmp_path / "vars.json", extra)
        try:
            proc = run_playbook(book, vars_file=vars_file, env=env, timeout=1200)
            assert proc.returncode == 0, proc.stdout[-6000:]
            pid = assert_one_argv_and_one_digest(base, key)
            assert parser_runs(count_file) == 1

            # The rerun: nothing changes, nothing is judged again, the same server keeps running.
            again = run_playbook(book, vars_file=vars_file, env=env, timeout=1200)
            assert again.returncode == 0, again.stdout[-6000:]
            assert json_report(again)["stats"]["localhost"]["changed"] == 0
            assert parser_runs(count_file) == 1
            assert int((base / "state" / "sglang_server" / "sglang-server.pid").read_text()) == pid

            # Another caller of the same object (the sweep's judge step) reuses the verdict by digest.
            obj = json.loads((base / "facts" / "epforge_preflight.fact").read_text())["server"]
            args = {"python": sglang_env["python"], "server_object": obj, "sglang_version": SGLANG_VERSION}
            args["cache_path"] = str(base / "state" / "sglang-flags-check.json")
            rc, res = run_module("sglang_flags_check", args)
            assert rc == 0 and res["cached"] is True, res
            assert parser_runs(count_file) == 1

            # A relaunch with settings no parser accepted (here the stand-in's python has none) is refused
            # BEFORE anything changes: the healthy server keeps running, its record stays.
            assert_unjudged_relaunch_keeps_the_server(tmp_path, extra, env, base, pid=pid)
        finally:
            stop = write_vars(tmp_path / "stop.json", {**extra, "sglang_server_state": "stopped"})
            run_playbook(book, vars_file=stop, env=env, timeout=300)
