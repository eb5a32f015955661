"""The engine on a live fabric: the emulated netns Clos (`netns`) and ports toward a switch under
test (`dut`). Both replay with the engine's coordinator and workers (emulator.engine); they
differ in what they bring up, what counters they read and what they cannot judge.

A session holds, between bring-up and teardown: the live fabric, the ranks' endpoints, the
NIC counters of every rank's interface, the PFC frame generators the scenario asks for, and on
the netns Clos the switch ports' counters and the link events. `run` starts the sampler and the
coordinator, relays the engine's events and the samples to the run, and stops everything it
started, whatever happens.

`engine.send_path: af_xdp` runs toward a DUT only (the emulated Clos shapes and marks on the
qdisc path AF_XDP goes around): the DUT session checks every port before a worker starts (one
line naming the interface and why it cannot), gives the ranks of one interface one NIC (one
worker, one port), and records the ports' XDP programs in the fabric's ledger as the workers
attach them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from collectors.nic import NetlinkCounters, NicSampler
from collectors.queue_pairs import qp_rows
from emulator.backends.base import (
    Backend,
    BackendContext,
    ReplayJob,
    Session,
    SessionReport,
)
from emulator.engine.coordinator import Coordinator, EngineFailure
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.run.attribution import class_names, classes_json
from emulator.run.interrupts import signals_deferred
from emulator.run.link_events import LinkEventRunner, flows_crossing
from emulator.run.link_events import resolve as resolve_link_events
from emulator.run.pfc_generator import PfcGenerator
from emulator.run.pfc_generator import interval_s as pfc_interval_s
from emulator.run.sampling import Sampler
from emulator.run.tester import PfcReadings
from emulator.run.verdict import af_xdp_reasons, engine_checks
from emulator.schedule.fabric import describe_fabric
from fabrics.link_watch import unannounced_downs
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


def check_send_path(scenario: Any) -> None:
    """engine.send_path af_xdp runs toward a DUT only: refused in one line elsewhere."""
    if scenario.engine.send_path == "af_xdp" and not isinstance(scenario.fabric, DutSpec):
        raise ScenarioError(
            "engine.send_path: af_xdp runs toward a switch under test (fabric kind dut) only; "
            "the emulated Clos shapes and ECN-marks its links with qdiscs that AF_XDP goes "
            "around: use udp_gso"
        )


def engine_params(context: BackendContext) -> EngineParams:
    """The scenario's engine settings for this run: its TDF, deadline and latency stamps."""
    scenario, planned, tdf = context.scenario, context.planned, context.tdf
    check_send_path(scenario)
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
                target_rate_bps(scenario.fabric),
                # endpoints behind one port share its line rate (one transmit arbiter)
                nic=self._nic_of(r),
            )
            for r in range(world)
        ]
        for other in self.ranks:  # a DUT refuses destinations outside its allowlist, first
            live.check_destination(other.rank, other.address)
        self.links: LinkEventRunner | None = None
        self.pfc = self._pfc_generators()
        self.nic_counters = self._nic_counters()
        for c in self.nic_counters.values():
            context.stack.callback(c.close)
        self.pfc_readings = PfcReadings(live)
        self.engine_metadata: dict[str, Any] = {}

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
        writes, emulator.run.attribution): only ours, with the eBPF marker. Elsewhere the
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

        def started(start_wall_s: float) -> None:
            """The replay's start: sampling, link events and PFC frames count from here."""
            context.interrupts.check()
            sampler.set_start(start_wall_s)
            if self.links is not None:
                self.links.start(start_wall_s)
            for generator in self.pfc:
                generator.start(start_wall_s)

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
        )

    def _not_applicable(self) -> tuple[str, ...]:
        return ()

    def _lossless(self) -> bool:
        return True

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
                    target_rate_bps(scenario.fabric),
                ),
                start_s=spec.start_us * 1e-6,
                stop_s=None if spec.stop_us is None else spec.stop_us * 1e-6,
                tdf=self.context.tdf,
            )
            self.context.stack.callback(generator.stop)
            out.append(generator)
        return out


class NetnsSession(EngineSession):
    """The emulated Clos: switch namespaces whose egress ports we shape, mark and read."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        super().__init__(context, live)
        spec = context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        self.port_line_rate_bps = spec.fabric_link_gbps * 1e9
        if spec.link_events:
            cables = resolve_link_events(spec, live.topology)
            self.links = LinkEventRunner(
                live, spec.link_events, cables, context.tdf, context.options.say
            )
        if self.pfc:
            context.options.say(
                "warning: PFC frames are sent, but the emulated Linux fabric does not pause for "
                "them (a switch under test does)"
            )

    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        from fabrics.topology import HOST_IFNAME

        world = self.context.planned.world_size
        return {r: NetlinkCounters(HOST_IFNAME, self.live.rank_netns(r)) for r in range(world)}

    def counts_classes(self) -> bool:
        return bool(self.marker_name == "ebpf")

    def _pfc_ifname(self, rank: int) -> str:
        from fabrics.topology import HOST_IFNAME

        del rank
        return HOST_IFNAME

    def ports_reader(self) -> Callable[[], list[Any]] | None:
        from fabrics.counters import read_port_counters

        live = self.live
        return lambda: list(read_port_counters(live).values())

    def links_reader(self) -> Callable[[], dict[Any, Any]] | None:
        from fabrics.link_watch import read_links

        netns = dict(self.live.netns)
        return lambda: dict(read_links(netns))

    def _lossless(self) -> bool:
        # drops and retransmissions are what a loss impairment or a link event asked for
        spec = self.context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        return not spec.loss_impairment() and self.links is None

    def impairments(self, flows: list[dict[str, Any]], job_end_s: float | None) -> dict[str, Any]:
        spec = self.context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        out: dict[str, Any] = {}
        loss = spec.loss_impairment()
        if loss:
            out["loss_probability"] = loss
            try:
                reader = self.ports_reader()
                out["loss_drops"] = sum(c.loss_drops for c in reader()) if reader else 0
            except Exception as exc:  # the fabric may be gone after a failure: say so
                out["loss_drops"] = f"unknown ({type(exc).__name__}: {exc})"
            out["packets_retransmitted"] = self.engine_metadata.get("counters", {}).get(
                "packets_resent_planned", 0
            )
        if self.links is not None:
            end_s = job_end_s or float("inf")
            crossing = flows_crossing(self.live.topology, self.links.down_windows(end_s), flows)
            out["link_events"] = self.links.applied
            out["flows_crossing_a_down_link"] = dict(crossing)
            if self.links.errors:
                out["link_event_errors"] = self.links.errors
        return out


class DutSession(EngineSession):
    """Ports toward a switch under test: its drops and queues are not ours to read."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        if context.scenario.engine.send_path == "af_xdp":
            check_af_xdp_ports(context, live)
        super().__init__(context, live)

    def _nic_of(self, rank: int) -> int | None:
        spec = self.live.spec
        if self.context.scenario.engine.send_path == "af_xdp":
            # one AF_XDP port per interface: its ranks share its arbiter, its worker, its cap
            return int(spec.interfaces.index(spec.rank_interface(rank)))
        return spec.port_of(rank) if spec.ranks_per_interface > 1 else None

    def _ledger(self) -> Callable[[list[dict[str, Any]]], None] | None:
        return self.live.ledger.record

    def _reasons(self, metadata: dict[str, Any]) -> list[str]:
        return af_xdp_reasons(metadata)

    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        # one reading per port: ranks sharing a port are counted under its first rank
        spec = self.live.spec
        world = self.context.planned.world_size
        return {
            r: NetlinkCounters(spec.rank_interface(r), self.live.rank_netns(r))
            for r in range(0, world, spec.ranks_per_interface)
        }

    def _pfc_ifname(self, rank: int) -> str:
        return str(self.live.spec.rank_interface(rank))

    def _not_applicable(self) -> tuple[str, ...]:
        # a real switch under test is not ours: its drops are not in our counters
        return ("drops_in_lossless_fabric",)


def check_af_xdp_ports(context: BackendContext, live: Any) -> None:
    """Every local DUT port can run af_xdp (emulator.engine.af_xdp.check_interface: root, the
    native module, the interface up with its addresses, its MTU, no other XDP program, and
    multi-buffer where the path MTU needs it), before any worker starts: AfXdpUnavailable
    otherwise, one line naming the interface and why. What only the driver can say (its XDP
    modes, zero-copy) the workers find when they open the ports, still before any packet."""
    from emulator.engine.af_xdp import check_interface
    from emulator.engine.xdp_ports import port_config

    spec = live.spec
    engine = engine_params(context)
    ports: dict[tuple[str | None, str], list[str]] = {}
    for r in live.local_ranks:
        key = (live.rank_netns(r), spec.rank_interface(r))
        ports.setdefault(key, []).append(live.rank_address(r))
    config = port_config(engine, context.scenario.transport.path_mtu_bytes, live.max_rate_bps)
    for (netns, ifname), addresses in ports.items():
        check_interface(ifname, netns, addresses, config)


def _bring_up(context: BackendContext) -> Any:
    from fabrics.registry import bring_up_fabric

    options = context.options
    options.say(f"bringing up the fabric: {describe_fabric(context.scenario.fabric)}")
    live = bring_up_fabric(
        context.scenario.fabric,
        time_dilation=context.tdf,
        prefix=options.fabric_prefix,
        progress=lambda m: options.say(m),
    )
    context.stack.callback(_teardown, live, context)
    context.interrupts.check()
    return live


def _teardown(live: Any, context: BackendContext) -> None:
    # close() raises EnvironmentProblem naming what it could not release (left for `emulate clean`)
    with signals_deferred():
        removed = live.close()
    context.options.say(f"fabric torn down ({len(removed)} resources released)")


class NetnsEngineBackend(Backend):
    """The emulated Clos in network namespaces on this machine, replayed by the engine."""

    name = "netns"

    def open(self, context: BackendContext) -> Session:
        check_send_path(context.scenario)  # before anything is brought up
        return NetnsSession(context, _bring_up(context))


class DutEngineBackend(Backend):
    """Ranks on interfaces cabled to a switch under test, replayed by the engine."""

    name = "dut"

    def open(self, context: BackendContext) -> Session:
        return DutSession(context, _bring_up(context))
