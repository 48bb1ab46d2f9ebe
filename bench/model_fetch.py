#!/usr/bin/env python3
"""How fast does role model fetch real-sized weights, against `hf download` run by hand on the same mirror?

A checkpoint of --shards safetensors shards of --shard-mib MiB each (default 5 x 440 MiB = 2.15 GiB, plus
config, index and tokenizer files) is served by a real Hub-compatible mirror on loopback (olah, from PyPI;
tests/hub_mirror.py). Then, interleaved for --repeat rounds (the order alternating each round), into fresh
directories on the same disk:
- epforge: module model_weights (source mirror; as Ansible runs it), which also checks every file's hash
  against the mirror's metadata and stamps the directory;
- hf download: huggingface_hub's own CLI, `hf download REPO --revision COMMIT --local-dir DIR`, with the
  same HF_ENDPOINT and the same number of parallel files (--concurrency).
It prints the machine, each run's seconds and MiB/s, the median throughput ratio epforge / hf (target
>= 0.95), and the fixed cost: both tools on a tiny repo (one small shard), and epforge's no-op rerun (the
probe).

--fleet also times role model's controller source to three podman hosts (the project's test-host image):
the controller's one download, then rsync to the three hosts and each host's verification, as one
ansible-playbook run; it prints the bytes moved and the aggregate rate, and the mirror's download count.

    .venv/bin/python bench/model_fetch.py [--repeat 3] [--shards 5] [--shard-mib 440] [--fleet]

Disk: about 3x the checkpoint under /var/tmp for the comparison (the mirror's git repo holds it twice, each
fetch once, removed after each run), 7x with --fleet (the controller's copy and three hosts' copies): 15 GiB
at the defaults. Everything is removed at the end (a killed run leaves /var/tmp/epforge-model-bench-*).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "bench"))

from hub_mirror import Olah, git_repo, write_checkpoint  # noqa: E402
from module_runner import call_module  # noqa: E402
from podman_hosts import remove_hosts, start_host, write_inventory  # noqa: E402

MIB = 1 << 20


def machine() -> str:
    cpu = ""
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def epforge_fetch(olah: Olah, repo: str, target: Path, work: Path, concurrency: int) -> tuple[float, dict]:
    args = {
        "name": "model_path",
        "source": "mirror",
        "repo": repo,
        "endpoint": olah.endpoint,
        "path": str(target),
        "python": sys.executable,
        "log_path": str(work / "epforge.log"),
        "space_margin_mb": 64,
        "concurrency": concurrency,
    }
    started = time.monotonic()
    result, _ended = call_module(ROOT / "library" / "model_weights.py", args, work, timeout=3600)
    seconds = time.monotonic() - started
    if result.get("failed"):
        sys.exit(f"epforge fetch failed: {result.get('msg')}")
    return seconds, result


def hf_download(olah: Olah, repo: str, commit: str, target: Path, concurrency: int) -> float:
    hf = Path(sys.executable).parent / "hf"
    argv = [str(hf), "download", repo, "--revision", commit, "--local-dir", str(target)]
    argv += ["--max-workers", str(concurrency)]
    env = dict(os.environ, HF_ENDPOINT=olah.endpoint, HF_HUB_DISABLE_PROGRESS_BARS="1")
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"hf download failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def fleet(olah: Olah, repo: str, work: Path, total: int) -> None:
    from ansible_collections.epforge.ep.plugins.module_utils.server_object import build  # noqa: PLC0415

    image = "localhost/epforge-molecule-bookworm:latest"
    subprocess.run([str(ROOT / "molecule" / "_podman" / "build-image.sh")], check=True)
    hosts = [f"epforge-bench-fleet-{i}" for i in range(1, 4)]
    try:
        for host in hosts:
            start_host(host, image, seconds=7200)
        write_inventory(work / "hosts.yml", hosts)
        verdict = {"adjusted_settings": {"model_path": repo, "tp_size": 2}, "findings": {"adjustments": []}}
        (work / "vars.json").write_text(
            json.dumps(
                {
                    "preflight_server_object": build(verdict, "0.5.23"),
                    "model_source": "controller",
                    "model_endpoint": olah.endpoint,
                    "model_controller_dir": str(work / "controller-cache"),
                    "model_controller_python": sys.executable,
                    "model_require_gpu": False,
                    "model_space_margin_mb": 64,
                }
            )
        )
        (work / "play.yml").write_text(
            "- name: Fleet\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Role model\n"
            "      ansible.builtin.import_role:\n        name: model\n"
        )
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(work / "hosts.yml")]
        argv += [str(work / "play.yml"), "-e", f"@{work / 'vars.json'}"]
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
            ANSIBLE_CALLBACKS_ENABLED="epforge.ep.preload,ansible.posix.profile_tasks",
        )
        served = len(olah.downloads(repo))
        started = time.monotonic()
        proc = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
        )
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"fleet run failed:\n{proc.stdout[-4000:]}")
        started = time.monotonic()
        rerun = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
        )
        rerun_s = time.monotonic() - started
        moved = 3 * total
        # profile_tasks' recap: each task's time in the first run (controller fetch, check, rsync, verify)
        for line in proc.stdout.splitlines():
            timed = re.match(r"^(model : .*?) -+ ([0-9.]+)s$", line.strip())
            if timed:
                print(f"  {timed.group(2):>7}s  {timed.group(1)}")
        print(
            f"fleet (controller source, 3 podman hosts): {seconds:.1f} s for the controller's fetch + "
            f"{moved / 2**30:.2f} GiB sent and verified ({moved / MIB / seconds:.0f} MiB/s aggregate); "
            f"mirror downloads: {len(olah.downloads(repo)) - served} (files: {len(list_files(work, repo))}); "
            f"rerun {rerun_s:.1f} s, rc {rerun.returncode}"
        )
    finally:
        remove_hosts(*hosts)


def list_files(work: Path, repo: str) -> list[str]:
    directory = work / "controller-cache" / repo
    return [p.name for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")]


def compare(olah: Olah, work: Path, opts, commits: dict, total: int) -> None:
    """epforge against hf download on the big repo, interleaved; then the fixed cost on the tiny one."""
    rates = {"epforge": [], "hf": []}
    for round_no in range(opts.repeat):
        order = ["epforge", "hf"] if round_no % 2 == 0 else ["hf", "epforge"]
        for tool in order:
            target = work / f"{tool}-{round_no}"
            if tool == "epforge":
                seconds, result = epforge_fetch(olah, "bench/big", target, work, opts.concurrency)
                assert result["bytes_fetched"] == total, result
            else:
                seconds = hf_download(olah, "bench/big", commits["big"], target, opts.concurrency)
            rates[tool].append(total / MIB / seconds)
            print(f"round {round_no + 1} {tool:8s} {seconds:6.1f} s  {total / MIB / seconds:7.1f} MiB/s")
            shutil.rmtree(target)
    ratio = statistics.median(rates["epforge"]) / statistics.median(rates["hf"])
    print(
        f"median: epforge {statistics.median(rates['epforge']):.1f} MiB/s, hf download "
        f"{statistics.median(rates['hf']):.1f} MiB/s; ratio epforge/hf = {ratio:.3f} (target >= 0.95)"
    )

    tiny = {"epforge": [], "hf": []}
    for round_no in range(opts.repeat):
        seconds, _ = epforge_fetch(olah, "bench/tiny", work / "tiny-e", work, opts.concurrency)
        tiny["epforge"].append(seconds)
        tiny["hf"].append(hf_download(olah, "bench/tiny", commits["tiny"], work / "tiny-h", opts.concurrency))
        if round_no < opts.repeat - 1:
            shutil.rmtree(work / "tiny-e")
            shutil.rmtree(work / "tiny-h")
    probe, result = epforge_fetch(olah, "bench/tiny", work / "tiny-e", work, opts.concurrency)
    assert result["changed"] is False and result["bytes_fetched"] == 0, result
    print(
        f"fixed cost (tiny repo, 1 MiB shard): epforge {statistics.median(tiny['epforge']):.2f} s, "
        f"hf download {statistics.median(tiny['hf']):.2f} s; epforge no-op rerun (the probe) "
        f"{probe:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the comparison (0: --fleet only)")
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--shard-mib", type=int, default=440)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--fleet", action="store_true")
    parser.add_argument("--workdir", default="", help="default: a temp dir on the same disk as /var/tmp")
    opts = parser.parse_args()

    work = Path(opts.workdir or tempfile.mkdtemp(prefix="epforge-model-bench-", dir="/var/tmp"))
    olah = Olah(work / "olah")
    try:
        print(machine())
        started = time.monotonic()
        _repo_dir, commit = git_repo(
            olah.mirrors, "bench/big", shards=opts.shards, shard_bytes=opts.shard_mib * MIB
        )
        _tiny_dir, tiny_commit = git_repo(
            olah.mirrors, "bench/tiny", checkpoint=lambda d: write_checkpoint(d, shards=1, shard_bytes=MIB)
        )
        total = sum(p.stat().st_size for p in _repo_dir.iterdir() if p.is_file())
        print(
            f"checkpoint: {opts.shards} shards, {total / 2**30:.2f} GiB ({total} B), written and committed "
            f"in {time.monotonic() - started:.0f} s; olah {olah.endpoint}"
        )

        if opts.repeat > 0:
            compare(olah, work, opts, {"big": commit, "tiny": tiny_commit}, total)
        if opts.fleet:
            fleet(olah, "bench/big", work, total)
    finally:
        olah.stop()
        if not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
