"""What one collective type of one run gives the bootstrap (CollectiveUnits), and the busbw CV
the run's time stamps cannot tell from 0 (its floor, below which a ratio over it is noise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CollectiveUnits:
    """What the bootstrap resamples of one collective type in one run."""

    busbw: np.ndarray  # complete instances with a busbw, bytes/s
    groups: tuple[np.ndarray, ...]  # the same, per process group
    paired: np.ndarray  # (n, 2): busbw and ideal busbw of the complete instances that have both
    fct: np.ndarray  # finished flows, s
    cv_floor: float = 0.0  # the busbw CV the run's time stamps cannot tell from 0 (busbw_cv_floor)

    @classmethod
    def empty(cls) -> CollectiveUnits:
        return cls(np.empty(0), (), np.empty((0, 2)), np.empty(0))


def collective_units(tables: Any, collective: str, resolution_s: float = 0.0) -> CollectiveUnits:
    """The units of one collective type in a run's tables (collectors.tables.RunTables), chosen as
    collectors.summary chooses them; resolution_s: the run's timing_resolution_s."""
    import pyarrow.compute as pc

    from collectors.tables import rows

    busbw: list[float] = []
    durations_s: list[float] = []
    by_group: dict[str, list[float]] = {}
    paired: list[tuple[float, float]] = []
    columns = ("collective_type", "process_group", "busbw_bytes_per_s", "ideal_busbw_bytes_per_s")
    for ctype, group, value, ideal, complete, duration_s in rows(
        tables.collectives, (*columns, "complete", "bandwidth_time_s")
    ):
        if ctype == collective and complete and value is not None:
            busbw.append(value)
            durations_s.append(duration_s)
            by_group.setdefault(group, []).append(value)
            if ideal:
                paired.append((value, ideal))
    flows = tables.flows
    finished = pc.and_(pc.equal(flows["collective_type"], collective), pc.is_valid(flows["fct_s"]))
    fct = flows.filter(finished)["fct_s"].to_numpy(zero_copy_only=False)
    return CollectiveUnits(
        np.asarray(busbw, dtype=float),
        tuple(np.asarray(v, dtype=float) for v in by_group.values()),
        np.asarray(paired, dtype=float).reshape(-1, 2),
        np.asarray(fct, dtype=float),
        busbw_cv_floor(durations_s, resolution_s),
    )


# The emulated engine stamps flow starts and ends with time.perf_counter (CLOCK_MONOTONIC,
# nanoseconds on Linux) in wall time and divides by the TDF into target time
# (emulator.engine.clock), so two stamps closer than 1 ns / TDF are one reading.
CLOCK_RESOLUTION_S = 1e-9


def timing_resolution_s(summary: Mapping[str, Any]) -> float:
    """How far a run's time stamps may be from the times they stand for by their rounding alone,
    in target time, from its summary.json.

    The emulated engine: its clock's resolution / TDF. The simulator: its clock is a float of
    simulated seconds advanced event by event (emulator.sim.engine), each event's time one
    rounding (at most an ulp of the time) after the event that scheduled it, so a stamp can carry
    up to `events` ulps of the run's end time (summary.json engine.events, engine.simulated_s).
    Measured: two instances of a simulated two_tenant All-Reduce alone that took the same
    2.406 ms were stamped 2.5e-14 s apart, within the 4e-12 s (2.4e6 events x 1.7e-18 s) this
    gives."""
    engine = summary.get("engine") or {}
    if summary.get("time") == "simulated":  # the backend says: a simulation
        events, end_s = engine.get("events"), engine.get("simulated_s")
        if events and end_s:
            return float(events) * float(np.spacing(float(end_s)))
    return CLOCK_RESOLUTION_S / float(summary.get("tdf") or 1.0)


def busbw_cv_floor(durations_s: Sequence[float | None], resolution_s: float) -> float:
    """The busbw CV that the rounding of the stamps alone can produce: a busbw is bytes over a
    duration between two stamps (all members entered -> last byte), each off by up to
    resolution_s, so instances that took the same time can differ by up to 2 x resolution_s /
    duration relative, and so can their CV. A CV at or below it is indistinguishable from 0."""
    durations = [d for d in durations_s if d]
    return 2.0 * resolution_s / min(durations) if durations else 0.0


def units_cv_floor(units: Sequence[CollectiveUnits]) -> float:
    """The CV floor of a side's runs pooled: the largest of theirs."""
    return max((u.cv_floor for u in units), default=0.0)
