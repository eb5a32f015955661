"""The packet-level simulation as a backend (`sim`): the scenario's Clos simulated from the same
Topology, transport and schedule as the emulated one, in simulated time.

No root, no namespaces, no time dilation: time is the simulator's and every event is in it. The
session replays the driver over emulator.sim (hop-by-hop ECMP as the kernel's, per-port buffers
and the ECN law of the tiers, PFC, link delay, switch latency, loss and link events), reads every
port's exact queue, counters and pauses and every NIC's bytes each `sim.sample_interval_us` of
simulated time, and reports the same events as the engine, so the run writes the same folder;
and, which only it can, every switch port's data queue, bytes, marks and drops per collective
instance (PortAttribution: every frame carries its flow and collective).
Determinism: every random draw comes from generators seeded by `run.seed` (salted by
`sim.draw_seed`) and a port's name; the only wall-clock readings are the run's own speed
(summary.json engine.wall_s, replay_wall_s).
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

import numpy as np

from collectors.capture import LINKTYPE_IPV4, Packet, write_pcap
from collectors.queue_pairs import qp_rows
from emulator.backends.base import (
    Backend,
    BackendContext,
    BackendOptions,
    ReplayJob,
    Session,
    SessionReport,
    TimescaleRequest,
)
from emulator.backends.link_events import LinkEventRunner, flows_crossing
from emulator.backends.link_events import resolve as resolve_link_events
from emulator.backends.simulated_time import run_in_simulated_time
from emulator.backends.streams import stream_extra, stream_sinks, stream_sources
from emulator.engine.gcpause import frozen_heap
from emulator.errors import ScenarioError
from emulator.events import (
    Direction,
    FlowFinished,
    FlowStarted,
    NicSamples,
    PortAttribution,
    PortSamples,
    RateSample,
    RunEvent,
)
from emulator.scenario.model import Scenario
from emulator.schedule.fabric import describe_fabric
from emulator.sim.fabric import SimFabric, SimFabricParams, build_fabric
from emulator.sim.readings import PortReader
from emulator.sim.replay import FlowRecord, ReplayOutputs, SimReplay
from emulator.timescale.tdf import TdfChoice
from emulator.transport.qp_counters import recv_qp_counters, send_qp_counters
from emulator.transport.stream import StreamSink, StreamSource
from fabrics.spec import ClosSpec
from fabrics.topology import HOST_IFNAME, Cable, build_clos

# What the model leaves out (summary.json fidelity.leaves_out): a simulated run is never judged
# on this machine's speed, and these are the differences from a real fabric it cannot see.
LEAVES_OUT = (
    "no CPU and no kernel: every host sends at exactly its paced rate and the engine's "
    "timers fire on time (the emulated fabric's late ticks and pacing deficit do not exist here)",
    "one lossless data priority: every data packet, ACK and NAK shares one queue per port and "
    "one PFC class (per-QP qp_dscp classes are not separated); CNPs (fabric.priority_dscps) "
    "ride a strict-priority queue PFC never pauses",
    "PFC pauses are modelled as XOFF/XON events, not as refreshed pause quanta",
    "switches forward from their ingress after a fixed latency (no cut-through, no shared "
    "ingress pipeline contention); the shared buffer only sets PFC's dynamic threshold",
    "hosts drain what they receive at once (no receive-side CPU, socket buffer or GRO)",
)


def sim_params(scenario: Any) -> SimFabricParams:
    spec = scenario.fabric
    assert isinstance(spec, ClosSpec)
    transport = scenario.transport
    return SimFabricParams(
        pfc=spec.pfc,
        switch_latency_s=spec.switch_latency_ns * 1e-9,
        # auto: the HPCC ns-3 switch's point, as the simulator's checks assume
        ecn_mark_on_arrival=spec.ecn_mark_point == "arrival",
        data_dscp=transport.dscp,
        ack_dscp=transport.ack_dscp_value,
        cnp_dscp=transport.cnp_dscp,
        ecn_bits=(transport.data_ecn_bits, transport.ack_ecn_bits, transport.cnp_ecn_bits),
        wire_bytes=scenario.metrics.capture is not None,
        draw_seed=scenario.sim.draw_seed,
        native=scenario.sim.native_fabric,
    )


class _Cables:
    """The link-event runner's view of a simulated fabric (set_cable and reroute, as the live
    netns fabric has): a cable going down stops both its ports at once and the switches at its
    ends route around it at once; the others follow at the reroute."""

    def __init__(self, fabric: SimFabric) -> None:
        self.fabric = fabric
        self.down: set[Cable] = set()

    def set_cable(self, cable: Cable, *, up: bool) -> None:
        for port in self.fabric.cable_ports(cable):
            port.set_up(up)
        if up:
            self.down.discard(cable)
        else:
            self.down.add(cable)
            self.fabric.reroute((cable.a.node, cable.b.node), self.down)

    def reroute(self, down: set[Cable]) -> None:
        self.down = set(down)
        self.fabric.reroute(self.fabric.switches, self.down)


class SimSession(Session):
    def __init__(self, context: BackendContext) -> None:
        self.context = context
        scenario = context.scenario
        spec = scenario.fabric
        assert isinstance(spec, ClosSpec)
        self.spec = spec
        self.topology = build_clos(spec)
        self.events = SimReplay.event_list()
        self.params = sim_params(scenario)
        self.fabric = build_fabric(
            self.topology, self.params, seed=scenario.run.seed, events=self.events
        )
        self.marker_name = "simulated (DCQCN law: emulator/transport/marking.py)"
        self.port_line_rate_bps = spec.port_rate_bps
        self.links: LinkEventRunner | None = None
        if spec.link_events:
            cables = resolve_link_events(spec, self.topology)
            self.links = LinkEventRunner(
                _Cables(self.fabric), spec.link_events, cables, 1.0, context.options.say
            )
        if scenario.run.pfc_frames:
            raise ScenarioError(
                "run.pfc_frames: the simulator does not generate PFC frames from a rank (its "
                "switches pause by themselves: fabric.pfc); run them toward a switch under test"
            )
        capture = scenario.metrics.capture
        self._captured_hosts: dict[int, Any] = {}
        if capture is not None:
            for rank in capture.ranks:
                if rank >= len(self.fabric.hosts):
                    raise ScenarioError(
                        f"metrics.capture.ranks: {rank} is not a rank "
                        f"(0..{len(self.fabric.hosts) - 1})"
                    )
                host = self.fabric.hosts[rank]
                host.capture, host.capture_limit = [], capture.packets
                host.capture_snap = capture.snap_bytes
                self._captured_hosts[rank] = host
        self.replay: SimReplay | None = None
        self.wall_s = 0.0
        self._gc_pauses: dict[str, Any] = {}  # the replay's collections (run)
        # the far end's ingress account of each port (headroom drops are counted there)
        self._ingress_of = {ingress.upstream: ingress for ingress in self.fabric.ingresses}
        # attribution: every switch port counts its data queue per collective instance
        self._switch_ports = [
            (node, dev, port)
            for (node, dev), port in self.fabric.ports.items()
            if node in self.topology.routers
        ]
        for _, _, port in self._switch_ports:
            port.attribution = {}
        self._attributed_s = 0.0  # simulated time of the last attribution sample
        # what each sample reads, in one order for the run: every port (with the ingress account
        # at its far end), and each host's NIC both ways (its own port, and its downlink)
        ports = self.fabric.ports
        self._sampled_names = tuple(ports)
        self._port_reader = PortReader(
            [(port, self._ingress_of.get(port)) for port in ports.values()]
        )
        hosts = self.fabric.hosts
        both: tuple[Direction, ...] = ("tx", "rx")
        self._nic_names = tuple((rank, d) for rank in range(len(hosts)) for d in both)
        self._nic_ports = [(ports[(h.name, HOST_IFNAME)], self._downlink(h.name)) for h in hosts]
        self._paused_at: dict[Any, float] = {}  # each port's paused time at that sample

    # -- Session --------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "kind": "sim",
            "fabric": describe_fabric(spec),
            "ports": len(self.fabric.ports),
            "pfc": spec.pfc,
            "switch_latency_ns": spec.switch_latency_ns,
            "ecn_mark_point": "arrival" if self.params.ecn_mark_on_arrival else "departure",
            "link_delay_us": spec.link_delay_us,
            "seed": self.context.scenario.run.seed,
            "draw_seed": self.params.draw_seed,
        }

    def run(self, job: ReplayJob) -> SessionReport:
        context, scenario = self.context, self.context.scenario
        pending: list[RunEvent] = []
        outputs = ReplayOutputs(
            flow_started=lambda fid, t: pending.append(FlowStarted(fid, t)),
            flow_finished=lambda r: pending.append(_finished(r)),
            rate=lambda rank, qpn, t, bps: pending.append(RateSample(t, rank, qpn, bps)),
        )
        replay = self.replay = SimReplay(
            self.fabric,
            self.events,
            job.driver,
            outputs,
            transport=scenario.transport,
            profiles=context.planned.profiles,
            rate_sample_s=scenario.engine.rate_sample_s,
        )
        if self.links is not None:
            for action in self.links.actions:
                self.fabric.sim.at(action.at_s, self.links.apply, action, action.at_s)
        sources, sinks = self._start_streams()
        # What the run built before the replay (the plan, the schedule, the fabric, the
        # recorder) lives through it: frozen out of the collector's way and thawed after
        # (not collected first: that would cost the full collection it saves). Each full
        # collection in the replay walked all of it: the 8:1 incast's one took 60 ms of a
        # 0.75 s replay.
        with frozen_heap(collect_first=False) as (frozen, pauses):
            loop = run_in_simulated_time(
                context,
                job,
                replay,
                pending,
                self._samples,
                what="the simulation",
                throughput_bps=self._throughput_bps,
            )
        self._gc_pauses = {"frozen": frozen, **pauses.to_json()}
        self.wall_s = loop.wall_s
        conns = replay.connections.values()
        return SessionReport(
            metadata=self._engine_metadata(replay, loop.cpu_s),
            queue_pairs=qp_rows(
                {key: c.conn_id for key, c in replay.connections.items()},
                {c.conn_id + 1: send_qp_counters(c.sender, c.cnps_received, c.dscp) for c in conns},
                {c.conn_id + 1: recv_qp_counters(c.receiver, c.cnps_sent) for c in conns},
            ),
            not_applicable=(
                # in a simulation drops and retransmissions are the fabric's own result (PFC
                # off, a headroom too small), never this machine's: the summary counts them
                "drops_in_lossless_fabric",
                "retransmissions_in_lossless_fabric",
            ),
            leaves_out=LEAVES_OUT,
            lossless=True,
            extra={
                "time": "simulated",
                "pfc": self._pfc_summary(),
                **stream_extra(scenario, sources, sinks),
            },
            error=loop.error,
            captures=self._captures(),
        )

    def _start_streams(self) -> tuple[list[StreamSource], dict[int, StreamSink]]:
        """The scenario's streams: each source on its sending host, a sink at each receiver."""
        scenario = self.context.scenario
        sources, sinks = stream_sources(scenario), stream_sinks(scenario)
        hosts = self.fabric.hosts
        for rank, sink in sinks.items():
            hosts[rank].stream_sink = sink
        priority = frozenset(self.topology.priority_dscps)
        for spec, source in zip(scenario.streams, sources, strict=True):
            hosts[spec.src].add_stream(
                source,
                dst=hosts[spec.dst],
                dport=spec.udp_dport,
                dscp=spec.dscp,
                ecn=spec.ecn,
                priority=spec.dscp in priority,
            )
        return sources, sinks

    def _captures(self) -> dict[int, bytes]:
        """Each captured host's packets, stamped in simulated time (raw IPv4: no link header)."""
        snap = self.context.scenario.metrics.capture
        out = {}
        for rank, host in self._captured_hosts.items():
            packets = [Packet(t, data, n) for t, data, n in host.capture or []]
            out[rank] = write_pcap(packets, link=LINKTYPE_IPV4, snap=snap.snap_bytes if snap else 0)
        return out

    def impairments(
        self, flows: Callable[[], list[dict[str, Any]]], job_end_s: float | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        loss = self.spec.loss_impairment()
        if loss:
            out["loss_probability"] = loss
            out["loss_drops"] = sum(p.losses for p in self.fabric.ports.values())
            if self.replay is not None:
                out["packets_retransmitted"] = self.replay.counters["packets_resent_planned"]
        if self.links is not None:
            end_s = job_end_s or float("inf")
            windows = self.links.down_windows(end_s)
            out["link_events"] = self.links.applied
            out["flows_crossing_a_down_link"] = dict(
                flows_crossing(self.topology, windows, flows())
            )
            out["no_route_drops"] = sum(s.no_route for s in self.fabric.switches.values())
        return out

    # -- readings -------------------------------------------------------------------------
    def _samples(self, t: float) -> list[RunEvent]:
        """Every port's counters and exact queue, every NIC's bytes, at simulated time t: one
        event of columns for the ports and one for the NICs (a row object per port and sample
        would hold most of a large fabric's memory by the end of the run)."""
        c = self._port_reader.read(t)
        out: list[RunEvent] = [
            PortSamples(
                t,
                self._sampled_names,
                c.tx_bytes,
                c.tx_frames,
                c.marks,
                c.drops,
                c.queued_bytes,
                c.rate_bps,
                c.paused_s,
                c.pause_frames,
            )
        ]
        out.extend(self._attribution(t))
        nic_bytes = []
        for nic, down in self._nic_ports:
            nic_bytes.append(nic.tx_bytes)
            # what its downlink sent, less the bytes of the frames lost on that link
            nic_bytes.append(down.tx_bytes - down.lost_bytes if down else 0)
        out.append(NicSamples(t, self._nic_names, np.array(nic_bytes, dtype=np.int64)))
        return out

    def _attribution(self, t: float) -> list[RunEvent]:
        """Each switch port's data queue by collective instance since the last sample: the
        instances that hold bytes now or counted anything, and the flows marked."""
        out: list[RunEvent] = []
        interval_s, self._attributed_s = t - self._attributed_s, t
        for node, dev, port in self._switch_ports:
            held, marked = port.take_attribution()
            paused_until = port.paused_s_until(t)
            paused_s = paused_until - self._paused_at.get(port, 0.0)
            self._paused_at[port] = paused_until
            if held or marked:
                out.append(PortAttribution(t, interval_s, node, dev, held, marked, paused_s))
        return out

    def _downlink(self, host: str) -> Any:
        link = self.topology.links[(host, HOST_IFNAME)]
        return self.fabric.ports.get((link.dst, link.dst_ifname))

    def _throughput_bps(self, t: float) -> float:
        if t <= 0:
            return 0.0
        sent = sum(self.fabric.ports[(h.name, HOST_IFNAME)].tx_bytes for h in self.fabric.hosts)
        return sent * 8 / t

    def _engine_metadata(self, replay: SimReplay, cpu_s: float) -> dict[str, Any]:
        fabric = self.fabric
        hops = sum(p.tx_frames for p in fabric.ports.values())
        return {
            "simulator": "emulator.sim (discrete events, simulated time)",
            "fabric_code": fabric.code,
            "data_packets_taken_in_c": fabric.data_packets_taken_in_c,
            "data_packets_sent_in_c": fabric.data_packets_sent_in_c,
            "dcqcn_timers_in_c": fabric.dcqcn_timers_in_c,
            "simulated_s": fabric.sim.now,
            "events": fabric.sim.events_run,
            "packet_hops": hops,
            "connections": len(replay.connections),
            "counters": dict(sorted(replay.counters.items())),
            "drops": dict(sorted(replay.drops.items())),
            # the run's own speed on this machine (wall clock: differs run to run)
            "wall_s": round(self.wall_s, 3),
            "replay_wall_s": round(self.wall_s, 3),
            "cpu_s": round(cpu_s, 3),
            "packet_hops_per_wall_s": round(hops / self.wall_s) if self.wall_s > 0 else None,
            "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            # the replay's garbage collections (count per generation, seconds), its heap frozen
            "gc_pauses": self._gc_pauses,
        }

    def _pfc_summary(self) -> dict[str, Any]:
        """PFC as the simulator ran it: pause frames and paused time per port that was paused,
        and what overflowed a headroom (a lossless class drops only there)."""
        fabric = self.fabric
        now = fabric.sim.now
        paused: list[dict[str, Any]] = [
            {
                "switch": node,
                "port": dev,
                "pause_frames": p.pause_frames,
                "paused_s": p.paused_s_until(now),
            }
            for (node, dev), p in fabric.ports.items()
            if p.pause_frames
        ]
        paused.sort(key=lambda r: -float(r["paused_s"]))
        return {
            "enabled": self.spec.pfc,
            "pause_frames": sum(r["pause_frames"] for r in paused),
            "paused_s": sum(r["paused_s"] for r in paused),
            "headroom_drops": sum(i.drops for i in fabric.ingresses),
            "max_ingress_bytes": max((i.max_bytes for i in fabric.ingresses), default=0),
            "ports": paused[:10],
        }


def _finished(r: FlowRecord) -> FlowFinished:
    return FlowFinished(
        r.flow_id,
        r.time_s,
        r.packets,
        r.retransmitted_packets,
        r.ce_marks,
        r.cnps_sent,
        r.cnps_received,
        reordered_packets=r.reordered_packets,
    )


class SimBackend(Backend):
    """The scenario's Clos as a packet-level simulation (emulator.sim)."""

    name = "sim"
    simulated = True

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        """A simulation runs in simulated time: a dilation factor on the command line is a
        mistake, said in one line; the scenario's own factor is for the emulated fabric and is
        left alone (a scenario runs on both)."""
        del scenario
        if options.tdf is not None:
            raise ScenarioError(
                "--tdf: a simulation runs in simulated time, it has no dilation factor"
            )

    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        """No dilation: the simulation's clock is the target's."""
        peak_bps = request.planned.world_size * request.scenario.fabric.rank_rate_bps
        return TdfChoice(1.0, "none: simulated time", peak_bps)

    def open(self, context: BackendContext) -> Session:
        return SimSession(context)
