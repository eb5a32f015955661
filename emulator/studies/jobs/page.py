"""The jobs study's page: report.html of a jobs study folder, from its jobs.json and jobs.txt:
per job the effect of the other jobs, each metric alone and together with its interval, and the
runs (linking each one's own page). Registered with the page kit as the "jobs" page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.pages.kit import (
    badge,
    bullets,
    divided,
    esc,
    facts,
    files_section,
    html_page,
    interval,
    load_json,
    number,
    plots_section,
    register_page,
    run_link,
    section,
    table,
    text_section,
    verdict_box,
    write_page,
)
from emulator.studies.jobs import JOBS_JSON, JOBS_TEXT

# jobs.json metric -> (label, divisor, format), as jobs.txt prints them (analysis.METRICS).
JOBS_METRICS: dict[str, tuple[str, float, str]] = {
    "busbw_mean": ("busbw mean GB/s", 1e9, "{:.2f}"),
    "busbw_cv": ("busbw CV", 1.0, "{:.3f}"),
    "fct_p50": ("FCT p50 us", 1e-6, "{:.1f}"),
    "fct_p99": ("FCT p99 us", 1e-6, "{:.1f}"),
    "job_time": ("job time ms", 1e-3, "{:.3f}"),
}
# The effect of the other jobs on one -> CSS class: an effect shown is harm done to
# the job (its "shown" is not the interference study's claim confirmed, hence not kit.TONES).
EFFECT_TONES = {"shown": "bad", "not shown": "good", "not measurable": "warn"}


def _jobs_metric_row(m: Mapping[str, Any]) -> list[Any]:
    """One jobs.json metric: alone, together and together/alone, each with its interval, in the
    units of jobs.txt, and the effect of the other jobs as a badge."""
    label, divisor, fmt = JOBS_METRICS.get(str(m.get("metric")), (m.get("metric"), 1.0, "{:.4g}"))
    cells: list[Any] = [m.get("job"), m.get("collective"), label]
    sides = (("alone", divisor, fmt), ("together", divisor, fmt))
    for side, by, spec in (*sides, ("together_over_alone", 1.0, "{:.3f}")):
        value = m.get(side) or {}
        cells += [
            number(divided(value.get("value"), by), spec),
            interval(divided(value.get("interval"), by), spec),
        ]
    if m.get("ratio_undefined"):  # the alone value at its floor: the difference instead
        diff = m.get("together_minus_alone") or {}
        cells[-2:] = [
            f"undefined; difference {number(divided(diff.get('value'), divisor), fmt)}",
            interval(divided(diff.get("interval"), divisor), fmt),
        ]
    return [*cells, badge(m.get("effect_of_the_others", "?"), EFFECT_TONES)]


def _effect_line(text: Path) -> str:
    """jobs.txt's footer line saying what "effect" means; "" without the file."""
    lines = text.read_text().splitlines() if text.is_file() else []
    return next((f"<p>{esc(line)}</p>" for line in lines if line.startswith("effect:")), "")


@register_page("jobs")
def render_jobs_report(out_dir: Path) -> str:
    """The page of a jobs study folder, from its jobs.json and jobs.txt, linking each run's."""
    doc = load_json(out_dir / JOBS_JSON)
    metrics = doc.get("metrics") or []
    runs = doc.get("runs") or []
    jobs = list(dict.fromkeys(str(m.get("job")) for m in metrics))
    verdicts = []
    for job in jobs:
        effects = [m.get("effect_of_the_others") for m in metrics if str(m.get("job")) == job]
        shown = effects.count("shown")
        tone = "bad" if shown else "good" if "not shown" in effects else "warn"
        verdict = f"shown in {shown} of {len(effects)} measures"
        verdicts.append(verdict_box(f"{job}: effect of the other jobs", verdict, tone=tone))
    heads = ["job", "collective", "metric", "alone", "95% interval", "together", "95% interval"]
    heads += ["together/alone", "95% interval", "effect"]
    run_rows = [
        [
            r.get("condition"),
            number(r.get("seed"), "{:.0f}"),
            run_link(out_dir, r.get("folder")),
            "yes" if r.get("partial") else "no",
            badge(r.get("verdict") or "?"),
        ]
        for r in runs
    ]
    flagged = [
        f"{r.get('condition')}-seed{r.get('seed')} ({'; '.join(r.get('flags') or [])})"
        for r in runs
        if r.get("flags")
    ]
    flagged_what = (
        "flagged, and judged (--include-flagged)"
        if doc.get("include_flagged")
        else "flagged, and left out of every measure"
    )
    return html_page(
        "jobs study: report",
        [
            "<h1>Study: jobs</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            facts(
                [
                    ("scenario", doc.get("scenario") or "-"),
                    ("jobs", ", ".join(jobs) or "-"),
                    ("repeats", len({r.get("seed") for r in runs})),
                    ("conditions", "all jobs together, and each job alone on its hosts"),
                ]
            ),
            *verdicts,
            section(
                "Each job alone and together",
                table(heads, map(_jobs_metric_row, metrics), (0, 1, 2, 9)),
                _effect_line(out_dir / JOBS_TEXT),
                f"<p>95% intervals: {esc(doc.get('bootstrap') or '?')}</p>" if metrics else "",
            ),
            section(
                "Runs",
                table(
                    ["condition", "seed", "folder", "partial", "fidelity"], run_rows, (0, 2, 3, 4)
                ),
                bullets([f"{flagged_what}: {'; '.join(flagged)}"] if flagged else []),
            ),
            plots_section(out_dir),
            text_section(out_dir / JOBS_TEXT),
            files_section(out_dir),
        ],
    )


def write_jobs_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return write_page("jobs", out_dir)
