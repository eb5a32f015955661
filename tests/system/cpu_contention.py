"""CPU that something outside a test took during an interval: steal time and other processes.

A timing claim on a shared machine may fail because the machine, not the code, was short: the
hypervisor ran another guest (steal time) or another process ran on our cores. This measures
both over an interval, from two snapshots of /proc:

- steal: the `steal` column of /proc/stat, all CPUs;
- others: the CPU of every process outside this test's process tree (this process and its
  descendants), from /proc/PID/stat: utime + stime of all its threads, plus cutime + cstime,
  the processes it reaped. A process that ends during the interval is counted in its reaper's
  cutime/cstime with its whole life, less what it had used when the interval began; one that
  starts and ends inside it, likewise with nothing to take off. Kernel threads are counted
  apart (`kernel`): ksoftirqd, for one, may be forwarding this test's own packets.
- own: the same sum over this test's process tree.

Why per process and not the machine's busy time (/proc/stat) minus our own: /proc/stat is
sampled at the scheduler tick (250 Hz here) while a process's utime + stime is its exact run
time, so the difference moves by about 0.1 CPU-second per second on a quiet machine while a
test's workers wake every millisecond (measured with the pacing test: -0.10 to +0.03 s per 1 s
window, while the per-process sum of other processes stayed at 0.00 s). The difference is still
reported (`unattributed`: busy minus every process's CPU: tick sampling, and interrupts served
while the CPU was idle), to show what the per-process sum cannot see. Resolution: 10 ms per
process that ran (USER_HZ clock ticks).

Every value is CPU time in seconds. Linux only; no root needed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat and /proc/PID/stat times
RESOLUTION_S = 1 / CLOCK_TICKS  # per process, per reading
PF_KTHREAD = 0x00200000  # include/linux/sched.h: the `flags` field of /proc/PID/stat

# /proc/stat "cpu" line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest time is already inside user (and guest_nice inside nice), so it is not added again.
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
_STEAL_COLUMN = 7


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU from /proc/PID/stat, in seconds."""

    pid: int
    ppid: int
    start_ticks: int  # starttime: with pid, names the process even if its pid is reused
    kernel_thread: bool
    own_s: float  # utime + stime: all its threads, the ended ones included
    children_s: float  # cutime + cstime: the children it has reaped, and theirs

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_ticks)

    @property
    def total_s(self) -> float:
        return self.own_s + self.children_s


def parse_process_stat(text: str) -> ProcessCpu:
    """Parse one /proc/PID/stat line. The command name may hold spaces and ')': the fields
    after it start after the *last* ')'."""
    pid = int(text[: text.index("(")])
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state) of proc(5); field n is fields[n - 3]
    ppid = int(fields[1])
    flags = int(fields[6])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    start = int(fields[19])
    return ProcessCpu(
        pid,
        ppid,
        start,
        bool(flags & PF_KTHREAD),
        (utime + stime) / CLOCK_TICKS,
        (cutime + cstime) / CLOCK_TICKS,
    )


def parse_machine_stat(text: str) -> tuple[float, float, int]:
    """(busy seconds, steal seconds, CPUs) from /proc/stat."""
    cpus = 0
    busy = steal = 0.0
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            busy = sum(values[i] for i in _BUSY_COLUMNS if i < len(values)) / CLOCK_TICKS
            steal = values[_STEAL_COLUMN] / CLOCK_TICKS if len(values) > _STEAL_COLUMN else 0.0
        elif line.startswith("cpu"):
            cpus += 1
    return busy, steal, cpus


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):  # the process ended meanwhile
        return None


def processes() -> list[ProcessCpu]:
    """Every process in /proc now (about 10 us each)."""
    found: list[ProcessCpu] = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            text = _read(f"/proc/{name}/stat")
            if text is not None:
                found.append(parse_process_stat(text))
    return found


def descendants(procs: list[ProcessCpu], root: int) -> set[tuple[int, int]]:
    """Keys of `root` and of every process below it (by ppid)."""
    children: dict[int, list[ProcessCpu]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    tree = {p.key for p in procs if p.pid == root}
    todo = [root] if tree else []
    while todo:
        for child in children.get(todo.pop(), []):
            if child.key not in tree:
                tree.add(child.key)
                todo.append(child.pid)
    return tree


@dataclass(frozen=True)
class CpuSnapshot:
    monotonic_s: float
    busy_s: float
    steal_s: float
    cpus: int
    processes: dict[tuple[int, int], ProcessCpu]
    tree: frozenset[tuple[int, int]]  # this test's processes


def snapshot(root: int | None = None) -> CpuSnapshot:
    """The machine's and every process's CPU now (under a millisecond for ~100 processes).
    `root` (default: this process) and its descendants are the test's own processes."""
    procs = processes()
    text = _read("/proc/stat")
    assert text is not None
    busy, steal, cpus = parse_machine_stat(text)
    tree = descendants(procs, os.getpid() if root is None else root)
    return CpuSnapshot(
        time.monotonic(), busy, steal, cpus, {p.key: p for p in procs}, frozenset(tree)
    )


@dataclass(frozen=True)
class Contention:
    """CPU time over one interval: this test's, other processes', steal, and the machine's."""

    interval_s: float
    cpus: int
    own_s: float
    others_s: float  # other processes, kernel threads apart
    kernel_s: float  # kernel threads (ksoftirqd, kworkers): may be working for this test
    steal_s: float
    busy_s: float  # the machine's busy time, /proc/stat (tick-sampled)

    @property
    def taken_s(self) -> float:
        """CPU that went to something outside this test: other processes plus steal."""
        return max(self.others_s, 0.0) + self.steal_s

    @property
    def taken_share(self) -> float:
        """taken_s as a share of the machine's capacity over the interval (CPUs x interval)."""
        capacity = self.interval_s * self.cpus
        return self.taken_s / capacity if capacity > 0 else 0.0

    @property
    def unattributed_s(self) -> float:
        """The machine's busy time that no process's CPU accounts for (see the module doc)."""
        return self.busy_s - self.own_s - self.others_s - self.kernel_s

    def __str__(self) -> str:
        return (
            f"outside CPU {self.taken_s:.3f} s ({self.taken_share:.1%} of {self.cpus} CPUs x "
            f"{self.interval_s:.3f} s): other processes {self.others_s:.3f} s, steal "
            f"{self.steal_s:.3f} s; this test {self.own_s:.3f} s, kernel threads "
            f"{self.kernel_s:.3f} s, machine busy {self.busy_s:.3f} s "
            f"(unattributed {self.unattributed_s:+.3f} s)"
        )


def between(a: CpuSnapshot, b: CpuSnapshot) -> Contention:
    """CPU used from snapshot `a` to snapshot `b` (same root).

    Each group's CPU is what its processes alive at `b` have used (themselves and through the
    children they reaped) minus what those alive at `a` had used. A process of the tree at
    either snapshot counts as the tree's at both (one orphaned meanwhile stays ours)."""
    ours = a.tree | b.tree

    def group(s: CpuSnapshot) -> tuple[float, float, float]:
        own = others = kernel = 0.0
        for key, p in s.processes.items():
            if key in ours:
                own += p.total_s
            elif p.kernel_thread:
                kernel += p.total_s
            else:
                others += p.total_s
        return own, others, kernel

    own_a, others_a, kernel_a = group(a)
    own_b, others_b, kernel_b = group(b)
    return Contention(
        interval_s=b.monotonic_s - a.monotonic_s,
        cpus=b.cpus,
        own_s=own_b - own_a,
        others_s=others_b - others_a,
        kernel_s=kernel_b - kernel_a,
        steal_s=b.steal_s - a.steal_s,
        busy_s=b.busy_s - a.busy_s,
    )
