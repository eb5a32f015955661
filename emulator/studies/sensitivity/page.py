"""The sensitivity study's page: report.html of a sensitivity study folder, from its
sensitivity.json, sensitivity.txt and plot: each verdict, the time per collective type at each
rate with its slowdown, the mean instance duration and the runs (linking each rate's run and its
page inside the folder). Registered with the page kit as the "sensitivity" page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collectors.pages.kit import (
    badge,
    bullets,
    esc,
    facts,
    files_section,
    html_page,
    load_json,
    number,
    plain_items,
    plots_section,
    register_page,
    run_link,
    section,
    table,
    text_section,
    verdict_box,
    write_page,
)
from emulator.studies.sensitivity import SENSITIVITY_JSON, SENSITIVITY_TEXT


def _ratio(num: Any, den: Any) -> float | None:
    ok = isinstance(num, int | float) and isinstance(den, int | float) and den
    return num / den if ok else None


def _rate_tables(rows: Mapping[str, Mapping[str, Any]], rates: Sequence[Any]) -> tuple[str, str]:
    """sensitivity.txt's two tables (text.render_text), the same columns and
    numbers: time per collective type and the job at each rate with its slowdown, the plan's and
    the rate ratio; the mean instance duration per type."""
    ref, others = rates[0], rates[1:]
    heads = ["collective", "verdict", f"{number(ref, '{:g}')}G ms"]
    for rate in others:
        heads += [f"{number(rate, '{:g}')}G ms", "slowdown", "plan", "expected"]
    body, means = [], []
    for name, row in rows.items():
        given = [p if p.get("measured") else {} for p in row.get("by_rate") or []]
        points = (given + [{}] * len(rates))[: len(rates)]  # {}: not measured at that rate
        cells = [name, row.get("verdict", "?"), number(points[0].get("time_s"), "{:.3f}", 1e3)]
        for p, rate in zip(points[1:], others, strict=True):
            cells += [
                number(p.get("time_s"), "{:.3f}", 1e3),
                number(p.get("slowdown"), "{:.2f}x"),
                number(p.get("plan_slowdown"), "{:.2f}x"),
                number(_ratio(ref, rate), "{:.2f}x"),
            ]
        body.append(cells)
        if name != "job":
            means.append(
                [
                    name,
                    " / ".join(number(p.get("instances"), "{:.0f}") for p in points),
                    *(number(p.get("mean_s") or None, "{:.2f}", 1e6) for p in points),
                    *(number(p.get("mean_slowdown"), "{:.2f}x") for p in points[1:]),
                ]
            )
    mean_heads = ["collective", "instances", *(f"{number(r, '{:g}')}G us" for r in rates)]
    mean_heads += [f"x at {number(r, '{:g}')}G" for r in others]
    return table(heads, body, (0, 1)), table(mean_heads, means)


@register_page("sensitivity")
def render_sensitivity_report(out_dir: Path) -> str:
    """The page of a sensitivity study folder, from its sensitivity.json, sensitivity.txt and
    plot, linking each rate's run (and its page) inside the folder."""
    doc = load_json(out_dir / SENSITIVITY_JSON)
    runs = doc.get("runs") or []
    rates = [r.get("host_link_gbps") for r in runs]
    ref = number(doc.get("reference_gbps"), "{:g}")
    rows = {**(doc.get("collectives") or {}), "job": doc.get("job") or {}}
    times, means = _rate_tables(rows, rates) if rates else ("", "")
    run_rows = [
        [
            run_link(out_dir, r.get("folder")),
            f"{number(r.get('host_link_gbps'), '{:g}')} / {number(r.get('fabric_link_gbps'), '{:g}')}",
            r.get("backend") or "-",
            number(r.get("tdf"), "{:g}") if r.get("backend") != "sim" else "-",
            number(r.get("job_time_s"), "{:.3f}", 1e3),
            number(r.get("ideal_job_time_s"), "{:.3f}", 1e3),
            "yes" if r.get("partial") else "no",
            badge(r.get("fidelity") or "?"),
        ]
        for r in runs
    ]
    run_heads = ["run", "host / fabric Gb/s", "backend", "tdf", "job ms", "plan job ms"]
    name = doc.get("study") or "sensitivity"
    return html_page(
        f"{name} study: report",
        [
            f"<h1>Study: {esc(name)}</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            facts(
                [
                    ("scenario", doc.get("scenario") or "reused runs"),
                    ("link rates", f"{', '.join(number(r, '{:g}') for r in rates)} Gb/s"),
                    ("reference", f"{ref} Gb/s"),
                ]
            ),
            section(
                "Verdicts",
                *(
                    verdict_box(
                        ctype, row.get("verdict", "?"), f"<p>{esc(row.get('detail', ''))}</p>"
                    )
                    for ctype, row in rows.items()
                ),
                facts(plain_items(doc.get("tolerance") or {})),
            ),
            section(
                "Time per collective type",
                "<p>time: the sum of a type's complete instances' durations "
                f"({esc(doc.get('duration') or '?')}), the job's time for the job; slowdown = "
                f"time / time at {esc(ref)} Gb/s; expected = {esc(ref)} / rate (bandwidth-bound); "
                "plan = the congestion-free plan's own slowdown.</p>"
                if times
                else "",
                times,
            ),
            section("Mean instance duration", means),
            section("Runs", table([*run_heads, "partial", "fidelity"], run_rows, (0, 2, 6, 7))),
            section("Notes", bullets(doc.get("notes") or [])),
            plots_section(out_dir),
            text_section(out_dir / SENSITIVITY_TEXT),
            files_section(out_dir),
        ],
    )


def write_sensitivity_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return write_page("sensitivity", out_dir)
