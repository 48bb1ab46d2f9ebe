"""The GPU steps on a host that cannot run them: sglang_server, collective_probe and sglang_benchmark each
decide in ONE task, record the skipped step with its reason, publish their play fact and end the role there.

Real playbooks through the project's ansible.cfg and roles on this GPU-less machine. preflight_result and
ansible_facts['epforge_gpu_facts'] are given as the inputs these roles read (what role preflight publishes on
a host without a usable GPU, or with one GPU), so no run lock or host state is involved."""

from __future__ import annotations

import sys

import yaml

from playbooks import JSON_CALLBACK, json_report, run_playbook

# What role preflight publishes on a host where nvidia-smi is missing (tests/unit/test_preflight_checks.py
# checks the module's side of it).
NO_GPU_PREFLIGHT = {
    "gpu": {"available": False, "reason": "nvidia-smi not found on PATH", "gpu_count": 0},
    "gpu_runtime": {
        "available": False,
        "reason": "no usable GPU: nvidia-smi not found on PATH",
        "skipped_steps": ["sglang_server", "sglang_benchmark", "collective_probe", "deepep_gpu_verify"],
    },
}
ONE_GPU = {"available": True, "gpu_count": 1, "gpus": [{"index": 0, "name": "NVIDIA H200"}], "reason": ""}


def play(tmp_path, gpu_facts: dict, roles: list[str], role_vars: dict | None = None):
    tasks = [
        {"name": "Load the stack", "ansible.builtin.import_role": {"name": "epforge"}},
        {
            "name": "Know the GPUs as preflight left them",
            "ansible.builtin.set_fact": {"epforge_gpu_facts": gpu_facts, "cacheable": False},
        },
        {
            "name": "Publish them as the host fact",
            "ansible.builtin.set_fact": {"ansible_facts": {"epforge_gpu_facts": gpu_facts}},
        },
    ]
    tasks += [{"name": f"Run {r}", "ansible.builtin.include_role": {"name": r}} for r in roles]
    tasks.append(
        {
            "name": "Show",
            "ansible.builtin.debug": {
                "msg": {
                    "steps": "{{ epforge_steps | default([]) }}",
                    "probe": "{{ collective_probe_result | default('unset') }}",
                    "bench": "{{ sglang_benchmark_result | default('unset') }}",
                }
            },
        }
    )
    playbook = tmp_path / "skips.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "GPU steps",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "ansible_python_interpreter": sys.executable,
                        "epforge_stack": "cu130",
                        "epforge_facts_dir": str(tmp_path / "facts"),
                        "epforge_state_dir": str(tmp_path / "state"),
                        "epforge_log_dir": str(tmp_path / "log"),
                        "preflight_result": NO_GPU_PREFLIGHT,
                        **(role_vars or {}),
                    },
                    "tasks": tasks,
                }
            ],
            sort_keys=False,
        )
    )
    proc = run_playbook(playbook, env=JSON_CALLBACK, timeout=300)
    report = json_report(proc)
    assert proc.returncode == 0, proc.stdout[-4000:]
    tasks = report["plays"][0]["tasks"]
    ran = [
        t["task"]["name"]
        for t in tasks
        if "localhost" in t["hosts"]
        and not t["hosts"]["localhost"].get("skipped")
        and "Validating arguments" not in t["task"]["name"]
    ]
    return ran, tasks[-1]["hosts"]["localhost"]["msg"], tmp_path


def test_a_gpu_less_host_records_three_skipped_steps_in_one_task_each(tmp_path):
    ran, out, tmp = play(
        tmp_path,
        {"available": False, "gpu_count": 0, "reason": "nvidia-smi not found on PATH"},
        ["sglang_server", "collective_probe", "sglang_benchmark"],
    )
    steps = {s["step"]: s for s in out["steps"]}
    assert [s["step"] for s in out["steps"]] == ["sglang_server", "collective_probe", "sglang_benchmark"]
    assert all(s["status"] == "skipped" for s in out["steps"])
    assert steps["sglang_server"]["detail"] == (
        "Not launched: preflight found no usable GPU on this host (nvidia-smi not found on PATH); "
        "set sglang_server_require_gpu: false to launch anyway."
    )
    assert (
        steps["collective_probe"]["detail"]
        == "Not measured: no GPU on this host (nvidia-smi not found on PATH)."
    )
    assert steps["sglang_benchmark"]["detail"].startswith("Not measured: preflight found no usable GPU")
    assert out["probe"] == {
        "status": "skipped",
        "reason": "no GPU on this host (nvidia-smi not found on PATH)",
    }
    assert out["bench"]["status"] == "skipped" and out["bench"]["label"] == "decode-heavy"
    # nothing past the decision: no settings resolved, no launch, no probe script, no bench client
    role_tasks = [n for n in ran if " : " in n and not n.startswith("epforge : ")]
    assert role_tasks == [
        "sglang_server : Decide whether this host launches, and record a skipped launch",
        "collective_probe : Keep the GPU facts; with fewer than two GPUs, record the probe as skipped",
        "sglang_benchmark : Decide whether this host benchmarks, and record a skipped benchmark",
    ], ran
    assert not (tmp / "facts").exists() and not (tmp / "state").exists()


def test_one_gpu_skips_the_collective_probe_with_its_reason(tmp_path):
    ran, out, _ = play(tmp_path, ONE_GPU, ["collective_probe"])
    assert out["steps"] == [
        {
            "step": "collective_probe",
            "status": "skipped",
            "detail": "Not measured: one GPU on this host: a collective needs at least 2 ranks.",
        }
    ]
    assert not any("Install the probe script" in n for n in ran)
