"""What the engine-backed backends share (the emulated Clos, a switch under test, and each server of
a cluster): the session that replays a planned workload with the engine's coordinator and workers
(emulator.engine) on a live fabric, and its engine settings.

A session holds, between bring-up and teardown: the live fabric, the ranks' endpoints, the NIC
counters of every rank's interface, the PFC frame generators the scenario asks for, and on the
netns Clos the switch ports' counters and the link events. `run` starts the sampler and the
coordinator, relays the engine's events and the samples to the run, and stops everything it
started, whatever happens. What differs between fabrics is a method a subclass overrides
(backends/netns, backends/dut).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.capture import to_target_time
from collectors.nic import NetlinkCounters, NicSampler
from collectors.queue_pairs import qp_rows
from emulator.backends.base import BackendContext, ReplayJob, Session, SessionReport
from emulator.backends.engine.capture import RankCapture
from emulator.backends.engine.pfc_generator import PfcGenerator
from emulator.backends.engine.pfc_generator import interval_s as pfc_interval_s
from emulator.backends.engine.pfc_readings import PfcReadings
from emulator.backends.engine.sampling import Sampler
from emulator.backends.engine.streams import StreamRunner
from emulator.backends.link_events import LinkEventRunner
from emulator.backends.streams import stream_extra, stream_reasons, stream_sinks, stream_sources
from emulator.engine.coordinator import Coordinator, EngineFailure
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.errors import ScenarioError
from emulator.interrupts import signals_deferred
from emulator.planning.attribution import class_names, classes_json
from emulator.schedule.fabric import describe_fabric
from emulator.timescale.verdict import engine_checks
from fabrics.link_watch import unannounced_downs


def engine_params(context: BackendContext) -> EngineParams:
    """The scenario's engine settings for this run: its TDF, deadline and latency stamps."""
    scenario, planned, tdf = context.scenario, context.planned, context.tdf
    latency = scenario.metrics.one_way_latency
    return dataclasses.replace(
        scenario.engine,
        one_way_latency=latency == "on" or (latency == "auto" and bool(scenario.traffic)),
        tdf=tdf,
        run_timeout_s=scenario.run.deadline_s
        or max(120.0, 20 * planned.ideal.job_time_s * tdf + 60.0),
    )


class EngineSession(Session):
    """The live fabric and the engine's endpoints on it (shared by both engine backends)."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        self.context = context
        self.live = live
        self.marker_name = live.marker_name
        scenario = context.scenario
        world = context.planned.world_size
        self.ranks = [
            RankEndpoint(
                r,
                live.rank_address(r),
                live.rank_netns(r),
                scenario.fabric.rank_rate_bps,
                # endpoints behind one port share its line rate (one transmit arbiter)
                nic=self._nic_of(r),
            )
            for r in range(world)
        ]
        for other in self.ranks:  # a DUT refuses destinations outside its allowlist, first
            live.check_destination(other.rank, other.address)
        self.links: LinkEventRunner | None = None
        self.pfc = self._pfc_generators()
        self.streams = self._stream_runner()
        self.nic_counters = self._nic_counters()
        for c in self.nic_counters.values():
            context.stack.callback(c.close)
        self.pfc_readings = PfcReadings(live)
        self.engine_metadata: dict[str, Any] = {}
        self._qdiscs: Any = None  # _qdisc_stats', made once

    # -- what differs between the emulated fabric and a DUT ----------------------------------
    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        raise NotImplementedError

    def _nic_of(self, rank: int) -> int | None:
        """The NIC a rank shares with others (None: its own)."""
        del rank
        return None

    def _ledger(self) -> Callable[[list[dict[str, Any]]], None] | None:
        """Where the workers' AF_XDP ports are recorded before they attach (None: nowhere)."""
        return None

    def _reasons(self, metadata: dict[str, Any]) -> list[str]:
        """The session's own fidelity reasons from the engine's metadata."""
        del metadata
        return []

    def _pfc_ifname(self, rank: int) -> str:
        raise NotImplementedError

    def ports_reader(self) -> Callable[[], list[Any]] | None:
        """Reads the switch ports' counters (None: the fabric's switches are not ours to read)."""
        return None

    def _qdisc_stats(self) -> Any:
        """The session's one netlink reader of the switch namespaces (fabrics/qdisc_stats.py:
        a socket per namespace, for the sampler and any reading after the run), closed before
        the fabric is torn down (the context's stack: registered after it)."""
        if self._qdiscs is None:
            from fabrics.qdisc_stats import QdiscStats

            self._qdiscs = QdiscStats()
            self.context.stack.callback(self._qdiscs.close)
        return self._qdiscs

    def links_reader(self) -> Callable[[], dict[Any, Any]] | None:
        """Reads every fabric interface's carrier changes and drops (fabrics/link_watch.py;
        None: the links are not ours to watch)."""
        return None

    def _announced_ports(self) -> list[tuple[str, str]]:
        """The ports the scenario's own link events take down."""
        if self.links is None:
            return []
        return [(end.node, end.ifname) for c in self.links.cables for end in (c.a, c.b)]

    def counts_classes(self) -> bool:
        """The fabric's switches count by attribution class (the BTH tag the engine then
        writes, emulator.planning.attribution): only ours, with the eBPF marker. Elsewhere the
        reserved bits stay 0, as IBA transmits them."""
        return False

    # -- Session -------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        return dict(self.live.metadata())

    def pfc_received(self) -> dict[int, int | None]:
        return self.pfc_readings.received()

    def expectation_view(self) -> Any:
        return self.live

    def run(self, job: ReplayJob) -> SessionReport:
        context = self.context
        scenario, planned, tdf = context.scenario, context.planned, context.tdf
        engine = engine_params(context)
        classes = job.attribution_classes if self.counts_classes() else None
        sampler = Sampler(
            job.on_samples,
            NicSampler(self.nic_counters),
            self.ports_reader(),
            scenario.metrics.sample_interval_s,
            tdf,
            job.progress,
            lambda: job.state(sampler.throughput_bps),
            class_names=None if classes is None else lambda: class_names(classes),
        )

        captures = self._start_captures()
        origin: list[float] = []  # the replay's start on the wall clock tcpdump stamps with

        def started(start_wall_s: float) -> None:
            """The replay's start: sampling, link events and PFC frames count from here."""
            origin.append(time.time() - (time.perf_counter() - start_wall_s))
            context.interrupts.check()
            sampler.set_start(start_wall_s)
            if self.links is not None:
                self.links.start(start_wall_s)
            for generator in self.pfc:
                generator.start(start_wall_s)
            if self.streams is not None:
                self.streams.start(start_wall_s)

        read_links = self.links_reader()
        links_before: dict[Any, Any] = {}

        def ready(_pids: list[int]) -> None:
            sampler.take_baseline()
            if read_links is not None:
                links_before.update(read_links())

        coordinator = Coordinator(
            self.ranks,
            [],
            transport=scenario.transport,
            engine=engine,
            on_events=job.on_events,
            on_ready=ready,
            on_start=started,
            driver=job.driver,
            queue_pairs=planned.ideal.queue_pairs,
            profiles=planned.profiles,
            tag_of=job.tag_of if classes is not None else None,
            on_ledger=self._ledger(),
        )
        job.latency_source(coordinator.latency_by_class)
        error: BaseException | None = None
        outcome = None
        sampler.start()
        try:
            outcome = coordinator.run()
        except (KeyboardInterrupt, EngineFailure) as exc:
            context.interrupts.pending = False
            error = exc
        finally:
            if self.links is not None:
                self.links.stop()
            for generator in self.pfc:
                generator.stop()
            if self.streams is not None:
                self.streams.stop()
            for capture in captures:
                capture.stop()
            sampler.stop()
            job.progress.done(job.state(sampler.throughput_bps))
        metadata = outcome.metadata if outcome is not None else coordinator.metadata()
        self.engine_metadata = metadata
        limits = scenario.metrics.fidelity
        reasons, unknown = engine_checks(
            metadata, tdf, scenario.transport.dcqcn, limits.cpu_busy_ratio
        )
        reasons += self._reasons(metadata)
        reasons += [f"sampling failed: {e}" for e in sampler.errors[:3]]
        if read_links is not None and links_before:
            try:
                down = unannounced_downs(links_before, read_links(), self._announced_ports())
            except Exception as exc:  # the fabric may be gone after a failure: say so
                unknown.append(f"links: could not read them at the end ({exc})")
            else:
                if down is not None:
                    reasons.append(down)
        if self.links is not None and self.links.errors:
            reasons.append(f"link events failed: {'; '.join(self.links.errors[:2])}")
        pfc_sent: Counter[int] = Counter()  # per rank, over its generators
        for spec, generator in zip(scenario.run.pfc_frames, self.pfc, strict=True):
            pfc_sent[spec.rank] += generator.sent
        extra: dict[str, Any] = {
            # NIC readings whose time was uncertain (the sampler lost the CPU while reading)
            "nic_readings_left_out": sampler.nic.skipped,
        }
        if classes is not None:
            extra["attribution_classes"] = classes_json(classes)
        if self.pfc:
            extra["pfc_frames_sent"] = {str(rank): n for rank, n in pfc_sent.items()}
            errors = [e for g in self.pfc for e in g.errors]
            if errors:
                extra["pfc_frame_errors"] = errors[:5]
        if self.streams is not None:
            streams = self.streams
            extra.update(stream_extra(scenario, streams.sources, streams.sinks))
            reasons += stream_reasons(extra["streams"])
            for rank, n in sorted(streams.socket_drops.items()):
                reasons.append(
                    f"streams: rank {rank}'s receiving sockets dropped {n} datagrams (this "
                    "machine read them too slowly: counted lost, but not the fabric's)"
                )
            reasons += [f"streams: {e}" for e in streams.errors[:3]]
        captured: dict[int, bytes] = {}
        for capture in captures:
            data = capture.read()
            if data is not None and origin:
                captured[capture.rank] = to_target_time(data, wall_origin_s=origin[0], tdf=tdf)
        counters = coordinator.queue_pairs()
        return SessionReport(
            metadata=metadata,
            queue_pairs=qp_rows(
                counters.connections, counters.send, counters.recv, counters.latency
            ),
            reasons=reasons,
            unknown=unknown,
            not_applicable=self._not_applicable(),
            lossless=self._lossless(),
            pfc_sent=pfc_sent,
            extra=extra,
            error=error,
            captures=captured,
        )

    def _start_captures(self) -> list[RankCapture]:
        """metrics.capture: one tcpdump per captured rank, stopped by the context's stack
        whatever happens (and by the run when the replay ends)."""
        spec = self.context.scenario.metrics.capture
        if spec is None:
            return []
        world = self.context.planned.world_size
        for rank in spec.ranks:
            if rank >= world:
                raise ScenarioError(f"metrics.capture.ranks: {rank} is not a rank (0..{world - 1})")
        folder = Path(tempfile.mkdtemp(prefix="emulate-capture-"))
        self.context.stack.callback(shutil.rmtree, folder, ignore_errors=True)
        out = []
        for rank in spec.ranks:
            capture = RankCapture(
                rank,
                self.live.rank_netns(rank),
                self._pfc_ifname(rank),
                folder,
                packets=spec.packets,
                snap_bytes=spec.snap_bytes,
            )
            self.context.stack.callback(capture.stop)
            out.append(capture)
        return out

    def _not_applicable(self) -> tuple[str, ...]:
        return ()

    def _lossless(self) -> bool:
        return True

    def _stream_runner(self) -> StreamRunner | None:
        """The scenario's streams (None: it has none); sockets closed by the context's stack."""
        scenario = self.context.scenario
        if not scenario.streams:
            return None
        runner = StreamRunner(
            scenario.streams,
            stream_sources(scenario),
            stream_sinks(scenario),
            address_of=self.live.rank_address,
            netns_of=self.live.rank_netns,
            tdf=self.context.tdf,
        )
        self.context.stack.callback(runner.close)
        return runner

    def _pfc_generators(self) -> list[PfcGenerator]:
        """One generator per run.pfc_frames entry, on its rank's interface (sockets closed by
        the context's stack whatever happens)."""
        scenario, world = self.context.scenario, self.context.planned.world_size
        out = []
        for i, spec in enumerate(scenario.run.pfc_frames):
            if spec.rank >= world:
                raise ScenarioError(
                    f"run.pfc_frames[{i}].rank: {spec.rank} is not a rank (0..{world - 1})"
                )
            quanta = spec.quanta_by_priority
            generator = PfcGenerator(
                self.live.rank_netns(spec.rank),
                self._pfc_ifname(spec.rank),
                quanta,
                interval_s=pfc_interval_s(
                    spec.frames_per_s,
                    spec.duty_cycle,
                    max(quanta.values()),
                    scenario.fabric.rank_rate_bps,
                ),
                start_s=spec.start_us * 1e-6,
                stop_s=None if spec.stop_us is None else spec.stop_us * 1e-6,
                tdf=self.context.tdf,
            )
            self.context.stack.callback(generator.stop)
            out.append(generator)
        return out


def bring_up(context: BackendContext) -> Any:
    from fabrics.registry import bring_up_fabric

    options = context.options
    options.say(f"bringing up the fabric: {describe_fabric(context.scenario.fabric)}")
    live = bring_up_fabric(
        context.scenario.fabric,
        time_dilation=context.tdf,
        prefix=options.fabric_prefix,
        progress=lambda m: options.say(m),
    )
    context.stack.callback(_tear_down, live, context)
    context.interrupts.check()
    return live


def _tear_down(live: Any, context: BackendContext) -> None:
    # close() raises EnvironmentProblem naming what it could not release (left for `emulate clean`)
    with signals_deferred():
        removed = live.close()
    context.options.say(f"fabric torn down ({len(removed)} resources released)")
