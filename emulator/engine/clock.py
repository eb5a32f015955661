"""The dilated clock: the transport core runs in the TARGET timescale.

With time dilation factor TDF, one target second lasts TDF wall seconds: core time is wall time
since the common start divided by TDF. Every core timer (DCQCN periods, CNP interval,
retransmission timeout, compute delays) is thereby TDF times longer in wall time, and every time
the core reports is already a target-timescale duration (docs/architecture.md, "Time dilation").
time.perf_counter is CLOCK_MONOTONIC on Linux, shared by all processes of the machine, so workers
agree on the start instant without exchanging clocks.
"""

from __future__ import annotations

import time


class DilatedClock:
    __slots__ = ("start_wall_s", "tdf")

    def __init__(self, tdf: float, start_wall_s: float | None = None) -> None:
        if tdf <= 0:
            raise ValueError("tdf: must be positive")
        self.tdf = float(tdf)
        self.start_wall_s = time.perf_counter() if start_wall_s is None else start_wall_s

    def now(self) -> float:
        """Target seconds since the start."""
        return (time.perf_counter() - self.start_wall_s) / self.tdf

    def to_wall_s(self, target_s: float) -> float:
        """A target-time duration in wall seconds."""
        return target_s * self.tdf

    def wall_at(self, target_s: float) -> float:
        """The perf_counter reading at target time `target_s`."""
        return self.start_wall_s + target_s * self.tdf
