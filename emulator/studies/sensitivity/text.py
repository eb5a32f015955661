"""The sensitivity study's text (sensitivity.txt and the terminal): the runs, the time per
collective type and the job at each rate with its slowdown, the plan's and the rate ratio, the
mean instance duration, and each verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from emulator.studies.sensitivity.analysis import RateRun, Row, Tolerance


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def render_text(
    out_dir: Path,
    scenario: Path | None,
    runs: Sequence[RateRun],
    rows: Sequence[Row],
    job: Row,
    notes: Sequence[str],
    tolerance: Tolerance,
    plot: Path,
) -> str:
    from collectors.report import _render

    ref = runs[0].host_link_gbps
    run_body = [
        [
            str(r.folder.relative_to(out_dir) if r.folder.is_relative_to(out_dir) else r.folder),
            f"{r.host_link_gbps:g} / {r.fabric_link_gbps:g}",
            str(r.backend or "-"),
            _num(r.tdf, "{:g}") if r.backend != "sim" else "-",
            _num(None if r.job_time_s is None else r.job_time_s * 1e3, "{:.3f}"),
            _num(None if r.ideal_job_time_s is None else r.ideal_job_time_s * 1e3, "{:.3f}"),
            r.fidelity + (" partial" if r.partial else ""),
        ]
        for r in runs
    ]
    run_headers = [
        "run",
        "host / fabric Gb/s",
        "backend",
        "tdf",
        "job ms",
        "plan job ms",
        "fidelity",
    ]
    heads = ["collective", "verdict", f"{ref:g}G ms"]
    for r in runs[1:]:
        heads += [f"{r.host_link_gbps:g}G ms", "slowdown", "plan", "expected"]
    body = []
    for row in (*rows, job):
        first = row.points[0]
        cells = [row.name, row.verdict, _num(first.time_s * 1e3 if first else None, "{:.3f}")]
        for p, r in zip(row.points[1:], runs[1:], strict=True):
            expected = ref / r.host_link_gbps
            cells += [
                _num(p.time_s * 1e3 if p else None, "{:.3f}"),
                _num(p.slowdown if p else None, "{:.2f}x"),
                _num(p.plan_slowdown if p else None, "{:.2f}x"),
                f"{expected:.2f}x",
            ]
        body.append(cells)
    mean_heads = ["collective", "instances", *(f"{r.host_link_gbps:g}G us" for r in runs)]
    mean_heads += [f"x at {r.host_link_gbps:g}G" for r in runs[1:]]
    mean_body = [
        [
            row.name,
            " / ".join(str(p.instances) if p else "-" for p in row.points),
            *(_num(p.mean_s * 1e6 if p and p.mean_s else None, "{:.2f}") for p in row.points),
            *(_num(p.mean_slowdown if p else None, "{:.2f}x") for p in row.points[1:]),
        ]
        for row in rows
    ]
    t = tolerance
    return "\n".join(
        [
            f"sensitivity study: {out_dir}",
            f"scenario {scenario or 'reused runs'}; reference {ref:g} Gb/s; slowdown = time / "
            f"time at {ref:g} Gb/s; expected = {ref:g} / rate (bandwidth-bound); plan = the "
            "congestion-free plan's own slowdown",
            "",
            _render(run_headers, run_body),
            "",
            "time per collective type (sum of complete instances' durations, all members "
            "entered -> last byte) and the job:",
            _render(heads, body, left=2),
            "",
            "mean instance duration:",
            _render(mean_heads, mean_body),
            "",
            f"verdicts: f = (slowdown - 1) / (expected - 1) of the mean instance, the share of the "
            f"time at {ref:g} Gb/s that scales with 1/rate, at the rate farthest from it; "
            f"bandwidth-bound {t.bandwidth_bound_min_share:g} <= f <= "
            f"{t.bandwidth_bound_max_share:g}, latency/compute-bound f < "
            f"{t.latency_bound_max_share:g}, partly between",
            *(f"  {row.name}: {row.verdict}: {row.detail}" for row in (*rows, job)),
            *([""] + [f"note: {n}" for n in notes] if notes else []),
            "",
            f"plot: {plot}",
        ]
    )
