"""Whether a fleet benchmark window counts for its N workers: each worker's own access log (module
server_access_count, counted from a mark taken before the window) must show it served its share.

Why: with cache-aware routing a worker that came back after a failure can be left nearly idle (the issue's
case: 8 of 240 requests), and the window's figure then measures fewer workers than it claims. The window
counts for N only when every worker answered at least min_share of an even share (total / N); else the
figure is recorded with how many really served and is not valid for N.
"""

from __future__ import annotations

# default of role gateway's gateway_bench_min_share: each worker at least half an even share
MIN_SHARE = 0.5


def judge_split(counts: dict[str, int | None], min_share: float = MIN_SHARE) -> dict:
    """counts: requests answered 200 per worker host since the mark (None: its log could not be counted).
    The answer: split, total, share (total / N), bound (share x min_share), served (hosts at or above the
    bound), served_workers, workers, valid and, when not valid, reason."""
    workers = len(counts)
    total = sum(count for count in counts.values() if count)
    share = total / workers if workers else 0.0
    bound = share * min_share
    served = sorted(
        host for host, count in counts.items() if count is not None and count > 0 and count >= bound
    )
    answer = {
        "split": dict(counts),
        "total": total,
        "share": round(share, 1),
        "bound": round(bound, 1),
        "min_share": min_share,
        "served": served,
        "served_workers": len(served),
        "workers": workers,
        "valid": workers > 0 and len(served) == workers,
    }
    if not answer["valid"]:
        short = ", ".join(
            f"{host} {'not counted (no access log)' if count is None else f'{count} of {total}'}"
            for host, count in sorted(counts.items())
            if host not in served
        )
        answer["reason"] = (
            f"{len(served)} of {workers} workers served their share (at least {min_share:g} x {share:.1f} "
            f"requests each): {short}; the figure is not valid for {workers} workers"
        )
    return answer


def judged_entry(entry: dict, split: dict) -> dict:
    """The fleet benchmark's history entry with its split; a window whose split is not valid is invalid
    (its figures kept, never ok), with the reason among its invalid_reasons."""
    new = dict(entry)
    new["fleet"] = {
        **(entry.get("fleet") or {}),
        "split": split["split"],
        "served_workers": split["served_workers"],
        "share_bound": split["bound"],
    }
    if not split["valid"] and new.get("status") in ("ok", "invalid"):
        new["status"] = "invalid"
        new["invalid_reasons"] = [*(entry.get("invalid_reasons") or []), split["reason"]]
    return new
