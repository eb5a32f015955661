"""The interference study's checks: each asks one question of the runs' units and gives a verdict.

Six checks (All-Reduce busbw CV over every instance and within each process group, All-Reduce
busbw mean, All-to-All FCT tail p99/p50 and p99, All-Reduce alone against line rate), each a
Check with its numbers, intervals and verdict; the statistics, the bootstrap and the verdict rule
come from emulator.studies.stats. Each takes the runs as StudyRun (one run read back, with its
units per collective), so the checks can be judged without results folders; judge_checks judges
all six on the runs the project did not flag (or on every run, include_flagged).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emulator.studies.stats.bootstrap import (
    DEFAULT_BOOTSTRAP,
    BootstrapSpec,
    CellSample,
    PooledSample,
    cv,
    mean,
    percentile,
    percentile_ratio,
    ratio_of_sums,
)
from emulator.studies.stats.estimates import compare, estimate_alone
from emulator.studies.stats.flags import judged_runs, run_flags, with_flagged
from emulator.studies.stats.formatting import fmt_interval
from emulator.studies.stats.units import CollectiveUnits, units_cv_floor
from emulator.studies.stats.verdict import (
    Check,
    StudyThresholds,
    Verdict,
    comparison_check,
    cv_check,
    judge,
)

ALL_REDUCE, ALL_TO_ALL = "ALL_REDUCE", "ALL_TO_ALL"


@dataclass(frozen=True)
class StudyRun:
    """One run (one repeat of one condition) of the study as read back from its results folder."""

    role: str
    folder: Path
    summary: dict[str, Any]  # recomputed with collectors.summary.build_summary
    line_rate_bytes_per_s: float | None  # host link rate of the run's fabric, when known
    seed: int | None = None  # run.seed it ran with, when known
    repeat: int = 0  # 0-based, within its role
    units: Mapping[str, CollectiveUnits] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.role} repeat {self.repeat + 1}"

    @property
    def flags(self) -> tuple[str, ...]:
        """Why the project flagged the run (emulator.studies.stats.flags.run_flags; empty: judged).
        summary keeps the fidelity section as the run wrote it (None when it had none)."""
        return run_flags(self.summary)

    def stats(self, collective: str) -> Mapping[str, Any]:
        return (self.summary.get("collectives") or {}).get(collective) or {}

    def of(self, collective: str) -> CollectiveUnits:
        return self.units.get(collective) or CollectiveUnits.empty()

    def identity(self) -> dict[str, Any]:
        return {
            "repeat": self.repeat + 1,
            "seed": self.seed,
            "folder": str(self.folder),
            "scenario": self.summary.get("scenario"),
            "tdf": self.summary.get("tdf"),
            "partial": bool(self.summary.get("partial")),
            "fidelity": self.summary.get("fidelity"),
            "flags": list(self.flags),
            "line_rate_bytes_per_s": self.line_rate_bytes_per_s,
            "cnps_by_collective": {
                ctype: stats.get("cnps")
                for ctype, stats in (self.summary.get("collectives") or {}).items()
            },
        }


def _pooled(runs: Sequence[StudyRun], collective: str, attribute: str) -> np.ndarray:
    parts = [getattr(r.of(collective), attribute) for r in runs]
    return np.concatenate(parts) if parts else np.empty(0)


def check_allreduce_cv(
    alone: Sequence[StudyRun],
    mixed: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> Check:
    """CV over every instance: includes the fixed differences between process groups (paths)."""
    a, m = _pooled(alone, ALL_REDUCE, "busbw"), _pooled(mixed, ALL_REDUCE, "busbw")
    floor = units_cv_floor([r.of(ALL_REDUCE) for r in alone])
    return cv_check(
        "allreduce_busbw_cv",
        "Does the All-Reduce busbw vary more when mixed with the All-to-All?",
        PooledSample.of([r.of(ALL_REDUCE).busbw for r in alone], cv),
        PooledSample.of([r.of(ALL_REDUCE).busbw for r in mixed], cv),
        "complete All-Reduce instances",
        thresholds,
        spec,
        {
            "instances_alone": len(a),
            "instances_mixed": len(m),
            "busbw_mean_alone_bytes_per_s": float(a.mean()) if len(a) else None,
            "busbw_mean_mixed_bytes_per_s": float(m.mean()) if len(m) else None,
        },
        floor,
    )


def check_allreduce_cv_within_groups(
    alone: Sequence[StudyRun],
    mixed: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> Check:
    """The same question per process group (iteration to iteration), averaged over groups.

    ECMP pins a group's flows to the same uplinks in every iteration, so groups differ from each
    other by a fixed amount alone and mixed; this CV leaves that out and keeps what changes from
    one iteration to the next. Groups with fewer than 2 complete instances in a run are left
    out; a group's instances of different repeats are not pooled (run-to-run differences are not
    iteration-to-iteration variability)."""
    a = CellSample.of([r.of(ALL_REDUCE).groups for r in alone], cv)
    m = CellSample.of([r.of(ALL_REDUCE).groups for r in mixed], cv)
    return cv_check(
        "allreduce_busbw_cv_within_groups",
        "Does each All-Reduce group's busbw vary more from iteration to iteration when mixed?",
        a,
        m,
        "complete All-Reduce instances in groups of 2 or more",
        thresholds,
        spec,
        {"instances_alone": a.units, "instances_mixed": m.units},
        units_cv_floor([r.of(ALL_REDUCE) for r in alone]),
    )


def check_alltoall_tail(
    alone: Sequence[StudyRun],
    mixed: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> Check:
    from collectors.stats import percentile_nearest_rank as p

    tail = percentile_ratio(99, 50)
    c = compare(
        PooledSample.of([r.of(ALL_TO_ALL).fct for r in alone], tail),
        PooledSample.of([r.of(ALL_TO_ALL).fct for r in mixed], tail),
        spec,
    )
    a, m = _pooled(alone, ALL_TO_ALL, "fct").tolist(), _pooled(mixed, ALL_TO_ALL, "fct").tolist()
    numbers = {
        "fct_p50_alone_s": p(a, 50),
        "fct_p99_alone_s": p(a, 99),
        "fct_p50_mixed_s": p(m, 50),
        "fct_p99_mixed_s": p(m, 99),
        "flows_finished_alone": len(a),
        "flows_finished_mixed": len(m),
    }
    minimum = thresholds.tail_ratio_min
    units = "finished All-to-All flows"
    verdict = judge(c, "p99/p50", units, minimum, thresholds.repeats_min, spec.confidence)
    return comparison_check(
        "alltoall_fct_tail",
        "Does the All-to-All FCT tail (p99/p50) grow when mixed with the All-Reduce?",
        "longer tail mixed",
        c,
        verdict,
        minimum,
        numbers,
    )


def check_allreduce_busbw(
    alone: Sequence[StudyRun],
    mixed: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> Check:
    """Mean busbw over every complete instance, mixed vs alone: what the interference costs the
    All-Reduce in bandwidth (the CV says how variable it turns)."""
    c = compare(  # in GB/s, so the tables read as the run summaries do
        PooledSample.of([r.of(ALL_REDUCE).busbw * 1e-9 for r in alone], mean),
        PooledSample.of([r.of(ALL_REDUCE).busbw * 1e-9 for r in mixed], mean),
        spec,
    )
    maximum = thresholds.busbw_ratio_max
    units = "complete All-Reduce instances"
    verdict = judge(
        c, "busbw mean", units, maximum, thresholds.repeats_min, spec.confidence, worse="lower"
    )
    return comparison_check(
        "allreduce_busbw_mean",
        "Does the All-Reduce lose bandwidth (mean busbw) when mixed with the All-to-All?",
        "lower busbw mixed (GB/s)",
        c,
        verdict,
        maximum,
        {"instances_alone": c.alone.units, "instances_mixed": c.mixed.units},
    )


def check_alltoall_p99(
    alone: Sequence[StudyRun],
    mixed: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> Check:
    """The All-to-All FCT p99 itself, mixed vs alone (the tail check divides by p50, which a
    uniform slowdown leaves alone; this one is what a user waits for)."""
    c = compare(  # in microseconds
        PooledSample.of([r.of(ALL_TO_ALL).fct * 1e6 for r in alone], percentile(99)),
        PooledSample.of([r.of(ALL_TO_ALL).fct * 1e6 for r in mixed], percentile(99)),
        spec,
    )
    minimum = thresholds.tail_ratio_min
    units = "finished All-to-All flows"
    verdict = judge(c, "FCT p99", units, minimum, thresholds.repeats_min, spec.confidence)
    return comparison_check(
        "alltoall_fct_p99",
        "Does the All-to-All FCT p99 grow when mixed with the All-Reduce?",
        "higher p99 mixed (us)",
        c,
        verdict,
        minimum,
        {"flows_finished_alone": c.alone.units, "flows_finished_mixed": c.mixed.units},
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def check_allreduce_line_rate(
    alone: Sequence[StudyRun], thresholds: StudyThresholds, spec: BootstrapSpec = DEFAULT_BOOTSTRAP
) -> Check:
    """Mean busbw / mean ideal busbw over the complete instances that have both. The verdict is
    on the point estimate (near line rate is a level, with no "no change" to rule out); the
    interval is reported, and said when it reaches across the threshold."""
    paired = [r.of(ALL_REDUCE).paired for r in alone]
    e = estimate_alone(PooledSample.of(paired, ratio_of_sums), spec)
    pooled = np.concatenate(paired) if paired else np.empty((0, 2))
    busbw = float(pooled[:, 0].mean()) if len(pooled) else None
    ideal = float(pooled[:, 1].mean()) if len(pooled) else None
    line = next((r.line_rate_bytes_per_s for r in alone if r.line_rate_bytes_per_s), None)
    numbers = {
        "repeats_alone": e.repeats,
        "instances_alone": e.units,
        "busbw_mean_bytes_per_s": busbw,
        "ideal_busbw_bytes_per_s": ideal,
        "line_rate_bytes_per_s": line,
        "busbw_over_line_rate": _ratio(busbw, line),
        "ideal_over_line_rate": _ratio(ideal, line),
    }
    minimum = thresholds.line_rate_ratio_min
    verdict: Verdict = "not measurable"
    if not e.measurable or busbw is None or ideal is None or e.point is None:
        detail = (
            "fewer than 2 complete All-Reduce instances with an ideal busbw in the alone runs "
            f"({e.units})"
        )
    else:
        line_text = "" if line is None else f", host line rate {line / 1e9:.2f} GB/s"
        detail = (
            f"busbw {busbw / 1e9:.2f} GB/s is {fmt_interval(e.point, e.interval)} "
            f"({spec.confidence:.0%} CI) of the congestion-free plan's {ideal / 1e9:.2f} GB/s"
            f"{line_text}; over {e.repeats} repeats ({e.units} instances)"
        )
        if e.repeats < 2:
            detail += (
                "; with one repeat the interval is from that run's instances only and does not "
                "include run-to-run variation"
            )
        if e.repeats < thresholds.repeats_min:
            detail += f"; {thresholds.repeats_min} repeats needed to judge"
        else:
            verdict = "shown" if e.point >= minimum else "not shown"
            detail += f"; {'at or above' if verdict == 'shown' else 'below'} {minimum:g}"
            if e.interval is not None and e.interval[0] < minimum <= e.interval[1]:
                detail += f" (the interval reaches across {minimum:g})"
    return Check(
        "allreduce_alone_line_rate",
        "Does the All-Reduce alone run near line rate (busbw / ideal busbw)?",
        f"busbw / ideal >= {minimum:g}",
        verdict,
        e.point,
        None,
        e.point,
        minimum,
        detail,
        numbers,
        e.interval,
        None,
        e.interval,
    )


# Each check and the roles whose runs it is judged on, in the order of the study's tables.
CHECKS: tuple[tuple[Callable[..., Check], tuple[str, ...]], ...] = (
    (check_allreduce_cv, ("allreduce_only", "mixed")),
    (check_alltoall_tail, ("alltoall_only", "mixed")),
    (check_allreduce_line_rate, ("allreduce_only",)),
    (check_allreduce_cv_within_groups, ("allreduce_only", "mixed")),
    (check_allreduce_busbw, ("allreduce_only", "mixed")),
    (check_alltoall_p99, ("alltoall_only", "mixed")),
)


def judge_checks(
    runs: Sequence[StudyRun],
    thresholds: StudyThresholds,
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> tuple[Check, ...]:
    """Every check on the runs the project did not flag (run_flags), or on every run with
    include_flagged, each then saying which flagged runs it was judged on."""
    out = []
    for check, roles in CHECKS:
        sides = [[r for r in runs if r.role == role] for role in roles]
        judged = [judged_runs(side, include_flagged) for side in sides]
        out.append(_flagged(check(*judged, thresholds, spec), roles, sides, judged))
    return tuple(out)


def _flagged(
    check: Check,
    roles: Sequence[str],
    sides: Sequence[Sequence[StudyRun]],
    judged: Sequence[Sequence[StudyRun]],
) -> Check:
    """The check not measurable where every run of a side is flagged and left out, or saying
    which flagged runs it was judged on (emulator.studies.stats.flags.with_flagged)."""
    verdict, detail, flagged = with_flagged(
        check.verdict, check.detail, list(zip(roles, sides, judged, strict=True))
    )
    return dataclasses.replace(check, verdict=verdict, detail=detail, flagged=flagged)
