"""A clean slate between two servers: the previous launch's process groups gone and every GPU's used memory
back within a bound of its baseline, after a bounded wait (module gpu_clean_slate, used by role tuner).

Why: a server that is stopped can leave memory held for seconds (a worker still exiting, a driver that
has not reclaimed the context yet); a candidate launched then measures with less memory, or dies of
out-of-memory, and is ranked for what its predecessor left. The rule waits, then fails the candidate with
class GPU_MEMORY_NOT_RELEASED and the figures per GPU rather than measuring on a dirty slate.
"""

from __future__ import annotations

import os
import time

# The tuner's failure class of a candidate that could not start on a clean slate.
GPU_MEMORY_NOT_RELEASED = "gpu_memory_not_released"

# nvidia-smi's used memory per GPU, in MiB; the same query format as nvidia.QUERY_FIELDS's
# (csv,noheader,nounits gives "0, 512" per GPU).
QUERY_ARGS = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]


def parse_memory_used(text: str) -> dict[str, int]:
    """{GPU index: used MiB} from the QUERY_ARGS output; a line that is not "INDEX, MIB" raises ValueError."""
    used: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit():
            raise ValueError(f"memory query line {number}: {line.strip()!r} is not 'index, MiB used'")
        used[fields[0]] = int(fields[1])
    return used


def live_groups(pgids: list[int]) -> list[int]:
    """The process groups of pgids that still have a member (signal 0 probes without signalling)."""
    alive = []
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:  # another user's group exists all the same
            pass
        alive.append(pgid)
    return alive


def over_bound(baseline: dict[str, int], now: dict[str, int], bound_mib: int) -> list[str]:
    """The GPUs whose used memory exceeds their baseline by more than bound_mib; a GPU with no baseline
    counts from 0 (it appeared since), one gone from the answer is not judged."""
    return [index for index, used in now.items() if used - baseline.get(index, 0) > bound_mib]


def settle(
    read,
    groups,
    baseline: dict[str, int],
    *,
    bound_mib: int,
    wait_s: float,
    interval_s: float = 1.0,
    clock=time.monotonic,
    sleep=time.sleep,
) -> dict:
    """Poll read() (-> {index: MiB}) and groups() (-> live pgids) until no group lives and no GPU is over
    its bound, or wait_s has passed. The answer: clean, waited_s, gpus (per GPU: index, baseline_mib,
    now_mib, bound_mib, over), process_groups_left."""
    started = clock()
    while True:
        now = read()
        left = groups()
        over = over_bound(baseline, now, bound_mib)
        waited = clock() - started
        if (not over and not left) or waited >= wait_s:
            break
        sleep(min(interval_s, max(wait_s - waited, 0.0)))
    gpus = [
        {
            "index": index,
            "baseline_mib": baseline.get(index, 0),
            "now_mib": used,
            "bound_mib": bound_mib,
            "over": index in over,
        }
        for index, used in sorted(now.items(), key=lambda item: int(item[0]))
    ]
    return {
        "clean": not over and not left,
        "waited_s": round(waited, 1),
        "gpus": gpus,
        "process_groups_left": left,
    }


def describe(answer: dict, wait_s: float) -> str:
    """The failure message: what was not released, with the figures."""
    parts = []
    if answer["process_groups_left"]:
        parts.append(
            f"process group(s) {', '.join(map(str, answer['process_groups_left']))} of the previous "
            "server still alive"
        )
    for gpu in answer["gpus"]:
        if gpu["over"]:
            parts.append(
                f"GPU{gpu['index']}: {gpu['now_mib']} MiB used, baseline {gpu['baseline_mib']} MiB, "
                f"bound +{gpu['bound_mib']} MiB"
            )
    return (
        f"{GPU_MEMORY_NOT_RELEASED}: not a clean slate after waiting {answer['waited_s']} s "
        f"(limit {wait_s} s): " + "; ".join(parts)
    )
