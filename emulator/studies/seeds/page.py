"""A series of seeds' page: report.html of a seeds folder, from its seeds.json and seeds.txt:
each estimate with its interval, and the runs (linking each seed's own page). Registered with the
page kit as the "seeds" page.
"""

from __future__ import annotations

from pathlib import Path

from collectors.pages.kit import (
    badge,
    confidence_level,
    divided,
    esc,
    files_section,
    html_page,
    interval,
    load_json,
    method_note,
    number,
    plots_section,
    register_page,
    run_link,
    section,
    table,
    text_section,
    write_page,
)
from emulator.studies.seeds import RUN_FOLDER, SEEDS_JSON, SEEDS_TEXT

# seeds.json measure -> (unit, divisor), as seeds.txt prints them (series: each Measure's scale).
SEED_UNITS: dict[str, tuple[str, float]] = {
    "busbw_mean_bytes_per_s": ("GB/s", 1e9),
    "fct_p50_s": ("us", 1e-6),
    "fct_p99_s": ("us", 1e-6),
    "job_time_s": ("ms", 1e-3),
}


@register_page("seeds")
def render_seeds_report(out_dir: Path) -> str:
    """The page of a series of seeds, from its seeds.json and seeds.txt, linking each run's."""
    doc = load_json(out_dir / SEEDS_JSON)
    bootstrap = doc.get("bootstrap") or {}
    level = confidence_level(bootstrap)
    rows = []
    for group, measures in (doc.get("estimates") or {}).items():
        for name, e in measures.items():
            unit, divisor = SEED_UNITS.get(name, ("", 1.0))
            point, ci = divided(e.get("point"), divisor), divided(e.get("ci"), divisor)
            rows.append(
                [
                    "per run" if group == "run" else group,
                    name,
                    number(point, "{:.4g}"),
                    interval(ci, "{:.4g}"),
                    unit,
                    number(e.get("seeds"), "{:.0f}"),
                    number(e.get("units"), "{:.0f}"),
                ]
            )
    estimates = table(
        ["of", "measure", "estimate", f"{level} interval", "unit", "seeds", "units"],
        rows,
        (0, 1, 4),
    )
    runs = [
        [
            number(r.get("seed"), "{:.0f}"),
            run_link(out_dir, r.get("folder") or RUN_FOLDER.format(seed=r.get("seed"))),
            "yes" if r.get("partial") else "no",
            badge(r.get("fidelity") or "?"),
        ]
        for r in doc.get("runs") or []
    ]
    seeds = doc.get("seeds") or []
    return html_page(
        "seeds: report",
        [
            f"<h1>Seeds: {len(seeds)} runs</h1>",
            f'<p class="meta">{esc(out_dir.name)}, backend {esc(doc.get("backend") or "?")}, seeds {esc(", ".join(map(str, seeds)))}</p>',
            section("Estimates", estimates, method_note(bootstrap) if rows else ""),
            section("Runs", table(["seed", "folder", "partial", "fidelity"], runs, (1, 2, 3))),
            plots_section(out_dir),
            text_section(out_dir / SEEDS_TEXT),
            files_section(out_dir),
        ],
    )


def write_seeds_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return write_page("seeds", out_dir)
