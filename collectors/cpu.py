"""Machine CPU load during a run, for the fidelity verdict: a host that is CPU-saturated cannot
keep the emulated timing (pacing, timers), so its results are flagged.

Reads the aggregate `cpu` line of /proc/stat (proc(5): user nice system idle iowait irq softirq
steal ...; guest time is already counted in user/nice), busy = total - idle - iowait, and turns
two readings into a CpuSample. The path is injectable for tests.
"""

from __future__ import annotations

from pathlib import Path

from emulator.errors import EnvironmentProblem
from emulator.events import CpuSample

# proc(5) fields of the `cpu` line counted as total time (guest/guest_nice are inside user/nice).
_TOTAL_FIELDS = 8
_IDLE, _IOWAIT = 3, 4


def read_cpu_jiffies(proc_stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(busy, total) clock ticks since boot, summed over all CPUs."""
    try:
        first = proc_stat.read_text().splitlines()[0].split()
        if first[0] != "cpu":
            raise ValueError(f"first line is {first[0]!r}, not the aggregate 'cpu' line")
        values = [int(v) for v in first[1 : 1 + _TOTAL_FIELDS]]
    except (OSError, ValueError, IndexError) as exc:
        raise EnvironmentProblem(f"cannot read CPU times from {proc_stat}: {exc}") from exc
    total = sum(values)
    idle = values[_IDLE] + (values[_IOWAIT] if len(values) > _IOWAIT else 0)
    return total - idle, total


class CpuSampler:
    """sample(time_s) returns the busy share since the previous call (None the first time)."""

    def __init__(self, proc_stat: Path = Path("/proc/stat")) -> None:
        self.proc_stat = proc_stat
        self._last: tuple[int, int] | None = None

    def sample(self, time_s: float) -> CpuSample | None:
        busy, total = read_cpu_jiffies(self.proc_stat)
        last, self._last = self._last, (busy, total)
        if last is None or total <= last[1]:
            return None
        return CpuSample(time_s, (busy - last[0]) / (total - last[1]))
