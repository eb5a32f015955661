"""A schedule replayed over a simulated fabric: the driver's flows on the transport's queue pairs,
its compute delays as timers, in simulated time.

The same rules as the engine (emulator.engine): one queue pair per connection (src, dst, QP index,
UDP source port) with QP number connection id + 1 at both ends, messages posted in the order the
driver releases them, a flow done for the driver when its sender saw the last byte acknowledged,
and its record (packets, retransmissions, CE marks, CNPs) complete once the receiver's side of it
is in too. Nothing here reads a clock: the wall time a run takes is the caller's business.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulator.errors import EmulatorError
from emulator.schedule.driver import FlowDriver, FlowLike, is_delay
from emulator.sim.fabric import SimFabric
from emulator.transport.events import (
    CnpReceived,
    CnpSent,
    FlowCompleted,
    MessageReceived,
    PacketDropped,
    RateChanged,
    Retransmitted,
    TransportEvent,
)
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair


class SimulationStopped(EmulatorError):
    """The simulation could not finish the plan (a limit was reached)."""


class ProfileLike(Protocol):
    """A queue pair profile (emulator.engine.plan.QpProfile has these fields)."""

    @property
    def dscp(self) -> int | None: ...
    @property
    def max_rate_bps(self) -> float | None: ...
    @property
    def congestion_control(self) -> str | None: ...
    @property
    def path_mtu_bytes(self) -> int | None: ...
    @property
    def verb(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """A finished flow: what the run's FlowFinished carries."""

    flow_id: int
    time_s: float
    packets: int
    retransmitted_packets: int
    ce_marks: int
    cnps_sent: int
    cnps_received: int
    reordered_packets: int = 0  # at the receiver, since its QP's previous message completed


@dataclass(eq=False)
class Connection:
    conn_id: int
    src: int
    dst: int
    sender: SendQueuePair
    receiver: ReceiveQueuePair
    dscp: int
    next_ordinal: int = 0
    ordinals: dict[int, int] = field(default_factory=dict)  # flow id -> posting order
    snapshot: tuple[int, int, int] = (0, 0, 0)  # sender: packets, retransmitted, CNPs
    rx_snapshot: tuple[int, int, int] = (0, 0, 0)  # receiver: CE, CNPs sent, reordered
    cnps_received: int = 0
    cnps_sent: int = 0
    last_rate_sample_s: float = float("-inf")


@dataclass
class ReplayOutputs:
    """Where the replay reports (times are simulated seconds since the start)."""

    flow_started: Callable[[int, float], None]
    flow_finished: Callable[[FlowRecord], None]
    rate: Callable[[int, int, float, float], None]  # rank, qpn, time, rate


class _Events(list[TransportEvent]):
    """The transport's event list: the first event of an instant schedules one pass over them
    at that same instant, after the callback that raised them (no re-entry into a QP)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_first: Callable[[], None] = lambda: None

    def append(self, event: TransportEvent) -> None:
        if not self:
            self.on_first()
        list.append(self, event)  # not super(): a transport appends an event per ACK or CNP


class SimReplay:
    def __init__(
        self,
        fabric: SimFabric,
        events: _Events,
        driver: FlowDriver,
        outputs: ReplayOutputs,
        *,
        transport: TransportParams,
        profiles: Sequence[ProfileLike] = (),
        rate_sample_s: float = 0.001,
    ) -> None:
        self.fabric = fabric
        self.sim = fabric.sim
        self.driver = driver
        self.outputs = outputs
        self.transport = transport
        self.profiles = tuple(profiles)
        self.rate_sample_s = rate_sample_s
        self.events = events
        events.on_first = self._schedule_events
        # the C fabric raises some events itself (native.py): into this list, with this handler
        self.sim.bind_events(events, self._handle_events)
        self.connections: dict[tuple[int, int, int, int], Connection] = {}
        self.by_qpn: dict[int, Connection] = {}
        self.released: set[int] = set()
        self.finished: dict[int, FlowRecord] = {}
        self.counters: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self._done_at: dict[tuple[int, int], tuple[int, float, tuple[int, int, int]]] = {}
        self._rx_at: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._profile_params: dict[int, TransportParams] = {}
        self._events_scheduled = False
        self._line_rate = {
            rank: fabric.topology.links[(host.name, "eth0")].rate_bps
            for rank, host in enumerate(fabric.hosts)
        }

    @classmethod
    def event_list(cls) -> _Events:
        """The list to build the fabric's hosts with (their events come here)."""
        return _Events()

    # -- running --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.driver.finished and len(self.finished) == len(self.released)

    def start(self) -> None:
        self._poll()

    def advance(self, until_s: float) -> None:
        """Run the simulation up to `until_s`; a plan that can no longer move raises."""
        sim = self.sim
        sim.run(until_s=until_s)
        while not self.done and sim.pending == 0:
            if self.driver.unstall():
                self._poll()
                sim.run(until_s=until_s)
                continue
            raise self.driver.stall_error()

    # -- the driver -----------------------------------------------------------------------
    def _poll(self) -> None:
        now = self.sim.now
        for action in self.driver.poll(now):
            if is_delay(action):
                self.sim.at(now + action.delay_s, self._delay_done, action.token)
            else:
                self._post(action, now)

    def _delay_done(self, token: int) -> None:
        self.driver.delay_done(token, self.sim.now)
        self._poll()

    def _post(self, flow: FlowLike, now: float) -> None:
        if flow.id in self.released:
            raise SimulationStopped(f"flow {flow.id}: the driver released it twice")
        n = len(self.fabric.hosts)
        for rank, role in ((flow.src, "src"), (flow.dst, "dst")):
            if not 0 <= rank < n:
                raise SimulationStopped(f"flow {flow.id}: {role} rank {rank} is not on the fabric")
        self.released.add(flow.id)
        conn = self._connection(flow)
        qp = conn.sender
        if qp.idle:
            conn.snapshot = (qp.packets_sent, qp.packets_retransmitted, conn.cnps_received)
        conn.ordinals[flow.id] = conn.next_ordinal
        conn.next_ordinal += 1
        self.outputs.flow_started(flow.id, now)
        src = self.fabric.hosts[flow.src]
        src.message_tags[flow.id] = flow.instance  # its frames carry their collective
        src.post(qp, message_id=flow.id, size_bytes=flow.bytes)

    def _connection(self, flow: FlowLike) -> Connection:
        key = (flow.src, flow.dst, flow.qp, flow.udp_sport)
        conn = self.connections.get(key)
        if conn is not None:
            return conn
        conn_id = len(self.connections)
        qpn = conn_id + 1
        params, rate_bps, dscp = self._profile(flow, self._line_rate[flow.src])
        sender = SendQueuePair(
            qpn=qpn,
            dest_qp=qpn,
            params=params,
            line_rate_bps=rate_bps,
            verb=self.profiles[flow.profile].verb if flow.profile else "send",
            events=self.events,
        )
        receiver = ReceiveQueuePair(
            qpn=qpn, remote_qp=qpn, params=self.transport, events=self.events
        )
        fabric = self.fabric
        src, dst = fabric.hosts[flow.src], fabric.hosts[flow.dst]
        mhash = fabric.topology.flow_hash(
            fabric.host_address(flow.src), fabric.host_address(flow.dst), flow.udp_sport
        )
        entropy = None
        if params.entropy == "per_packet":
            topology = fabric.topology
            src_ip, dst_ip = fabric.host_address(flow.src), fabric.host_address(flow.dst)
            entropy = (
                params.entropy_values,
                lambda sport: topology.flow_hash(src_ip, dst_ip, sport),
            )
        src.add_sender(sender, dst=dst, sport=flow.udp_sport, mhash=mhash, entropy=entropy)
        dst.add_receiver(receiver, src=src, sport=flow.udp_sport, mhash=mhash)
        conn = Connection(conn_id, flow.src, flow.dst, sender, receiver, dscp)
        self.connections[key] = conn
        self.by_qpn[qpn] = conn
        return conn

    def _profile(self, flow: FlowLike, line_rate_bps: float) -> tuple[TransportParams, float, int]:
        """Transport parameters, starting (and highest) rate and data DSCP of a new QP (the
        engine's rule: emulator.engine.flows.FlowStarts._profile)."""
        t = self.transport
        if flow.profile == 0:
            return t, line_rate_bps, t.data_dscp(flow.qp)
        if not 0 < flow.profile < len(self.profiles):
            raise SimulationStopped(f"flow {flow.id}: QP profile {flow.profile} is not defined")
        p = self.profiles[flow.profile]
        params = self._profile_params.get(flow.profile)
        if params is None:
            changes: dict[str, Any] = {}
            if p.congestion_control is not None:
                changes["congestion_control"] = p.congestion_control
            if p.path_mtu_bytes is not None:
                changes["path_mtu_bytes"] = p.path_mtu_bytes
            params = self._profile_params[flow.profile] = dataclasses.replace(t, **changes)
        rate = min(line_rate_bps, p.max_rate_bps or line_rate_bps)
        return params, rate, t.data_dscp(flow.qp) if p.dscp is None else p.dscp

    # -- the transport's events -----------------------------------------------------------
    def _schedule_events(self) -> None:
        if not self._events_scheduled:
            self._events_scheduled = True
            self.sim.at(self.sim.now, self._handle_events)

    def _handle_events(self) -> None:
        self._events_scheduled = False
        batch = self.events[:]
        self.events.clear()
        completed: list[tuple[int, float]] = []
        for ev in batch:
            if isinstance(ev, RateChanged):
                self._on_rate(ev)
            elif isinstance(ev, FlowCompleted):
                completed.append((ev.message_id, ev.completed_s))
                self._on_completed(ev)
            elif isinstance(ev, MessageReceived):
                self._on_received(ev)
            elif isinstance(ev, CnpReceived):
                conn = self.by_qpn.get(ev.qpn)
                if conn is not None:
                    conn.cnps_received += 1
                self.counters["cnps_received"] += 1
            elif isinstance(ev, CnpSent):
                conn = self.by_qpn.get(ev.qpn)
                if conn is not None:
                    conn.cnps_sent += 1
                self.counters["cnps_sent"] += 1
            elif isinstance(ev, Retransmitted):
                self.counters[f"go_back_n_{ev.reason}"] += 1
                self.counters["packets_resent_planned"] += ev.packets
            elif isinstance(ev, PacketDropped):
                self.drops[ev.reason] += 1
        if completed:
            for flow_id, time_s in completed:
                self.driver.flow_done(flow_id, time_s)
            self._poll()

    def _on_rate(self, ev: RateChanged) -> None:
        conn = self.by_qpn.get(ev.qpn)
        if conn is None:
            return
        # every cut is reported; increases at most once per rate_sample_s per QP (the engine's)
        if ev.reason == "cnp" or ev.now_s - conn.last_rate_sample_s >= self.rate_sample_s:
            conn.last_rate_sample_s = ev.now_s
            self.outputs.rate(conn.src, ev.qpn, ev.now_s, ev.current_rate_bps)

    def _on_completed(self, ev: FlowCompleted) -> None:
        conn = self.by_qpn[ev.qpn]
        qp = conn.sender
        self.fabric.hosts[conn.src].settle(qp)  # what its NIC sent for it since, counted
        snap = (qp.packets_sent, qp.packets_retransmitted, conn.cnps_received)
        old = conn.snapshot
        conn.snapshot = snap
        counts = (snap[0] - old[0], snap[1] - old[1], snap[2] - old[2])
        key = (conn.conn_id, conn.ordinals.pop(ev.message_id, -1))
        self._done_at[key] = (ev.message_id, ev.completed_s, counts)
        self._join(key)

    def _on_received(self, ev: MessageReceived) -> None:
        conn = self.by_qpn[ev.qpn]
        snap = (conn.receiver.ce_packets, conn.cnps_sent, conn.receiver.reordered_packets)
        old = conn.rx_snapshot
        conn.rx_snapshot = snap
        key = (conn.conn_id, ev.message_index)
        self._rx_at[key] = (snap[0] - old[0], snap[1] - old[1], snap[2] - old[2])
        self._join(key)

    def _join(self, key: tuple[int, int]) -> None:
        done = self._done_at.get(key)
        rx = self._rx_at.get(key)
        if done is None or rx is None:
            return
        del self._done_at[key], self._rx_at[key]
        flow_id, time_s, (packets, retx, cnps_received) = done
        record = FlowRecord(flow_id, time_s, packets, retx, rx[0], rx[1], cnps_received, rx[2])
        self.finished[flow_id] = record
        self.outputs.flow_finished(record)
