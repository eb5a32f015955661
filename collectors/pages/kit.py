"""The page kit: the building blocks of every report.html, its escaping, and the pages' registry.

A page is one self-contained file for a results folder, a study or a series of seeds: it shows
what the command already wrote (summary.json, a study's JSON and text) and every PNG under
plots/, embedded as data: URIs, so it can be mailed or archived alone and read offline: no script,
no external stylesheet, font or URL. Every text taken from the JSON is escaped (esc; scenario
names and fidelity reasons are user input). Numbers use the units of the terminal tables
(collectors.report): busbw in GB/s, FCT in ms, job time in s.

Each page registers its renderer here under its kind (register_page: "run", a study's name), and
write_page writes a folder's page of a kind; the kit imports no page, so the run's page
(collectors.pages.run) and each study's (emulator.studies.*.page) depend on the kit, never the
other way round. Pages are written last by every run (emulator.run.execute, partial runs too),
study and series of seeds through write_or_warn, and a run's again by `emulate report DIR`
(emulator.commands.report).
"""

from __future__ import annotations

import base64
import html
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from collectors.results import PLOTS, SUMMARY, read_json_object, replace_file_atomically
from emulator.errors import InputError

REPORT_HTML = "report.html"
# Verdict -> CSS class; the class never comes from the JSON itself.
TONES = {
    "ok": "good",
    "shown": "good",
    "PASS": "good",
    "degraded": "bad",
    "FAIL": "bad",
    "not shown": "warn",
    "not measured": "warn",
}

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fff}
main{max-width:76rem;margin:0 auto;padding:1rem 1.5rem 3rem}
h1{font-size:1.6rem;margin:.5rem 0}h2{font-size:1.25rem;border-bottom:1px solid #ccc;margin-top:2rem}
h3{font-size:1.05rem;margin:1.2rem 0 .3rem}.meta{color:#555;margin:.2rem 0}
table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #ccc;padding:.25rem .55rem;vertical-align:top}
th{background:#f2f2f2;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict{padding:.6rem 1rem;border-left:.45rem solid;margin:1rem 0}.verdict strong{font-size:1.3rem}
.badge{padding:0 .4rem;border-left:.3rem solid;white-space:nowrap}
.good{border-color:#1a7f37;background:#e6f4ea}.bad{border-color:#c62828;background:#fdecea}
.warn{border-color:#b26a00;background:#fff4e0}.neutral{border-color:#777;background:#f2f2f2}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:.15rem 1rem}dl.facts dd{margin:0}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{color:#555}pre{overflow-x:auto;background:#f6f6f6;padding:.6rem}
"""


class Html(str):
    """Markup built here (already escaped): inserted as is, where any other str is escaped."""


def esc(value: Any) -> str:
    return value if isinstance(value, Html) else html.escape(str(value), quote=True)


def number(value: Any, fmt: str, scale: float = 1.0) -> str:
    """A number as the terminal tables print it (collectors.report): '-' for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if not isinstance(value, int | float):
        return str(value)
    return fmt.format(value * scale)


def plain_items(pairs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A key/value list (a check's numbers, thresholds): integers whole, floats to 6 digits."""
    return [
        (k, number(v, "{:.6g}") if not isinstance(v, int) else str(v)) for k, v in pairs.items()
    ]


def load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such file; the report page is written from it")
    return read_json_object(path)


def html_page(title: str, parts: Iterable[str]) -> str:
    head = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>"
    )
    return "\n".join([head, *(p for p in parts if p), "</main>\n</body>\n</html>\n"])


def section(title: str, *parts: str) -> str:
    """A titled section, left out ("") when every part is empty (a missing optional part)."""
    kept = [p for p in parts if p]
    return "\n".join(["<section>", f"<h2>{esc(title)}</h2>", *kept, "</section>"]) if kept else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], text: Iterable[int] = (0,)) -> str:
    """Columns `text` are words (left-aligned), the others numbers (right); "" without rows."""
    words = set(text)
    rows = list(rows)
    if not rows:
        return ""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    cell = ("<td>{}</td>", '<td class="num">{}</td>')
    body = "\n".join(
        "<tr>" + "".join(cell[i not in words].format(esc(c)) for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def facts(pairs: Iterable[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def bullets(items: Iterable[Any]) -> str:
    lines = [f"<li>{esc(i)}</li>" for i in items]
    return f"<ul>{''.join(lines)}</ul>" if lines else ""


def badge(verdict: Any, tones: Mapping[str, str] = TONES) -> Html:
    tone = tones.get(str(verdict), "neutral")
    return Html(f'<span class="badge {tone}">{esc(verdict)}</span>')


def verdict_box(label: str, verdict: Any, *parts: str, tone: str | None = None) -> str:
    tone = tone or TONES.get(str(verdict), "neutral")
    body = "".join(p for p in parts if p)
    return f'<div class="verdict {tone}"><p>{esc(label)}: <strong>{esc(verdict)}</strong></p>{body}</div>'


def link(href: str, text: Any) -> Html:
    return Html(f'<a href="{esc(quote(href))}">{esc(text)}</a>')


def _caption(relative: Path) -> str:
    return relative.with_suffix("").as_posix().replace("_", " ")


def plots_section(folder: Path) -> str:
    """Every PNG under folder/plots, sorted, embedded once as a data: URI."""
    plots = folder / PLOTS
    pngs = sorted(p for p in plots.rglob("*.png") if p.is_file()) if plots.is_dir() else []
    figures = []
    for png in pngs:
        caption = _caption(png.relative_to(plots))
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        figures.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)} ({esc(png.name)})</figcaption></figure>"
        )
    return section("Plots", *figures)


def files_section(folder: Path) -> str:
    """Links to the folder's other files (tables, JSON, text, scenario), relative."""
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name != REPORT_HTML
    )
    items = [Html(f"{link(p.name, p.name)} ({p.stat().st_size:,} bytes)") for p in files]
    return section("Files", bullets(items))


def text_section(path: Path) -> str:
    """A text file the command also wrote (study.txt, seeds.txt), folded: the terminal's view."""
    if not path.is_file():
        return ""
    return section(
        "As printed",
        f"<details><summary>{esc(path.name)}</summary><pre>{esc(path.read_text())}</pre></details>",
    )


def method_note(bootstrap: Mapping[str, Any]) -> str:
    get = bootstrap.get
    return (
        f"<p>{esc(confidence_level(bootstrap))} intervals: {esc(get('method', '?'))}, "
        f"B={esc(get('resamples', '?'))}, seed {esc(get('seed', '?'))}</p>"
    )


def confidence_level(bootstrap: Mapping[str, Any]) -> str:
    confidence = bootstrap.get("confidence")
    return f"{confidence:.0%}" if isinstance(confidence, int | float) else "confidence"


def _write(path: Path, page: str) -> Path:
    """0600 like the folder's other files, and atomically: a page rewritten by `emulate report`
    or cut short by a crash is the old page or the new one, never half of one."""
    replace_file_atomically(path, page.encode("utf-8"))
    return path


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_or_warn(
    write: Callable[[Path], Path],
    folder: Path,
    warn: Callable[[str], None] | None = None,
    again: str = "",
) -> Path | None:
    """write(folder) (a page's writer: write_run_report, a study's write_*_report): the page's
    path, or None after a warning through `warn` (default: a line on stderr) naming the page, why
    it is missing and `again`, how to write it again (e.g. "emulate report DIR").

    A warning, not an error: the page is a view of files already written and complete without
    it (summary.json, study.json, seeds.json, the plots). Raising would turn a finished run into
    a failed one and stop its caller (a study, a series of seeds) mid-way, for a page that can
    be written again from those files later. So any Exception (a full disk, a permission, a
    renderer bug on an unforeseen summary) is said, not raised; KeyboardInterrupt and SystemExit
    still propagate."""
    try:
        return write(folder)
    except Exception as exc:  # said as a warning: see above
        (warn or _stderr)(
            f"warning: {folder / REPORT_HTML}: not written ({type(exc).__name__}: {exc}); "
            "the other results files are complete without it"
            + (f"; `{again}` writes it again" if again else "")
        )
        return None


# -- what a study's page shows of its runs and estimates ----------------------------------


def interval(ci: Any, fmt: str = "{:.3g}") -> str:
    """'[0.664, 2.27]' ('-' for none), as the studies' text prints an interval
    (emulator.studies.stats.formatting.fmt_interval)."""
    if not isinstance(ci, Sequence) or len(ci) != 2:
        return "-"
    return f"[{number(ci[0], fmt)}, {number(ci[1], fmt)}]"


def divided(value: Any, divisor: float) -> Any:
    """A JSON number (or interval) in its display unit: divided by the unit, as the studies'
    text does (a series of seeds' estimates, the jobs study's metrics)."""
    if isinstance(value, list):
        return [divided(v, divisor) for v in value]
    return value / divisor if isinstance(value, int | float) else value


def _inside(out_dir: Path, folder: Any) -> str | None:
    """A run's folder relative to out_dir when it lies inside: its recorded path, or the longest
    tail of it that is a results folder there (so a moved study keeps its links); else None."""
    if not folder:
        return None
    path, base = Path(str(folder)), out_dir.resolve()
    try:
        return (Path.cwd() / path).resolve().relative_to(base).as_posix()
    except ValueError:
        pass
    parts = path.parts
    for k in range(1 if path.is_absolute() else 0, len(parts)):
        if (out_dir.joinpath(*parts[k:]) / SUMMARY).is_file():
            return Path(*parts[k:]).as_posix()
    return None


def run_link(out_dir: Path, folder: Any) -> Any:
    """A link to a run's folder inside out_dir (to its page when it has one), else its path."""
    rel = _inside(out_dir, folder)
    if rel is None:
        return folder or "-"
    has_page = (out_dir / rel / REPORT_HTML).is_file()
    return link(f"{rel}/{REPORT_HTML}" if has_page else f"{rel}/", rel)


# -- the pages' registry ------------------------------------------------------------------

# Renders a folder's page: folder -> the page's HTML.
Renderer = Callable[[Path], str]
# Page kind ("run", "interference", ...) -> its renderer. Filled by each page module as it is
# imported (register_page), so the kit needs to know no page, and no study.
_PAGES: dict[str, Renderer] = {}


def register_page(kind: str) -> Callable[[Renderer], Renderer]:
    """A decorator: the renderer of `kind`'s pages."""

    def register(render: Renderer) -> Renderer:
        _PAGES[kind] = render
        return render

    return register


def render_page(kind: str, folder: Path) -> str:
    """The page of `kind` for a folder, from its registered renderer."""
    render = _PAGES.get(kind)
    if render is None:
        known = ", ".join(sorted(_PAGES)) or "none"
        raise LookupError(f"no page registered for {kind!r} (registered: {known})")
    return render(folder)


def write_page(kind: str, folder: Path) -> Path:
    """Write folder/report.html, the page of `kind` (0600, atomically); return its path."""
    return _write(folder / REPORT_HTML, render_page(kind, folder))
