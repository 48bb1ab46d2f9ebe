"""Preflight: the host checks (module epforge_preflight_checks) and the role, run for real.

The role tests run ansible-playbook on localhost with epforge_facts_dir in a tmp dir. GPU hosts are
simulated by a fake nvidia-smi on PATH that prints real captures from tests/fixtures/nvidia-smi/.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from unittest import mock

import epforge_preflight_checks as checks_module
import pytest
import yaml
from gpu_fact_samples import NO_GPU, gpu_facts
from moduletools import run_main
from moduletools import run_module as run_module_file

from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks import host_checks
from ansible_collections.epforge.ep.plugins.module_utils.epforge_preflight_checks.host_checks import (
    GIB,
    disk_check,
    existing_parent,
    gpu_checks,
    gpu_runtime,
    python_check,
    run_python,
)
from ansible_collections.epforge.ep.plugins.module_utils.server_object import digest_of
from playbooks import JSON_CALLBACK, json_report, run_playbook, write_vars

ROOT = Path(__file__).resolve().parents[2]
SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"
VENV_BIN = str(Path(sys.executable).parent)
CU130 = yaml.safe_load((ROOT / "stacks" / "cu130.yml").read_text())["epforge_stack_spec"]
CU128 = yaml.safe_load((ROOT / "stacks" / "cu128.yml").read_text())["epforge_stack_spec"]
FACT = "epforge_preflight.fact"
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())


def by_name(checks: list[dict]) -> dict:
    return {c["name"]: c for c in checks}


# ---------------------------------------------------------------- GPU checks


def test_gpu_host_that_fits():
    checks = by_name(gpu_checks(CU130, gpu_facts(), require_gpu=True))
    assert [c["status"] for c in checks.values()] == ["passed"] * 4
    assert checks["driver"]["detail"] == "NVIDIA driver 580.159.04 >= 580.65.06 (stack cu130)"
    assert (
        checks["gpu"]["detail"] == "8 GPU(s): NVIDIA RTX PRO 6000 Blackwell Server Edition; interconnect pcie"
    )


def test_no_gpu_skips_with_the_reason():
    checks = gpu_checks(CU130, NO_GPU, require_gpu=False)
    assert [c["name"] for c in checks] == ["gpu", "driver", "driver_cuda", "gpu_arch"]
    assert all(c["status"] == "skipped" and c["ok"] for c in checks)
    assert "nvidia-smi not found on PATH" in checks[0]["detail"]


def test_no_gpu_fails_when_a_gpu_is_required():
    gpu = by_name(gpu_checks(CU130, NO_GPU, require_gpu=True))["gpu"]
    assert gpu["status"] == "failed" and gpu["ok"] is False
    assert "no usable GPU: nvidia-smi not found on PATH" in gpu["detail"]
    assert "set epforge_require_gpu: false for build-only work" in gpu["detail"]


def test_empty_gpu_facts_mean_no_gpu():
    assert by_name(gpu_checks(CU130, {}, require_gpu=False))["gpu"]["status"] == "skipped"


def test_old_driver_fails_with_the_remedy():
    checks = by_name(gpu_checks(CU130, gpu_facts(driver="570.124.06", cuda="12.8"), require_gpu=False))
    assert checks["driver"]["status"] == "failed"
    assert checks["driver"]["detail"].startswith("NVIDIA driver 570.124.06 is older than 580.65.06")
    assert "upgrade the driver to >= 580.65.06" in checks["driver"]["detail"]
    assert checks["driver_cuda"]["status"] == "failed"
    assert "supports CUDA up to 12.8 but stack cu130 needs CUDA 13.0" in checks["driver_cuda"]["detail"]
    # The same driver fits the CUDA 12.8 stack.
    fits = by_name(gpu_checks(CU128, gpu_facts(driver="570.124.06", cuda="12.8"), require_gpu=False))
    assert fits["driver"]["status"] == fits["driver_cuda"]["status"] == "passed"


def test_driver_version_compares_numerically():
    """580.9 < 580.65.06 < 580.159.04 (text comparison would get these wrong)."""
    assert by_name(gpu_checks(CU130, gpu_facts(driver="580.9"), False))["driver"]["status"] == "failed"
    assert by_name(gpu_checks(CU130, gpu_facts(driver="580.159.04"), False))["driver"]["status"] == "passed"


def test_unreadable_driver_version_fails():
    check = by_name(gpu_checks(CU130, gpu_facts(driver=""), False))["driver"]
    assert check["status"] == "failed" and "could not be read" in check["detail"]


def test_missing_driver_cuda_is_skipped():
    assert by_name(gpu_checks(CU130, gpu_facts(cuda=""), False))["driver_cuda"]["status"] == "skipped"


def test_gpu_arch_outside_the_stack_fails_naming_the_gpu():
    check = by_name(gpu_checks(CU130, gpu_facts(arch="9.0", count=2), False))["gpu_arch"]
    assert check["status"] == "failed"
    assert check["detail"].startswith(
        "GPU 0 (NVIDIA H200) is arch 9.0; GPU 1 (NVIDIA H200) is arch 9.0 but stack cu130"
    )
    assert "add their arch to arch_list in stacks/cu130.yml" in check["detail"]


def test_arch_specific_suffix_counts_as_the_same_base_arch():
    stack = {**CU128, "arch_list": ["9.0", "12.0a"]}
    facts = gpu_facts()
    facts["gpus"][3]["arch"] = "9.0"
    assert by_name(gpu_checks(stack, facts, False))["gpu_arch"]["status"] == "passed"
    facts["gpus"][5]["arch"] = "10.0"
    check = by_name(gpu_checks(stack, facts, False))["gpu_arch"]
    assert check["status"] == "failed" and check["detail"].startswith(
        "GPU 5 (NVIDIA RTX PRO 6000 Blackwell Server Edition) is arch 10.0 but"
    )


# ---------------------------------------------------------------- Python, disk, gpu_runtime


def test_python_check():
    assert python_check(CU130, "python3", "3.11.7")["status"] == "passed"
    old = python_check(CU130, "python3", "3.9.18")
    assert old["status"] == "failed"
    assert old["detail"] == (
        "python3 is Python 3.9.18, older than 3.10 that stack cu130 needs: install "
        "Python >= 3.10 and set preflight_python to it"
    )
    missing = python_check(CU130, "python3.99", "", "'python3.99' not found on PATH")
    assert missing["status"] == "failed" and "'python3.99' not found on PATH" in missing["detail"]
    assert "apt-get install python3 python3-venv" in missing["detail"]


def test_run_python_runs_the_real_interpreter(tmp_path):
    version = ".".join(map(str, sys.version_info[:3]))
    wrapper = tmp_path / "python3"  # another file, so the module starts it
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    assert run_python(str(wrapper)) == (version, "")
    with mock.patch.object(host_checks, "start_bounded", side_effect=AssertionError("started")):
        # The module's own binary (through a symlink too) is not started again.
        link = tmp_path / "python-link"
        link.symlink_to(sys.executable)
        assert run_python(sys.executable) == (version, "") == run_python(str(link))
        assert run_python("") == (version, "")  # the module's own interpreter
    assert run_python("no-such-python-here") == ("", "'no-such-python-here' not found on PATH")


def test_the_interpreter_runs_while_the_module_goes_on(tmp_path):
    """start_python returns before the interpreter has answered (the module does its pure work meanwhile);
    the answer waits for it."""
    version = ".".join(map(str, sys.version_info[:3]))
    gate, done = tmp_path / "gate", tmp_path / "done"
    wrapper = tmp_path / "python3"
    wrapper.write_text(
        f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n"
        f'{sys.executable} "$@"\nstatus=$?\ntouch {done}\nexit $status\n'
    )
    wrapper.chmod(0o755)
    answer = host_checks.start_python(str(wrapper))
    assert not done.exists()  # still waiting for the gate: start_python did not wait for it
    gate.touch()
    assert answer() == (version, "") and done.exists()


def test_run_python_reports_a_broken_interpreter(tmp_path):
    broken = tmp_path / "python3"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    assert run_python(str(broken)) == ("", "rc 3: cannot start")


def test_existing_parent(tmp_path):
    assert existing_parent(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert existing_parent(str(tmp_path)) == str(tmp_path)


def test_disk_check():
    assert disk_check("/var/lib/epforge", 20, 25 * GIB, "/var/lib")["detail"] == (
        "at least 20 GiB free on /var/lib/epforge"
    )  # no byte count, no measured parent: stable
    low = disk_check("/var/lib/epforge", 20, int(5.5 * GIB), "/var/lib")
    assert low["status"] == "failed"
    assert low["detail"].startswith("5.5 GiB free on /var/lib/epforge (measured on /var/lib), 20 GiB needed")
    assert "lower preflight_min_free_gib" in low["detail"]
    assert disk_check("/x", 0, None, "/")["status"] == "skipped"
    assert disk_check("/x", 1, None, "/")["status"] == "failed"


def test_a_run_that_builds_nothing_needs_only_what_a_server_run_writes():
    """serve.yml, tune.yml and benchmark.yml (builds=False) need at most 2 GiB; a building run the full need;
    a need below 2 GiB stays as set."""
    assert disk_check("/v", 20, int(16.9 * GIB), "/", builds=False) == {
        "name": "disk",
        "ok": True,
        "status": "passed",
        "detail": "at least 2 GiB free on /v: enough for a run that builds nothing, not for one that builds "
        "(20 GiB)",
    }
    assert disk_check("/v", 20, int(16.9 * GIB), "/", builds=True)["status"] == "failed"
    short = disk_check("/v", 20, int(1.5 * GIB), "/v", builds=False)
    assert short["status"] == "failed"
    assert short["detail"].startswith("1.5 GiB free on /v, 2 GiB needed (a run that builds nothing")
    assert (
        disk_check("/v", 0.5, int(0.6 * GIB), "/v", builds=False)["detail"] == "at least 0.5 GiB free on /v"
    )


def test_a_run_that_builds_and_one_that_does_not_record_the_same_passing_check():
    """provision.yml and serve.yml one after the other leave the preflight fact as it was (on the lent H200,
    2026-12-04, each rewrote the other's disk check: reprovision changed=1)."""
    for free in (25, 16.9):
        both = [disk_check("/v", 20, int(free * GIB), "/", builds=kind) for kind in (True, False)]
        if free >= 20:
            assert both[0] == both[1] and both[0]["detail"] == "at least 20 GiB free on /v"
        else:
            assert both[0]["status"] == "failed" and both[1]["status"] == "passed"


def test_gpu_runtime():
    steps = ["sglang_server", "collective_probe"]
    assert gpu_runtime(NO_GPU, steps) == {
        "available": False,
        "reason": "no usable GPU: nvidia-smi not found on PATH",
        "skipped_steps": steps,
    }
    assert gpu_runtime(gpu_facts(count=2), steps) == {
        "available": True,
        "reason": "2 usable GPU(s)",
        "skipped_steps": [],
    }


# ---------------------------------------------------------------- the module, in process


def run_module(args: dict) -> tuple[str, dict]:
    return run_main(checks_module, args)


def test_module_on_this_machine(tmp_path):
    how, result = run_module(
        {
            "stack": CU130,
            "gpu_facts": NO_GPU,
            "python": sys.executable,
            "disk_path": str(tmp_path / "state"),
            "min_free_gib": 0.01,
        }
    )
    assert how == "exit" and result["changed"] is False
    assert [c["name"] for c in result["checks"]] == [
        "gpu",
        "driver",
        "driver_cuda",
        "gpu_arch",
        "python",
        "disk",
    ]
    assert (
        result["failed_checks"] == []
        and "failed" not in result
        and result["gpu_runtime"]["available"] is False
    )
    assert result["gpu_runtime"]["skipped_steps"] == list(checks_module.DEFAULT_GPU_STEPS)
    assert not (tmp_path / "state").exists()  # reads only


def test_module_fails_on_too_little_disk_with_the_remedy(tmp_path):
    free = shutil.disk_usage(tmp_path).free / GIB
    how, result = run_module(
        {
            "stack": CU130,
            "gpu_facts": NO_GPU,
            "python": sys.executable,
            "disk_path": str(tmp_path),
            "min_free_gib": free * 2 + 1,
        }
    )
    assert how == "fail" and result["failed_checks"] == ["disk"]
    assert result["msg"].startswith("preflight: host does not fit stack 'cu130': ")
    assert "lower preflight_min_free_gib" in result["msg"]


def test_module_collects_every_failure(tmp_path):
    facts = gpu_facts(arch="9.0", driver="570.26", cuda="12.8")
    how, result = run_module(
        {
            "stack": CU130,
            "gpu_facts": facts,
            "python": "no-such-python-here",
            "disk_path": str(tmp_path),
            "min_free_gib": 0,
        }
    )
    assert how == "fail"
    assert result["failed_checks"] == ["driver", "driver_cuda", "gpu_arch", "python"]
    assert result["msg"].count(" | ") == 3


# ---------------------------------------------------------------- the one-call probe, run as Ansible runs it
# (a module file with a JSON args file); GPU hosts are a fake nvidia-smi printing the real captures.


def smi_script(path: str) -> str:
    """The fake nvidia-smi of a PATH made by fake_smi / sm120_pcie_host."""
    return path.split(":", 1)[0] + "/nvidia-smi"


def probe_args(tmp_path: Path, smi: str, **extra) -> dict:
    return {
        "stack": CU130,
        "gather_gpu_facts": True,
        "nvidia_smi_path": smi,
        "python": sys.executable,
        "disk_path": str(tmp_path / "state"),
        "min_free_gib": 0.01,
        "known_issues_table": TABLE,
        "facts_dir": str(tmp_path / "facts"),
        **extra,
    }


def h200_host(tmp_path: Path, gpus: int) -> str:
    name = f"h200x{gpus}"
    return fake_smi(
        tmp_path,
        SMI / f"{name}-query.csv",
        SMI / f"{name}-topo.txt",
        SMI / f"{name}-nvidia-smi.txt",
        SMI / f"{name}-p2p.txt",
    )


GATHER_HOSTS = {"h200x2": 2, "sm120x8-pcie": 8, "sm120x4-partial-p2p": 4, "no-smi": 0}


@pytest.mark.parametrize("host", sorted(GATHER_HOSTS))
def test_probe_gathers_the_gpu_facts_nvidia_gpu_facts_reports(tmp_path, host):
    """One owner of GPU gathering: the probe's epforge_gpu_facts equal module nvidia_gpu_facts' answer on
    the same host (real H200 captures; the sm_120 hosts as the role tests build them; no nvidia-smi)."""
    if host == "h200x2":
        smi = smi_script(h200_host(tmp_path, 2))
    elif host == "sm120x8-pcie":
        smi = smi_script(sm120_pcie_host(tmp_path))
    elif host == "sm120x4-partial-p2p":
        topo = "public-missalignment106-4xl40s-nic-topo.txt"
        smi = smi_script(sm120_pcie_host(tmp_path, 4, topo, {(0, 2), (0, 3), (1, 2), (1, 3)}))
    else:
        smi = str(tmp_path / "no" / "nvidia-smi")
    rc, alone = run_module_file("nvidia_gpu_facts", {"nvidia_smi_path": smi})
    assert rc == 0
    _, probe = run_module_file("epforge_preflight_checks", probe_args(tmp_path, smi, fail_on_error=False))
    assert probe["ansible_facts"]["epforge_gpu_facts"] == alone["ansible_facts"]["epforge_gpu_facts"]
    # and whether systemd runs the host, for sglang_server's choice of manager
    assert probe["ansible_facts"]["epforge_systemd_running"] is Path("/run/systemd/system").is_dir()
    facts = probe["ansible_facts"]["epforge_gpu_facts"]
    assert facts["gpu_count"] == GATHER_HOSTS[host] and facts["available"] is (host != "no-smi")


def test_probe_fails_on_an_unparsable_query_as_nvidia_gpu_facts_does(tmp_path):
    """The real 1x H200 capture was taken with a header and another field order: both modules refuse it
    with the same message, command and output tail."""
    smi = smi_script(h200_host(tmp_path, 1))
    rc, alone = run_module_file("nvidia_gpu_facts", {"nvidia_smi_path": smi})
    assert rc != 0 and alone["msg"].startswith("cannot parse the nvidia-smi GPU query: query line 1")
    rc, probe = run_module_file("epforge_preflight_checks", probe_args(tmp_path, smi))
    assert rc != 0 and not (tmp_path / "facts").exists()
    assert {k: probe[k] for k in ("msg", "cmd", "rc", "log_tail")} == {
        k: alone[k] for k in ("msg", "cmd", "rc", "log_tail")
    }


def test_probe_one_call_writes_the_fact_then_reruns_unchanged(tmp_path):
    """Check mode writes nothing (and shows the diff), the first run writes the fact, the rerun changes
    nothing; the fact is the returned preflight_result, byte for byte in epforge's JSON layout."""
    smi = smi_script(sm120_pcie_host(tmp_path))
    server = {"tp_size": 8, "moe_a2a_backend": "deepep", "api_key": "sk-never-written"}
    args = probe_args(tmp_path, smi, stack=CU128, require_gpu=True, server=server)
    fact = tmp_path / "facts" / FACT

    rc, checked = run_module_file("epforge_preflight_checks", args, check=True, diff=True)
    assert rc == 0 and checked["changed"] is True and not fact.exists()
    assert checked["diff"]["before"] == "" and '"deepep_mode": "low_latency"' in checked["diff"]["after"]

    rc, first = run_module_file("epforge_preflight_checks", args, diff=True)
    assert rc == 0 and first["changed"] is True and first["path"] == str(fact)
    assert fact.read_text() == json.dumps(first["preflight_result"], indent=2, sort_keys=True) + "\n"
    assert first["preflight_result"]["server"]["settings"]["deepep_mode"] == "low_latency"
    # ansible-core 2.19 wraps module warnings in events: one per warning row, naming it
    assert len(first["warnings"]) == 2
    assert "[deepep_deepgemm_disabled_sm120]" in json.dumps(first["warnings"])
    assert "[deepep_unquantized_no_runner_sm120]" in json.dumps(first["warnings"])
    assert "sk-never-written" not in json.dumps(first)  # masked in the invocation record as well
    written = fact.stat().st_mtime_ns

    rc, again = run_module_file("epforge_preflight_checks", args, check=True, diff=True)
    assert rc == 0 and again["changed"] is False and again["diff"] == {}
    rc, again = run_module_file("epforge_preflight_checks", args)
    assert rc == 0 and again["changed"] is False and fact.stat().st_mtime_ns == written
    assert again["preflight_result"] == first["preflight_result"]


def test_probe_refuses_a_dead_end_with_the_known_issues_message(tmp_path):
    """An error row fails the probe with module epforge_known_issues' own message, and writes nothing."""
    smi = smi_script(sm120_pcie_host(tmp_path))
    server = {"tp_size": 8, "enable_torch_symm_mem": True}
    rc, probe = run_module_file("epforge_preflight_checks", probe_args(tmp_path, smi, server=server))
    assert rc != 0 and not (tmp_path / "facts").exists()
    gpu = probe["ansible_facts"]["epforge_gpu_facts"]
    known = {"table": TABLE, "gpu_facts": gpu, "stack": CU130, "server": server}
    _, alone = run_module_file("epforge_known_issues", known)
    assert probe["msg"] == alone["msg"] and "[torch_symm_mem_sm120_pcie]" in probe["msg"]


def test_probe_refuses_contradictory_options(tmp_path):
    smi = smi_script(sm120_pcie_host(tmp_path))
    rc, result = run_module_file("epforge_preflight_checks", probe_args(tmp_path, smi, gpu_facts=NO_GPU))
    assert rc != 0 and result["msg"] == "gpu_facts and gather_gpu_facts exclude each other: pass one"
    args = probe_args(tmp_path, smi)
    del args["known_issues_table"]
    rc, result = run_module_file("epforge_preflight_checks", args)
    assert rc != 0 and "known_issues_table" in result["msg"]
    assert not (tmp_path / "facts").exists()


def test_the_tables_given_by_file_give_the_same_result_as_the_tables(tmp_path):
    """known_issues_path and flag_table_path (what the role passes: its action plugin reads them on the
    controller instead of a template finalizing 200 KB of tables) give the result the tables give."""
    smi = smi_script(sm120_pcie_host(tmp_path))
    server = {"model_path": "/models/m", "tp_size": 8, "chunked_prefill_size": 128}
    flags_file = ROOT / "data" / "sglang_flags" / f"{CU130['sglang']['version']}.json"
    flags = json.loads(flags_file.read_text())
    rc, by_table = run_module_file(
        "epforge_preflight_checks", probe_args(tmp_path, smi, server=server, flag_table=flags)
    )
    assert rc == 0, by_table.get("msg")
    args = probe_args(tmp_path, smi, server=server, flag_table_path=str(flags_file))
    del args["known_issues_table"]
    args["known_issues_path"] = str(ROOT / "data" / "known_issues.yml")
    rc, by_file = run_module_file("epforge_preflight_checks", args)
    assert rc == 0, by_file.get("msg")
    assert by_file["preflight_result"] == by_table["preflight_result"]
    assert "--chunked-prefill-size" in by_file["preflight_result"]["server"]["argv"]
    # what the action plugin passes for the paths: each table as JSON text (one value, not thousands of nodes)
    texts = probe_args(tmp_path, smi, server=server, flag_table=flags_file.read_text())
    texts["known_issues_table"] = json.dumps(texts["known_issues_table"])
    rc, by_text = run_module_file("epforge_preflight_checks", texts)
    assert rc == 0, by_text.get("msg")
    assert by_text["preflight_result"] == by_table["preflight_result"]
    rc, not_a_table = run_module_file("epforge_preflight_checks", dict(texts, flag_table="[1, 2]"))
    assert rc != 0 and "flag_table must be a mapping" in not_a_table["msg"]
    args["known_issues_path"] = str(tmp_path / "no-such.yml")
    rc, missing = run_module_file("epforge_preflight_checks", args)
    assert (
        rc != 0
        and "cannot read a table preflight needs" in missing["msg"]
        and "no-such.yml" in missing["msg"]
    )


# ---------------------------------------------------------------- the role, through ansible-playbook

PLAYBOOK = """\
- name: Preflight on this machine
  hosts: localhost
  gather_facts: false
  roles:
    - role: preflight
"""


def fake_smi(tmp_path: Path, query: Path, topo: Path, header: Path, p2p: Path | None = None) -> str:
    """A PATH whose nvidia-smi prints captures, as the real one would for these arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    p2p = p2p or SMI / "h200x2-p2p.txt"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) cat '{query}' ;;\n"
        f"  topo) if [ \"$2\" = -p2p ]; then cat '{p2p}'; else cat '{topo}'; fi ;;\n"
        f"  '') cat '{header}' ;;\n"
        '  *) echo "fake nvidia-smi: unexpected arguments $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin"


def p2p_matrix(count: int, missing: set[tuple[int, int]] = frozenset()) -> str:
    """`nvidia-smi topo -p2p r` for count GPUs in the format of the real H200 capture (tabs, escape codes
    around the header, its legend); pairs in missing read CNS."""
    legend = (SMI / "h200x2-p2p.txt").read_text().split("\n\n", 1)[1]
    names = [f"GPU{i}" for i in range(count)]
    rows = [" \t\x1b[4m" + "\t".join(names) + "\t\x1b[0m"]
    for i in range(count):
        cells = [
            "X" if i == j else ("CNS" if (min(i, j), max(i, j)) in missing else "OK") for j in range(count)
        ]
        rows.append(f" GPU{i}\t" + "\t".join(cells) + "\t")
    return "\n".join(rows) + "\n\n" + legend


def sm120_pcie_host(
    tmp_path: Path,
    count: int = 8,
    topo: str = "public-8x4090-pcie-node-sys-topo.txt",
    p2p_missing: set[tuple[int, int]] = frozenset(),
) -> str:
    """RTX PRO 6000s (sm_120) over PCIe. No such capture exists, so the query answer is derived from the
    real H200 capture (same fields and format, RTX PRO 6000 values), and so is the peer-read matrix; the
    topology is a real PCIe capture and the header the real driver 580.159.04 / CUDA 13.0 one."""
    template = (SMI / "h200x2-query.csv").read_text().splitlines()[0].split(", ")
    lines = []
    for i in range(count):
        fields = list(template)
        fields[0:6] = [
            str(i),
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "12.0",
            "97887",
            f"00000000:{0x18 + i:02X}:00.0",
            f"GPU-0e4a5f5c-0000-0000-0000-00000000000{i}",
        ]
        lines.append(", ".join(fields))
    query = tmp_path / f"rtx-pro-6000x{count}-query.csv"
    query.write_text("\n".join(lines) + "\n")
    p2p = tmp_path / f"rtx-pro-6000x{count}-p2p.txt"
    p2p.write_text(p2p_matrix(count, p2p_missing))
    return fake_smi(tmp_path, query, SMI / topo, SMI / "h200x2-nvidia-smi.txt", p2p)


def no_gpu_path() -> str:
    path = f"{VENV_BIN}:/usr/bin:/bin"
    searched = [*path.split(":"), "/sbin", "/usr/sbin", "/usr/local/sbin"]
    if any(os.path.exists(f"{d}/nvidia-smi") for d in searched):
        pytest.skip("GPU: this machine has an nvidia-smi; the test is about a host without one")
    return path


def play(tmp_path: Path, extra: dict, path: str, *, check: bool = False) -> tuple[int, dict]:
    book = tmp_path / "preflight.yml"
    book.write_text(PLAYBOOK)
    role_vars = {
        "epforge_facts_dir": str(tmp_path / "facts"),
        "epforge_state_dir": str(tmp_path / "state"),
        "preflight_min_free_gib": 1,
        **extra,
    }
    proc = run_playbook(
        book,
        *(["--check"] if check else []),
        vars_file=write_vars(tmp_path / "vars.json", role_vars),
        inventories=(),
        env={"PATH": path, **JSON_CALLBACK},
        timeout=300,
    )
    return proc.returncode, json_report(proc)


def assert_rerun_changes_nothing(tmp_path: Path, extra: dict, path: str) -> None:
    """The same run again changes nothing: changed=0 and the fact file's bytes as they were."""
    first = fact_file(tmp_path).read_bytes()
    rc, report = play(tmp_path, extra, path)
    assert rc == 0 and report["stats"]["localhost"]["changed"] == 0
    assert fact_file(tmp_path).read_bytes() == first


def host_results(report: dict) -> dict:
    """task name (without the 'role : ' prefix) -> the localhost result."""
    return {
        task["task"]["name"].split(" : ", 1)[-1]: task["hosts"]["localhost"]
        for task in report["plays"][0]["tasks"]
    }


def failure(report: dict) -> tuple[str, str]:
    """(task name, msg) of the failed task."""
    for name, result in host_results(report).items():
        if result.get("failed"):
            return name, result["msg"]
    raise AssertionError("no task failed")


def fact_file(tmp_path: Path) -> Path:
    return tmp_path / "facts" / FACT


NO_SERVER = {"epforge_server": {}}
# The role's one host call (a no-op rerun costs just this module call).
PROBE = "Check the host and the known dead ends against the stack, then write the preflight local fact"
PUBLISH = "Publish the preflight result and the server settings object as play facts, and record the step"


def test_role_on_a_host_without_gpu_writes_the_fact_once(tmp_path):
    path = no_gpu_path()
    # The localhost inventory requests a DeepEP server; this test is about a host asked for nothing.
    rc, report = play(tmp_path, NO_SERVER, path, check=True)
    assert rc == 0 and not fact_file(tmp_path).exists()  # check mode changes nothing

    rc, report = play(tmp_path, NO_SERVER, path)
    assert rc == 0, failure(report)
    assert report["stats"]["localhost"]["changed"] == 1  # one task: the facts dir and the fact file
    fact = json.loads(fact_file(tmp_path).read_text())
    assert fact["schema"] == 1 and fact["stack"]["name"] == "cu130" and fact["stack"]["arch_list"] == ["12.0"]
    assert fact["gpu"] == {
        "available": False,
        "reason": "nvidia-smi not found on PATH",
        "gpu_count": 0,
        "names": [],
        "archs": [],
        "interconnect": "none",
        "driver_version": "",
        "cuda_driver_version": "",
        "fabric": {"available": False, "reason": "nvidia-smi not found on PATH"},
    }
    assert fact["gpu_runtime"] == {
        "available": False,
        "reason": "no usable GPU: nvidia-smi not found on PATH",
        "skipped_steps": ["sglang_server", "sglang_benchmark", "collective_probe", "deepep_gpu_verify"],
    }
    assert [(c["name"], c["status"]) for c in fact["checks"]] == [
        ("gpu", "skipped"),
        ("driver", "skipped"),
        ("driver_cuda", "skipped"),
        ("gpu_arch", "skipped"),
        ("python", "passed"),
        ("disk", "passed"),
    ]
    assert fact["known_issues"] == {"matched": [], "errors": [], "warnings": [], "adjustments": []}
    results = host_results(report)
    # One task publishes the play facts and appends the run-summary step.
    published = results[PUBLISH]["ansible_facts"]
    assert set(published) == {"preflight_result", "preflight_server_object", "epforge_steps"}
    assert published["preflight_result"] == fact and published["preflight_server_object"] == {}
    # One module call gathered the GPU facts, checked the host and wrote the fact.
    probe = results[PROBE]
    assert probe["changed"] is True and probe["ansible_facts"]["epforge_gpu_facts"]["available"] is False
    [step] = published["epforge_steps"]
    assert step["step"] == "preflight" and step["status"] == "done"
    assert "no GPU (nvidia-smi not found on PATH), so sglang_server, sglang_benchmark" in step["detail"]
    assert_rerun_changes_nothing(tmp_path, NO_SERVER, path)


def test_role_adjusts_the_motivating_host_and_reruns_unchanged(tmp_path):
    path = sm120_pcie_host(tmp_path)
    server = yaml.safe_load((ROOT / "inventory" / "examples" / "rtx-pro-6000.yml").read_text())
    server = server["all"]["vars"]["epforge_server"]
    del server["deepep_mode"]  # auto: normal mode for prefill, which PCIe cannot run
    server["api_key"] = "sk-never-written"
    extra = {"epforge_stack": "cu128", "epforge_require_gpu": True, "epforge_server": server}
    rc, report = play(tmp_path, extra, path)
    assert rc == 0, failure(report)
    text = fact_file(tmp_path).read_text()
    assert "sk-never-written" not in text
    fact = json.loads(text)
    assert fact["gpu"]["gpu_count"] == 8 and fact["gpu"]["archs"] == ["12.0"]
    assert fact["gpu"]["interconnect"] == "pcie" and fact["gpu_runtime"]["skipped_steps"] == []
    assert all(c["status"] == "passed" for c in fact["checks"])
    assert [a["id"] for a in fact["known_issues"]["adjustments"]] == [
        "custom_allreduce_pcie_multi_gpu",
        "deepep_normal_mode_needs_nvlink",
        "flashinfer_jit_nvcc_before_12_9_sm120",
    ]
    # The one settings object: adjusted settings with each adjustment's reason, rendered once for the
    # stack's SGLang, its digest naming exactly that argv and environment.
    server = fact["server"]
    assert [a["id"] for a in server["adjustments"]] == [
        "custom_allreduce_pcie_multi_gpu",
        "deepep_normal_mode_needs_nvlink",
        "flashinfer_jit_nvcc_before_12_9_sm120",
    ]
    assert all(a["reason"] for a in server["adjustments"])
    assert server["settings"]["deepep_mode"] == "low_latency"
    assert server["settings"]["env"]["NCCL_P2P_LEVEL"] == "SYS"
    assert server["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
    argv = " ".join(server["argv"])
    assert "--deepep-mode low_latency" in argv and "--disable-custom-all-reduce" in argv
    assert "sk-never-written" not in argv and "--api-key" not in argv
    assert server["digest"] == digest_of(server["sglang_version"], server["argv"], server["env"])
    assert [w["id"] for w in fact["known_issues"]["warnings"]] == [
        "deepep_deepgemm_disabled_sm120",
        "deepep_unquantized_no_runner_sm120",
    ]
    assert_rerun_changes_nothing(tmp_path, extra, path)


def test_role_refuses_a_dead_end_setting_before_writing(tmp_path):
    path = sm120_pcie_host(tmp_path)
    rc, report = play(tmp_path, {"epforge_server": {"tp_size": 8, "enable_torch_symm_mem": True}}, path)
    assert rc != 0
    task, msg = failure(report)
    assert task == PROBE
    assert msg.startswith("1 known dead end(s) in the requested server settings: [torch_symm_mem_sm120_pcie]")
    assert "[torch_symm_mem_sm120_pcie]" in msg and "KeyError: 12" in msg
    assert "Remedy: remove enable_torch_symm_mem from epforge_server" in msg
    assert not fact_file(tmp_path).exists()


def test_role_refuses_deepep_on_partial_peer_access(tmp_path):
    # 4 GPUs in two PCIe pairs: GPU0-GPU1 and GPU2-GPU3 reach each other, the rest read CNS
    path = sm120_pcie_host(
        tmp_path, 4, "public-missalignment106-4xl40s-nic-topo.txt", {(0, 2), (0, 3), (1, 2), (1, 3)}
    )
    server = {"model_path": "/m", "tp_size": 4, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}
    rc, report = play(tmp_path, {"epforge_server": server}, path)
    assert rc != 0
    task, msg = failure(report)
    assert task == PROBE
    assert "[deepep_partial_peer_access]" in msg and "deep_ep.cpp:200" in msg
    peer = host_results(report)[PROBE]["ansible_facts"]["epforge_gpu_facts"]["peer_access"]
    assert peer["status"] == "partial" and peer["missing"] == [
        "GPU0-GPU2 CNS",
        "GPU0-GPU3 CNS",
        "GPU1-GPU2 CNS",
        "GPU1-GPU3 CNS",
    ]
    assert not fact_file(tmp_path).exists()


def test_role_refuses_gpus_outside_the_stack(tmp_path):
    path = fake_smi(
        tmp_path, SMI / "h200x2-query.csv", SMI / "h200x2-topo.txt", SMI / "h200x2-nvidia-smi.txt"
    )
    rc, report = play(tmp_path, {}, path)
    assert rc != 0
    task, msg = failure(report)
    assert task == PROBE
    assert msg.startswith("preflight: host does not fit stack 'cu130': ")
    assert "GPU 0 (NVIDIA H200) is arch 9.0" in msg and "choose a stack whose arch_list covers" in msg
    assert not fact_file(tmp_path).exists()


def test_role_requires_a_gpu_when_told(tmp_path):
    rc, report = play(tmp_path, {"epforge_require_gpu": True}, no_gpu_path())
    assert rc != 0
    _, msg = failure(report)
    assert "no usable GPU: nvidia-smi not found on PATH" in msg and "epforge_require_gpu: false" in msg
    assert not fact_file(tmp_path).exists()


def test_role_refuses_an_unknown_stack(tmp_path):
    rc, report = play(tmp_path, {"epforge_stack": "cu999"}, no_gpu_path())
    assert rc != 0
    _, msg = failure(report)
    assert "unknown stack 'cu999'" in msg and "choose one of" in msg
    assert not fact_file(tmp_path).exists()


def test_role_refuses_an_incoherent_stack(tmp_path):
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)
    broken = yaml.safe_load((stacks / "cu130.yml").read_text())
    broken["epforge_stack_spec"]["torch"]["cuda"] = "12.8"
    (stacks / "cu130.yml").write_text(yaml.safe_dump(broken))
    rc, report = play(tmp_path, {"epforge_stacks_dir": str(stacks)}, no_gpu_path())
    assert rc != 0
    _, msg = failure(report)
    assert "stack 'cu130' is incoherent" in msg and "pick a torch build for CUDA 13.x" in msg
    assert not fact_file(tmp_path).exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("epforge_stack_spec: {name: cu130, torch: [unclosed\n", "is not valid YAML"),
        ("", "is empty: it must define epforge_stack_spec"),
        ("# only a comment\n", "is empty: it must define epforge_stack_spec"),
        ("other_key: 1\n", "does not define epforge_stack_spec"),
    ],
)
def test_role_names_a_broken_stack_file_and_its_fault(tmp_path, content, words):
    """Issue 'nothing let in' (12): a stack file that is not YAML, is empty or lacks the key is refused with
    its path and the fault (before: 'Action failed: Unknown error.', "'epforge_stack_spec' is undefined")."""
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)
    (stacks / "cu130.yml").write_text(content)
    rc, report = play(tmp_path, {"epforge_stacks_dir": str(stacks)}, no_gpu_path())
    assert rc != 0
    _, msg = failure(report)
    assert str(stacks / "cu130.yml") in msg and words in msg, msg
    assert not fact_file(tmp_path).exists()


def test_role_names_a_stack_without_a_torch_version(tmp_path):
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)
    broken = yaml.safe_load((stacks / "cu130.yml").read_text())
    del broken["epforge_stack_spec"]["torch"]["version"]
    (stacks / "cu130.yml").write_text(yaml.safe_dump(broken))
    rc, report = play(tmp_path, {"epforge_stacks_dir": str(stacks)}, no_gpu_path())
    assert rc != 0
    _, msg = failure(report)
    assert "torch.version (the torch release the stack installs" in msg and "None" not in msg, msg


def test_the_action_plugin_passes_each_table_as_its_json_text():
    """The role's paths become JSON text on the controller: the flag table's file as it is, the known-issues
    YAML as the JSON of its mapping; a release without a flag file passes an empty table."""
    from ansible_collections.epforge.ep.plugins.action.epforge_preflight_checks import (  # noqa: PLC0415
        tables_read_here,
    )

    flags_file = ROOT / "data" / "sglang_flags" / f"{CU130['sglang']['version']}.json"
    known = ROOT / "data" / "known_issues.yml"
    args = tables_read_here({"flag_table_path": str(flags_file), "known_issues_path": str(known)})
    assert set(args) == {"flag_table", "known_issues_table"}
    assert args["flag_table"] == flags_file.read_text()
    assert json.loads(args["known_issues_table"]) == yaml.safe_load(known.read_text())
    assert tables_read_here({"flag_table_path": str(ROOT / "data" / "sglang_flags" / "0.0.0.json")}) == {
        "flag_table": "{}"
    }
