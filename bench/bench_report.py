"""What every bench script prints the same way: a ratio against its target and the machine's load.

Imported by the scripts of this folder (run as `python bench/NAME.py`, so this folder is on sys.path).
"""

from __future__ import annotations

import os


def verdict(ratio: float, target: float) -> str:
    """`1.23x (target <= 4x): OK`, or OVER TARGET."""
    return f"{ratio:.2f}x (target <= {target:g}x): {'OK' if ratio <= target else 'OVER TARGET'}"


def load_line() -> str:
    """The load average at the end of a run, with the CPU count: a figure means little without it."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"load average at the end: {load} on {os.cpu_count()} CPUs"
