"""What the host was doing while a block of steps was timed.

A busy neighbour on a shared host steals CPU time and slows every step of a block
alike, which no interval over one session's runs can show. So every timed block records,
untimed, the CPU time stolen and busy, the load, and a fixed piece of numpy work timed
just before and after it (their ratio shows the host's speed changing). A block is
**contended** where its steal or its probes' ratio passes a threshold: the report leaves
its run out of the intervals with a note. Without `/proc/stat` only the probes decide.
"""

import time
from pathlib import Path
from typing import Any

import numpy as np

CONTENDED_STEAL = 0.05  # steal fraction
CONTENDED_PROBE = 1.5  # ratio of the probes after and before

_STAT = Path("/proc/stat")
_LOADAVG = Path("/proc/loadavg")
_PROBE = np.random.default_rng(0).standard_normal((96, 96))


def cpu_times() -> tuple[int, int, int] | None:
    """`(total, idle, steal)` jiffies of all CPUs so far, or None without `/proc/stat`."""
    try:
        fields = [int(x) for x in _STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    fields += [0] * (8 - len(fields))
    # user nice system idle iowait irq softirq steal (guest time is counted in user).
    return sum(fields[:8]), fields[3] + fields[4], fields[7]


def load_average() -> float | None:
    """The 1-minute load average, or None without `/proc/loadavg`."""
    try:
        return float(_LOADAVG.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def probe_ms(repeats: int = 5) -> float:
    """Median milliseconds of a fixed piece of numpy work on one core, to compare hosts'
    speed.

    Elementwise work only, no matrix product: after a BLAS call OpenBLAS's idle threads
    spin (for about 0.1 s) on the cores the block's first steps then need, which slowed
    the first steps of a block that uses every core (`PROTOCOL` 3)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m = _PROBE
        for _ in range(20):
            m = np.tanh(m * 1.01 + 0.01)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


class Watch:
    """Watches one block: `start()` before its steps, `stop()` after them."""

    def __init__(self) -> None:
        self._before: tuple[int, int, int] | None = None
        self._probe = 0.0

    def start(self) -> None:
        """Probe, then read the CPU counters (just before the block's first step)."""
        self._probe = probe_ms()
        self._before = cpu_times()

    def stop(self) -> dict[str, Any]:
        """Read the counters, then probe; returns the block's host sample."""
        after = cpu_times()
        load = load_average()
        sample: dict[str, Any] = {"steal": None, "busy": None, "load": load}
        if self._before is not None and after is not None:
            total = max(after[0] - self._before[0], 1)
            sample["steal"] = (after[2] - self._before[2]) / total
            sample["busy"] = 1.0 - (after[1] - self._before[1]) / total
        sample["probe_before_ms"] = self._probe
        sample["probe_after_ms"] = probe_ms()
        return sample


def contended(sample: dict[str, Any] | None) -> str | None:
    """Why a block's host sample marks it contended, or None (also without a sample)."""
    if not sample:
        return None
    steal = sample.get("steal")
    if steal is not None and steal > CONTENDED_STEAL:
        return f"steal {steal:.0%} > {CONTENDED_STEAL:.0%}"
    a, b = sample.get("probe_before_ms"), sample.get("probe_after_ms")
    if a and b and max(a, b) / min(a, b) > CONTENDED_PROBE:
        return f"probe {a:.2f} -> {b:.2f} ms (over x{CONTENDED_PROBE})"
    return None
