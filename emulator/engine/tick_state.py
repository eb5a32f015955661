"""A worker's tick schedule, as its parts read it: the dilated clock, whether the run has started,
when the next tick is due, and what delayed the ticks (reported with the worker's stats).

The worker's tick (emulator/engine/worker.py) writes it; the flows read whether the run started,
the reports how late the worker is, the AF_XDP pacer until when it may drain its ports.
"""

from __future__ import annotations

import time

from emulator.engine.clock import DilatedClock
from emulator.engine.gcpause import GcPauses
from emulator.engine.lateness import TickLateness


class TickState:
    """One per worker. The clock is one object for the whole run: the coordinator's "go" sets
    its start (DilatedClock.start_wall_s), so every part holding it reads the common time."""

    def __init__(self, tdf: float) -> None:
        self.clock = DilatedClock(tdf)
        self.started = False
        self.next_tick_wall = 0.0  # perf_counter reading the next tick is due at
        self.last_tick_wall = 0.0  # when the last tick ran (0: none yet)
        self.max_tick_gap_s = 0.0  # wall seconds between two ticks, at most
        self.lateness = TickLateness()
        self.gc_pauses = GcPauses()

    def lag_s(self) -> float:
        """How far behind its schedule this worker is now, in wall seconds: how overdue its
        next tick is. A read handled now was handled about that late (the loop was busy, or
        not given a CPU), and the times the protocol stamps at it carry that much of the
        machine; 0 while the loop keeps its schedule."""
        if not self.started:
            return 0.0
        return max(time.perf_counter() - self.next_tick_wall, 0.0)
