"""report.html: one self-contained page for a results folder, a study or a series of seeds.

The page shows what the run, study or seeds command already wrote (summary.json, study.json,
sensitivity.json, jobs.json, seeds.json) and every PNG under plots/, embedded as data: URIs, so it can be
mailed or archived alone and read offline: no script, no external stylesheet, font or URL. Every
text taken from the JSON is escaped (scenario names and fidelity reasons are user input). Numbers
use the units of the terminal tables (collectors.report): busbw in GB/s, FCT in ms, job time in s.

Written last by every run (emulator.run.execute, partial runs too), a series of seeds
(emulator.seeds) and a study (emulator.study, emulator.sensitivity, emulator.jobs_study) through
write_or_warn, and
a run's again by `emulate report DIR` (emulator.commands.report).
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

from collectors.report import TYPE_COLUMNS
from collectors.results import PLOTS, SUMMARY, read_json_object, replace_file_atomically
from emulator.errors import InputError

REPORT_HTML = "report.html"
# The names emulator.study, emulator.seeds, emulator.sensitivity and emulator.jobs_study write
# (not imported: they import this module).
STUDY_JSON, STUDY_TEXT = "study.json", "study.txt"
SEEDS_JSON, SEEDS_TEXT = "seeds.json", "seeds.txt"
SENSITIVITY_JSON, SENSITIVITY_TEXT = "sensitivity.json", "sensitivity.txt"
JOBS_JSON, JOBS_TEXT = "jobs.json", "jobs.txt"

# The collective table: the terminal's columns (collectors.report) and the ECN marks.
HTML_TYPE_COLUMNS = (*TYPE_COLUMNS, ("ECN marks", "ce_marks", 1.0, "{:.0f}"))
# seeds.json measure -> (unit, divisor), as emulator.seeds prints them.
SEED_UNITS: dict[str, tuple[str, float]] = {
    "busbw_mean_bytes_per_s": ("GB/s", 1e9),
    "fct_p50_s": ("us", 1e-6),
    "fct_p99_s": ("us", 1e-6),
    "job_time_s": ("ms", 1e-3),
}
# jobs.json metric -> (label, divisor, format), as emulator.jobs_study prints them (its METRICS).
JOBS_METRICS: dict[str, tuple[str, float, str]] = {
    "busbw_mean": ("busbw mean GB/s", 1e9, "{:.2f}"),
    "busbw_cv": ("busbw CV", 1.0, "{:.3f}"),
    "fct_p50": ("FCT p50 us", 1e-6, "{:.1f}"),
    "fct_p99": ("FCT p99 us", 1e-6, "{:.1f}"),
    "job_time": ("job time ms", 1e-3, "{:.3f}"),
}
# The jobs study's effect of the other jobs on one -> CSS class: an effect shown is harm done to
# the job (its "shown" is not the interference study's claim confirmed, hence not TONES).
EFFECT_TONES = {"shown": "bad", "not shown": "good", "not measurable": "warn"}
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


def _num(value: Any, fmt: str, scale: float = 1.0) -> str:
    """A number as the terminal tables print it (collectors.report): '-' for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if not isinstance(value, int | float):
        return str(value)
    return fmt.format(value * scale)


def _plain_items(pairs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A key/value list (a check's numbers, thresholds): integers whole, floats to 6 digits."""
    return [(k, _num(v, "{:.6g}") if not isinstance(v, int) else str(v)) for k, v in pairs.items()]


def _load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such file; the report page is written from it")
    return read_json_object(path)


def _page(title: str, parts: Iterable[str]) -> str:
    head = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>"
    )
    return "\n".join([head, *(p for p in parts if p), "</main>\n</body>\n</html>\n"])


def _section(title: str, *parts: str) -> str:
    """A titled section, left out ("") when every part is empty (a missing optional part)."""
    kept = [p for p in parts if p]
    return "\n".join(["<section>", f"<h2>{esc(title)}</h2>", *kept, "</section>"]) if kept else ""


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], text: Iterable[int] = (0,)
) -> str:
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


def _facts(pairs: Iterable[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def _list(items: Iterable[Any]) -> str:
    lines = [f"<li>{esc(i)}</li>" for i in items]
    return f"<ul>{''.join(lines)}</ul>" if lines else ""


def _badge(verdict: Any, tones: Mapping[str, str] = TONES) -> Html:
    tone = tones.get(str(verdict), "neutral")
    return Html(f'<span class="badge {tone}">{esc(verdict)}</span>')


def _verdict(label: str, verdict: Any, *parts: str, tone: str | None = None) -> str:
    tone = tone or TONES.get(str(verdict), "neutral")
    body = "".join(p for p in parts if p)
    return f'<div class="verdict {tone}"><p>{esc(label)}: <strong>{esc(verdict)}</strong></p>{body}</div>'


def _link(href: str, text: Any) -> Html:
    return Html(f'<a href="{esc(quote(href))}">{esc(text)}</a>')


def _caption(relative: Path) -> str:
    return relative.with_suffix("").as_posix().replace("_", " ")


def _plots(folder: Path) -> str:
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
    return _section("Plots", *figures)


def _files(folder: Path) -> str:
    """Links to the folder's other files (tables, JSON, text, scenario), relative."""
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name != REPORT_HTML
    )
    items = [Html(f"{_link(p.name, p.name)} ({p.stat().st_size:,} bytes)") for p in files]
    return _section("Files", _list(items))


def _text_file(path: Path) -> str:
    """A text file the command also wrote (study.txt, seeds.txt), folded: the terminal's view."""
    if not path.is_file():
        return ""
    return _section(
        "As printed",
        f"<details><summary>{esc(path.name)}</summary><pre>{esc(path.read_text())}</pre></details>",
    )


def _method(bootstrap: Mapping[str, Any]) -> str:
    get = bootstrap.get
    return (
        f"<p>{esc(_level(bootstrap))} intervals: {esc(get('method', '?'))}, "
        f"B={esc(get('resamples', '?'))}, seed {esc(get('seed', '?'))}</p>"
    )


def _level(bootstrap: Mapping[str, Any]) -> str:
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
    """write(folder) (write_run_report, write_study_report, write_seeds_report): the page's path,
    or None after a warning through `warn` (default: a line on stderr) naming the page, why it is
    missing and `again`, how to write it again (e.g. "emulate report DIR").

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


# -- one run ------------------------------------------------------------------------------


def _timescale(summary: Mapping[str, Any]) -> str:
    if summary.get("backend") == "sim" or summary.get("time") == "simulated":
        return "simulated time"
    how = (summary.get("time_dilation") or {}).get("how")
    return f"time dilated by TDF {_num(summary.get('tdf'), '{:g}')}" + (f" ({how})" if how else "")


def _fidelity(summary: Mapping[str, Any]) -> str:
    fid = summary.get("fidelity") or {}
    reasons = [*(fid.get("reasons") or []), *(f"unknown: {u}" for u in fid.get("unknown") or [])]
    leaves_out = fid.get("leaves_out") or []
    parts = [
        f"{name}: {part.get('verdict', '?')}"
        + (
            " (" + "; ".join([*(part.get("reasons") or []), *(part.get("unknown") or [])]) + ")"
            if part.get("reasons") or part.get("unknown")
            else ""
        )
        for name, part in (fid.get("parts") or {}).items()
    ]
    return _verdict(
        "Fidelity",
        fid.get("verdict", "?"),
        _list(reasons),
        f"<p>The model leaves out:</p>{_list(leaves_out)}" if leaves_out else "",
        f"<p>Each part on its own:</p>{_list(parts)}" if parts else "",
    )


def _headline(summary: Mapping[str, Any]) -> str:
    flows = summary.get("flows") or {}
    return _facts(
        [
            ("job time", f"{_num(summary.get('job_time_s'), '{:.6f}')} s"),
            ("ideal job time", f"{_num(summary.get('ideal_job_time_s'), '{:.6f}')} s"),
            ("seed", _num(summary.get("seed"), "{:.0f}")),
            ("world size", _num(summary.get("world_size"), "{:.0f}")),
            ("iterations", _num(summary.get("iterations"), "{:.0f}")),
            ("flows finished", f"{flows.get('finished', '-')} of {flows.get('planned', '-')}"),
            ("fabric", summary.get("fabric") or "-"),
            ("marker", summary.get("marker") or "-"),
        ]
    )


BUSBW_NOTE = "<p>busbw in 10<sup>9</sup> bytes/s (as nccl-tests), FCT in the target's time.</p>"


def _type_cells(stats: Mapping[str, Any]) -> list[str]:
    """One collective type's cells of HTML_TYPE_COLUMNS."""
    return [_num(stats.get(key), fmt, scale) for _, key, scale, fmt in HTML_TYPE_COLUMNS]


def _collectives(summary: Mapping[str, Any]) -> str:
    collectives: Mapping[str, Mapping[str, Any]] = summary.get("collectives") or {}
    rows = [[ctype, *_type_cells(stats)] for ctype, stats in collectives.items()]
    headers = ["collective", *(h for h, *_ in HTML_TYPE_COLUMNS)]
    return _section("Collectives", _table(headers, rows), BUSBW_NOTE if rows else "")


def _host_ranges(hosts: Any) -> str:
    """[0, 1, 2, 3, 8, 9] -> '0-3,8-9': runs of consecutive hosts, in the placement's order."""
    if not isinstance(hosts, Sequence) or isinstance(hosts, str):
        return str(hosts) if hosts is not None else "-"
    spans: list[list[Any]] = []
    for host in hosts:
        if spans and isinstance(host, int) and spans[-1][-1] == host - 1:
            spans[-1][1:] = [host]
        else:
            spans.append([host])
    return ",".join("-".join(map(str, span)) for span in spans)


def _jobs(summary: Mapping[str, Any]) -> str:
    """Several jobs on one fabric (collectors.report.job_table): where each job runs, and per job
    and collective type the collective table's columns with the job's ranks and time; "" for one
    job (the page of a single-job run is unchanged)."""
    jobs: Mapping[str, Mapping[str, Any]] = summary.get("jobs") or {}
    if len(jobs) < 2:
        return ""
    placed = [
        [
            p.get("job"),
            _host_ranges(p.get("hosts")),
            _num(p.get("iterations"), "{:.0f}"),
            _num(p.get("start_us"), "{:g}"),
        ]
        for p in summary.get("placement") or []
    ]
    rows = [
        [
            name,
            ctype,
            _num(job.get("ranks"), "{:.0f}"),
            _num(job.get("job_time_s"), "{:.3f}", 1e3),
            *_type_cells(stats),
        ]
        for name, job in jobs.items()
        for ctype, stats in (job.get("collectives") or {}).items()
    ]
    headers = ["job", "collective", "ranks", "job time ms", *(h for h, *_ in HTML_TYPE_COLUMNS)]
    return _section(
        "Jobs",
        _table(["job", "hosts", "iterations", "start us"], placed, (0, 1)),
        _table(headers, rows, (0, 1)),
        BUSBW_NOTE if rows else "",
    )


def _shares(shares: Any) -> str:
    """{'ALL_REDUCE': 0.72, 'ALL_TO_ALL': 0.28} -> 'ALL_REDUCE 72%, ALL_TO_ALL 28%'."""
    if not isinstance(shares, Mapping) or not shares:
        return "-"
    ranked = sorted(shares.items(), key=lambda kv: -float(kv[1] or 0))
    return ", ".join(f"{k} {float(v or 0):.0%}" for k, v in ranked)


def _attribution(summary: Mapping[str, Any]) -> str:
    """Who throttled whom (collectors.attribution): the most congested ports with each
    collective's (and job's) share of the queue and the top interferer, CNPs by the marked
    collective and the marks reconciled with the receivers; why not, where not measured."""
    section = summary.get("attribution")
    if not isinstance(section, Mapping):
        return ""
    if not section.get("measured"):
        return _section("Attribution", f"<p>{esc(section.get('why') or 'not measured')}</p>")
    ports = section.get("ports") or []
    by_job = any("queue_share_by_job" in p for p in ports)
    headers = ["port", "queue byte-time B·s", "queue share", "top interferer", "ECN marks"]
    if by_job:
        headers += ["queue share by job", "top job"]
    rows = []
    for p in ports:
        marks = p.get("ecn_marks") or {}
        row = [
            f"{p.get('switch')}:{p.get('port')}",
            _num(p.get("queue_byte_s"), "{:.4g}"),
            _shares(p.get("queue_share")),
            p.get("top_interferer") or "-",
            ", ".join(f"{k} {v}" for k, v in marks.items()) or "0",
        ]
        if by_job:
            row += [_shares(p.get("queue_share_by_job")), p.get("top_interfering_job") or "-"]
        rows.append(row)
    reconciled = section.get("marks_reconciled") or {}
    facts = [
        ("source", section.get("source")),
        ("ports with a queue", section.get("ports_with_queue")),
        (
            "CNPs by the marked collective",
            ", ".join(
                f"{k} {v}" for k, v in (section.get("cnps_by_marked_collective") or {}).items()
            )
            or "0",
        ),
    ]
    if reconciled:
        facts.append(
            (
                "switch marks / receiver CE",
                f"{reconciled.get('switch_marks')} / {reconciled.get('receiver_ce')} "
                f"({'reconciled' if reconciled.get('holds') else 'discrepancy'})",
            )
        )
    if section.get("granularity"):
        facts.append(("granularity", section.get("granularity")))
    slow = section.get("slowest_all_to_all") or []
    slow_line = ""
    if slow:
        marked = sum(1 for f in slow if f.get("marked_at"))
        slow_line = (
            f"<p>Slowest 1% of All-to-All flows: {len(slow)}, of which {marked} had a packet "
            "marked (summary.json names the ports and what held them).</p>"
        )
    return _section(
        "Attribution: who throttled whom",
        _facts(facts),
        _table(headers, rows, (0, 2, 3, 4, 5, 6)),
        _list(reconciled.get("discrepancies") or []),
        slow_line,
    )


def _reference(summary: Mapping[str, Any]) -> str:
    ref = summary.get("reference")
    if not isinstance(ref, Mapping):
        return ""

    def side(row: Mapping[str, Any], key: str, fmt: str) -> list[str]:
        pair = [*(row.get(key) or []), None, None]
        return [_num(pair[0], fmt), _num(pair[1], fmt)]

    headers = ["collective", "busbw GB/s run", "busbw GB/s ref", "ratio", "CV run", "CV ref"]
    headers += ["KS D", "CNPs run", "CNPs ref", "marks run", "marks ref", "deviations"]
    rows = [
        [
            ctype,
            *side(row, "busbw_mean_gbps", "{:.2f}"),
            _num(row.get("busbw_mean_ratio"), "{:.3f}"),
            *side(row, "busbw_cv", "{:.3f}"),
            _num(row.get("fct_ks_distance"), "{:.3f}"),
            *side(row, "cnps", "{:.0f}"),
            *side(row, "ecn_marks", "{:.0f}"),
            "; ".join(row.get("deviations") or []) or "none",
        ]
        for ctype, row in (ref.get("by_collective") or {}).items()
    ]
    bounds = ref.get("bounds") or {}
    intro = (
        f"<p>Against the {esc(ref.get('backend') or '?')} reference run "
        f"{esc(ref.get('folder') or '')}; bounds: "
        + esc(", ".join(f"{k} {v}" for k, v in bounds.items()) or "-")
        + "</p>"
    )
    deviations = ref.get("deviations") or []
    verdict = "deviates" if deviations else "agrees within the bounds"
    not_measured = ref.get("not_measured") or []
    return _section(
        "Reference comparison",
        intro,
        _table(headers, rows, (0, 11))
        or "<p>Nothing to compare: neither run has a collective.</p>",
        f"<p>{esc(verdict)}{' where measured' if not_measured and not deviations else ''}.</p>",
        _list(f"not measured in both: {m}" for m in not_measured),
    )


def _expectations(summary: Mapping[str, Any]) -> str:
    verdicts = summary.get("expectations") or []
    if not verdicts:
        return ""
    rows = [[_badge(v.get("status")), v.get("expectation"), v.get("detail")] for v in verdicts]
    failed = sum(v.get("status") == "FAIL" for v in verdicts)
    na = sum(v.get("status") == "NOT APPLICABLE" for v in verdicts)
    count = f"{len(verdicts) - failed - na} passed, {failed} failed, {na} not applicable"
    return _section(
        "Expectations",
        f"<p>{esc(count)}</p>",
        _table(["status", "expectation", "detail"], rows, (0, 1, 2)),
    )


def _pfc(summary: Mapping[str, Any]) -> str:
    pfc, equivalent = summary.get("pfc"), summary.get("pfc_equivalent") or {}
    if isinstance(pfc, Mapping):
        facts = _facts(
            [
                ("PFC", "on" if pfc.get("enabled") else "off"),
                ("pause frames", _num(pfc.get("pause_frames"), "{:.0f}")),
                ("paused", f"{_num(pfc.get('paused_s'), '{:.3g}', 1e6)} us"),
                ("headroom drops", _num(pfc.get("headroom_drops"), "{:.0f}")),
                ("max ingress bytes", _num(pfc.get("max_ingress_bytes"), "{:.0f}")),
            ]
        )
        rows = [
            [
                p.get("switch"),
                p.get("port"),
                _num(p.get("pause_frames"), "{:.0f}"),
                _num(p.get("paused_s"), "{:.3g}", 1e6),
            ]
            for p in pfc.get("ports") or []
        ]
        return _section(
            "PFC", facts, _table(["switch", "port", "pause frames", "paused us"], rows, (0, 1))
        )
    if equivalent.get("known"):
        facts = _facts(
            [
                ("pauses", _num(equivalent.get("pauses"), "{:.0f}")),
                ("paused", f"{_num(equivalent.get('pause_s'), '{:.3g}', 1e6)} us"),
            ]
        )
        rows = [
            [p.get("switch"), p.get("port"), _num(p.get("pause_s"), "{:.3g}", 1e6)]
            for p in equivalent.get("ports") or []
        ]
        return _section(
            "PFC-equivalent pauses", facts, _table(["switch", "port", "paused us"], rows, (0, 1))
        )
    return ""


def render_run_report(folder: Path) -> str:
    """The page of one results folder, from its summary.json and plots."""
    summary = _load_json(folder / SUMMARY)
    scenario = summary.get("scenario") or folder.name
    meta = f"backend {summary.get('backend') or '?'}, {_timescale(summary)}"
    return _page(
        f"{scenario}: run report",
        [
            f"<h1>Run report: {esc(scenario)}</h1>",
            f'<p class="meta">{esc(meta)}</p>',
            _verdict("Partial run", "interrupted or failed: fewer samples", tone="warn")
            if summary.get("partial")
            else "",
            _fidelity(summary),
            _headline(summary),
            _collectives(summary),
            _jobs(summary),
            _attribution(summary),
            _reference(summary),
            _expectations(summary),
            _pfc(summary),
            _section("Warnings", _list(summary.get("warnings") or [])),
            _plots(folder),
            _files(folder),
        ],
    )


def write_run_report(folder: Path) -> Path:
    """Write folder/report.html (0600, as the folder's other files); return its path."""
    return _write(folder / REPORT_HTML, render_run_report(folder))


# -- a study and a series of seeds --------------------------------------------------------


def _interval(ci: Any, fmt: str = "{:.3g}") -> str:
    """'[0.664, 2.27]' ('-' for none), as emulator.study_stats.fmt_interval prints it."""
    if not isinstance(ci, Sequence) or len(ci) != 2:
        return "-"
    return f"[{_num(ci[0], fmt)}, {_num(ci[1], fmt)}]"


def _divided(value: Any, divisor: float) -> Any:
    """A seeds.json number (or interval) in its display unit, divided as emulator.seeds does."""
    if isinstance(value, list):
        return [_divided(v, divisor) for v in value]
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


def _run_link(out_dir: Path, folder: Any) -> Any:
    rel = _inside(out_dir, folder)
    if rel is None:
        return folder or "-"
    has_page = (out_dir / rel / REPORT_HTML).is_file()
    return _link(f"{rel}/{REPORT_HTML}" if has_page else f"{rel}/", rel)


def _check(check: Mapping[str, Any], level: str) -> str:
    rows = [
        [side, _num(check.get(side), "{:.3g}"), _interval(check.get(f"{side}_ci"))]
        for side in ("alone", "mixed", "ratio")
    ]
    rows[2][0] = "mixed/alone" if check.get("mixed") is not None else "ratio"
    if check.get("ratio_undefined"):  # the alone value at its floor: the difference instead
        rows[2][1:] = ["undefined", "-"]
        rows.append(
            [
                "mixed - alone",
                _num(check.get("difference"), "{:+.3g}"),
                _interval(check.get("difference_ci")),
            ]
        )
    numbers = check.get("numbers") or {}
    return "\n".join(
        [
            f"<article><h3>{esc(check.get('name', '?'))} {_badge(check.get('verdict', '?'))}</h3>",
            f"<p>{esc(check.get('question', ''))}</p>",
            _facts(
                [
                    ("expected", check.get("expected", "-")),
                    ("threshold", _num(check.get("threshold"), "{:g}")),
                ]
            ),
            _table(["statistic", "estimate", f"{level} interval"], rows),
            f"<p>{esc(check.get('detail', ''))}</p>",
            f"<details><summary>numbers</summary>{_facts(_plain_items(numbers))}</details>"
            if numbers
            else "",
            "</article>",
        ]
    )


def render_study_report(out_dir: Path) -> str:
    """The page of a study folder, from its study.json, study.txt and plots."""
    study = _load_json(out_dir / STUDY_JSON)
    checks = study.get("checks") or []
    bootstrap = study.get("bootstrap") or {}
    shown = sum(c.get("verdict") == "shown" for c in checks)
    rows = [
        [
            role,
            run.get("repeat", "-"),
            _run_link(out_dir, run.get("folder")),
            _num(run.get("seed"), "{:.0f}"),
            _num(run.get("tdf"), "{:g}"),
            "yes" if run.get("partial") else "no",
            _badge((run.get("fidelity") or {}).get("verdict", "?")),
        ]
        for role, runs in (study.get("runs") or {}).items()
        for run in runs
    ]
    runs_table = _table(
        ["role", "repeat", "folder", "seed", "TDF", "partial", "fidelity"], rows, (0, 2, 5, 6)
    )
    name = study.get("study") or "study"
    return _page(
        f"{name} study: report",
        [
            f"<h1>Study: {esc(name)}</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            _verdict(
                "Checks",
                "every check shown"
                if study.get("all_shown")
                else f"{shown} of {len(checks)} shown",
                tone="good" if study.get("all_shown") else "warn",
            ),
            _section("Checks", *(_check(c, _level(bootstrap)) for c in checks), _method(bootstrap)),
            _section("Runs", runs_table),
            _section("Notes", _list(study.get("notes") or [])),
            _section("Thresholds", _facts(_plain_items(study.get("thresholds") or {}))),
            _plots(out_dir),
            _text_file(out_dir / STUDY_TEXT),
            _files(out_dir),
        ],
    )


def write_study_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return _write(out_dir / REPORT_HTML, render_study_report(out_dir))


def render_seeds_report(out_dir: Path) -> str:
    """The page of a series of seeds, from its seeds.json and seeds.txt, linking each run's."""
    doc = _load_json(out_dir / SEEDS_JSON)
    bootstrap = doc.get("bootstrap") or {}
    level = _level(bootstrap)
    rows = []
    for group, measures in (doc.get("estimates") or {}).items():
        for name, e in measures.items():
            unit, divisor = SEED_UNITS.get(name, ("", 1.0))
            point, ci = _divided(e.get("point"), divisor), _divided(e.get("ci"), divisor)
            rows.append(
                [
                    "per run" if group == "run" else group,
                    name,
                    _num(point, "{:.4g}"),
                    _interval(ci, "{:.4g}"),
                    unit,
                    _num(e.get("seeds"), "{:.0f}"),
                    _num(e.get("units"), "{:.0f}"),
                ]
            )
    estimates = _table(
        ["of", "measure", "estimate", f"{level} interval", "unit", "seeds", "units"],
        rows,
        (0, 1, 4),
    )
    runs = [
        [
            _num(r.get("seed"), "{:.0f}"),
            _run_link(out_dir, r.get("folder") or f"seed-{r.get('seed')}"),
            "yes" if r.get("partial") else "no",
            _badge(r.get("fidelity") or "?"),
        ]
        for r in doc.get("runs") or []
    ]
    seeds = doc.get("seeds") or []
    return _page(
        "seeds: report",
        [
            f"<h1>Seeds: {len(seeds)} runs</h1>",
            f'<p class="meta">{esc(out_dir.name)}, backend {esc(doc.get("backend") or "?")}, seeds {esc(", ".join(map(str, seeds)))}</p>',
            _section("Estimates", estimates, _method(bootstrap) if rows else ""),
            _section("Runs", _table(["seed", "folder", "partial", "fidelity"], runs, (1, 2, 3))),
            _plots(out_dir),
            _text_file(out_dir / SEEDS_TEXT),
            _files(out_dir),
        ],
    )


def write_seeds_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return _write(out_dir / REPORT_HTML, render_seeds_report(out_dir))


# -- the sensitivity study ----------------------------------------------------------------


def _ratio(num: Any, den: Any) -> float | None:
    ok = isinstance(num, int | float) and isinstance(den, int | float) and den
    return num / den if ok else None


def _rate_tables(rows: Mapping[str, Mapping[str, Any]], rates: Sequence[Any]) -> tuple[str, str]:
    """sensitivity.txt's two tables (emulator.sensitivity.render_text), the same columns and
    numbers: time per collective type and the job at each rate with its slowdown, the plan's and
    the rate ratio; the mean instance duration per type."""
    ref, others = rates[0], rates[1:]
    heads = ["collective", "verdict", f"{_num(ref, '{:g}')}G ms"]
    for rate in others:
        heads += [f"{_num(rate, '{:g}')}G ms", "slowdown", "plan", "expected"]
    body, means = [], []
    for name, row in rows.items():
        given = [p if p.get("measured") else {} for p in row.get("by_rate") or []]
        points = (given + [{}] * len(rates))[: len(rates)]  # {}: not measured at that rate
        cells = [name, row.get("verdict", "?"), _num(points[0].get("time_s"), "{:.3f}", 1e3)]
        for p, rate in zip(points[1:], others, strict=True):
            cells += [
                _num(p.get("time_s"), "{:.3f}", 1e3),
                _num(p.get("slowdown"), "{:.2f}x"),
                _num(p.get("plan_slowdown"), "{:.2f}x"),
                _num(_ratio(ref, rate), "{:.2f}x"),
            ]
        body.append(cells)
        if name != "job":
            means.append(
                [
                    name,
                    " / ".join(_num(p.get("instances"), "{:.0f}") for p in points),
                    *(_num(p.get("mean_s") or None, "{:.2f}", 1e6) for p in points),
                    *(_num(p.get("mean_slowdown"), "{:.2f}x") for p in points[1:]),
                ]
            )
    mean_heads = ["collective", "instances", *(f"{_num(r, '{:g}')}G us" for r in rates)]
    mean_heads += [f"x at {_num(r, '{:g}')}G" for r in others]
    return _table(heads, body, (0, 1)), _table(mean_heads, means)


def render_sensitivity_report(out_dir: Path) -> str:
    """The page of a sensitivity study folder, from its sensitivity.json, sensitivity.txt and
    plot, linking each rate's run (and its page) inside the folder."""
    doc = _load_json(out_dir / SENSITIVITY_JSON)
    runs = doc.get("runs") or []
    rates = [r.get("host_link_gbps") for r in runs]
    ref = _num(doc.get("reference_gbps"), "{:g}")
    rows = {**(doc.get("collectives") or {}), "job": doc.get("job") or {}}
    times, means = _rate_tables(rows, rates) if rates else ("", "")
    run_rows = [
        [
            _run_link(out_dir, r.get("folder")),
            f"{_num(r.get('host_link_gbps'), '{:g}')} / {_num(r.get('fabric_link_gbps'), '{:g}')}",
            r.get("backend") or "-",
            _num(r.get("tdf"), "{:g}") if r.get("backend") != "sim" else "-",
            _num(r.get("job_time_s"), "{:.3f}", 1e3),
            _num(r.get("ideal_job_time_s"), "{:.3f}", 1e3),
            "yes" if r.get("partial") else "no",
            _badge(r.get("fidelity") or "?"),
        ]
        for r in runs
    ]
    run_heads = ["run", "host / fabric Gb/s", "backend", "tdf", "job ms", "plan job ms"]
    name = doc.get("study") or "sensitivity"
    return _page(
        f"{name} study: report",
        [
            f"<h1>Study: {esc(name)}</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            _facts(
                [
                    ("scenario", doc.get("scenario") or "reused runs"),
                    ("link rates", f"{', '.join(_num(r, '{:g}') for r in rates)} Gb/s"),
                    ("reference", f"{ref} Gb/s"),
                ]
            ),
            _section(
                "Verdicts",
                *(
                    _verdict(ctype, row.get("verdict", "?"), f"<p>{esc(row.get('detail', ''))}</p>")
                    for ctype, row in rows.items()
                ),
                _facts(_plain_items(doc.get("tolerance") or {})),
            ),
            _section(
                "Time per collective type",
                "<p>time: the sum of a type's complete instances' durations "
                f"({esc(doc.get('duration') or '?')}), the job's time for the job; slowdown = "
                f"time / time at {esc(ref)} Gb/s; expected = {esc(ref)} / rate (bandwidth-bound); "
                "plan = the congestion-free plan's own slowdown.</p>"
                if times
                else "",
                times,
            ),
            _section("Mean instance duration", means),
            _section("Runs", _table([*run_heads, "partial", "fidelity"], run_rows, (0, 2, 6, 7))),
            _section("Notes", _list(doc.get("notes") or [])),
            _plots(out_dir),
            _text_file(out_dir / SENSITIVITY_TEXT),
            _files(out_dir),
        ],
    )


def write_sensitivity_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return _write(out_dir / REPORT_HTML, render_sensitivity_report(out_dir))


# -- the jobs study -----------------------------------------------------------------------


def _jobs_metric_row(m: Mapping[str, Any]) -> list[Any]:
    """One jobs.json metric: alone, together and together/alone, each with its interval, in the
    units of jobs.txt, and the effect of the other jobs as a badge."""
    label, divisor, fmt = JOBS_METRICS.get(str(m.get("metric")), (m.get("metric"), 1.0, "{:.4g}"))
    cells: list[Any] = [m.get("job"), m.get("collective"), label]
    sides = (("alone", divisor, fmt), ("together", divisor, fmt))
    for side, by, spec in (*sides, ("together_over_alone", 1.0, "{:.3f}")):
        value = m.get(side) or {}
        cells += [
            _num(_divided(value.get("value"), by), spec),
            _interval(_divided(value.get("interval"), by), spec),
        ]
    if m.get("ratio_undefined"):  # the alone value at its floor: the difference instead
        diff = m.get("together_minus_alone") or {}
        cells[-2:] = [
            f"undefined; difference {_num(_divided(diff.get('value'), divisor), fmt)}",
            _interval(_divided(diff.get("interval"), divisor), fmt),
        ]
    return [*cells, _badge(m.get("effect_of_the_others", "?"), EFFECT_TONES)]


def _effect_line(text: Path) -> str:
    """jobs.txt's footer line saying what "effect" means; "" without the file."""
    lines = text.read_text().splitlines() if text.is_file() else []
    return next((f"<p>{esc(line)}</p>" for line in lines if line.startswith("effect:")), "")


def render_jobs_report(out_dir: Path) -> str:
    """The page of a jobs study folder, from its jobs.json and jobs.txt, linking each run's."""
    doc = _load_json(out_dir / JOBS_JSON)
    metrics = doc.get("metrics") or []
    runs = doc.get("runs") or []
    jobs = list(dict.fromkeys(str(m.get("job")) for m in metrics))
    verdicts = []
    for job in jobs:
        effects = [m.get("effect_of_the_others") for m in metrics if str(m.get("job")) == job]
        shown = effects.count("shown")
        tone = "bad" if shown else "good" if "not shown" in effects else "warn"
        verdict = f"shown in {shown} of {len(effects)} measures"
        verdicts.append(_verdict(f"{job}: effect of the other jobs", verdict, tone=tone))
    heads = ["job", "collective", "metric", "alone", "95% interval", "together", "95% interval"]
    heads += ["together/alone", "95% interval", "effect"]
    run_rows = [
        [
            r.get("condition"),
            _num(r.get("seed"), "{:.0f}"),
            _run_link(out_dir, r.get("folder")),
            "yes" if r.get("partial") else "no",
            _badge(r.get("verdict") or "?"),
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
    return _page(
        "jobs study: report",
        [
            "<h1>Study: jobs</h1>",
            f'<p class="meta">{esc(out_dir.name)}</p>',
            _facts(
                [
                    ("scenario", doc.get("scenario") or "-"),
                    ("jobs", ", ".join(jobs) or "-"),
                    ("repeats", len({r.get("seed") for r in runs})),
                    ("conditions", "all jobs together, and each job alone on its hosts"),
                ]
            ),
            *verdicts,
            _section(
                "Each job alone and together",
                _table(heads, map(_jobs_metric_row, metrics), (0, 1, 2, 9)),
                _effect_line(out_dir / JOBS_TEXT),
                f"<p>95% intervals: {esc(doc.get('bootstrap') or '?')}</p>" if metrics else "",
            ),
            _section(
                "Runs",
                _table(
                    ["condition", "seed", "folder", "partial", "fidelity"], run_rows, (0, 2, 3, 4)
                ),
                _list([f"{flagged_what}: {'; '.join(flagged)}"] if flagged else []),
            ),
            _plots(out_dir),
            _text_file(out_dir / JOBS_TEXT),
            _files(out_dir),
        ],
    )


def write_jobs_report(out_dir: Path) -> Path:
    """Write out_dir/report.html (0600); return its path."""
    return _write(out_dir / REPORT_HTML, render_jobs_report(out_dir))
