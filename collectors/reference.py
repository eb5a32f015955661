"""Two runs of one scenario held against each other per collective type, typically the emulated
fabric (the run) against a packet-level simulation of it (the reference), with stated bounds of
agreement: busbw mean and CV, the FCT distribution (two-sample Kolmogorov-Smirnov distance), and
CNPs and ECN marks side by side.

Busbw statistics come from collectors.summary (complete instances, population CV), FCTs are the
flows' fct_s (end_s - start_s of finished flows), CNPs are those receivers sent (cnps_sent) and
ECN marks the flows' CE-marked packets (ce_marks). CNPs and marks are reported, not
judged: their absolute numbers depend on the marker, which the two runs need not share.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectors.report import _render
from collectors.summary import collectives_summary
from collectors.tables import RunTables, rows

ONE_RUN_ONLY = "present in one run only"


@dataclass(frozen=True)
class ReferenceBounds:
    """How far the run may be from the reference before a metric counts as a deviation.

    The run and the reference model the same fabric differently (rate pacing and time dilation
    against per-packet events), so exact agreement is not expected. The bounds are stated choices,
    not derived: each is as wide as it can be while the effects the study looks for still show
    as deviations, and tighter values can be passed where a study needs them.
    - busbw_mean_ratio: |run/reference - 1| of the mean busbw. 0.10: beyond it the two models
      of one fabric differ by as much as the busbw effects they are used to compare.
    - ks_distance: the largest gap between the two FCT CDFs. 0.25: a tail present in one run only
      shows once it holds a quarter of the flows, and so does a body shifted past most of the other.
    - busbw_cv_abs: |CV run - CV reference|, absolute (CVs are already relative). 0.10: tells a
      steady collective (CV of a few percent) from a disturbed one (CV of tens of percent).
    """

    busbw_mean_ratio: float = 0.10
    ks_distance: float = 0.25
    busbw_cv_abs: float = 0.10

    def describe(self) -> str:
        return (
            f"busbw mean within {self.busbw_mean_ratio:.0%}, busbw CV within "
            f"{self.busbw_cv_abs:.2f}, FCT KS distance at most {self.ks_distance:.2f}"
        )


def ks_distance(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sample Kolmogorov-Smirnov statistic: the largest absolute difference between the
    empirical CDFs of `a` and `b` (0 identical, 1 disjoint); None when either sample is empty."""
    if len(a) == 0 or len(b) == 0:
        return None
    xa = np.sort(np.asarray(a, dtype=float))
    xb = np.sort(np.asarray(b, dtype=float))
    if np.isnan(xa).any() or np.isnan(xb).any():
        raise ValueError("ks_distance: samples must not contain NaN")
    # Both CDFs are step functions that only change at sample values: evaluating them at every
    # value of either sample (right-continuous, so ties count fully) finds the largest gap.
    points = np.concatenate([xa, xb])
    cdf_a = np.searchsorted(xa, points, side="right") / len(xa)
    cdf_b = np.searchsorted(xb, points, side="right") / len(xb)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _fcts_by_type(tables: RunTables) -> dict[str, list[float]]:
    fcts: defaultdict[str, list[float]] = defaultdict(list)
    for ctype, fct in rows(tables.flows, ("collective_type", "fct_s")):
        if fct is not None:
            fcts[ctype].append(float(fct))
    return fcts


def _gbps(stats: Mapping[str, Any] | None) -> float | None:
    value = (stats or {}).get("busbw_mean_bytes_per_s")
    return None if value is None else value * 1e-9


def _cv(stats: Mapping[str, Any] | None) -> float | None:
    """The busbw CV, None under two complete instances (the summary reports 0.0 for one)."""
    if (stats or {}).get("instances_complete", 0) < 2:
        return None
    return _get(stats, "busbw_cv")


def _get(stats: Mapping[str, Any] | None, key: str) -> Any:
    return (stats or {}).get(key)


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _compare_type(
    run: Mapping[str, Any] | None,
    ref: Mapping[str, Any] | None,
    fct_run: list[float],
    fct_ref: list[float],
    bounds: ReferenceBounds,
) -> dict[str, Any]:
    busbw = [_gbps(run), _gbps(ref)]
    cv = [_cv(run), _cv(ref)]
    ratio = busbw[0] / busbw[1] if busbw[0] is not None and busbw[1] else None
    distance = ks_distance(fct_run, fct_ref)
    deviations: list[str] = []
    not_measured: list[str] = []
    if run is None or ref is None:
        deviations.append(
            f"{ONE_RUN_ONLY} (missing in the {'run' if run is None else 'reference'})"
        )
    else:
        if ratio is not None and abs(ratio - 1.0) > bounds.busbw_mean_ratio:
            deviations.append(
                f"busbw mean {busbw[0]:.2f} GB/s vs reference {busbw[1]:.2f} GB/s: ratio "
                f"{ratio:.3f}, beyond 1 +/- {bounds.busbw_mean_ratio:.2f}"
            )
        if cv[0] is not None and cv[1] is not None and abs(cv[0] - cv[1]) > bounds.busbw_cv_abs:
            deviations.append(
                f"busbw CV {cv[0]:.3f} vs reference {cv[1]:.3f}: differ by "
                f"{abs(cv[0] - cv[1]):.3f} > {bounds.busbw_cv_abs:.2f}"
            )
        if distance is not None and distance > bounds.ks_distance:
            deviations.append(
                f"FCT distributions ({len(fct_run)} vs {len(fct_ref)} flows): KS distance "
                f"{distance:.3f} > {bounds.ks_distance:.2f}"
            )
        measured = {
            "busbw mean": ratio is not None,
            "busbw CV": None not in cv,
            "FCT": distance is not None,
        }
        not_measured = [name for name, known in measured.items() if not known]
    return {
        "busbw_mean_gbps": busbw,
        "busbw_cv": cv,
        "busbw_mean_ratio": ratio,
        "fct_ks_distance": distance,
        "fct_count": [len(fct_run), len(fct_ref)],
        "cnps": [_get(run, "cnps"), _get(ref, "cnps")],
        "ecn_marks": [_get(run, "ce_marks"), _get(ref, "ce_marks")],
        "deviations": deviations,
        "not_measured": not_measured,
    }


def compare_runs(
    run: RunTables, reference: RunTables, bounds: ReferenceBounds = ReferenceBounds()
) -> dict[str, Any]:
    """Per collective type, the run's busbw, FCTs, CNPs and ECN marks against the reference's,
    with every difference beyond `bounds` named in `deviations` (JSON-ready; busbw in GB/s,
    10^9 bytes per second; None where a value cannot be measured, e.g. a CV of no instance).
    `not_measured` names the judged metrics that could not be compared (None on either side), so
    an empty `deviations` is never mistaken for agreement on something neither run measured."""
    stats = (collectives_summary(run), collectives_summary(reference))
    fcts = (_fcts_by_type(run), _fcts_by_type(reference))
    by_collective: dict[str, dict[str, Any]] = {}
    deviations: list[str] = []
    not_measured: list[str] = []
    for ctype in sorted(set(stats[0]) | set(stats[1])):
        row = _compare_type(
            stats[0].get(ctype), stats[1].get(ctype), fcts[0][ctype], fcts[1][ctype], bounds
        )
        by_collective[ctype] = row
        deviations += [f"{ctype}: {d}" for d in row["deviations"]]
        not_measured += [f"{ctype} {m}" for m in row["not_measured"]]
    return {
        "bounds": dataclasses.asdict(bounds),
        "by_collective": by_collective,
        "deviations": deviations,
        "not_measured": not_measured,
    }


def reference_lines(comparison: Mapping[str, Any]) -> list[str]:
    """compare_runs' result as text: one row per collective type (run/reference pairs), then one
    line per deviation, or that the runs agree within the bounds."""

    def pair(values: Sequence[Any], fmt: str) -> str:
        return "/".join(_fmt(v, fmt) for v in values)

    headers = [
        "collective",
        "busbw GB/s run/ref",
        "ratio",
        "CV run/ref",
        "KS D",
        "CNPs run/ref",
        "marks run/ref",
    ]
    body = [
        [
            ctype,
            pair(row["busbw_mean_gbps"], "{:.2f}"),
            _fmt(row["busbw_mean_ratio"], "{:.3f}"),
            pair(row["busbw_cv"], "{:.3f}"),
            _fmt(row["fct_ks_distance"], "{:.3f}"),
            pair(row["cnps"], "{:.0f}"),
            pair(row["ecn_marks"], "{:.0f}"),
        ]
        for ctype, row in comparison["by_collective"].items()
    ]
    lines = _render(headers, body).splitlines()
    bounds = ReferenceBounds(**comparison["bounds"])
    lines += [f"deviation: {d}" for d in comparison["deviations"]]
    if not comparison["by_collective"]:
        lines.append("nothing to compare: neither run has a collective")
    elif not comparison["deviations"]:
        where = " where measured" if comparison.get("not_measured") else ""
        lines.append(f"agrees within the bounds ({bounds.describe()}){where}")
    if comparison.get("not_measured"):
        lines.append("not measured in both: " + ", ".join(comparison["not_measured"]))
    return lines
