"""Malformed epforge_server is refused in preflight, before anything changes (module
epforge_server_settings, role preflight), with a message that names the setting, the value and what would
be accepted.

The playbook test runs the real playbooks/provision.yml (in --check mode, so that a check that let bad
input through could not install anything) for four hosts at once, one bad input each, and proves from
the run's JSON report that every host failed at preflight's settings task and that no cuda_toolkit task
ran for any of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import epforge_server_settings
from moduletools import run_main

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = str(Path(sys.executable).parent)
SETTINGS_TASK = (
    "preflight : Refuse malformed server settings (shape, keys, types, ranges) before anything changes"
)

# The bad inputs of issue 11, as a new user wrote them (host name -> epforge_server).
BAD = {
    "typo": {"model_path": "/m", "tpsize": 8},
    "port": {"model_path": "/m", "port": "30000x"},
    "tp0": {"model_path": "/m", "tp_size": 0},
    "string": "tp=8",
}
EXPECTED = {
    "typo": "unknown server setting 'tpsize' (did you mean 'tp_size'?) (value 8)",
    "port": "port must be an integer, got str '30000x' (write it as a number, e.g. 8); accepted: an integer "
    "from 1 to 65535",
    "tp0": "tp_size is out of range, got 0; accepted: an integer >= 1",
    "string": "server settings (epforge_server) must be a mapping of setting names to values, e.g. "
    "{model_path: /models/m, tp_size: 8}, got str 'tp=8'",
}
# Refused by the stack's SGLang release (cu130: 0.5.23) through the tables role epforge names by path
# (epforge_sglang_env_file, epforge_sglang_flag_successors_file): the playbook test proves they reach
# the task.
BY_RELEASE = {
    "envname": {"model_path": "/m", "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDCE": "1"}},
    "retired": {"model_path": "/m", "keep_mm_feature_on_device": True},
}
EXPECTED |= {
    "envname": "env.SGLANG_ENABLE_PCIE_IPC_ALLREDCE is not a variable SGLang 0.5.23 reads (did you mean "
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?)",
    "retired": "--keep-mm-feature-on-device was removed in SGLang 0.5.23 (deprecated in 0.5.16); SGLang "
    "0.5.16 names its successor --mm-feature-transport=cuda_ipc: did you mean mm_feature_transport: "
    "cuda_ipc?",
}


def test_module_refuses_each_bad_input_and_passes_a_good_one():
    for name, settings in BAD.items():
        kind, result = run_main(epforge_server_settings, {"settings": settings})
        assert kind == "fail", name
        assert result["msg"].startswith("epforge_server is refused before anything changes: (1) "), result
        assert EXPECTED[name] in result["msg"], (name, result["msg"])
    kind, good = run_main(
        epforge_server_settings,
        {"settings": {"model_path": "/m", "tp_size": "8", "ep_size": 8, "api_key": "sk-secret-value"}},
    )
    assert kind == "exit" and good["changed"] is False and good["problems"] == []
    assert good["setting_names"] == ["api_key", "ep_size", "model_path", "tp_size"]
    assert run_main(epforge_server_settings, {"settings": {}})[0] == "exit"


def test_module_requires_a_model_when_told_and_hides_the_api_key():
    kind, result = run_main(
        epforge_server_settings,
        {"settings": {"tp_size": 2, "api_key": "sk-never-shown", "tpsize": 1}, "require_model": True},
    )
    assert kind == "fail" and "model_path is required" in result["msg"]
    assert "sk-never-shown" not in json.dumps(result)


def test_provision_refuses_each_bad_input_in_preflight_before_cuda_toolkit(tmp_path):
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "epforge_server": settings,
        }
        for name, settings in (BAD | BY_RELEASE).items()
    }
    inventory = tmp_path / "inventory.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": hosts,
                    "vars": {
                        "epforge_stack": "cu130",
                        "epforge_facts_dir": str(tmp_path / "facts"),
                        "epforge_state_dir": str(tmp_path / "state"),
                    },
                }
            }
        )
    )
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}:/usr/bin:/bin",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    argv = [
        os.path.join(VENV_BIN, "ansible-playbook"),
        "-i",
        str(inventory),
        "--check",
        "--forks",
        "1",
        str(ROOT / "playbooks" / "provision.yml"),
    ]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode != 0
    tasks = [task for play in report["plays"] for task in play["tasks"]]
    for name in BAD | BY_RELEASE:
        ran = [task["task"]["name"] for task in tasks if name in task["hosts"]]
        failed = [task["task"]["name"] for task in tasks if task["hosts"].get(name, {}).get("failed")]
        assert failed == [SETTINGS_TASK], (name, failed)
        # the settings task is preflight's first: no GPU query, no host check, no toolkit task ran before
        assert ran[-1] == SETTINGS_TASK
        assert not [
            task for task in ran if task.startswith(("cuda_toolkit :", "ml_env :", "preflight : Gather"))
        ]
        result = next(task["hosts"][name] for task in tasks if task["task"]["name"] == SETTINGS_TASK)
        assert EXPECTED[name] in result["msg"], (name, result["msg"])
    assert report["stats"].keys() == (BAD | BY_RELEASE).keys()
    assert all(stats["failures"] == 1 and stats["changed"] == 0 for stats in report["stats"].values())
    assert not (tmp_path / "facts").exists()
