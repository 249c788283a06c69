"""The machine's state for benchmark output: timings mean little without the load they ran under."""

from __future__ import annotations

import os


def load_line() -> str:
    """One line: cores and the 1/5/15-minute load averages, flagged when the load exceeds the
    cores (other processes were competing for the CPU, so times are upper bounds)."""
    cores = os.cpu_count() or 1
    one, five, fifteen = os.getloadavg()
    flag = (
        (
            f"UNDER LOAD (load {one:.1f} > {cores} cores): times are upper bounds, ratios within one run "
            "are the comparable numbers"
        )
        if one > cores
        else "idle enough (load <= cores)"
    )
    return f"machine: {cores} cores, load average {one:.2f} {five:.2f} {fifteen:.2f} — {flag}"
