"""`emulate run`, end to end: plan, choose the TDF, bring the fabric up, replay, measure, write.

Order matters for what a failure leaves behind: everything that can refuse bad input (scenario,
trace set, plan, results folder) runs before the fabric exists; the fabric, the exporter, the
sampler and the engine's workers are released in reverse order whatever happens. An interrupted
or failed replay still writes the results folder, marked partial, before the error propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from collectors.events import CollectiveMemberStarted, NicSample, RunEvent
from collectors.fidelity import assess_fidelity
from collectors.live import RunInfo
from collectors.nic import NetlinkCounters, NicSampler
from collectors.prometheus import exporter_for, push
from collectors.queue_pairs import QpRow
from collectors.recorder import RunRecorder
from collectors.records import CollectiveMeta, FlowMeta
from collectors.report import summary_table
from collectors.results import ResultsWriter, default_results_dir
from collectors.summary import RunMeta
from collectors.tables import column, to_table
from emulator.engine.coordinator import Coordinator, EngineFailure
from emulator.engine.plan import RankEndpoint
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.run.calibrate import Shape
from emulator.run.link_events import LinkEventRunner, flows_crossing
from emulator.run.link_events import resolve as resolve_link_events
from emulator.run.options import RunOptions, RunResult
from emulator.run.pfc_generator import PfcGenerator
from emulator.run.pfc_generator import interval_s as pfc_interval_s
from emulator.run.progress import ProgressLine, ProgressState
from emulator.run.sampling import Sampler
from emulator.run.tdf import TdfChoice, auto_tdf
from emulator.run.tester import PfcReadings, TesterResults
from emulator.run.verdict import burst_reason, engine_checks
from emulator.run.workload import (
    Driver,
    PlannedWorkload,
    plan_workload,
    trace_prefix,
    traffic_of,
)
from emulator.scenario.model import Scenario
from emulator.schedule.fabric import describe_fabric
from emulator.schedule.plan import CollectiveInstance
from fabrics.spec import ClosSpec, DutSpec


def fabric_ranks(spec: Any) -> int:
    if isinstance(spec, ClosSpec):
        return spec.hosts_per_leaf * spec.leaves * spec.pods
    if isinstance(spec, DutSpec):
        return spec.rank_count
    raise EnvironmentProblem(f"fabric: {type(spec).__name__} cannot run")


def target_rate_bps(spec: Any) -> float:
    if isinstance(spec, ClosSpec):
        return spec.host_link_gbps * 1e9
    assert isinstance(spec, DutSpec)
    return spec.max_rate_gbps * 1e9


def calibration_shape(scenario: Scenario, world: int) -> Shape:
    """The scenario's fabric and QPs, for a calibration shaped like its run."""
    fabric = scenario.fabric
    qps = scenario.collectives.qps_per_peer
    if isinstance(fabric, ClosSpec) and fabric.pods == 1:
        return Shape(
            fabric.hosts_per_leaf,
            fabric.leaves,
            fabric.spines,
            fabric.parallel_links,
            qps,
            world,
        )
    # several pods: the same number of ranks on one pod's two tiers
    leaves = max(2, math.ceil(world / 16))
    return Shape(max(1, math.ceil(world / leaves)), leaves, 2, 1, qps, world)


def choose_tdf(
    scenario: Scenario, options: RunOptions, world: int, planned: PlannedWorkload | None = None
) -> TdfChoice:
    peak_bps = world * target_rate_bps(scenario.fabric)
    if isinstance(scenario.fabric, DutSpec):
        return TdfChoice(1.0, "dut", peak_bps)
    if options.tdf is not None:
        return TdfChoice(options.tdf, "command line", peak_bps)
    setting = scenario.run.time_dilation
    if setting != "auto":
        return TdfChoice(float(setting), "scenario", peak_bps)
    from emulator.run.calibrate import calibrate

    calibration = calibrate(
        scenario.transport.path_mtu_bytes,
        calibration_shape(scenario, world),
        refresh=options.recalibrate,
        say=options.say,
    )
    tdf, why = auto_tdf(
        peak_bps,
        calibration,
        scenario.transport.dcqcn,
        scenario.metrics.fidelity.cpu_busy_ratio,
    )
    first = TdfChoice(tdf, "auto", peak_bps, calibration, why)
    if planned is None or not isinstance(scenario.fabric, ClosSpec):
        return first
    from emulator.run.probe import verify

    return verify(scenario, options, planned, first)


def scenario_text(scenario: Scenario) -> str:
    """The scenario as run: its file, or the file with what the caller changed (--iterations,
    the study's seed) written in, so the copy in the results folder replays the same run."""
    if scenario.source is not None and scenario.source.is_file():
        text = scenario.source.read_text()
        changes = _changed_keys(scenario)
        if not changes:
            return text
        doc = yaml.safe_load(text)
        for (section, key), value in changes.items():
            doc.setdefault(section, {})[key] = value
        said = ", ".join(f"{s}.{k}: {v}" for (s, k), v in changes.items())
        return f"# {scenario.source.name} as run ({said} set by the caller)\n" + yaml.safe_dump(
            doc, sort_keys=False
        )
    return yaml.safe_dump(_plain(dataclasses.asdict(scenario)), sort_keys=False)


def _changed_keys(scenario: Scenario) -> dict[tuple[str, str], Any]:
    """What the caller changed from the scenario's file: run.seed and workload.iterations."""
    from emulator.scenario import load_scenario

    assert scenario.source is not None
    written = load_scenario(scenario.source)
    changes: dict[tuple[str, str], Any] = {}
    if written.run.seed != scenario.run.seed:
        changes[("run", "seed")] = scenario.run.seed
    if (
        written.workload is not None
        and scenario.workload is not None
        and written.workload.iterations != scenario.workload.iterations
    ):
        changes[("workload", "iterations")] = scenario.workload.iterations
    return changes


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "source"}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


class Interrupts:
    """Ctrl-C and SIGTERM stop the run: partial results written, everything released.

    Python raises a signal's KeyboardInterrupt wherever the main thread is; when that is a
    callback the garbage collector runs (an import's module-lock cleanup), the exception is
    printed as "ignored" and lost, and the run would go on to the end. So the signal is also
    remembered, and the run's checkpoints (fabric up, replay start, every batch of engine
    events) raise one that was not delivered."""

    def __init__(self) -> None:
        self.pending = False

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def handled(self) -> Iterator[None]:
        owner = os.getpid()

        def handler(signum: int, frame: FrameType | None) -> None:
            del frame
            if not _forked_helper_died(signum, owner):
                self.pending = True
                raise KeyboardInterrupt

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        except KeyboardInterrupt:
            self.pending = False  # delivered
            raise
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


class Replay:
    """One replay on a live fabric: the schedule, the recorder, and their bookkeeping."""

    def __init__(
        self,
        scenario: Scenario,
        planned: PlannedWorkload,
        recorder: RunRecorder,
        interrupts: Interrupts | None = None,
    ) -> None:
        self.scenario = scenario
        self.interrupts = interrupts or Interrupts()
        self.planned = planned
        self.recorder = recorder
        self.unpaired: list[str] = []
        self.iteration_of: dict[int, int] = {}
        self.stragglers = {int(r) for r in scenario.compute.stragglers}
        # collective instances with a straggler among their members, by type
        self.affected: Counter[str] = Counter()
        planned.numbering.restart()  # a replay numbers its instances from the first
        self.job: Driver = planned.schedule(scenario, self._on_instance, self._on_member_issued)

    def _on_instance(self, inst: CollectiveInstance) -> None:
        if self.stragglers.intersection(inst.members):
            self.affected[inst.collective] += 1
        iteration = self.planned.numbering.number(inst)
        self.iteration_of[inst.id] = iteration
        ideal = self.planned.ideal_time(inst)
        if ideal is None:
            self.unpaired.append(f"{inst.collective} #{inst.id}")
        coll = CollectiveMeta(
            collective_id=inst.id,
            collective_type=inst.collective,
            process_group=inst.group,
            group_size=inst.group_size,
            iteration=iteration,
            bytes=inst.size_bytes,
            ideal_time_s=ideal,
            timed_from_rank=inst.timed_from_rank,
        )
        flows = [
            FlowMeta(
                flow_id=f.id,
                collective_id=inst.id,
                collective_type=inst.collective,
                iteration=iteration,
                step=f.step,
                src_rank=f.src,
                dst_rank=f.dst,
                qp=f.qp,
                udp_sport=f.udp_sport,
                bytes=f.bytes,
            )
            for f in inst.flows
        ]
        self.recorder.add_plan(flows, [coll])

    def _on_member_issued(self, collective_id: int, rank: int, time_s: float) -> None:
        # the rendezvous (last member in) is where busbw is timed from, as the ideal model does
        self.recorder.on_events([CollectiveMemberStarted(collective_id, rank, time_s)])

    def on_events(self, batch: list[RunEvent]) -> None:
        self.interrupts.check()
        # NIC samples come from the interfaces' own counters (the sampler), not the engine's
        self.recorder.on_events([e for e in batch if not isinstance(e, NicSample)])

    def progress(self, sampler: Sampler | None) -> ProgressState:
        results = self.job.results
        done_by_iteration: dict[int, int] = {}
        for r in list(results):
            it = self.iteration_of.get(r.id, 0)
            done_by_iteration[it] = done_by_iteration.get(it, 0) + 1
        planned = self.planned.numbering
        iterations_done = 0
        per_iteration = max(self.planned.collectives // max(planned.total, 1), 1)
        while done_by_iteration.get(iterations_done, 0) >= per_iteration:
            iterations_done += 1
        return ProgressState(
            len(results),
            min(iterations_done, planned.total),
            sampler.throughput_bps if sampler else 0.0,
        )

    @property
    def job_time_s(self) -> float | None:
        ends = [r.end_s for r in self.job.results]
        return max(ends) if ends else None


def run_scenario(scenario: Scenario, options: RunOptions | None = None) -> RunResult:
    options = options or RunOptions()
    if os.geteuid() != 0:
        raise EnvironmentProblem("emulate run needs root (network namespaces, qdiscs, BPF)")
    with contextlib.ExitStack() as stack:
        prefix = stack.enter_context(trace_prefix(scenario))
        planned = plan_workload(
            scenario, prefix, fabric_ranks(scenario.fabric), target_rate_bps(scenario.fabric)
        )
        for warning in planned.warnings:
            options.say(f"warning: {warning}")
        if isinstance(scenario.fabric, ClosSpec) and scenario.fabric.link_events:
            from fabrics.topology import build_clos

            resolve_link_events(scenario.fabric, build_clos(scenario.fabric))  # before bring-up
        choice = choose_tdf(scenario, options, planned.world_size, planned)
        started = datetime.now(UTC)
        out_dir = options.out_dir or default_results_dir(
            Path(scenario.metrics.results_dir), scenario.name, started
        )
        writer = ResultsWriter(out_dir, scenario_text=scenario_text(scenario))
        options.say(
            f"{planned.world_size} ranks, {planned.collectives} collectives, ideal job time "
            f"{planned.ideal.job_time_s * 1e3:.3f} ms; TDF {choice.tdf:g} ({choice.how}"
            + (f", bound by {choice.bound_by}" if choice.bound_by else "")
            + f"), so about {planned.ideal.job_time_s * choice.tdf:.0f} s of wall time at best"
        )
        return run_on_fabric(scenario, options, planned, choice, writer, stack)


def run_on_fabric(
    scenario: Scenario,
    options: RunOptions,
    planned: PlannedWorkload,
    choice: TdfChoice,
    writer: ResultsWriter,
    stack: contextlib.ExitStack,
) -> RunResult:
    from fabrics.counters import read_port_counters
    from fabrics.netns import LiveFabric
    from fabrics.registry import bring_up_fabric
    from fabrics.topology import HOST_IFNAME

    interrupts = Interrupts()
    stack.enter_context(interrupts.handled())
    options.say(f"bringing up the fabric: {describe_fabric(scenario.fabric)}")
    live = bring_up_fabric(
        scenario.fabric,
        time_dilation=choice.tdf,
        prefix=options.fabric_prefix,
        progress=lambda m: options.say(m),
    )
    stack.callback(_teardown, live, options)
    interrupts.check()
    world = planned.world_size
    shared = isinstance(scenario.fabric, DutSpec) and scenario.fabric.ranks_per_interface > 1
    ranks = [
        RankEndpoint(
            r,
            live.rank_address(r),
            live.rank_netns(r),
            target_rate_bps(scenario.fabric),
            # endpoints behind one port share its line rate (one transmit arbiter)
            nic=scenario.fabric.port_of(r) if shared else None,
        )
        for r in range(world)
    ]
    for other in ranks:  # a DUT refuses any destination outside its allowlist, before sending
        live.check_destination(other.rank, other.address)
    info = RunInfo(scenario.name, choice.tdf, live.marker_name, describe_fabric(scenario.fabric))
    port_rate = (
        scenario.fabric.fabric_link_gbps * 1e9 if isinstance(scenario.fabric, ClosSpec) else None
    )
    recorder = RunRecorder(
        (),
        (),
        info,
        nic_line_rate_bps=target_rate_bps(scenario.fabric),
        port_line_rate_bps=port_rate,
    )
    replay = Replay(scenario, planned, recorder, interrupts)
    links: LinkEventRunner | None = None
    fabric_spec = scenario.fabric
    if (
        isinstance(live, LiveFabric)
        and isinstance(fabric_spec, ClosSpec)
        and fabric_spec.link_events
    ):
        cables = resolve_link_events(fabric_spec, live.topology)
        links = LinkEventRunner(live, fabric_spec.link_events, cables, choice.tdf, options.say)
    pfc = _pfc_generators(scenario, live, choice.tdf, world, stack)
    if pfc and isinstance(live, LiveFabric):
        options.say(
            "warning: PFC frames are sent, but the emulated Linux fabric does not pause for "
            "them (a switch under test does)"
        )
    if isinstance(live, LiveFabric):
        counters = {r: NetlinkCounters(HOST_IFNAME, live.rank_netns(r)) for r in range(world)}
        fabric = live

        def read_ports() -> list[Any]:
            return list(read_port_counters(fabric).values())

        ports: Any = read_ports
    else:
        # one reading per port: ranks sharing a port are counted under its first rank
        dut_spec = live.spec
        counters = {
            r: NetlinkCounters(dut_spec.rank_interface(r), live.rank_netns(r))
            for r in range(0, world, dut_spec.ranks_per_interface)
        }
        ports = None
    for c in counters.values():
        stack.callback(c.close)
    exporter = exporter_for(scenario.metrics.prometheus, recorder.live)
    stack.enter_context(exporter)
    if exporter.port is not None:
        options.say(
            f"live metrics on http://{scenario.metrics.prometheus.bind_address}:{exporter.port}/metrics"
        )
    latency = scenario.metrics.one_way_latency
    engine = dataclasses.replace(
        scenario.engine,
        one_way_latency=latency == "on" or (latency == "auto" and bool(scenario.traffic)),
        tdf=choice.tdf,
        run_timeout_s=scenario.run.deadline_s
        or max(120.0, 20 * planned.ideal.job_time_s * choice.tdf + 60.0),
    )
    progress = ProgressLine(
        planned.collectives,
        planned.numbering.total,
        planned.ideal.job_time_s * choice.tdf,
        enabled=options.progress,
    )
    sampler = Sampler(
        recorder,
        NicSampler(counters),
        ports,
        scenario.metrics.sample_interval_s,
        choice.tdf,
        progress,
        lambda: replay.progress(sampler),
    )
    coordinator = Coordinator(
        ranks,
        [],
        transport=scenario.transport,
        engine=engine,
        on_events=replay.on_events,
        on_ready=lambda _pids: sampler.take_baseline(),
        on_start=lambda start_wall_s: _started(start_wall_s, sampler, links, pfc, interrupts),
        driver=replay.job,
        profiles=planned.profiles,
    )
    pfc_readings = PfcReadings(live)
    recorder.live.latency_source = coordinator.latency_by_class
    partial = True
    error: BaseException | None = None
    outcome = None
    sampler.start()
    try:
        outcome = coordinator.run()
        partial = not replay.job.finished
    except (KeyboardInterrupt, EngineFailure) as exc:
        interrupts.pending = False
        error = exc
    finally:
        if links is not None:
            links.stop()
        for generator in pfc:
            generator.stop()
        sampler.stop()
        progress.done(replay.progress(sampler))
    metadata = outcome.metadata if outcome is not None else coordinator.metadata()
    pfc_sent: Counter[int] = Counter()  # per rank, over its generators
    for spec, generator in zip(scenario.run.pfc_frames, pfc, strict=True):
        pfc_sent[spec.rank] += generator.sent
    tester = TesterResults.gather(
        coordinator.queue_pairs(), traffic_of(replay.job), pfc_sent, pfc_readings
    )
    tables = dataclasses.replace(recorder.tables(), queue_pairs=to_table(tester.queue_pairs, QpRow))
    limits = scenario.metrics.fidelity
    reasons, unknown = engine_checks(
        metadata, choice.tdf, scenario.transport.dcqcn, limits.cpu_busy_ratio
    )
    if partial:
        reasons.append("the run did not finish (partial results): what it measured is a part")
    if (short := burst_reason(column(tables.flows, "bytes"), live.metadata())) is not None:
        reasons.append(short)
    reasons += [f"sampling failed: {e}" for e in sampler.errors[:3]]
    if replay.unpaired:
        reasons.append(
            f"{len(replay.unpaired)} collectives had no ideal-time counterpart: "
            + ", ".join(replay.unpaired[:4])
        )
    if links is not None and links.errors:
        reasons.append(f"link events failed: {'; '.join(links.errors[:2])}")
    loss = fabric_spec.loss_impairment() if isinstance(fabric_spec, ClosSpec) else {}
    if loss or links is not None:
        # drops and retransmissions are what the impairment asked for
        limits = dataclasses.replace(limits, lossless=False)
    fidelity = assess_fidelity(
        tables,
        limits,
        reasons,
        unknown,
        # a real switch under test is not ours: its drops are not in our counters
        not_applicable=() if ports is not None else ("drops_in_lossless_fabric",),
    )
    extra = {
        "time_dilation": choice.to_json(),
        "wall_time": {
            "replay_s": metadata.get("replay_wall_s"),
            "predicted_s": planned.ideal.job_time_s * choice.tdf,  # the ideal job time x TDF
        },
        "ideal_job_time_s": planned.ideal.job_time_s,
        "seed": scenario.run.seed,
        "world_size": planned.world_size,
        "iterations": planned.numbering.total,
        "engine": metadata,
        "fabric_backend": live.metadata(),
        "warnings": planned.warnings,
        # NIC readings whose time was uncertain (the sampler lost the CPU while reading)
        "nic_readings_left_out": sampler.nic.skipped,
        # the tester's counters (per QP in queue_pairs.parquet): totals, and per rank
        **tester.summary(),
    }
    impairments: dict[str, Any] = {}
    if scenario.compute.stragglers:
        impairments["stragglers"] = dict(scenario.compute.stragglers)
        impairments["collectives_with_a_straggler"] = dict(replay.affected)
    if loss and ports is not None:
        impairments["loss_probability"] = loss
        try:
            impairments["loss_drops"] = sum(c.loss_drops for c in ports())
        except Exception as exc:  # the fabric may be gone after a failure: say so
            impairments["loss_drops"] = f"unknown ({type(exc).__name__}: {exc})"
        impairments["packets_retransmitted"] = metadata.get("counters", {}).get(
            "packets_resent_planned", 0
        )
    if links is not None:
        end_s = replay.job_time_s or float("inf")
        crossing = flows_crossing(
            links.fabric.topology, links.down_windows(end_s), tables.flows.to_pylist()
        )
        impairments["link_events"] = links.applied
        impairments["flows_crossing_a_down_link"] = dict(crossing)
        if links.errors:
            impairments["link_event_errors"] = links.errors
    if impairments:
        extra["impairments"] = impairments
    if pfc:
        extra["pfc_frames_sent"] = {str(rank): n for rank, n in pfc_sent.items()}
        errors = [e for g in pfc for e in g.errors]
        if errors:
            extra["pfc_frame_errors"] = errors[:5]
    if error is not None:
        extra["stopped_by"] = (
            "interrupt" if isinstance(error, KeyboardInterrupt) else f"error: {error}"
        )
    verdicts = tester.judge(scenario.expect, tables, live) if scenario.expect else []
    if verdicts:
        extra["expectations"] = [v.to_json() for v in verdicts]
    summary = writer.write(
        RunMeta.from_info(info, fidelity, replay.job_time_s, extra), tables, partial
    )
    url = scenario.metrics.prometheus.pushgateway_url
    if url:
        push(exporter.registry, url)
    if options.report:
        print(summary_table(summary))  # with the latency per class and the expectations
        print(f"\nresults: {writer.target}\nplots:   {writer.target / 'plots'}")
        sys.stdout.flush()
    if error is not None:
        raise error
    failed = sum(v.status == "FAIL" for v in verdicts)
    return RunResult(writer.target, summary, partial, failed)


def _started(
    start_wall_s: float,
    sampler: Sampler,
    links: LinkEventRunner | None,
    pfc: list[PfcGenerator],
    interrupts: Interrupts,
) -> None:
    """The replay's start: sampling, link events and PFC frames count from here."""
    interrupts.check()
    sampler.set_start(start_wall_s)
    if links is not None:
        links.start(start_wall_s)
    for generator in pfc:
        generator.start(start_wall_s)


def _pfc_generators(
    scenario: Scenario, live: Any, tdf: float, world: int, stack: contextlib.ExitStack
) -> list[PfcGenerator]:
    """One generator per run.pfc_frames entry, on its rank's interface (sockets closed by
    `stack` whatever happens)."""
    from fabrics.netns import LiveFabric
    from fabrics.topology import HOST_IFNAME

    out = []
    for i, spec in enumerate(scenario.run.pfc_frames):
        if spec.rank >= world:
            raise ScenarioError(
                f"run.pfc_frames[{i}].rank: {spec.rank} is not a rank (0..{world - 1})"
            )
        ifname = (
            HOST_IFNAME if isinstance(live, LiveFabric) else live.spec.rank_interface(spec.rank)
        )
        quanta = spec.quanta_by_priority
        generator = PfcGenerator(
            live.rank_netns(spec.rank),
            ifname,
            quanta,
            interval_s=pfc_interval_s(
                spec.frames_per_s,
                spec.duty_cycle,
                max(quanta.values()),
                target_rate_bps(scenario.fabric),
            ),
            start_s=spec.start_us * 1e-6,
            stop_s=None if spec.stop_us is None else spec.stop_us * 1e-6,
            tdf=tdf,
        )
        stack.callback(generator.stop)
        out.append(generator)
    return out


def _teardown(live: Any, options: RunOptions) -> None:
    # close() raises EnvironmentProblem naming what it could not release (left for `emulate clean`)
    with signals_deferred():
        removed = live.close()
    options.say(f"fabric torn down ({len(removed)} resources released)")


def _forked_helper_died(signum: int, owner: int) -> bool:
    """In a process forked from the run (pyroute2's netns child) that inherited a handler of
    ours: die of the signal as usual (returns only in the run's own process, with False)."""
    if os.getpid() == owner:
        return False
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return True


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is over (noted, not lost): a teardown interrupted
    halfway would leave namespaces behind. On exit a noted signal stops the run as usual
    (KeyboardInterrupt). Python runs signal handlers in the main thread whichever thread the
    signal hit, so this holds with the exporter's and the sampler's threads alive."""
    noted: list[int] = []
    owner = os.getpid()

    def note(signum: int, frame: FrameType | None) -> None:
        del frame
        if not _forked_helper_died(signum, owner):
            noted.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if noted:
        raise KeyboardInterrupt
