"""The jobs study's text (jobs.txt and the terminal): per job, collective type and metric the
estimates alone and together with their intervals, together / alone and the effect of the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulator.studies.jobs.analysis import (
    MATERIAL_CHANGE,
    MATERIAL_CV,
    METRICS,
    JobsRun,
    MetricRow,
)
from emulator.studies.stats.bootstrap import BOOTSTRAP_METHOD
from emulator.studies.stats.estimates import Comparison
from emulator.studies.stats.flags import flagged_notes
from emulator.studies.stats.formatting import fmt_interval, fmt_ratio
from emulator.studies.stats.verdict import DEFAULT_THRESHOLDS


def render(
    runs: Sequence[JobsRun],
    rows: Sequence[MetricRow],
    scenario: Path,
    include_flagged: bool = False,
) -> str:
    from collectors.report import _render

    labels = {m: (label, scale, spec) for m, (label, scale, spec, *_) in METRICS.items()}
    labels["job_time"] = ("job time ms", 1e3, ".3f")
    body = []
    for row in rows:
        label, scale, spec = labels[row.metric]
        c = row.comparison

        def scaled(e: Any, scale: float = scale, spec: str = spec) -> str:
            interval = (
                None if e.interval is None else (e.interval[0] * scale, e.interval[1] * scale)
            )
            point = None if e.point is None else e.point * scale
            return fmt_interval(point, interval, spec)

        body.append(
            [
                row.job,
                row.collective,
                label,
                scaled(c.alone),
                scaled(c.mixed),
                _ratio_cell(c, scale, spec),
                row.effect,
            ]
        )
    headers = ["job", "collective", "metric", "alone", "together", "together/alone", "effect"]
    repeats = max((r.seed for r in runs), default=0) - min((r.seed for r in runs), default=0) + 1
    lines = [
        f"jobs study of {scenario}: each job alone on its hosts vs all together, "
        f"{repeats} repeat(s); 95% intervals: {BOOTSTRAP_METHOD}",
        "",
        _render(headers, body, left=3),
        "",
        "effect: what the other jobs do to this one: shown when the interval of together/alone "
        f"lies beyond 1 on the worse side and the change is at least {MATERIAL_CHANGE:.0%} (a "
        f"busbw CV: and at least {MATERIAL_CV} together), over at least "
        f"{DEFAULT_THRESHOLDS.repeats_min} repeats a side; a ratio over an alone CV at its floor "
        "is undefined, and the difference together - alone is judged",
    ]
    flagged = [(r.name, r.flags) for r in runs if r.flags]
    lines += [f"note: {n}" for n in flagged_notes(flagged, include_flagged)]
    return "\n".join(lines)


def _ratio_cell(c: Comparison, scale: float, spec: str) -> str:
    """together/alone, or where it is undefined the difference in the metric's unit."""
    if c.ratio_undefined is None:
        return fmt_interval(c.ratio, c.ratio_interval, ".3f")
    diff = c.difference_interval
    return fmt_ratio(
        None,
        None,
        c.ratio_undefined,
        None if c.difference is None else c.difference * scale,
        None if diff is None else (diff[0] * scale, diff[1] * scale),
        spec,
    )
