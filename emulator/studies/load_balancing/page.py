"""The load-balancing study's page: report.html of a study folder, from its study.json, study.txt
and plots: the checks with their verdicts and numbers, every condition's metrics with their
intervals and against the baseline, the runs (linking each one's own page), the notes and the
thresholds. Registered with the page kit as the "load_balancing" page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.pages.kit import (
    badge,
    bullets,
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
from emulator.studies.load_balancing import STUDY_JSON, STUDY_TEXT
from emulator.studies.load_balancing.analysis import METRICS, RUN

KIND = "load_balancing"


def _check(check: Mapping[str, Any]) -> str:
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
            f"<p>{esc(check.get('detail', ''))}</p>",
            f"<details><summary>numbers</summary>{facts(plain_items(numbers))}</details>"
            if numbers
            else "",
            "</article>",
        ]
    )


def _versus(value: Mapping[str, Any] | None) -> list[str]:
    if not value:
        return ["-", "-"]
    if value.get("ratio_undefined"):
        return [
            "difference " + number(value.get("difference"), "{:+.4g}"),
            interval(value.get("difference_interval"), "{:.4g}"),
        ]
    return [number(value.get("ratio"), "{:.3f}"), interval(value.get("interval"), "{:.3f}")]


def _metrics(study: Mapping[str, Any]) -> str:
    rows = []
    conditions = study.get("conditions") or {}
    for key, metric in METRICS.items():
        fmt = "{:" + metric.fmt + "}"
        whats = sorted(
            {w for c in conditions.values() for w in (c.get("metrics") or {}).get(key, {})}
        )
        for what in whats:
            for name, condition in conditions.items():
                cell = ((condition.get("metrics") or {}).get(key) or {}).get(what)
                if cell is None:
                    continue
                rows.append(
                    [
                        metric.label,
                        "" if what == RUN else what,
                        name,
                        number(cell.get("value"), fmt),
                        interval(cell.get("interval"), fmt),
                        *_versus(cell.get("versus_baseline")),
                    ]
                )
    baseline = study.get("baseline", "baseline")
    headers = ["metric", "of", "condition", "value", "interval", f"vs {baseline}", "interval"]
    return table(headers, rows, (0, 1, 2))


def _runs(out_dir: Path, study: Mapping[str, Any]) -> str:
    rows = [
        [
            name,
            run.get("repeat", "-"),
            run_link(out_dir, run.get("folder")),
            number(run.get("seed"), "{:.0f}"),
            number(run.get("tdf"), "{:g}"),
            "yes" if run.get("partial") else "no",
            badge(run.get("fidelity") or "?"),
            ("yes (resends waived)" if run.get("flags_waived") else "yes")
            if run.get("judged")
            else "no (flagged)",
        ]
        for name, condition in (study.get("conditions") or {}).items()
        for run in condition.get("runs") or []
    ]
    headers = ["condition", "repeat", "folder", "seed", "TDF", "partial", "fidelity", "judged"]
    return table(headers, rows, (0, 2, 5, 6, 7))


@register_page(KIND)
def render_study_report(out_dir: Path) -> str:
    study = load_json(out_dir / STUDY_JSON)
    checks = study.get("checks") or []
    shown = sum(c.get("verdict") == "shown" for c in checks)
    return html_page(
        "load-balancing study: report",
        [
            "<h1>Study: load balancing</h1>",
            f'<p class="meta">{esc(out_dir.name)}; scenario {esc(study.get("scenario") or "reused runs")}; '
            f"balancing tiers {esc(', '.join(study.get('balancing_tiers') or []) or '-')}; "
            f"collectives.sport_policy {esc(study.get('sport_policy') or '-')}</p>",
            verdict_box(
                "Checks",
                "every check shown"
                if study.get("all_shown")
                else f"{shown} of {len(checks)} shown",
                tone="good" if study.get("all_shown") else "warn",
            ),
            section(
                "Checks", *(_check(c) for c in checks), method_note(study.get("bootstrap") or {})
            ),
            section("Conditions", _metrics(study)),
            section("Runs", _runs(out_dir, study), f"<p>{esc(study.get('resend_rule', ''))}</p>"),
            section("Notes", bullets(study.get("notes") or [])),
            section("Thresholds", facts(plain_items(study.get("thresholds") or {}))),
            plots_section(out_dir),
            text_section(out_dir / STUDY_TEXT),
            files_section(out_dir),
        ],
    )


def write_study_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return write_page(KIND, out_dir)
