"""Every metric of every condition with its bootstrap interval, and each condition against the
baseline (ECMP with go-back-N): condition / baseline with its interval.

A metric (METRICS, a registry) is a statistic of units, and the units of one run:
- per collective type: busbw mean over its complete instances (GB/s) and FCT p99 over its
  finished flows (us), units as the other studies take them (emulator.studies.stats.units);
- per link group of summary.json's load_balance (leaf_up, spine_down, ...): the max-to-mean
  ratio of the group's link loads (MMR) and Jain's fairness index (JFI) over the run, and the
  median MMR over its intervals, one unit per run;
- per run: the job time (ms); the share of data packets received out of order (reordered /
  received) and of data packets resent (retransmitted / sent), each summed over the repeats
  (ratio of sums, one (numerator, denominator) pair per run); retransmitted packets and NAKs
  sent, the mean over runs.
Intervals: the two-level bootstrap of emulator.studies.stats.bootstrap (repeats, then units
within each); a metric with one unit per run resamples the repeats only. The comparison with
the baseline: emulator.studies.stats.estimates.compare (a ratio only where the baseline's
interval lies above 0, else the difference condition - baseline). Only judged runs count
(emulator.studies.load_balancing.runs); a condition or run without a number for a metric (no
load_balance in its summary.json) is left out of it, never filled in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from emulator.studies.load_balancing.conditions import BASELINE, CONDITIONS
from emulator.studies.load_balancing.runs import LbRun
from emulator.studies.stats.bootstrap import (
    DEFAULT_BOOTSTRAP,
    BootstrapSpec,
    PooledSample,
    Statistic,
    mean,
    percentile,
    ratio_of_sums,
)
from emulator.studies.stats.estimates import Comparison, Estimate, compare, estimate_alone
from emulator.studies.stats.flags import judged_runs
from emulator.studies.stats.formatting import json_finite

Kind = Literal["collective", "group", "run"]
RUN = "run"  # what a per-run metric is "of"
LEAF_UPLINKS = "leaf_up"  # the link group the study's imbalance check reads
PER_RUN = "per-run values"  # the units of a metric with one number per run


@dataclass(frozen=True)
class Metric:
    """One number per condition: a statistic of units, each run's units from `units`."""

    key: str  # as study.json names it, with its unit
    label: str  # as study.txt prints it
    kind: Kind  # what it is of: a collective type, a link group, the run
    statistic: Statistic
    units: Callable[[LbRun, str], np.ndarray]  # (run, what it is of) -> the run's units
    fmt: str
    unit_name: str  # what a unit is, for the verdicts' text


def _one(value: float | None) -> np.ndarray:
    return np.empty(0) if value is None else np.array([value], dtype=float)


def _pair(numerator: float | None, denominator: float | None) -> np.ndarray:
    if numerator is None or not denominator:
        return np.empty((0, 2))
    return np.array([[numerator, denominator]], dtype=float)


def _balance(key: str) -> Callable[[LbRun, str], np.ndarray]:
    def units(run: LbRun, group: str) -> np.ndarray:
        return _one(((run.load_balance or {}).get(group) or {}).get(key))

    return units


def _counter(name: str) -> Callable[[LbRun, str], np.ndarray]:
    return lambda run, _: _one(run.counters[name])


def _share(numerator: str, denominator: str) -> Callable[[LbRun, str], np.ndarray]:
    return lambda run, _: _pair(run.counters[numerator], run.counters[denominator])


def _job_time_ms(run: LbRun, _: str) -> np.ndarray:
    return _one(None if run.job_time_s is None else run.job_time_s * 1e3)


# Metric key -> metric, in the order of the tables.
METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric(
            "busbw_mean_GBps",
            "busbw mean GB/s",
            "collective",
            mean,
            lambda run, t: run.of(t).busbw * 1e-9,
            ".2f",
            "complete instances",
        ),
        Metric(
            "fct_p99_us",
            "FCT p99 us",
            "collective",
            percentile(99),
            lambda run, t: run.of(t).fct * 1e6,
            ".1f",
            "finished flows",
        ),
        Metric("job_time_ms", "job time ms", "run", mean, _job_time_ms, ".3f", PER_RUN),
        Metric("mmr", "link MMR (max/mean)", "group", mean, _balance("mmr"), ".3f", PER_RUN),
        Metric("jfi", "link JFI", "group", mean, _balance("jfi"), ".3f", PER_RUN),
        Metric(
            "mmr_p50_over_time",
            "link MMR p50 over time",
            "group",
            mean,
            _balance("mmr_p50_over_time"),
            ".3f",
            PER_RUN,
        ),
        Metric(
            "reordered_share",
            "reordered / received",
            "run",
            ratio_of_sums,
            _share("reordered_packets", "data_packets_received"),
            ".4f",
            PER_RUN,
        ),
        Metric(
            "retransmitted_share",
            "resent / sent",
            "run",
            ratio_of_sums,
            _share("retransmitted_packets", "data_packets_sent"),
            ".4f",
            PER_RUN,
        ),
        Metric(
            "retransmitted_packets",
            "retransmitted packets",
            "run",
            mean,
            _counter("retransmitted_packets"),
            ".1f",
            PER_RUN,
        ),
        Metric("naks_sent", "NAKs sent", "run", mean, _counter("naks_sent"), ".1f", PER_RUN),
    )
}


@dataclass(frozen=True)
class Cell:
    """One metric of one condition: its estimate, and against the baseline (None for the
    baseline itself, or when the baseline did not run)."""

    condition: str
    metric: str
    of: str  # a collective type, a link group, or RUN
    estimate: Estimate
    versus: Comparison | None = None

    def to_json(self) -> dict[str, Any]:
        e, c = self.estimate, self.versus
        out: dict[str, Any] = {
            "value": e.point,
            "interval": e.interval,
            "repeats": e.repeats,
            "units": e.units,
        }
        if c is not None:
            out["versus_baseline"] = {
                "ratio": c.ratio,
                "interval": c.ratio_interval,
                "ratio_undefined": c.ratio_undefined,
                "difference": c.difference,
                "difference_interval": c.difference_interval,
            }
        return json_finite(out)


@dataclass(frozen=True)
class Analysis:
    """Every cell, and what they are of: collective types and link groups."""

    cells: tuple[Cell, ...]
    conditions: tuple[str, ...]
    types: tuple[str, ...]
    groups: tuple[str, ...]  # empty: no run has load_balance (not measured)

    def cell(self, condition: str, metric: str, of: str = RUN) -> Cell | None:
        return next(
            (c for c in self.cells if (c.condition, c.metric, c.of) == (condition, metric, of)),
            None,
        )

    def of(self, metric: str) -> tuple[str, ...]:
        kind = METRICS[metric].kind
        return self.types if kind == "collective" else self.groups if kind == "group" else (RUN,)


def by_condition(runs: Sequence[LbRun], include_flagged: bool) -> dict[str, list[LbRun]]:
    """Condition -> its judged runs, in the registry's order (conditions with runs only)."""
    return {
        name: judged_runs([r for r in runs if r.condition == name], include_flagged)
        for name in CONDITIONS
        if any(r.condition == name for r in runs)
    }


def analyse(
    runs: Sequence[LbRun],
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> Analysis:
    """Every metric of every condition over its judged runs, and against the baseline."""
    judged = by_condition(runs, include_flagged)
    types = tuple(sorted({t for r in runs for t in r.units}))
    groups = tuple(sorted({g for r in runs for g in (r.load_balance or {})}))
    cells: list[Cell] = []
    for key, metric in METRICS.items():
        whats = (
            types if metric.kind == "collective" else groups if metric.kind == "group" else (RUN,)
        )
        for what in whats:

            def sample(side: Sequence[LbRun], metric: Metric = metric, what: str = what) -> Any:
                return PooledSample.of([metric.units(r, what) for r in side], metric.statistic)

            base = sample(judged.get(BASELINE, []))
            for name, side in judged.items():
                if name == BASELINE or BASELINE not in judged:
                    cells.append(Cell(name, key, what, estimate_alone(sample(side), bootstrap)))
                    continue
                c = compare(base, sample(side), bootstrap)
                cells.append(Cell(name, key, what, c.mixed, c))
    return Analysis(tuple(cells), tuple(judged), types, groups)
