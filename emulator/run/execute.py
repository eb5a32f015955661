"""A planned workload through a backend, measured and written: the part of `emulate run` after
planning and the TDF (emulator.run.pipeline), the same for every backend.

It opens the backend the scenario's fabric asks for (emulator.backends), builds the recorder, the
live exporter and the progress line, lets the backend's session replay the driver into them, and
then turns what was recorded and what the backend reported into the tables, the fidelity
verdict, the expectations and the results folder with its report.html. An interrupted or failed
replay still writes the folder (and its page), marked partial, before the error propagates. The
probe (emulator.timescale.probe) runs short versions of it to verify a TDF.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.capture import read_pcap
from collectors.fidelity import assess_fidelity
from collectors.live import RunInfo
from collectors.pages.kit import write_or_warn
from collectors.pages.run import write_run_report
from collectors.prometheus import exporter_for, push
from collectors.queue_pairs import QpRow, rank_totals
from collectors.recorder import RunRecorder
from collectors.reference import compare_runs, reference_lines
from collectors.report import summary_table
from collectors.results import ResultsWriter
from collectors.summary import RunMeta
from collectors.tables import RunTables, column, to_table
from emulator.backends import BackendContext, ReplayJob, backend_for
from emulator.interrupts import Interrupts
from emulator.planning.workload import PlannedWorkload, traffic_of
from emulator.progress import ProgressLine
from emulator.run.options import RunOptions, RunResult, backend_options
from emulator.run.replay import Replay
from emulator.run.tester import TesterResults
from emulator.scenario.model import Scenario
from emulator.schedule.fabric import describe_fabric
from emulator.timescale.tdf import TdfChoice
from emulator.timescale.verdict import (
    burst_reason,
    dependency_reason,
    engine_delay_reason,
    engine_delay_shares,
    flow_delays,
)


@dataclass(frozen=True)
class SimReference:
    """`--reference sim`'s simulation: its folder and tables, and its other draws' tables."""

    folder: Path
    tables: RunTables
    draws: tuple[RunTables, ...] = ()


def capture_summary(captures: Mapping[int, bytes], spec: Any) -> dict[str, Any]:
    """summary.json `capture`: per captured rank its file and packets (what was kept)."""
    ranks = {}
    for rank in spec.ranks:
        data = captures.get(rank)
        ranks[str(rank)] = (
            {"file": f"capture/rank-{rank}.pcap", "packets": len(read_pcap(data)[2])}
            if data is not None
            else {"file": None, "packets": 0}
        )
    return {"snap_bytes": spec.snap_bytes, "most_packets": spec.packets, "ranks": ranks}


def run_planned(
    scenario: Scenario,
    options: RunOptions,
    planned: PlannedWorkload,
    choice: TdfChoice,
    writer: ResultsWriter,
    stack: contextlib.ExitStack,
    reference: SimReference | None = None,
) -> RunResult:
    interrupts = Interrupts()
    stack.enter_context(interrupts.handled())
    backend = backend_for(scenario, options.backend)
    context = BackendContext(
        scenario,
        planned,
        choice.tdf,
        backend_options(options),
        stack,
        interrupts,
    )
    session = backend.open(context)
    info = RunInfo(scenario.name, choice.tdf, session.marker_name, describe_fabric(scenario.fabric))
    recorder = RunRecorder(
        (),
        (),
        info,
        nic_line_rate_bps=scenario.fabric.rank_rate_bps,
        port_line_rate_bps=session.port_line_rate_bps,
    )
    replay = Replay(scenario, planned, recorder, interrupts)
    exporter = exporter_for(scenario.metrics.prometheus, recorder.live)
    stack.enter_context(exporter)
    if exporter.port is not None:
        options.say(
            f"live metrics on http://{scenario.metrics.prometheus.bind_address}:{exporter.port}/metrics"
        )
    progress = ProgressLine(
        planned.collectives,
        planned.numbering.total,
        planned.ideal.job_time_s * choice.tdf,
        enabled=options.progress,
    )

    def latency_source(source: Any) -> None:
        recorder.live.latency_source = source

    report = session.run(
        ReplayJob(
            replay.job,
            replay.on_events,
            recorder.on_events,
            progress,
            replay.progress,
            latency_source,
            tag_of=replay.tag_of,
            attribution_classes=replay.classes,
        )
    )
    partial = report.error is not None or not replay.job.finished
    tester = TesterResults.gather(
        report.queue_pairs,
        traffic_of(replay.job),
        report.pfc_sent,
        session.pfc_received(),
        {host: p.name for p in planned.placements for host in p.hosts},
    )
    # the final scrape and push carry the tester's counters (reordering, SACKs, ...) per rank
    rows = tester.queue_pairs
    recorder.live.queue_pair_source = lambda: rank_totals(rows)
    tables = dataclasses.replace(recorder.tables(), queue_pairs=to_table(tester.queue_pairs, QpRow))
    fabric_metadata = session.metadata()
    reasons, unknown = list(report.reasons), list(report.unknown)
    if partial:
        reasons.append("the run did not finish (partial results): what it measured is a part")
    short = burst_reason(
        column(tables.flows, "bytes"),
        fabric_metadata,
        column(tables.flows, "fct_s"),
        scenario.fabric.slowest_link_bps,
    )
    if short is not None:
        reasons.append(short)
    late_start = dependency_reason(
        report.metadata.get("dependency_latency") or {}, column(tables.flows, "fct_s")
    )
    if late_start is not None:
        reasons.append(late_start)
    delay_shares = engine_delay_shares(flow_delays(tables))
    lagged = engine_delay_reason(delay_shares)
    if lagged is not None:
        reasons.append(lagged)
    if replay.unpaired:
        reasons.append(
            f"{len(replay.unpaired)} collectives had no ideal-time counterpart: "
            + ", ".join(replay.unpaired[:4])
        )
    comparison = None
    if reference is not None:
        comparison = compare_runs(tables, reference.tables, draws=reference.draws)
        reasons += [
            f"differs from the simulation beyond the stated bounds: {d}"
            for d in comparison["deviations"]
        ]
    limits = scenario.metrics.fidelity
    if not report.lossless:
        limits = dataclasses.replace(limits, lossless=False)
    if burst := fabric_metadata.get("shaper_burst_bytes"):
        limits = dataclasses.replace(limits, nic_burst_bytes=int(burst))
    if spreading := reordering_causes(scenario):
        limits = dataclasses.replace(limits, reordering_by=spreading)
    fidelity = assess_fidelity(
        tables,
        limits,
        reasons,
        unknown,
        not_applicable=(
            *report.not_applicable,
            # streams alone: no queue pair, nothing a transport could retransmit
            *(() if scenario.jobs or scenario.traffic else ("retransmissions_in_lossless_fabric",)),
        ),
        leaves_out=report.leaves_out,
        parts=report.parts,
    )
    recorder.live.judged(
        fidelity.verdict,
        len(fidelity.reasons),
        {name: (part.verdict, len(part.reasons)) for name, part in fidelity.parts.items()},
    )
    metadata = report.metadata
    extra: dict[str, Any] = {
        "backend": backend.name,
        "time_dilation": choice.to_json(),
        "wall_time": {
            "replay_s": metadata.get("replay_wall_s"),
            "predicted_s": planned.ideal.job_time_s * choice.tdf,  # the ideal job time x TDF
        },
        "ideal_job_time_s": planned.ideal.job_time_s,
        "ideal_model": scenario.run.ideal,  # the yardstick (run.ideal)
        "seed": scenario.run.seed,
        "world_size": planned.world_size,
        "placement": [
            {
                "job": p.name,
                "hosts": list(p.hosts),
                "iterations": p.iterations,
                "start_us": round(p.start_s * 1e6, 6),
            }
            for p in planned.placements
        ],
        "iterations": planned.numbering.total,
        "engine": {**metadata, **({"delay_share": delay_shares} if delay_shares else {})},
        "fabric_backend": fabric_metadata,
        "warnings": planned.warnings,
        **report.extra,
        # the tester's counters (per QP in queue_pairs.parquet): totals, and per rank
        **tester.summary(),
    }
    if reference is not None and comparison is not None:
        extra["reference"] = {"backend": "sim", "folder": str(reference.folder), **comparison}
    impairments: dict[str, Any] = {}
    if scenario.compute.stragglers:
        impairments["stragglers"] = dict(scenario.compute.stragglers)
        impairments["collectives_with_a_straggler"] = dict(replay.affected)
    impairments.update(session.impairments(tables.flows.to_pylist, replay.job_time_s))
    if impairments:
        extra["impairments"] = impairments
    error = report.error
    if error is not None:
        extra["stopped_by"] = (
            "interrupt" if isinstance(error, KeyboardInterrupt) else f"error: {error}"
        )
    verdicts = (
        tester.judge(scenario.expect, tables, session.expectation_view()) if scenario.expect else []
    )
    if verdicts:
        extra["expectations"] = [v.to_json() for v in verdicts]
    files = {f"capture/rank-{rank}.pcap": data for rank, data in sorted(report.captures.items())}
    if scenario.metrics.capture is not None:
        extra["capture"] = capture_summary(report.captures, scenario.metrics.capture)
    summary = writer.write(
        RunMeta.from_info(info, fidelity, replay.job_time_s, extra), tables, partial, files
    )
    # report.html after the folder is in place (it shows summary.json and the plots); a page
    # that cannot be written is a warning, the run's results stand without it (write_or_warn)
    page = write_or_warn(
        write_run_report, writer.target, options.say, again=f"emulate report {writer.target}"
    )
    url = scenario.metrics.prometheus.pushgateway_url
    if url:
        push(exporter.registry, url)
    linger_s = scenario.metrics.prometheus.linger_s
    if exporter.port is not None and linger_s > 0:
        # the final values (the verdict, the tester's end-of-run counters) for a scraper; a
        # Ctrl-C ends the wait like any other (the results are already in place)
        options.say(f"serving the final metrics for {linger_s:g} s (metrics.prometheus.linger_s)")
        time.sleep(linger_s)
    if options.report:
        print(summary_table(summary))  # with the latency per class and the expectations
        if comparison is not None:
            print("\nthe simulation as the reference:")
            print("\n".join(reference_lines(comparison)))
        print(f"\nresults: {writer.target}\nplots:   {writer.target / 'plots'}")
        if page is not None:
            print(f"report:  {page}")
        sys.stdout.flush()
    if error is not None:
        raise error
    failed = sum(v.status == "FAIL" for v in verdicts)
    return RunResult(writer.target, summary, partial, failed)


def reordering_causes(scenario: Scenario) -> str:
    """What in the scenario spreads a flow's packets over paths ("" for nothing): the switch
    tiers whose load balancing is not ECMP, and per-packet entropy."""
    causes: list[str] = []
    tiers = getattr(scenario.fabric, "tiers", {})
    by_mode: dict[str, list[str]] = {}
    for name, tier in tiers.items():
        mode = tier.load_balancing.mode
        if mode != "ecmp":
            by_mode.setdefault(mode, []).append(name.replace("_", " "))
    for mode, names in by_mode.items():
        what = {"spray": "packet spraying", "flowlet": "flowlet switching"}.get(
            mode, f"{mode} routing"
        )
        causes.append(f"{what} at the {' and '.join(names)} tier{'s' if len(names) > 1 else ''}")
    if scenario.transport.entropy == "per_packet":
        causes.append("per-packet entropy")
    return " and ".join(causes)
