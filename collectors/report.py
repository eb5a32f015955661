"""Reading results folders back: re-render one (`emulate report`) and compare several
(`emulate compare`), with the plain-text tables both commands print.

Units in tables: busbw in GB/s (10^9 bytes per second, as nccl-tests prints), FCT in
milliseconds, both in the target timescale.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv

from collectors.plots import COMPARE_PLOTS, render_run_plots
from collectors.reordering import MultipathSetup, shows_multipath
from collectors.results import (
    DIR_MODE,
    PLOTS,
    SCENARIO_COPY,
    SUMMARY,
    make_private,
    read_json_object,
    replace_file_atomically,
)
from collectors.summary import RunMeta, build_summary
from collectors.tables import RunTables, read_tables
from emulator.errors import InputError

# Columns of the per-collective-type table: (header, summary key, scale, format).
TYPE_COLUMNS: tuple[tuple[str, str, float, str], ...] = (
    ("instances", "instances", 1.0, "{:.0f}"),
    ("busbw mean GB/s", "busbw_mean_bytes_per_s", 1e-9, "{:.2f}"),
    ("busbw p5 GB/s", "busbw_p5_bytes_per_s", 1e-9, "{:.2f}"),
    ("busbw CV", "busbw_cv", 1.0, "{:.3f}"),
    ("ideal GB/s", "ideal_busbw_bytes_per_s", 1e-9, "{:.2f}"),
    ("FCT p50 ms", "fct_p50_s", 1e3, "{:.3f}"),
    ("FCT p99 ms", "fct_p99_s", 1e3, "{:.3f}"),
    ("FCT max ms", "fct_max_s", 1e3, "{:.3f}"),
    ("CNPs", "cnps", 1.0, "{:.0f}"),
)

# Compare prints fewer columns per run, since every run adds a row.
COMPARE_COLUMNS = ("busbw_mean_bytes_per_s", "busbw_cv", "fct_p50_s", "fct_p99_s", "cnps")


@dataclass(frozen=True)
class LoadedRun:
    folder: Path
    summary: dict[str, Any]
    tables: RunTables

    @property
    def label(self) -> str:
        return str(self.summary.get("scenario") or self.folder.name)


def load_run(folder: Path) -> LoadedRun:
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    tables = read_tables(folder)
    summary_path = folder / SUMMARY
    summary = read_json_object(summary_path) if summary_path.is_file() else {}
    return LoadedRun(folder, summary, tables)


def _cell(value: Any, scale: float, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value * scale)


def _render(headers: Sequence[str], body: Sequence[Sequence[str]], left: int = 1) -> str:
    """A plain-text table: the first `left` columns left-aligned (names), the rest right (numbers)."""
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in body)])


def _fidelity_parts(fid: Mapping[str, Any]) -> list[str]:
    """One line per part of the backend (a cluster's servers): its own verdict and reasons."""
    lines = []
    for name, part in (fid.get("parts") or {}).items():
        said = "; ".join(
            [*(part.get("reasons") or []), *(f"unknown: {u}" for u in part.get("unknown") or [])]
        )
        lines.append(f"  {name}: {part.get('verdict', '?')}" + (f" ({said})" if said else ""))
    return lines


def summary_table(summary: Mapping[str, Any]) -> str:
    """The run's header lines and one row per collective type."""
    fid = summary.get("fidelity") or {}
    reasons = "; ".join(
        [*(fid.get("reasons") or []), *(f"unknown: {u}" for u in fid.get("unknown") or [])]
    )
    job = summary.get("job_time_s")
    simulated = summary.get("time") == "simulated"  # the backend says (a simulation)
    timescale = "simulated time" if simulated else f"tdf {summary.get('tdf')}"
    head = [
        f"scenario {summary.get('scenario')}  fabric {summary.get('fabric')}  "
        f"{timescale}  marker {summary.get('marker')}",
        f"fidelity {fid.get('verdict', '?')}{' (' + reasons + ')' if reasons else ''}  "
        f"job time {_cell(job, 1.0, '{:.6f}')} s  partial {str(bool(summary.get('partial'))).lower()}",
        *_fidelity_parts(fid),
    ]
    wall = summary.get("wall_time") or {}
    if simulated and wall.get("replay_s") is not None:
        head.append(f"simulated in {wall['replay_s']:.1f} s of wall time")
    elif wall.get("replay_s") is not None and wall.get("predicted_s") is not None:
        head.append(
            f"replay wall time {wall['replay_s']:.1f} s (the TDF predicted "
            f"{wall['predicted_s']:.1f} s at best)"
        )
    data_path = (summary.get("engine") or {}).get("data_path") or {}
    if data_path.get("path") not in (None, "unknown"):
        # which engine data path ran (engine.native), and why when not the native one; and
        # the AF_XDP ports when they sent (engine.send_path: af_xdp)
        why = data_path.get("reason") if data_path["path"] != "native" else ""
        xdp = (summary.get("engine") or {}).get("send_path") == "af_xdp"
        head.append(
            f"engine data path: {data_path['path']}"
            + (f" ({why})" if why else "")
            + (", sent and received through AF_XDP ports (engine.af_xdp)" if xdp else "")
        )
    wait = (summary.get("engine") or {}).get("receive_wait") or {}
    if wait.get("reads") and wait.get("target_p50_us") is not None:
        # the engine's own delay before it reads what arrived (a NIC has none): fidelity.md
        head.append(
            f"reads waited in the sockets (target time): p50 {wait['target_p50_us']:.3g} us, "
            f"p99 {wait['target_p99_us']:.3g} us, max {wait['target_max_us']:.3g} us"
        )
    if fid.get("leaves_out"):
        head.append(f"the model leaves out: {len(fid['leaves_out'])} things (summary.json)")
    sim_pfc = summary.get("pfc") if simulated else None
    pfc = summary.get("pfc_equivalent") or {}
    if isinstance(sim_pfc, Mapping):
        top = ", ".join(
            f"{p['switch']}:{p['port']} {p['paused_s'] * 1e6:.3g} us" for p in sim_pfc["ports"][:3]
        )
        state = "on" if sim_pfc.get("enabled") else "off"
        head.append(
            f"PFC {state}: {sim_pfc.get('pause_frames', 0)} pause frames, "
            f"{sim_pfc.get('paused_s', 0) * 1e6:.3g} us paused, "
            f"{sim_pfc.get('headroom_drops', 0)} headroom drops" + (f" ({top})" if top else "")
        )
    elif pfc.get("known"):
        top = ", ".join(
            f"{p['switch']}:{p['port']} {p['pause_s'] * 1e6:.3g} us" for p in pfc["ports"][:3]
        )
        head.append(
            f"PFC-equivalent: {pfc.get('pauses') or 0} pauses, {(pfc.get('pause_s') or 0) * 1e6:.3g} us"
            + (f" ({top})" if top else "")
        )
    collectives: Mapping[str, Mapping[str, Any]] = summary.get("collectives") or {}
    body = [
        [ctype, *(_cell(stats.get(key), scale, fmt) for _, key, scale, fmt in TYPE_COLUMNS)]
        for ctype, stats in collectives.items()
    ]
    headers = ["collective", *(h for h, *_ in TYPE_COLUMNS)]
    lines = [*head, "", _render(headers, body)] if body or not summary.get("streams") else head
    if summary.get("streams"):
        lines += ["", stream_table(summary["streams"])]
    jobs: Mapping[str, Mapping[str, Any]] = summary.get("jobs") or {}
    if len(jobs) > 1:
        lines += ["", job_table(jobs)]
    attribution = attribution_lines(summary.get("attribution") or {})
    if attribution:
        lines += ["", *attribution]
    latency = latency_lines((summary.get("engine") or {}).get("latency_by_class") or {})
    if latency:
        lines += ["", *latency]
    multipath = multipath_lines(summary)
    if multipath:
        lines += ["", *multipath]
    if summary.get("expectations"):
        lines += ["", *expectation_lines(summary["expectations"])]
    return "\n".join(lines)


def multipath_lines(summary: Mapping[str, Any]) -> list[str]:
    """Load balancing and reordering in a few lines, for a run that spreads packets or saw any
    reordered (collectors.reordering.shows_multipath): per tier group the MMR and JFI of its
    link loads over the run (and the median MMR over the sampling intervals), then what the
    receivers saw."""
    if not shows_multipath(summary):
        return []
    r: Mapping[str, Any] = summary.get("reordering") or {}
    modes = ", ".join(f"{t} {m}" for t, m in (r.get("load_balancing") or {}).items())
    lines = [
        f"load balancing and reordering: reliability {r.get('reliability') or '-'}, "
        f"entropy {r.get('entropy') or '-'}, {modes or 'tiers unknown'}"
    ]
    for group, g in (summary.get("load_balance") or {}).items():
        lines.append(
            f"  {group}: {g.get('links')} links, MMR {_cell(g.get('mmr'), 1.0, '{:.3f}')}, "
            f"JFI {_cell(g.get('jfi'), 1.0, '{:.3f}')} over the run; MMR p50 "
            f"{_cell(g.get('mmr_p50_over_time'), 1.0, '{:.3f}')} over "
            f"{g.get('intervals')} intervals"
        )
    share = r.get("reordered_share")
    lines.append(
        f"  reordered {_cell(r.get('reordered_packets'), 1.0, '{:.0f}')} of "
        f"{_cell(r.get('data_packets_received'), 1.0, '{:.0f}')} data packets"
        + (f" ({share:.2%})" if share is not None else "")
        + f", extent mean {_cell(r.get('reorder_extent_mean'), 1.0, '{:.2f}')} max "
        f"{_cell(r.get('reorder_extent_max'), 1.0, '{:.0f}')}; held "
        f"{_cell(r.get('held_out_of_order'), 1.0, '{:.0f}')}, SACKs "
        f"{_cell(r.get('sacks_sent'), 1.0, '{:.0f}')}, resent "
        f"{_cell(r.get('retransmitted_packets'), 1.0, '{:.0f}')}, NAKs "
        f"{_cell(r.get('naks_sent'), 1.0, '{:.0f}')}"
    )
    return lines


def stream_table(streams: Sequence[Mapping[str, Any]]) -> str:
    """The scenario's streams: frames each way, loss, CE marks, latency and rates."""
    body = [
        [
            str(r["name"]),
            f"{r['src']}->{r['dst']}",
            _cell(r.get("frames_tx"), 1.0, "{:.0f}"),
            _cell(r.get("frames_rx"), 1.0, "{:.0f}"),
            _cell(r.get("loss_percent"), 1.0, "{:.3f}"),
            _cell(r.get("out_of_order"), 1.0, "{:.0f}"),
            _cell(r.get("ce_rx"), 1.0, "{:.0f}"),
            _cell((r.get("latency_ns") or {}).get("avg"), 1e-3, "{:.2f}"),
            _cell((r.get("latency_ns") or {}).get("max"), 1e-3, "{:.2f}"),
            _cell(r.get("tx_rate_bps"), 1e-9, "{:.2f}"),
            _cell(r.get("rx_rate_bps"), 1e-9, "{:.2f}"),
        ]
        for r in streams
    ]
    headers = [
        "stream",
        "ranks",
        "frames tx",
        "frames rx",
        "loss %",
        "reordered",
        "CE",
        "latency avg us",
        "latency max us",
        "tx Gb/s",
        "rx Gb/s",
    ]
    return _render(headers, body)


def job_table(jobs: Mapping[str, Mapping[str, Any]]) -> str:
    """Several jobs on one fabric: one row per job and collective type, with the job's time."""
    body = [
        [
            name,
            ctype,
            _cell(job.get("ranks"), 1.0, "{:.0f}"),
            _cell(job.get("job_time_s"), 1e3, "{:.3f}"),
            *(_cell(stats.get(key), scale, fmt) for _, key, scale, fmt in TYPE_COLUMNS),
        ]
        for name, job in jobs.items()
        for ctype, stats in (job.get("collectives") or {}).items()
    ]
    headers = ["job", "collective", "ranks", "job time ms", *(h for h, *_ in TYPE_COLUMNS)]
    return _render(headers, body, left=2)


def attribution_lines(section: Mapping[str, Any]) -> list[str]:
    """Who throttled whom, in a few lines: each congested port's queue shares and top
    interferer (and job, with several), CNPs by the marked collective, the marks reconciled."""
    if not section.get("measured") or not section.get("ports"):
        return []

    def shares(values: Mapping[str, float]) -> str:
        ranked = sorted(values.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{k} {v:.0%}" for k, v in ranked)

    lines = [f"attribution ({section.get('source')}): queue share at the most congested ports"]
    for p in section["ports"]:
        by_job = p.get("queue_share_by_job")
        jobs = f"; by job {shares(by_job)}" if by_job else ""
        lines.append(
            f"  {p['switch']}:{p['port']}: {shares(p.get('queue_share') or {})} "
            f"(top interferer {p.get('top_interferer')}){jobs}"
        )
    cnps = section.get("cnps_by_marked_collective") or {}
    if cnps:
        lines.append(
            "  CNPs by the marked collective: " + ", ".join(f"{k} {v}" for k, v in cnps.items())
        )
    reconciled = section.get("marks_reconciled") or {}
    if reconciled:
        state = "reconciled" if reconciled.get("holds") else "DISCREPANCY"
        lines.append(
            f"  switch ECN marks {reconciled.get('switch_marks')}, receiver CE "
            f"{reconciled.get('receiver_ce')}: {state}"
        )
    return lines


def latency_lines(by_class: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One-way latency per traffic class (engine.latency_by_class), target time."""
    if not by_class:
        return []
    lines = ["one-way latency (target time, us):"]
    for dscp, row in by_class.items():
        if not row.get("packets"):
            continue
        lines.append(
            f"  dscp {dscp:>2}: {row['packets']} packets, avg {row['avg_us']:.3g}, "
            f"p50 {row['p50_us']:.3g}, p99 {row['p99_us']:.3g}, max {row['max_us']:.3g}"
        )
    return lines


def expectation_lines(verdicts: Sequence[Mapping[str, str]]) -> list[str]:
    """The switch test's verdicts (summary.json `expectations`), one line each, and the count."""
    lines = ["expectations:"]
    for v in verdicts:
        lines.append(f"  {v['status']:<14} {v['expectation']}: {v['detail']}")
    failed = sum(v["status"] == "FAIL" for v in verdicts)
    na = sum(v["status"] == "NOT APPLICABLE" for v in verdicts)
    lines.append(f"  {len(verdicts) - failed - na} passed, {failed} failed, {na} not applicable")
    return lines


def rerender(folder: Path, write_csv: bool) -> dict[str, Any]:
    """Recompute summary.json and the plots of `folder` from its parquet files."""
    run = load_run(folder)
    meta = RunMeta.from_summary(run.summary)
    scenario = folder / SCENARIO_COPY
    if meta.multipath is None and scenario.is_file():  # a folder written before `reordering`
        meta = dataclasses.replace(
            meta, multipath=MultipathSetup.of_scenario_text(scenario.read_text())
        )
    summary = build_summary(meta, run.tables, partial=bool(run.summary.get("partial", False)))
    render_run_plots(run.tables, folder / PLOTS, meta.scenario)
    if write_csv:
        csv_dir = folder / "csv"
        csv_dir.mkdir(mode=DIR_MODE, exist_ok=True)
        for name, table in run.tables.by_name().items():
            pacsv.write_csv(table, csv_dir / f"{name}.csv")
    replace_file_atomically(folder / SUMMARY, (json.dumps(summary, indent=2) + "\n").encode())
    make_private(folder)
    return summary


def _compare_value(summary: Mapping[str, Any], ctype: str, key: str) -> Any:
    return ((summary.get("collectives") or {}).get(ctype) or {}).get(key)


def compare_table(runs: Sequence[LoadedRun]) -> str:
    """Per collective type, one row per run: busbw mean and CV, FCT p50/p99, CNPs."""
    columns = {key: (head, scale, fmt) for head, key, scale, fmt in TYPE_COLUMNS}
    summaries = [
        build_summary(RunMeta.from_summary(r.summary), r.tables, bool(r.summary.get("partial")))
        for r in runs
    ]
    types = sorted({t for s in summaries for t in (s.get("collectives") or {})})
    headers = ["collective", "run", *(columns[k][0] for k in COMPARE_COLUMNS)]
    body: list[list[str]] = []
    labels = unique_labels(runs)
    for ctype in types:
        for label, summary in zip(labels, summaries, strict=True):
            if ctype not in summary["collectives"]:
                continue
            body.append(
                [
                    ctype,
                    label,
                    *(
                        _cell(_compare_value(summary, ctype, k), columns[k][1], columns[k][2])
                        for k in COMPARE_COLUMNS
                    ),
                ]
            )
    return _render(headers, body, left=2)


def unique_labels(runs: Sequence[LoadedRun]) -> list[str]:
    """Run labels for legends: the scenario name, with the folder name where names repeat."""
    labels = [r.label for r in runs]
    return [
        f"{label} ({run.folder.name})" if labels.count(label) > 1 else label
        for label, run in zip(labels, runs, strict=True)
    ]


def write_compare_plots(runs: Sequence[LoadedRun], out: Path) -> list[Path]:
    out.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    labelled = list(zip(unique_labels(runs), (r.tables for r in runs), strict=True))
    paths = [render(labelled, out / name) for name, render in COMPARE_PLOTS.items()]
    make_private(out)
    return paths
