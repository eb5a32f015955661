"""Two runs of one scenario held against each other per collective type, typically the emulated
fabric (the run) against a packet-level simulation of it (the reference), with stated bounds of
agreement: busbw mean and CV, the FCT distribution (two-sample Kolmogorov-Smirnov distance), and
CNPs and ECN marks side by side.

The model's own spread: a reference may come with other draws of itself (the same flows on the
same paths, other random ECN marks: sim.draw_seed). Each metric is then also measured between
every draw and the reference, and a run counts as deviating only beyond both the stated bound
and the largest of those: a difference the model produces against itself is not the run's.

Busbw statistics come from collectors.summary (complete instances, population CV), FCTs are the
flows' fct_s (end_s - start_s of finished flows), CNPs are those receivers sent (cnps_sent) and
ECN marks the flows' CE-marked packets (ce_marks). CNPs and marks are reported, not
judged: their absolute numbers depend on the marker, which the two runs need not share.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from collectors.report import _render
from collectors.summary import collectives_summary, job_time_s
from collectors.tables import RunTables, rows

ONE_RUN_ONLY = "present in one run only"
DRAWS_DIR = "draws"  # a reference folder's other draws: draws/1, draws/2, ...


def draw_folder(reference: Path, n: int) -> Path:
    """Where a reference's draw `n` is written: the reference folder itself for 0."""
    return reference if n == 0 else reference / DRAWS_DIR / str(n)


def draw_folders(reference: Path) -> list[Path]:
    """A reference folder's other draws (draws/1, draws/2, ...), in order; none if absent."""
    found = [d for d in (reference / DRAWS_DIR).glob("*") if d.is_dir() and d.name.isdigit()]
    return sorted(found, key=lambda d: int(d.name))


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
    - fct_tolerance: a relative FCT shift the KS distance forgives (ks_distance's `tolerance`).
      0.05: half the busbw bound. Without it, equal flows that finish together (a rank's
      All-to-All flows on an uncongested leaf: one point each) read KS 0.5 when one run is 0.6%
      faster, a difference no engineer would call one; a tail or a shifted body still shows.
    - busbw_cv_abs: |CV run - CV reference|, absolute (CVs are already relative). 0.10: tells a
      steady collective (CV of a few percent) from a disturbed one (CV of tens of percent).
    - job_time_ratio: |run/reference - 1| of the job time (first flow's start to last flow's
      end). 0.10, as busbw's: the job time is the slowest chain of collectives, so it carries
      their busbw; being a maximum over chains it also moves with which chain loses at a shared
      link, which the reference's draws show (moe_mix, four draws: 34.2-37.2 ms).
    """

    busbw_mean_ratio: float = 0.10
    ks_distance: float = 0.25
    busbw_cv_abs: float = 0.10
    fct_tolerance: float = 0.05
    job_time_ratio: float = 0.10

    def describe(self) -> str:
        return (
            f"busbw mean within {self.busbw_mean_ratio:.0%}, busbw CV within "
            f"{self.busbw_cv_abs:.2f}, FCT KS distance at most {self.ks_distance:.2f} beyond "
            f"{self.fct_tolerance:.0%} of FCT, job time within {self.job_time_ratio:.0%}"
        )


def ks_distance(a: Sequence[float], b: Sequence[float], tolerance: float = 0.0) -> float | None:
    """Two-sample Kolmogorov-Smirnov statistic: the largest absolute difference between the
    empirical CDFs of `a` and `b` (0 identical, 1 disjoint); None when either sample is empty.

    `tolerance` (relative, >= 0) forgives a shift of that much in time: the largest share of
    one sample done by x while the other is not yet done by x * (1 + tolerance), either way
    round. At 0 it is the plain statistic; FCTs that all moved by 1% read 0 at 0.05, while
    near-point distributions 1% apart read up to 1 without it."""
    if len(a) == 0 or len(b) == 0:
        return None
    xa = np.sort(np.asarray(a, dtype=float))
    xb = np.sort(np.asarray(b, dtype=float))
    if np.isnan(xa).any() or np.isnan(xb).any():
        raise ValueError("ks_distance: samples must not contain NaN")
    # Both CDFs are right-continuous step functions that rise only at sample values, so the
    # gap F_a(x) - F_b(x * (1 + tolerance)) is largest at a value of `a`, and the other way
    # round at a value of `b`: evaluating there finds the supremum.
    stretch = 1.0 + tolerance
    ahead_a = np.searchsorted(xa, xa, side="right") / len(xa) - np.searchsorted(
        xb, xa * stretch, side="right"
    ) / len(xb)
    ahead_b = np.searchsorted(xb, xb, side="right") / len(xb) - np.searchsorted(
        xa, xb * stretch, side="right"
    ) / len(xa)
    return float(max(0.0, ahead_a.max(), ahead_b.max()))


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


@dataclass(frozen=True)
class _Side:
    """One run's view of one collective type: its busbw statistics and its FCTs."""

    stats: Mapping[str, Any] | None
    fcts: list[float]


def _distances(
    run: _Side, ref: _Side, tolerance: float
) -> tuple[float | None, float | None, float | None]:
    """|busbw mean ratio - 1|, |CV difference| and the FCT KS distance (forgiving `tolerance`)
    of `run` against `ref` (None where either side cannot measure it)."""
    busbw, ref_busbw = _gbps(run.stats), _gbps(ref.stats)
    cv, ref_cv = _cv(run.stats), _cv(ref.stats)
    ratio_off = abs(busbw / ref_busbw - 1.0) if busbw is not None and ref_busbw else None
    cv_off = abs(cv - ref_cv) if cv is not None and ref_cv is not None else None
    return ratio_off, cv_off, ks_distance(run.fcts, ref.fcts, tolerance)


def _spread(ref: _Side, draws: Sequence[_Side], tolerance: float) -> dict[str, Any] | None:
    """The largest each metric reads between one of the reference's other draws and the
    reference itself; None without draws."""
    if not draws:
        return None
    measured = [_distances(d, ref, tolerance) for d in draws]

    def largest(i: int) -> float | None:
        known = [v for m in measured if (v := m[i]) is not None]
        return max(known) if known else None

    return {
        "draws": len(draws),
        "busbw_mean_ratio": largest(0),
        "busbw_cv_abs": largest(1),
        "ks_distance": largest(2),
    }


# Smirnov (1948): for two samples of n and m values drawn from one distribution, the KS
# distance exceeds c(a) sqrt((n + m) / (n m)) with probability a, where c(a) = sqrt(-ln(a / 2) / 2)
# (1.358 at a = 0.05: the asymptotic critical value every KS table gives). A smaller distance is
# one those samples cannot tell from chance, whatever the stated bound.
KS_ALPHA = 0.05


def ks_noise(n: int, m: int, alpha: float = KS_ALPHA) -> float | None:
    """The KS distance two samples of `n` and `m` values reach by chance with probability
    `alpha` (None when either is empty)."""
    if n <= 0 or m <= 0:
        return None
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def _beyond(
    value: float | None, stated: float, spread: float | None, noise: float | None = None
) -> str | None:
    """Why `value` is a deviation (beyond the stated bound, the model's spread and, for a
    sample statistic, what the samples can tell from chance), or None (also when it was not
    measured)."""
    if value is None or value <= stated or (spread is not None and value <= spread):
        return None
    if noise is not None and value <= noise:
        return None
    why = f"> {stated:.2f}"
    if spread is not None:
        why += f" and > {spread:.3f}, the reference's own draws' largest"
    if noise is not None:
        why += f", and > {noise:.3f}, what the two samples tell from chance (95%)"
    return why


def _compare_type(
    run: _Side, ref: _Side, draws: Sequence[_Side], bounds: ReferenceBounds
) -> dict[str, Any]:
    busbw = [_gbps(run.stats), _gbps(ref.stats)]
    cv = [_cv(run.stats), _cv(ref.stats)]
    ratio = busbw[0] / busbw[1] if busbw[0] is not None and busbw[1] else None
    ratio_off, cv_off, distance = _distances(run, ref, bounds.fct_tolerance)
    plain_distance = ks_distance(run.fcts, ref.fcts)
    spread = (
        _spread(ref, draws, bounds.fct_tolerance)
        if run.stats is not None and ref.stats is not None
        else None
    )
    model = spread or {}
    deviations: list[str] = []
    not_measured: list[str] = []
    if run.stats is None or ref.stats is None:
        deviations.append(
            f"{ONE_RUN_ONLY} (missing in the {'run' if run.stats is None else 'reference'})"
        )
    else:
        if why := _beyond(ratio_off, bounds.busbw_mean_ratio, model.get("busbw_mean_ratio")):
            deviations.append(
                f"busbw mean {busbw[0]:.2f} GB/s vs reference {busbw[1]:.2f} GB/s: ratio "
                f"{ratio:.3f}, off by {ratio_off:.3f} {why}"
            )
        if why := _beyond(cv_off, bounds.busbw_cv_abs, model.get("busbw_cv_abs")):
            deviations.append(
                f"busbw CV {cv[0]:.3f} vs reference {cv[1]:.3f}: differ by {cv_off:.3f} {why}"
            )
        noise = ks_noise(len(run.fcts), len(ref.fcts))
        if why := _beyond(distance, bounds.ks_distance, model.get("ks_distance"), noise):
            deviations.append(
                f"FCT distributions ({len(run.fcts)} vs {len(ref.fcts)} flows): KS distance "
                f"{distance:.3f} beyond {bounds.fct_tolerance:.0%} of FCT {why}"
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
        "fct_ks_distance": distance,  # forgiving bounds.fct_tolerance
        "fct_ks_distance_plain": plain_distance,
        # the distance these two samples reach by chance at 95% (ks_noise)
        "fct_ks_noise": ks_noise(len(run.fcts), len(ref.fcts)),
        "fct_count": [len(run.fcts), len(ref.fcts)],
        "cnps": [_get(run.stats, "cnps"), _get(ref.stats, "cnps")],
        "ecn_marks": [_get(run.stats, "ce_marks"), _get(ref.stats, "ce_marks")],
        "model_spread": spread,
        "deviations": deviations,
        "not_measured": not_measured,
    }


def compare_runs(
    run: RunTables,
    reference: RunTables,
    bounds: ReferenceBounds = ReferenceBounds(),
    draws: Sequence[RunTables] = (),
) -> dict[str, Any]:
    """Per collective type, the run's busbw, FCTs, CNPs and ECN marks against the reference's,
    with every difference beyond `bounds` named in `deviations` (JSON-ready; busbw in GB/s,
    10^9 bytes per second; None where a value cannot be measured, e.g. a CV of no instance).
    `draws`: the reference's other draws; with them a difference must also exceed the largest
    the draws read against the reference (`model_spread`) to count.
    `not_measured` names the judged metrics that could not be compared (None on either side), so
    an empty `deviations` is never mistaken for agreement on something neither run measured."""
    tables = (run, reference, *draws)
    stats = [collectives_summary(t) for t in tables]
    fcts = [_fcts_by_type(t) for t in tables]
    by_collective: dict[str, dict[str, Any]] = {}
    deviations: list[str] = []
    not_measured: list[str] = []
    for ctype in sorted(set(stats[0]) | set(stats[1])):
        sides = [_Side(s.get(ctype), f[ctype]) for s, f in zip(stats, fcts, strict=True)]
        row = _compare_type(sides[0], sides[1], sides[2:], bounds)
        by_collective[ctype] = row
        deviations += [f"{ctype}: {d}" for d in row["deviations"]]
        not_measured += [f"{ctype} {m}" for m in row["not_measured"]]
    job = _compare_job_time([job_time_s(t) for t in tables], bounds)
    deviations += job.pop("deviations")
    if job["ratio"] is None and by_collective:
        not_measured.append("job time")
    return {
        "bounds": dataclasses.asdict(bounds),
        "reference_draws": 1 + len(draws),
        "by_collective": by_collective,
        "job_time": job,
        "deviations": deviations,
        "not_measured": not_measured,
    }


def _compare_job_time(times: Sequence[float | None], bounds: ReferenceBounds) -> dict[str, Any]:
    """The run's job time (times[0]) against the reference's (times[1]), beyond the stated bound
    and the most any other draw (times[2:]) reads against the reference."""
    run, ref, *draws = times
    ratio = run / ref if run is not None and ref else None
    spread = [abs(d / ref - 1.0) for d in draws if d is not None and ref]
    model = max(spread) if spread else None
    deviations = []
    if ratio is not None and (why := _beyond(abs(ratio - 1.0), bounds.job_time_ratio, model)):
        assert run is not None and ref is not None
        deviations.append(
            f"job time {run * 1e3:.3f} ms vs reference {ref * 1e3:.3f} ms: ratio {ratio:.3f}, "
            f"off by {abs(ratio - 1.0):.3f} {why}"
        )
    return {
        "job_time_s": [run, ref],
        "ratio": ratio,
        "model_spread": model,
        "deviations": deviations,
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
        "KS D",  # beyond the FCT tolerance
        "CNPs run/ref",
        "marks run/ref",
    ]

    def spread(row: Mapping[str, Any], key: str, fmt: str) -> str:
        value = (row.get("model_spread") or {}).get(key)
        return "" if value is None else f" ({fmt.format(value)})"

    body = [
        [
            ctype,
            pair(row["busbw_mean_gbps"], "{:.2f}"),
            _fmt(row["busbw_mean_ratio"], "{:.3f}") + spread(row, "busbw_mean_ratio", "±{:.3f}"),
            pair(row["busbw_cv"], "{:.3f}") + spread(row, "busbw_cv_abs", "±{:.3f}"),
            _fmt(row["fct_ks_distance"], "{:.3f}") + spread(row, "ks_distance", "{:.3f}"),
            pair(row["cnps"], "{:.0f}"),
            pair(row["ecn_marks"], "{:.0f}"),
        ]
        for ctype, row in comparison["by_collective"].items()
    ]
    lines = _render(headers, body).splitlines()
    job = comparison.get("job_time") or {}
    if job.get("ratio") is not None:
        run_s, ref_s = job["job_time_s"]
        model = job.get("model_spread")
        lines.append(
            f"job time run/ref {run_s * 1e3:.3f}/{ref_s * 1e3:.3f} ms, ratio {job['ratio']:.3f}"
            + ("" if model is None else f" (±{model:.3f})")
        )
    if (draws := comparison.get("reference_draws", 1)) > 1:
        lines.append(
            f"(in parentheses: the most the simulation's {draws - 1} other draws read against "
            "the reference; a deviation must exceed it and the stated bound)"
        )
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
