"""The run's page: report.html of one results folder, from its summary.json and plots.

The fidelity verdict, the headline numbers, the collective table, the jobs, who throttled whom,
the reference comparison, the expectations, PFC, load balancing and reordering
(collectors.pages.multipath), the warnings and every plot; built with the page
kit (collectors.pages.kit) and registered there as the "run" page. Written last by every run
(emulator.run.execute, partial runs too) and again by `emulate report DIR`.
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
    plots_section,
    register_page,
    section,
    table,
    verdict_box,
    write_page,
)
from collectors.pages.multipath import multipath_section
from collectors.report import TYPE_COLUMNS
from collectors.results import SUMMARY

# The collective table: the terminal's columns (collectors.report) and the ECN marks.
HTML_TYPE_COLUMNS = (*TYPE_COLUMNS, ("ECN marks", "ce_marks", 1.0, "{:.0f}"))


def _timescale(summary: Mapping[str, Any]) -> str:
    if summary.get("time") == "simulated":  # the backend says: a simulation
        return "simulated time"
    how = (summary.get("time_dilation") or {}).get("how")
    return f"time dilated by TDF {number(summary.get('tdf'), '{:g}')}" + (
        f" ({how})" if how else ""
    )


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
    return verdict_box(
        "Fidelity",
        fid.get("verdict", "?"),
        bullets(reasons),
        f"<p>The model leaves out:</p>{bullets(leaves_out)}" if leaves_out else "",
        f"<p>Each part on its own:</p>{bullets(parts)}" if parts else "",
    )


def _headline(summary: Mapping[str, Any]) -> str:
    flows = summary.get("flows") or {}
    return facts(
        [
            ("job time", f"{number(summary.get('job_time_s'), '{:.6f}')} s"),
            ("ideal job time", f"{number(summary.get('ideal_job_time_s'), '{:.6f}')} s"),
            ("seed", number(summary.get("seed"), "{:.0f}")),
            ("world size", number(summary.get("world_size"), "{:.0f}")),
            ("iterations", number(summary.get("iterations"), "{:.0f}")),
            ("flows finished", f"{flows.get('finished', '-')} of {flows.get('planned', '-')}"),
            ("fabric", summary.get("fabric") or "-"),
            ("marker", summary.get("marker") or "-"),
        ]
    )


BUSBW_NOTE = "<p>busbw in 10<sup>9</sup> bytes/s (as nccl-tests), FCT in the target's time.</p>"


def _type_cells(stats: Mapping[str, Any]) -> list[str]:
    """One collective type's cells of HTML_TYPE_COLUMNS."""
    return [number(stats.get(key), fmt, scale) for _, key, scale, fmt in HTML_TYPE_COLUMNS]


def _collectives(summary: Mapping[str, Any]) -> str:
    collectives: Mapping[str, Mapping[str, Any]] = summary.get("collectives") or {}
    rows = [[ctype, *_type_cells(stats)] for ctype, stats in collectives.items()]
    headers = ["collective", *(h for h, *_ in HTML_TYPE_COLUMNS)]
    return section("Collectives", table(headers, rows), BUSBW_NOTE if rows else "")


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
            number(p.get("iterations"), "{:.0f}"),
            number(p.get("start_us"), "{:g}"),
        ]
        for p in summary.get("placement") or []
    ]
    rows = [
        [
            name,
            ctype,
            number(job.get("ranks"), "{:.0f}"),
            number(job.get("job_time_s"), "{:.3f}", 1e3),
            *_type_cells(stats),
        ]
        for name, job in jobs.items()
        for ctype, stats in (job.get("collectives") or {}).items()
    ]
    headers = ["job", "collective", "ranks", "job time ms", *(h for h, *_ in HTML_TYPE_COLUMNS)]
    return section(
        "Jobs",
        table(["job", "hosts", "iterations", "start us"], placed, (0, 1)),
        table(headers, rows, (0, 1)),
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
    found = summary.get("attribution")
    if not isinstance(found, Mapping):
        return ""
    if not found.get("measured"):
        return section("Attribution", f"<p>{esc(found.get('why') or 'not measured')}</p>")
    ports = found.get("ports") or []
    by_job = any("queue_share_by_job" in p for p in ports)
    headers = ["port", "queue byte-time B·s", "queue share", "top interferer", "ECN marks"]
    if by_job:
        headers += ["queue share by job", "top job"]
    rows = []
    for p in ports:
        marks = p.get("ecn_marks") or {}
        row = [
            f"{p.get('switch')}:{p.get('port')}",
            number(p.get("queue_byte_s"), "{:.4g}"),
            _shares(p.get("queue_share")),
            p.get("top_interferer") or "-",
            ", ".join(f"{k} {v}" for k, v in marks.items()) or "0",
        ]
        if by_job:
            row += [_shares(p.get("queue_share_by_job")), p.get("top_interfering_job") or "-"]
        rows.append(row)
    reconciled = found.get("marks_reconciled") or {}
    pairs = [
        ("source", found.get("source")),
        ("ports with a queue", found.get("ports_with_queue")),
        (
            "CNPs by the marked collective",
            ", ".join(f"{k} {v}" for k, v in (found.get("cnps_by_marked_collective") or {}).items())
            or "0",
        ),
    ]
    if reconciled:
        pairs.append(
            (
                "switch marks / receiver CE",
                f"{reconciled.get('switch_marks')} / {reconciled.get('receiver_ce')} "
                f"({'reconciled' if reconciled.get('holds') else 'discrepancy'})",
            )
        )
    if found.get("granularity"):
        pairs.append(("granularity", found.get("granularity")))
    slow = found.get("slowest_all_to_all") or []
    slow_line = ""
    if slow:
        marked = sum(1 for f in slow if f.get("marked_at"))
        slow_line = (
            f"<p>Slowest 1% of All-to-All flows: {len(slow)}, of which {marked} had a packet "
            "marked (summary.json names the ports and what held them).</p>"
        )
    return section(
        "Attribution: who throttled whom",
        facts(pairs),
        table(headers, rows, (0, 2, 3, 4, 5, 6)),
        bullets(reconciled.get("discrepancies") or []),
        slow_line,
    )


def _reference(summary: Mapping[str, Any]) -> str:
    ref = summary.get("reference")
    if not isinstance(ref, Mapping):
        return ""

    def side(row: Mapping[str, Any], key: str, fmt: str) -> list[str]:
        pair = [*(row.get(key) or []), None, None]
        return [number(pair[0], fmt), number(pair[1], fmt)]

    headers = ["collective", "busbw GB/s run", "busbw GB/s ref", "ratio", "CV run", "CV ref"]
    headers += ["KS D", "CNPs run", "CNPs ref", "marks run", "marks ref", "deviations"]
    rows = [
        [
            ctype,
            *side(row, "busbw_mean_gbps", "{:.2f}"),
            number(row.get("busbw_mean_ratio"), "{:.3f}"),
            *side(row, "busbw_cv", "{:.3f}"),
            number(row.get("fct_ks_distance"), "{:.3f}"),
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
    return section(
        "Reference comparison",
        intro,
        table(headers, rows, (0, 11)) or "<p>Nothing to compare: neither run has a collective.</p>",
        f"<p>{esc(verdict)}{' where measured' if not_measured and not deviations else ''}.</p>",
        bullets(f"not measured in both: {m}" for m in not_measured),
    )


def _expectations(summary: Mapping[str, Any]) -> str:
    verdicts = summary.get("expectations") or []
    if not verdicts:
        return ""
    rows = [[badge(v.get("status")), v.get("expectation"), v.get("detail")] for v in verdicts]
    failed = sum(v.get("status") == "FAIL" for v in verdicts)
    na = sum(v.get("status") == "NOT APPLICABLE" for v in verdicts)
    count = f"{len(verdicts) - failed - na} passed, {failed} failed, {na} not applicable"
    return section(
        "Expectations",
        f"<p>{esc(count)}</p>",
        table(["status", "expectation", "detail"], rows, (0, 1, 2)),
    )


def _pfc(summary: Mapping[str, Any]) -> str:
    pfc, equivalent = summary.get("pfc"), summary.get("pfc_equivalent") or {}
    if isinstance(pfc, Mapping):
        shown = facts(
            [
                ("PFC", "on" if pfc.get("enabled") else "off"),
                ("pause frames", number(pfc.get("pause_frames"), "{:.0f}")),
                ("paused", f"{number(pfc.get('paused_s'), '{:.3g}', 1e6)} us"),
                ("headroom drops", number(pfc.get("headroom_drops"), "{:.0f}")),
                ("max ingress bytes", number(pfc.get("max_ingress_bytes"), "{:.0f}")),
            ]
        )
        rows = [
            [
                p.get("switch"),
                p.get("port"),
                number(p.get("pause_frames"), "{:.0f}"),
                number(p.get("paused_s"), "{:.3g}", 1e6),
            ]
            for p in pfc.get("ports") or []
        ]
        return section(
            "PFC", shown, table(["switch", "port", "pause frames", "paused us"], rows, (0, 1))
        )
    if equivalent.get("known"):
        shown = facts(
            [
                ("pauses", number(equivalent.get("pauses"), "{:.0f}")),
                ("paused", f"{number(equivalent.get('pause_s'), '{:.3g}', 1e6)} us"),
            ]
        )
        rows = [
            [p.get("switch"), p.get("port"), number(p.get("pause_s"), "{:.3g}", 1e6)]
            for p in equivalent.get("ports") or []
        ]
        return section(
            "PFC-equivalent pauses", shown, table(["switch", "port", "paused us"], rows, (0, 1))
        )
    return ""


@register_page("run")
def render_run_report(folder: Path) -> str:
    """The page of one results folder, from its summary.json and plots."""
    summary = load_json(folder / SUMMARY)
    scenario = summary.get("scenario") or folder.name
    meta = f"backend {summary.get('backend') or '?'}, {_timescale(summary)}"
    return html_page(
        f"{scenario}: run report",
        [
            f"<h1>Run report: {esc(scenario)}</h1>",
            f'<p class="meta">{esc(meta)}</p>',
            verdict_box("Partial run", "interrupted or failed: fewer samples", tone="warn")
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
            multipath_section(summary),
            section("Warnings", bullets(summary.get("warnings") or [])),
            plots_section(folder),
            files_section(folder),
        ],
    )


def write_run_report(folder: Path) -> Path:
    """Write folder/report.html (0600, as the folder's other files); return its path."""
    return write_page("run", folder)
