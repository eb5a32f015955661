"""The jobs study's numbers: what the other jobs do to each job, judged by the one rule.

Per job and per collective type of the job, over the job's units only (its collectives and flows:
the job column of the tables): busbw mean, busbw CV over complete instances, FCT p50 and p99 over
finished flows, alone and together, each with the two-level bootstrap interval of
emulator.studies.stats.bootstrap, and together / alone with its interval; per job its time (first
flow start to last flow end, one unit per repeat). What the others do to a job is that ratio,
judged by the interference study's rule (emulator.studies.stats.verdict.judge): an effect is
"shown" when the interval of the ratio lies beyond 1 (slower, lower busbw, longer tail) and the
change is material (MATERIAL_CHANGE, MATERIAL_CV), "not shown" otherwise, "not measurable" with
fewer than 2 units or fewer than StudyThresholds.repeats_min repeats a side (one run's interval
leaves out run-to-run variation). A ratio over an alone busbw CV at its floor is undefined: the
difference together - alone is given and judged instead. Runs the project flagged (partial, a
fidelity verdict other than ok) are left out of every statistic unless include_flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.studies.stats.bootstrap import (
    DEFAULT_BOOTSTRAP,
    BootstrapSpec,
    PooledSample,
    Statistic,
    cv,
    mean,
    percentile,
)
from emulator.studies.stats.estimates import Comparison, compare
from emulator.studies.stats.flags import flags_of, judged_runs, with_flagged
from emulator.studies.stats.formatting import json_finite
from emulator.studies.stats.units import busbw_cv_floor
from emulator.studies.stats.verdict import DEFAULT_THRESHOLDS, Worse, judge

if TYPE_CHECKING:
    from collectors.tables import RunTables

ALL = "all"  # the condition with every job


# Metric -> (what it is, unit scale for text, format, the statistic, the units it takes, the
# direction that is worse).
METRICS: dict[str, tuple[str, float, str, Statistic, str, Worse]] = {
    "busbw_mean": ("busbw mean GB/s", 1e-9, ".2f", mean, "busbw", "lower"),
    "busbw_cv": ("busbw CV", 1.0, ".3f", cv, "busbw", "higher"),
    "fct_p50": ("FCT p50 us", 1e6, ".1f", percentile(50), "fct", "higher"),
    "fct_p99": ("FCT p99 us", 1e6, ".1f", percentile(99), "fct", "higher"),
}
UNITS = {"busbw": "complete instances", "fct": "finished flows"}
# What counts as a material effect, besides an interval beyond 1: a change of at least 5% (a
# simulation's intervals are narrow enough to call a 0.2% change "beyond 1"), and for the CV a
# together CV of at least 0.02 (from 0.0001 to 0.001 is a large ratio of a steady collective).
MATERIAL_CHANGE = 0.05
MATERIAL_CV = 0.02


@dataclass(frozen=True)
class JobsRun:
    condition: str
    seed: int
    folder: Path
    verdict: str
    partial: bool
    reasons: tuple[str, ...] = ()  # of the fidelity verdict
    resolution_s: float = 0.0  # its stamps' timing resolution (stats.units.timing_resolution_s)

    @property
    def name(self) -> str:
        return f"{self.condition}-seed{self.seed}"

    @property
    def flags(self) -> tuple[str, ...]:
        """Why the project flagged the run (empty: judged; stats.flags.flags_of)."""
        return flags_of(self.partial, self.verdict, self.reasons)


@dataclass(frozen=True)
class MetricRow:
    job: str
    collective: str
    metric: str
    comparison: Comparison
    effect: str  # shown / not shown / not measurable
    detail: str = ""  # why (emulator.studies.stats.verdict.judge)
    flagged: tuple[str, ...] = ()  # flagged runs it was judged on (include_flagged)

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        return json_finite(
            {
                "job": self.job,
                "collective": self.collective,
                "metric": self.metric,
                "alone": {"value": c.alone.point, "interval": c.alone.interval},
                "together": {"value": c.mixed.point, "interval": c.mixed.interval},
                "together_over_alone": {"value": c.ratio, "interval": c.ratio_interval},
                "ratio_undefined": c.ratio_undefined,
                "together_minus_alone": {
                    "value": c.difference,
                    "interval": c.difference_interval,
                },
                "repeats": {"alone": c.alone.repeats, "together": c.mixed.repeats},
                "units": {"alone": c.alone.units, "together": c.mixed.units},
                "effect_of_the_others": self.effect,
                "detail": self.detail,
                "flagged_runs_judged": list(self.flagged),
            }
        )


def _units(tables: RunTables, job: str, collective: str) -> dict[str, np.ndarray]:
    """The job's units of one collective type: busbw of its complete instances (and their
    durations, for the CV's floor), FCT of its finished flows."""
    from collectors.summary import job_tables
    from collectors.tables import rows

    mine = job_tables(tables, job)
    timed = [
        (b, d)
        for ctype, complete, b, d in rows(
            mine.collectives,
            ("collective_type", "complete", "busbw_bytes_per_s", "bandwidth_time_s"),
        )
        if ctype == collective and complete and b is not None
    ]
    fct = [
        f
        for ctype, f in rows(mine.flows, ("collective_type", "fct_s"))
        if ctype == collective and f is not None
    ]
    return {
        "busbw": np.asarray([b for b, _ in timed], dtype=float),
        "durations": np.asarray([d for _, d in timed if d is not None], dtype=float),
        "fct": np.asarray(fct, dtype=float),
    }


def _row(
    job: str,
    collective: str,
    metric: str,
    c: Comparison,
    units: str,
    sides: Sequence[tuple[str, Sequence[JobsRun], Sequence[JobsRun]]],
    confidence: float,
) -> MetricRow:
    """The row with the interference study's verdict (emulator.studies.stats.verdict.judge) at
    study's material change: shown when the interval of together/alone lies beyond 1 on the
    worse side and the change is at least MATERIAL_CHANGE (a busbw CV: and at least MATERIAL_CV
    together); then what the flagged runs did to it (with_flagged)."""
    label, worse = _rule(metric)
    threshold = 1.0 + MATERIAL_CHANGE if worse == "higher" else 1.0 - MATERIAL_CHANGE
    steady = MATERIAL_CV if metric == "busbw_cv" else None
    repeats_min = DEFAULT_THRESHOLDS.repeats_min
    verdict, detail = judge(c, label, units, threshold, repeats_min, confidence, steady, worse)
    effect, detail, flagged = with_flagged(verdict, detail, sides)
    return MetricRow(job, collective, metric, c, effect, detail, flagged)


def _rule(metric: str) -> tuple[str, Worse]:
    """What a metric is called in a verdict's detail, and which way is worse."""
    if metric == "job_time":
        return "job time", "higher"
    label, *_, worse = METRICS[metric]
    return label, worse


def _cv_floor(runs: Sequence[JobsRun], units: Sequence[dict[str, np.ndarray]]) -> float:
    """The alone runs' busbw CV floor: the largest of theirs (stats.units.busbw_cv_floor)."""
    floors = [
        busbw_cv_floor(list(u["durations"]), r.resolution_s)
        for r, u in zip(runs, units, strict=True)
    ]
    return max(floors, default=0.0)


def analyse(
    runs: Sequence[JobsRun],
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> tuple[MetricRow, ...]:
    """Per job and collective type every metric, and per job its time, alone vs together, over
    the runs not flagged (or every run, include_flagged)."""
    from collectors.tables import read_tables

    tables = {(r.condition, r.seed): read_tables(r.folder) for r in runs}
    together = [r for r in runs if r.condition == ALL]
    together_judged = judged_runs(together, include_flagged)
    jobs = [r.condition for r in runs if r.condition != ALL]
    out: list[MetricRow] = []
    for job in dict.fromkeys(jobs):
        alone = [r for r in runs if r.condition == job]
        alone_judged = judged_runs(alone, include_flagged)
        sides = [(f"{job} alone", alone, alone_judged), (ALL, together, together_judged)]
        # the types are not a statistic: a flagged run's say which rows there are
        types = sorted({ctype for r in alone for ctype in _types(tables[_key(r)], job)})
        for ctype in types:
            a_units = [_units(tables[_key(r)], job, ctype) for r in alone_judged]
            m_units = [_units(tables[_key(r)], job, ctype) for r in together_judged]
            for metric, (_, _, _, statistic, kind, _) in METRICS.items():
                c = compare(
                    PooledSample.of([u[kind] for u in a_units], statistic),
                    PooledSample.of([u[kind] for u in m_units], statistic),
                    bootstrap,
                    _cv_floor(alone_judged, a_units) if metric == "busbw_cv" else 0.0,
                )
                units = f"{UNITS[kind]} of {job}'s {ctype}"
                out.append(_row(job, ctype, metric, c, units, sides, bootstrap.confidence))
        a_time = [_job_time(tables[_key(r)], job) for r in alone_judged]
        m_time = [_job_time(tables[_key(r)], job) for r in together_judged]
        c = compare(
            PooledSample.of([np.array([x]) for x in a_time if x is not None], mean),
            PooledSample.of([np.array([x]) for x in m_time if x is not None], mean),
            bootstrap,
        )
        units = "runs (one job time each)"
        out.append(_row(job, "job", "job_time", c, units, sides, bootstrap.confidence))
    return tuple(out)


def _key(run: JobsRun) -> tuple[str, int]:
    return run.condition, run.seed


def _types(tables: RunTables, job: str) -> set[str]:
    from collectors.summary import job_tables
    from collectors.tables import column

    return set(column(job_tables(tables, job).collectives, "collective_type"))


def _job_time(tables: RunTables, job: str) -> float | None:
    from collectors.summary import jobs_summary

    return (jobs_summary(tables).get(job) or {}).get("job_time_s")
