"""The interference study's page: report.html of a study folder, from its study.json, study.txt
and plots: each check with its estimates, intervals and verdict, the runs (linking each one's own
page), the notes and the thresholds. Registered with the page kit as the "interference" page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.pages.kit import (
    badge,
    bullets,
    confidence_level,
    esc,
    facts,
    files_section,
    html_page,
    interval,
    load_json,
    method_note,
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
from emulator.studies.interference import STUDY_JSON, STUDY_TEXT


def _check(check: Mapping[str, Any], level: str) -> str:
    rows = [
        [side, number(check.get(side), "{:.3g}"), interval(check.get(f"{side}_ci"))]
        for side in ("alone", "mixed", "ratio")
    ]
    rows[2][0] = "mixed/alone" if check.get("mixed") is not None else "ratio"
    if check.get("ratio_undefined"):  # the alone value at its floor: the difference instead
        rows[2][1:] = ["undefined", "-"]
        rows.append(
            [
                "mixed - alone",
                number(check.get("difference"), "{:+.3g}"),
                interval(check.get("difference_ci")),
            ]
        )
    numbers = check.get("numbers") or {}
    return "\n".join(
        [
            f"<article><h3>{esc(check.get('name', '?'))} {badge(check.get('verdict', '?'))}</h3>",
            f"<p>{esc(check.get('question', ''))}</p>",
            facts(
                [
                    ("expected", check.get("expected", "-")),
                    ("threshold", number(check.get("threshold"), "{:g}")),
                ]
            ),
            table(["statistic", "estimate", f"{level} interval"], rows),
            f"<p>{esc(check.get('detail', ''))}</p>",
            f"<details><summary>numbers</summary>{facts(plain_items(numbers))}</details>"
            if numbers
            else "",
            "</article>",
        ]
    )


@register_page("interference")
def render_study_report(out_dir: Path) -> str:
    """The page of a study folder, from its study.json, study.txt and plots."""
    study = load_json(out_dir / STUDY_JSON)
    checks = study.get("checks") or []
    bootstrap = study.get("bootstrap") or {}
    shown = sum(c.get("verdict") == "shown" for c in checks)
    rows = [
        [
            role,
            run.get("repeat", "-"),
            run_link(out_dir, run.get("folder")),
            number(run.get("seed"), "{:.0f}"),
            number(run.get("tdf"), "{:g}"),
            "yes" if run.get("partial") else "no",
            badge((run.get("fidelity") or {}).get("verdict", "?")),
        ]
        for role, runs in (study.get("runs") or {}).items()
        for run in runs
    ]
    runs_table = table(
        ["role", "repeat", "folder", "seed", "TDF", "partial", "fidelity"], rows, (0, 2, 5, 6)
    )
    name = study.get("study") or "study"
    return html_page(
        f"{name} study: report",
        [
            f"<h1>Study: {esc(name)}</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            verdict_box(
                "Checks",
                "every check shown"
                if study.get("all_shown")
                else f"{shown} of {len(checks)} shown",
                tone="good" if study.get("all_shown") else "warn",
            ),
            section(
                "Checks",
                *(_check(c, confidence_level(bootstrap)) for c in checks),
                method_note(bootstrap),
            ),
            section("Runs", runs_table),
            section("Notes", bullets(study.get("notes") or [])),
            section("Thresholds", facts(plain_items(study.get("thresholds") or {}))),
            plots_section(out_dir),
            text_section(out_dir / STUDY_TEXT),
            files_section(out_dir),
        ],
    )


def write_study_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return write_page("interference", out_dir)
