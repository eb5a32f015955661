"""The sensitivity study's analysis: per collective type, each rate's slowdown against the first,
the bandwidth-bound expectation and the verdict (emulator.studies.sensitivity.study explains
the method).

Bound or not: with a time t(rate) = a + b / rate (a: latency and anything the rate does not
change; b / rate: serialization), the slowdown at ratio k is s = (1 - f) + f k, where
f = b / rate_ref / t_ref is the share of the reference time that scales with 1/rate. So
f = (s - 1) / (k - 1) is measured, and Tolerance says what counts as bandwidth-bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.errors import InputError
from emulator.studies.stats.flags import flags_of

if TYPE_CHECKING:
    import pyarrow as pa

DURATION = "bandwidth_time_s"  # see emulator.studies.sensitivity.study's docstring
JOB = "job"  # the row of the job time

BANDWIDTH_BOUND = "bandwidth-bound"
BEYOND = "slower than bandwidth-bound"
PARTLY = "partly bandwidth-bound"
LATENCY_BOUND = "latency/compute-bound"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Tolerance:
    """Shares f of the reference time that scales with 1/rate (module docstring) per verdict.

    0.85-1.15: a collective that is bandwidth-bound by any reading still has per-hop latency and
    DCQCN's reaction at its start, which do not scale: at a 4x cut, 32 MiB All-Reduce and
    All-to-All measure 3.5-4.4x in simulation (tests/integration/test_sim_sensitivity.py), f
    0.83-1.13; the paper's 4.1x and 4.4x are f 1.03 and 1.13. Above 1.15 the type lost more
    than its bandwidth (more congestion at the lower rate). Below 0.5 less than half of its time
    is serialization ("well under" the ratio: under 2.5x at a 4x cut).
    """

    bandwidth_bound_min_share: float = 0.85
    bandwidth_bound_max_share: float = 1.15
    latency_bound_max_share: float = 0.5

    def verdict(self, share: float | None) -> str:
        if share is None:
            return NOT_MEASURED
        if share > self.bandwidth_bound_max_share:
            return BEYOND
        if share >= self.bandwidth_bound_min_share:
            return BANDWIDTH_BOUND
        if share >= self.latency_bound_max_share:
            return PARTLY
        return LATENCY_BOUND


DEFAULT_TOLERANCE = Tolerance()


@dataclass(frozen=True)
class TypeTimes:
    """One collective type in one run, over its complete instances."""

    instances: int
    total_s: float
    ideal_total_s: float | None  # None when an instance has no ideal time

    @property
    def mean_s(self) -> float:
        return self.total_s / self.instances


def type_times(collectives: pa.Table) -> dict[str, TypeTimes]:
    """Per collective type: its complete instances' count, summed duration and ideal time."""
    from collectors.tables import rows

    durations: defaultdict[str, list[float]] = defaultdict(list)
    ideals: defaultdict[str, list[float | None]] = defaultdict(list)
    for ctype, complete, duration, ideal in rows(
        collectives, ("collective_type", "complete", DURATION, "ideal_time_s")
    ):
        if complete and duration is not None:
            durations[ctype].append(duration)
            ideals[ctype].append(ideal)
    return {
        ctype: TypeTimes(
            len(values),
            sum(values),
            None if None in ideals[ctype] else sum(i for i in ideals[ctype] if i is not None),
        )
        for ctype, values in durations.items()
    }


@dataclass(frozen=True)
class RateRun:
    """A finished run at one link rate."""

    host_link_gbps: float
    fabric_link_gbps: float
    folder: Path
    times: Mapping[str, TypeTimes]
    job_time_s: float | None
    ideal_job_time_s: float | None
    fidelity: str = "ok"
    partial: bool = False
    tdf: float | None = None
    backend: str | None = None
    fidelity_reasons: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.host_link_gbps:g} Gb/s ({self.folder})"

    @property
    def flags(self) -> tuple[str, ...]:
        """Why the project flagged the run (empty: judged; stats.flags.flags_of)."""
        return flags_of(self.partial, self.fidelity, self.fidelity_reasons)

    def unmeasured(self) -> RateRun:
        """The run with nothing measured: a flagged run left out keeps its place (its rate)."""
        return dataclasses.replace(self, times={}, job_time_s=None, ideal_job_time_s=None)

    def identity(self) -> dict[str, Any]:
        return {
            "host_link_gbps": self.host_link_gbps,
            "fabric_link_gbps": self.fabric_link_gbps,
            "folder": str(self.folder),
            "backend": self.backend,
            "tdf": self.tdf,
            "fidelity": self.fidelity,
            "partial": self.partial,
            "flags": list(self.flags),
            "job_time_s": self.job_time_s,
            "ideal_job_time_s": self.ideal_job_time_s,
        }


@dataclass(frozen=True)
class Point:
    """A collective type (or the job) at one rate, against the reference rate."""

    host_link_gbps: float
    expected: float  # the bandwidth-bound slowdown: reference rate / this rate
    time_s: float  # the type's total time (the job's time for the job row)
    slowdown: float | None  # None: instance counts differ, totals are not comparable
    plan_slowdown: float | None
    share: float | None  # of the reference time that scales with 1/rate (None at the reference)
    verdict: str
    instances: int | None = None
    mean_s: float | None = None
    mean_slowdown: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"measured": True, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class Row:
    """A collective type (or the job) across the rates, in their order."""

    name: str
    points: tuple[Point | None, ...]  # None: not measured at that rate (or at the reference)
    verdict: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "detail": self.detail,
            "by_rate": [p.to_json() if p else {"measured": False} for p in self.points],
        }


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _point(
    run: RateRun,
    ref_gbps: float,
    time_s: float,
    ref_time_s: float,
    plan: tuple[float | None, float | None],
    tolerance: Tolerance,
    judged: float | None,
) -> Point:
    """judged: the slowdown the verdict reads (the mean instance's for a type)."""
    expected = ref_gbps / run.host_link_gbps
    reference = run.host_link_gbps == ref_gbps
    share = None if reference or judged is None else (judged - 1) / (expected - 1)
    return Point(
        run.host_link_gbps,
        expected,
        time_s,
        _ratio(time_s, ref_time_s),
        _ratio(*plan),
        share,
        "reference" if reference else tolerance.verdict(share),
    )


def _type_row(name: str, runs: Sequence[RateRun], tolerance: Tolerance) -> Row:
    ref = runs[0].times.get(name)
    ref_gbps = runs[0].host_link_gbps
    points: list[Point | None] = []
    for run in runs:
        times = run.times.get(name)
        if ref is None or times is None:
            points.append(None)
            continue
        mean_slowdown = _ratio(times.mean_s, ref.mean_s)
        point = _point(
            run,
            ref_gbps,
            times.total_s,
            ref.total_s,
            (times.ideal_total_s, ref.ideal_total_s),
            tolerance,
            mean_slowdown,
        )
        # Totals over different instance counts (a partial run) say nothing: only means then.
        same = times.instances == ref.instances
        points.append(
            dataclasses.replace(
                point,
                slowdown=point.slowdown if same else None,
                plan_slowdown=point.plan_slowdown if same else None,
                instances=times.instances,
                mean_s=times.mean_s,
                mean_slowdown=mean_slowdown,
            )
        )
    return _judge(name, points, runs, tolerance)


def _job_row(runs: Sequence[RateRun], tolerance: Tolerance) -> Row:
    ref = runs[0]
    points: list[Point | None] = []
    for run in runs:
        if run.job_time_s is None or ref.job_time_s is None:
            points.append(None)
            continue
        plan = (run.ideal_job_time_s, ref.ideal_job_time_s)
        slowdown = run.job_time_s / ref.job_time_s
        points.append(
            _point(
                run, ref.host_link_gbps, run.job_time_s, ref.job_time_s, plan, tolerance, slowdown
            )
        )
    return _judge(JOB, points, runs, tolerance)


def _judge(
    name: str, points: Sequence[Point | None], runs: Sequence[RateRun], tolerance: Tolerance
) -> Row:
    """The row's verdict: that of the rate farthest from the reference (the clearest signal)."""
    measured = [p for p in points[1:] if p is not None and p.share is not None]
    if not measured:
        where = "at the reference rate" if points[0] is None else "at any other rate"
        return Row(name, tuple(points), NOT_MEASURED, f"no complete instance {where}")
    far = max(measured, key=lambda p: abs(math.log(p.expected)))
    slowdown = far.mean_slowdown if far.mean_slowdown is not None else far.slowdown
    assert far.share is not None and slowdown is not None
    missing = [f"{r.host_link_gbps:g}" for r, p in zip(runs, points, strict=True) if p is None]
    detail = (
        f"{slowdown:.2f}x at {far.host_link_gbps:g} Gb/s against {far.expected:.3g}x "
        f"bandwidth-bound: {far.share:.0%} of its time at {runs[0].host_link_gbps:g} Gb/s "
        "scales with 1/rate" + (f"; not measured at {', '.join(missing)} Gb/s" if missing else "")
    )
    return Row(name, tuple(points), tolerance.verdict(far.share), detail)


def analyse_runs(
    runs: Sequence[RateRun], tolerance: Tolerance = DEFAULT_TOLERANCE
) -> tuple[tuple[Row, ...], Row]:
    """Per collective type (every type any run has, sorted) and for the job: the rows."""
    if len(runs) < 2:
        raise InputError(f"sensitivity: {len(runs)} run given, at least 2 rates are needed")
    types = sorted({t for run in runs for t in run.times})
    return tuple(_type_row(t, runs, tolerance) for t in types), _job_row(runs, tolerance)
