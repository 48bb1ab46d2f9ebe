"""The same SGLang server launched by hand and through epforge's sglang_server module, on the same GPU host.

Per variant, one after the other on the same port:
  hand         `PYTHON -m sglang.launch_server FLAGS` started by this script as the current user, output to a
               file, /health polled every 0.25 s (what a person does by hand)
  module       library/sglang_server.py run the way Ansible runs it (JSON args file), manager `process`,
               as the unprivileged --user, through the role's launcher (roles/sglang_server/files)
  module-root  the same module without a user (runs as the current user): isolates the account switch
  hand-env     the hand launch with the environment the module gives its server (server_env.py's PATH and
               CUDA_HOME, the settings' env with HF_HUB_OFFLINE=1, the current account's HOME/USER/LOGNAME,
               the locale; nothing else of this shell): isolates the environment from the launcher
A variant may be named again (e.g. hand,module,hand-env,module,hand): the order effects of warm caches show,
and a repeat is reported as NAME-2, NAME-3.
The FLAGS are one list, rendered once by plugins/module_utils/sglang_args.py, so both sides run the same
server. Per variant: seconds to ready, then --warmups discarded and --runs measured bench_serving runs of the
same workload (plugins/module_utils/sglang_bench/workload.py builds the argv and parses the result), and
what the server
processes run with (/proc: user, nice, CPU affinity, limits, cgroup, environment names and differing values).

Triton's JIT cache lives in the launching user's HOME (~/.triton/cache). Before each launch the caches of the
current user and --user are merged, so no variant compiles kernels that another already compiled; the script
reports how many cache entries each side had.

Prints one JSON document (also --json FILE): per variant the runs and medians; the ratios module/hand of
output throughput, median TTFT and median TPOT; readiness overhead = module's seconds from its start until it
returned (ready, settings confirmed) minus the hand launch's seconds to ready.
Exit status 1 when a target is missed: throughput ratio < 0.98, |TTFT ratio - 1| > 0.05, overhead > 2 s.

Usage (on the GPU host, as root, with SGLang in PYTHON):
  python3 bench/side_by_side.py --python /opt/torch/.venv/bin/python3 --model /var/lib/epforge/smoke-model \
      --user sglang --runs 3 --json /tmp/sbs.json -- --attention-backend triton ...
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from module_runner import call_module

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "library" / "sglang_server.py"
LAUNCHER = ROOT / "roles" / "sglang_server" / "files" / "epforge_sglang_launch.py"
# Environment names whose values are compared between the variants' server processes.
WATCHED_ENV = (
    "HOME",
    "USER",
    "PATH",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "TRITON_CACHE_DIR",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PYTHONUNBUFFERED",
    "NCCL_NVLS_ENABLE",
)


# The collection's module_utils, importable from collections/ (the checkout as collection epforge.ep).
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.epforge.ep.plugins.module_utils import server_env as SERVER_ENV  # noqa: E402
from ansible_collections.epforge.ep.plugins.module_utils import sglang_args as ARGS  # noqa: E402
from ansible_collections.epforge.ep.plugins.module_utils.sglang_bench import workload as BENCH  # noqa: E402

# ------------------------------------------------------------------------------------------------ probes


def health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2.0) as resp:  # noqa: S310 (http URL built here)
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def process_view(pid: int) -> dict:
    """What one server process runs with, read from /proc."""
    base = Path(f"/proc/{pid}")
    try:
        lines = (base / "status").read_text().splitlines()
        status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        stat = (base / "stat").read_text().rpartition(")")[2].split()
        env = dict(
            item.split("=", 1)
            for item in (base / "environ").read_bytes().decode(errors="replace").split("\0")
            if "=" in item
        )
        rows = (base / "limits").read_text().splitlines()[1:]
        limits = {line[:26].strip(): line[26:47].strip() for line in rows}
        cgroup = (base / "cgroup").read_text().strip()
        cmd = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError as exc:
        return {"pid": pid, "error": str(exc)}
    return {
        "pid": pid,
        "comm": status.get("Name", "").strip(),
        "cmd": cmd[:200],
        "uid": status.get("Uid", "").split()[0] if status.get("Uid") else None,
        "nice": int(stat[16]),
        "threads": int(status.get("Threads", "0").strip() or 0),
        "cpus_allowed": status.get("Cpus_allowed_list", "").strip(),
        "limits": {k: limits.get(k) for k in ("Max open files", "Max locked memory", "Max processes")},
        "cgroup": cgroup,
        "env_names": sorted(env),
        "env": {k: env.get(k) for k in WATCHED_ENV},
    }


# ------------------------------------------------------------------------------------------------ caches


def triton_cache(home: str) -> Path:
    return Path(home) / ".triton" / "cache"


def merge_caches(homes: list[tuple[str, int, int]]) -> dict:
    """Copy every Triton cache entry any of these users has into the others' caches (owner fixed)."""
    seen = {}
    for home, _, _ in homes:
        cache = triton_cache(home)
        seen[home] = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    union = {name for names in seen.values() for name in names}
    for home, uid, gid in homes:
        target = triton_cache(home)
        target.mkdir(parents=True, exist_ok=True)
        for name in union - set(seen[home]):
            source = next(triton_cache(h) / name for h, _, _ in homes if name in seen[h])
            shutil.copytree(source, target / name)
        for path in [target.parent, target, *target.rglob("*")]:
            os.chown(path, uid, gid)
    return {home: len(names) for home, names in seen.items()} | {"union": len(union)}


# ------------------------------------------------------------------------------------------------ bench


def bench_runs(args, url: str, tag: str, workdir: Path) -> list[dict]:
    workload = BENCH.normalize_workload(args.workload)
    runs = []
    for index in range(args.warmups + args.runs):
        out = workdir / f"{tag}-bench-{index}.jsonl"
        argv = BENCH.bench_argv(args.python, url, workload, str(out), tokenizer=args.model)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(
                f"{tag}: bench_serving failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}"
                f"\n{proc.stderr[-2000:]}"
            )
        record = BENCH.parse_result_lines(out.read_text())[-1]
        figures = BENCH.extract_figures(record)
        if figures["completed"] != workload["num_prompts"]:
            raise SystemExit(
                f"{tag}: only {figures['completed']} of {workload['num_prompts']} requests completed"
            )
        figures["warmup"] = index < args.warmups
        runs.append(figures)
    return runs


def medians(runs: list[dict]) -> dict:
    measured = [r for r in runs if not r["warmup"]]
    keys = ("output_throughput", "ttft_median_ms", "tpot_median_ms", "itl_median_ms", "e2e_median_ms")
    return {k: round(statistics.median(r[k] for r in measured), 3) for k in keys}


# ------------------------------------------------------------------------------------------------ variants


def stop_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def wait_port_free(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not port_free(port) and time.monotonic() < deadline:
        time.sleep(0.25)


def module_env(args, settings: dict) -> dict:
    """The environment module sglang_server gives a process-managed server (plugins/modules/sglang_server.py
    server_env, then server_env.child_env), for the current account: built by the same functions."""
    cuda_home = SERVER_ENV.toolkit_home(args.cuda_home, SERVER_ENV.TOOLKIT_FACT)
    env = {**SERVER_ENV.server_base_env(args.python, cuda_home), **ARGS.build_server_env(settings)}
    return SERVER_ENV.child_env(env, pwd.getpwuid(os.geteuid()))


def run_hand(args, flags: list[str], url: str, workdir: Path, *, tag: str = "hand", env=None) -> dict:
    log = open(workdir / f"{tag}-server.log", "wb")  # handed to the child, closed below
    started = time.monotonic()
    proc = subprocess.Popen(
        [args.python, "-m", "sglang.launch_server", *flags],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    log.close()
    try:
        while not health(url):
            if proc.poll() is not None:
                raise SystemExit(
                    f"{tag}: server exited with {proc.returncode}; see {workdir}/{tag}-server.log"
                )
            if time.monotonic() - started > args.timeout:
                raise SystemExit(f"{tag}: not ready in time")
            time.sleep(0.25)
        ready_s = time.monotonic() - started
        view = [process_view(p) for p in descendants(proc.pid)]
        runs = bench_runs(args, url, tag, workdir)
    finally:
        stop_group(proc)
        wait_port_free(args.port)
    return {"ready_s": round(ready_s, 3), "returned_s": round(ready_s, 3), "processes": view, "runs": runs}


def module_call(margs: dict, workdir: Path) -> dict:
    return call_module(MODULE, margs, workdir, timeout=3600)[0]


def run_module(args, settings: dict, url: str, workdir: Path, *, user: str | None, tag: str) -> dict:
    launcher_dir = Path(tempfile.mkdtemp(prefix="epforge-launcher-"))
    launcher_dir.chmod(0o755)
    launcher = launcher_dir / LAUNCHER.name
    shutil.copy(LAUNCHER, launcher)
    launcher.chmod(0o644)
    state_dir = workdir / f"{tag}-state"
    base = {
        "name": f"sbs-{tag}",
        "manager": "process",
        "launcher": str(launcher),
        "log_path": str(workdir / f"{tag}-server.log"),
        "state_dir": str(state_dir),
    }
    if user:
        home = pwd.getpwnam(user).pw_dir
        base.update(user=user, working_dir=home)
    started = time.monotonic()
    result = module_call(
        {
            **base,
            "state": "started",
            "settings": settings,
            "python": args.python,
            "sglang_version": args.sglang_version,
            "timeout": args.timeout,
            "poll_interval": 0.25,
        },
        workdir,
    )
    returned_s = time.monotonic() - started
    if result.get("failed"):
        raise SystemExit(f"{tag}: module failed: {result.get('msg')}\n{result.get('log_tail', '')}")
    try:
        view = [process_view(p) for p in descendants(int(result["pid"]))]
        runs = bench_runs(args, url, tag, workdir)
    finally:
        stopped = module_call({**base, "state": "absent"}, workdir)
        wait_port_free(args.port)
    return {
        "ready_s": result.get("ready_s"),
        "returned_s": round(returned_s, 3),
        "polls": result.get("polls"),
        "running": result.get("running"),
        "argv": result.get("argv"),
        "processes": view,
        "runs": runs,
        "stopped": not stopped.get("failed"),
    }


def env_differences(a: list[dict], b: list[dict]) -> dict:
    """Environment of the two variants' SGLang processes (the last, deepest ones: scheduler/detokenizer)."""
    pa, pb = a[-1] if a else {}, b[-1] if b else {}
    names_a, names_b = set(pa.get("env_names", [])), set(pb.get("env_names", []))
    values = {
        k: [pa.get("env", {}).get(k), pb.get("env", {}).get(k)]
        for k in WATCHED_ENV
        if pa.get("env", {}).get(k) != pb.get("env", {}).get(k)
    }
    return {
        "only_hand": sorted(names_a - names_b),
        "only_module": sorted(names_b - names_a),
        "values": values,
    }


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="python of the env that has SGLang")
    parser.add_argument("--model", required=True, help="model directory (also the tokenizer)")
    parser.add_argument("--user", default="sglang", help="unprivileged account of the module variant")
    parser.add_argument("--sglang-version", default="0.5.16")
    parser.add_argument(
        "--cuda-home",
        default="",
        help="the module server's toolkit (default: the toolkit role's fact)",
    )
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--cuda-graph-max-bs", type=int, default=64, help="0 disables CUDA graphs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=1)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--num-prompts", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--variants",
        default="hand,module",
        help="comma list of hand, module, module-root, hand-env (again: repeats)",
    )
    parser.add_argument("--workdir", default="", help="logs and bench files (default: a new temp dir)")
    parser.add_argument("--json", default="")
    parser.add_argument("extra", nargs="*", help="extra server flags (after --)")
    args = parser.parse_args()
    args.workload = {
        "name": "side-by-side",
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_prompts": args.num_prompts,
        "max_concurrency": args.concurrency,
    }
    return args


def server_settings(args) -> dict:
    """The one set of server settings both variants run (rendered once into flags)."""
    settings = {
        "model_path": args.model,
        "tp_size": args.tp_size,
        "host": "127.0.0.1",
        "port": args.port,
        "extra_args": list(args.extra),
    }
    if args.cuda_graph_max_bs > 0:
        settings["cuda_graph_max_bs"] = args.cuda_graph_max_bs
    else:
        settings["disable_cuda_graph"] = True
    return settings


VARIANTS = ("hand", "module", "module-root", "hand-env")


def variant_keys(names: list[str]) -> list[tuple[str, str]]:
    """(variant, key) in order: a variant named again is keyed NAME-2, NAME-3; an unknown name is refused
    before anything launches."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    seen: dict[str, int] = {}
    keys = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        keys.append((name, name if seen[name] == 1 else f"{name}-{seen[name]}"))
    return keys


def run_variant(
    args, variant: str, *, key: str, flags: list[str], settings: dict, url: str, workdir: Path
) -> dict:
    if variant == "hand":
        return run_hand(args, flags, url, workdir, tag=key)
    if variant == "hand-env":
        return run_hand(args, flags, url, workdir, tag=key, env=module_env(args, settings))
    user = args.user if variant == "module" else None
    return run_module(args, settings, url, workdir, user=user, tag=key)


def compare(hand: dict, other: dict) -> dict:
    """Ratios module/hand of the medians, the readiness overhead, the environment differences, and
    whether the targets are met."""
    h, m = hand["medians"], other["medians"]
    cmp = {
        "throughput_ratio": round(m["output_throughput"] / h["output_throughput"], 4),
        "ttft_ratio": round(m["ttft_median_ms"] / h["ttft_median_ms"], 4),
        "tpot_ratio": round(m["tpot_median_ms"] / h["tpot_median_ms"], 4),
        "readiness_overhead_s": round(other["returned_s"] - hand["ready_s"], 3),
        "env": env_differences(hand["processes"], other["processes"]),
    }
    cmp["targets_met"] = (
        cmp["throughput_ratio"] >= 0.98
        and abs(cmp["ttft_ratio"] - 1) <= 0.05
        and cmp["readiness_overhead_s"] <= 2.0
    )
    return cmp


def main() -> int:
    args = parse_args()
    keys = variant_keys([name.strip() for name in args.variants.split(",") if name.strip()])
    if os.geteuid() != 0:
        sys.exit("run as root: the module variant switches to --user")
    if not port_free(args.port):
        sys.exit(f"port {args.port} is taken: stop that server first")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="epforge-sbs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    settings = server_settings(args)
    flags = ARGS.build_server_argv(settings, sglang_version=args.sglang_version)
    url = f"http://127.0.0.1:{args.port}"
    user = pwd.getpwnam(args.user)
    homes = [
        (pwd.getpwuid(os.geteuid()).pw_dir, os.geteuid(), os.getegid()),
        (user.pw_dir, user.pw_uid, user.pw_gid),
    ]
    report: dict = {
        "machine": socket.gethostname(),
        "flags": flags,
        "workload": BENCH.normalize_workload(args.workload),
        "runs": args.runs,
        "warmups": args.warmups,
        "variants": {},
        "caches": {},
    }
    for variant, key in keys:
        report["caches"][key] = merge_caches(homes)
        result = run_variant(args, variant, key=key, flags=flags, settings=settings, url=url, workdir=workdir)
        result["medians"] = medians(result["runs"])
        report["variants"][key] = result
        print(
            f"{key}: ready {result['ready_s']} s, medians {result['medians']}",
            file=sys.stderr,
            flush=True,
        )
    ok = True
    hand = report["variants"].get("hand")
    for name, other in report["variants"].items():
        if name == "hand" or not hand:
            continue
        report[f"{name}_vs_hand"] = compare(hand, other)
        ok = ok and report[f"{name}_vs_hand"]["targets_met"]
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
