"""One worker process: a uvloop loop driving the transport core for a shard of ranks.

Per rank: a RoceEndpoint (its queue pairs), a socket bound to ADDRESS:4791 that receives every
RoCEv2 packet for the rank, and one socket per UDP source port its queue pairs use (RoCEv2 sends
to port 4791 both ways; the source port is the QP's entropy, so ACKs and CNPs go back on the
reversed 5-tuple from the receiver's socket bound to the same source port). Receive queue pairs
are created when a QP's first packet arrives, from the packet's source address and port, so a
receiver needs no plan. Received ICRCs are not checked: a UDP socket does not see the IP id and
length they cover (tests/system/test_engine_wire.py checks them on a capture of the wire).

Each tick (`tick_s` of wall time) runs the core's timers, starts flows whose dependencies and
start delays are over, and sends what every queue pair's pacer released, as GSO batches. Reads
happen whenever a receive socket is readable. Events go to the coordinator in batches as tuples
(cheap to pickle); coordinator messages come in on the same pipe.

The data path works a GSO buffer at a time, not a packet at a time: queue pairs hand out compact
Bursts (`SendQueuePair.poll_burst`) that `BurstWriter` lays out with every ICRC in a few numpy
operations; a GRO read of data for one QP goes to `ReceiveQueuePair.on_data_run` in one call,
a read of ACKs to `SendQueuePair.on_acks`, and the ACKs one read produces leave as one GSO send.
Anything else (CE marks, gaps, NAKs, unknown QPs) goes packet by packet through the codec.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno
import heapq
import os
import resource
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from emulator.engine.clock import DilatedClock
from emulator.engine.gcpause import GcPauses
from emulator.engine.lateness import TickLateness
from emulator.engine.nicpacer import NicPacer
from emulator.engine.pacing import GSO_MAX_BUFFER_BYTES
from emulator.engine.params import EngineParams
from emulator.engine.plan import DEFAULT_PROFILE, EngineFlow, QpProfile, RankEndpoint
from emulator.engine.sockets import (
    ANCILLARY_BYTES,
    SO_TIMESTAMPNS,
    Offloads,
    detect_offloads,
    gso_cmsg,
    open_udp,
    read_ancillary,
    segments,
    tos_cmsg,
)
from emulator.errors import EmulatorError, EnvironmentProblem
from emulator.latency import LatencyHistogram
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import (
    BurstBuffer,
    BurstWriter,
    departed_ns,
    read_ack_run,
    read_data_run,
)
from emulator.transport.endpoint import RoceEndpoint
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
from emulator.transport.events import FlowStarted as PostedToQueue
from emulator.transport.packets import (
    BTH_BYTES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    RETH_OPCODES,
    ROCEV2_UDP_PORT,
    UDP_HEADER_BYTES,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
    Packet,
)
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair
from emulator.transport.wire import (
    ECN_CE,
    ECN_NOT_ECT,
    FlowAddress,
    IcrcContext,
    MalformedPacket,
    decode,
    encode,
    layout_gso,
)

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h
IP_UDP_BYTES = IPV4_HEADER_BYTES + UDP_HEADER_BYTES
READS_PER_WAKEUP = 64  # bound the work of one readable callback so ticks keep their pace
RECV_BUFFER_BYTES = 65535 * 2
# no way to the destination right now (a link down, no route): the send is lost, not fatal
NO_PATH_ERRNOS = frozenset({errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN})


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, picklable (it crosses into a spawned process)."""

    index: int
    ranks: tuple[RankEndpoint, ...]
    addresses: dict[int, str]  # every rank's address (destinations)
    flows: tuple[EngineFlow, ...]  # flows whose src rank is in this shard
    connections: dict[tuple[int, int, int, int], int]  # EngineFlow.connection_key -> conn id
    transport: TransportParams
    engine: EngineParams
    profiles: tuple[QpProfile, ...] = (DEFAULT_PROFILE,)  # EngineFlow.profile -> how its QP sends
    relay: frozenset[int] = frozenset()  # flow ids other workers wait for: report at once


@dataclass(eq=False)
class _Rank:
    spec: RankEndpoint
    endpoint: RoceEndpoint
    rx_sock: socket.socket
    nic: NicPacer
    sport_socks: dict[int, socket.socket] = field(default_factory=dict)
    ns_per_byte: float = 0.0  # wall time of one byte on its link (line rate, dilated)
    tx_bytes: int = 0
    rx_bytes: int = 0


@dataclass(eq=False)
class _SendConn:
    conn_id: int
    rank: _Rank
    qp: SendQueuePair
    sock: socket.socket
    dest: tuple[str, int]
    icrc: IcrcContext
    writer: BurstWriter
    next_ordinal: int = 0
    cnps_received: int = 0
    snapshot: tuple[int, int, int] = (0, 0, 0)
    ordinals: dict[int, int] = field(default_factory=dict)
    last_rate_sample_s: float = float("-inf")
    tos: int = 0  # ToS byte of its data: its class's DSCP and the data ECN field
    tos_cmsgs: tuple[tuple[int, int, bytes], ...] = ()  # () when the socket's default is it


@dataclass(eq=False)
class _RecvConn:
    conn_id: int
    rank: _Rank
    qp: ReceiveQueuePair
    sock: socket.socket
    dest: tuple[str, int]
    icrc: IcrcContext
    cnps_sent: int = 0
    snapshot: tuple[int, int] = (0, 0)
    latency: LatencyHistogram | None = None  # one-way latency of its data packets


class Worker:
    def __init__(self, spec: WorkerSpec, pipe: Connection) -> None:
        self.spec = spec
        self.rank_addresses = frozenset(spec.addresses.values())
        self.pipe = pipe
        p = spec.engine
        self.params = p
        self.transport = spec.transport
        self.offloads: Offloads = detect_offloads(p.gso, p.gro)
        self.events: list[TransportEvent] = []
        self.out: list[tuple[Any, ...]] = []
        self.drops: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.ranks: dict[int, _Rank] = {}
        self.send_conns: dict[int, _SendConn] = {}  # by qpn
        self.recv_conns: dict[int, _RecvConn] = {}  # by qpn
        self.active: dict[int, _SendConn] = {}
        self.flows: dict[int, EngineFlow] = {}
        self.connections: dict[tuple[int, int, int, int], int] = {}
        self.waiting: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = {}
        self.done_flows: set[int] = set()
        self.delayed: list[tuple[float, int]] = []
        self.clock = DilatedClock(p.tdf)
        self.buf = bytearray(RECV_BUFFER_BYTES)
        self.latency = p.one_way_latency
        self.gso_buf = BurstBuffer(RECV_BUFFER_BYTES, stamps=self.latency)
        # one-way latency per traffic class as received (DSCP), target seconds
        self.latency_classes: dict[int, LatencyHistogram] = {}
        self._target_s_per_ns = 1e-9 / p.tdf
        self.gso_view = memoryview(self.gso_buf.data)
        self._gso_cmsgs: dict[tuple[int, int], list[tuple[int, int, bytes]]] = {}
        self.reply_buf = bytearray(RECV_BUFFER_BYTES)
        self.relay = set(spec.relay)
        self._completed: list[tuple[int, float]] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            FlowCompleted: self._on_flow_completed,
            MessageReceived: self._on_message_received,
            RateChanged: self._on_rate_changed,
            CnpReceived: self._on_cnp_received,
            CnpSent: self._on_cnp_sent,
            Retransmitted: self._on_retransmitted,
            PacketDropped: self._on_packet_dropped,
            PostedToQueue: _ignore,  # the engine reports the start itself, with the flow id
        }
        self.flush_now = False
        self.started = False
        self._last_tick_wall = 0.0
        self._cpu_at_start_s = 0.0
        self.max_tick_gap_s = 0.0
        self.tick_lateness = TickLateness()
        self.gc_pauses = GcPauses()
        self._burst_s = p.burst_ticks * p.tick_s / p.tdf
        self._max_packet_wire_bytes = (
            BTH_BYTES + spec.transport.path_mtu_bytes + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.finished: asyncio.Future[None] | None = None
        t = spec.transport
        # sockets default to the data class; a QP in another class (qp_dscp) says so per send
        self.tos_data = t.dscp << 2 | t.data_ecn_bits
        self.tos_ack = t.ack_dscp_value << 2 | ECN_NOT_ECT
        self.tos_cnp = t.cnp_dscp << 2 | ECN_NOT_ECT
        # per traffic class (DSCP): [packets sent, bytes sent, packets received, bytes received]
        self.classes: dict[int, list[int]] = {}
        self._profile_params: dict[int, TransportParams] = {}
        self._nic_sent: dict[int, tuple[int, int]] = {}  # NIC counters as last reported
        self._open_ranks()
        self._add_flows(spec.flows, spec.connections)

    # -- set-up ---------------------------------------------------------------------------
    def _open_ranks(self) -> None:
        p = self.params
        nics: dict[object, NicPacer] = {}  # ranks naming one NIC share its arbiter
        for r in self.spec.ranks:
            key = ("nic", r.nic) if r.nic is not None else ("rank", r.rank)
            nic = nics.get(key)
            if nic is None:
                nic = nics[key] = NicPacer(r.line_rate_bps)
            sock = open_udp(
                r.netns,
                r.address,
                ROCEV2_UDP_PORT,
                gro=self.offloads.gro,
                buffer_bytes=p.socket_buffer_bytes,
            )
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos_data)
            if self.latency:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.ranks[r.rank] = _Rank(
                r,
                RoceEndpoint(self.events),
                sock,
                nic,
                ns_per_byte=8e9 * p.tdf / r.line_rate_bps,
            )

    def _sport_socket(self, rank: _Rank, sport: int) -> socket.socket:
        if sport == ROCEV2_UDP_PORT:
            return rank.rx_sock
        sock = rank.sport_socks.get(sport)
        if sock is None:
            s = rank.spec
            sock = open_udp(
                s.netns, s.address, sport, gro=False, buffer_bytes=self.params.socket_buffer_bytes
            )
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos_data)
            rank.sport_socks[sport] = sock
        return sock

    def _add_flows(
        self, flows: Sequence[EngineFlow], connections: dict[tuple[int, int, int, int], int]
    ) -> None:
        self.connections.update(connections)
        for f in flows:
            conn_id = connections[f.connection_key]
            qpn = conn_id + 1
            if qpn not in self.send_conns:
                rank = self.ranks[f.src]
                dst = self.spec.addresses[f.dst]
                params, rate_bps, dscp = self._profile(f, rank.spec.line_rate_bps)
                qp = SendQueuePair(
                    qpn=qpn,
                    dest_qp=qpn,
                    params=params,
                    line_rate_bps=rate_bps,
                    events=self.events,
                )
                # its ACKs, NAKs and CNPs come from the receiver's socket bound to our source port
                rank.endpoint.add_sender(qp, peer=(dst, f.udp_sport))
                address = FlowAddress(rank.spec.address, dst, f.udp_sport, dscp=self.transport.dscp)
                icrc = IcrcContext(address)
                tos = dscp << 2 | self.transport.data_ecn_bits
                self.send_conns[qpn] = _SendConn(
                    conn_id,
                    rank,
                    qp,
                    self._sport_socket(rank, f.udp_sport),
                    (dst, ROCEV2_UDP_PORT),
                    icrc,
                    BurstWriter(icrc, self.gso_buf, self.params.gso_max_segments),
                    tos=tos,
                    tos_cmsgs=() if tos == self.tos_data else (tos_cmsg(tos),),
                )
            self.flows[f.id] = f
        for f in flows:
            pending = [d for d in set(f.deps) if d not in self.done_flows]
            self.waiting[f.id] = len(pending)
            for d in pending:
                self.dependents.setdefault(d, []).append(f.id)
            if not pending and self.started:
                self._ready(f, self.clock.now())

    def _profile(
        self, flow: EngineFlow, line_rate_bps: float
    ) -> tuple[TransportParams, float, int]:
        """The transport parameters, starting (and highest) rate and data DSCP of a new QP."""
        t = self.transport
        if flow.profile == 0:
            return t, line_rate_bps, t.data_dscp(flow.qp)
        p = self.spec.profiles[flow.profile]
        changes: dict[str, Any] = {}
        if p.congestion_control is not None:
            changes["congestion_control"] = p.congestion_control
        if p.path_mtu_bytes is not None:
            changes["path_mtu_bytes"] = p.path_mtu_bytes
        params = self._profile_params.get(flow.profile)
        if params is None:
            params = self._profile_params[flow.profile] = dataclasses.replace(t, **changes)
        rate = min(line_rate_bps, p.max_rate_bps or line_rate_bps)
        return params, rate, t.data_dscp(flow.qp) if p.dscp is None else p.dscp

    # -- flows ----------------------------------------------------------------------------
    def _ready(self, flow: EngineFlow, now: float) -> None:
        if flow.start_delay_s > 0:
            heapq.heappush(self.delayed, (now + flow.start_delay_s, flow.id))
        else:
            self._post(flow, now)

    def _post(self, flow: EngineFlow, now: float) -> None:
        qpn = self.connections[flow.connection_key] + 1
        conn = self.send_conns[qpn]
        qp = conn.qp
        if qp.idle:
            conn.snapshot = (qp.packets_sent, qp.packets_retransmitted, conn.cnps_received)
        qp.post_send(now=now, message_id=flow.id, size_bytes=flow.bytes)
        conn.ordinals[flow.id] = conn.next_ordinal
        conn.next_ordinal += 1
        self.active[qpn] = conn
        self.out.append(("started", flow.id, now))

    def _deps_done(self, flow_ids: Sequence[int], now: float) -> None:
        for fid in flow_ids:
            if fid in self.done_flows:
                continue
            self.done_flows.add(fid)
            for child in self.dependents.pop(fid, ()):
                self.waiting[child] -= 1
                if self.waiting[child] == 0:
                    self._ready(self.flows[child], now)

    # -- the tick -------------------------------------------------------------------------
    def _start(self) -> None:
        self.started = True
        self._cpu_at_start_s = _cpu_s()
        now = self.clock.now()
        for f in self.flows.values():
            if self.waiting.get(f.id) == 0:
                self._ready(f, max(now, 0.0))
        self._next_tick_wall = time.perf_counter()
        self._next_flush_wall = self._next_tick_wall + self.params.event_batch_s
        self._tick()

    def _tick(self) -> None:
        assert self.loop is not None
        if self.finished is None or self.finished.done():
            return
        now = self.clock.now()
        start_wall = time.perf_counter()
        if self._last_tick_wall:
            self.max_tick_gap_s = max(self.max_tick_gap_s, start_wall - self._last_tick_wall)
            self.tick_lateness.add(max(start_wall - self._next_tick_wall, 0.0))
        self._last_tick_wall = start_wall
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, fid = heapq.heappop(delayed)
            self._post(self.flows[fid], now)
        for conn in list(self.active.values()):
            deadline = conn.qp.next_timer_s()
            if deadline is not None and deadline <= now:
                conn.qp.on_timer(now=now)
        # A tick that fires late (uvloop timers round to 1 ms) gets the credit the on-time
        # tick would have had: its bucket is deeper by the lateness, at most one tick.
        tick = self.params.tick_s
        late_s = min(max(start_wall - self._next_tick_wall, 0.0), tick)
        self._pump(now, late_s / self.params.tdf)
        self._handle_events()
        wall = time.perf_counter()
        if self.flush_now or wall >= self._next_flush_wall:
            self._flush(now)
            self._next_flush_wall = wall + self.params.event_batch_s
        self._next_tick_wall += tick
        if self._next_tick_wall < wall:
            self._next_tick_wall = wall + tick  # fell behind: do not try to catch up in a burst
        self.loop.call_later(self._next_tick_wall - wall, self._tick)

    def _pump(self, now: float, late_s: float = 0.0) -> None:
        """Send what every active queue pair's pacer released by `now`, within its NIC's rate."""
        # A token bucket of depth burst_s (+ how late this tick is): enough for a tick that
        # fires late without losing rate, never a catch-up burst after idling or a stall.
        floor = now - self._burst_s - late_s
        max_segments = self.params.gso_max_segments if self.offloads.gso else 64
        per_nic: dict[int, list[tuple[int, _SendConn]]] = {}
        for qpn, conn in self.active.items():
            per_nic.setdefault(id(conn.rank.nic), []).append((qpn, conn))
        for conns in per_nic.values():
            self._serve_nic(conns, now, floor, max_segments)
        for conns in per_nic.values():
            for qpn, conn in conns:
                if conn.qp.idle:
                    del self.active[qpn]

    def _serve_nic(
        self, conns: list[tuple[int, _SendConn]], now: float, floor: float, max_segments: int
    ) -> None:
        """A NIC's transmit arbiter: its queue pairs in turn, one GSO burst each per round,
        until none has a packet due or the NIC's line-rate budget is spent (each queue pair
        paces itself at its own rate; together they must not exceed the NIC's)."""
        nic = conns[0][1].rank.nic
        turn = nic.turn % len(conns)
        nic.turn += 1
        order = [conn for _, conn in conns[turn:] + conns[:turn]]
        packet_wire = self._max_packet_wire_bytes
        nic.start_tick(floor)
        # a NIC that was line-rate bound accounts the lost credit itself, not its queue pairs
        count_lost = not nic.backlogged
        budget = nic.budget_bytes(now, floor)
        while order and budget >= 0:
            waiting = []
            for conn in order:
                burst = conn.qp.poll_burst(
                    now=now,
                    floor_s=floor,
                    max_packets=min(max_segments, 1 + budget // packet_wire),
                    max_bytes=GSO_MAX_BUFFER_BYTES,
                    count_lost=count_lost,
                )
                if burst is None:
                    continue
                used = self._send_burst(conn, burst)
                nic.consume(floor, used + burst.count * IPV4_FRAME_OVERHEAD_BYTES)
                budget = nic.budget_bytes(now, floor)
                waiting.append(conn)
                if budget < 0:
                    break
            order = waiting
        nic.backlogged = budget < 0 and bool(order)

    def _send_burst(self, conn: _SendConn, burst: Burst) -> int:
        """One GSO send of the burst's segments (one send per segment without GSO); returns
        the UDP payload bytes handed to the kernel."""
        count = burst.count
        gso = self.offloads.gso
        if self.latency:
            # a burst's packets leave back to back at the rank's line rate (dilated)
            spacing = (burst.segment_bytes + IPV4_FRAME_OVERHEAD_BYTES) * conn.rank.ns_per_byte
            used = conn.writer.write(
                burst, gso=gso, departed_ns=time.time_ns(), spacing_ns=int(spacing)
            )
        else:
            used = conn.writer.write(burst, gso=gso)
        view = self.gso_view
        if count == 1:
            self._sendmsg(conn.sock, [view[:used]], conn.tos_cmsgs, conn.dest, conn.rank)
        elif gso:
            segment = burst.segment_bytes
            cmsg = self._gso_cmsgs.get((segment, conn.tos))
            if cmsg is None:
                cmsg = self._gso_cmsgs[(segment, conn.tos)] = [gso_cmsg(segment), *conn.tos_cmsgs]
            buffers = [view[:used]]
            try:
                conn.sock.sendmsg(buffers, cmsg, 0, conn.dest)  # _sendmsg, inlined
            except OSError as e:
                self._send_failed(e, buffers, conn.dest, conn.rank)
            self.counters["gso_sends"] += 1
        else:
            segment = burst.segment_bytes
            for at in range(0, used, segment):
                end = min(at + segment, used)
                self._sendmsg(conn.sock, [view[at:end]], conn.tos_cmsgs, conn.dest, conn.rank)
        self.counters["data_packets_sent"] += count
        conn.rank.tx_bytes += used + IP_UDP_BYTES * count
        self._count_class(conn.tos, count, used, sent=True)
        return used

    def _count_class(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
        """Per-DSCP tally of what this worker's ranks sent or received (UDP payload bytes)."""
        row = self.classes.get(tos >> 2)
        if row is None:
            row = self.classes[tos >> 2] = [0, 0, 0, 0]
        at = 0 if sent else 2
        row[at] += packets
        row[at + 1] += udp_bytes

    def _sendmsg(
        self,
        sock: socket.socket,
        buffers: list[bytes] | list[memoryview],
        ancillary: Sequence[tuple[int, int, bytes]],
        dest: tuple[str, int],
        rank: _Rank,
    ) -> None:
        try:
            sock.sendmsg(buffers, ancillary, 0, dest)
        except OSError as e:
            self._send_failed(e, buffers, dest, rank)

    def _send_failed(
        self,
        e: OSError,
        buffers: list[bytes] | list[memoryview],
        dest: tuple[str, int],
        rank: _Rank,
    ) -> None:
        if isinstance(e, BlockingIOError | InterruptedError):
            # The socket buffer is full: the packets are lost like on a congested NIC; the
            # transport recovers them (NAK or timeout). Counted so a run can say so.
            self.counters["send_buffer_full"] += 1
            return
        if e.errno == 90:  # EMSGSIZE
            raise EnvironmentProblem(
                f"rank {rank.spec.rank}: a {sum(len(b) for b in buffers)}-byte RoCEv2 send "
                f"to {dest[0]} exceeds the path MTU: raise the interface MTU or lower "
                f"transport.path_mtu_bytes ({self.transport.path_mtu_bytes})"
            ) from None
        if e.errno == 105:  # ENOBUFS: qdisc or device queue full
            self.counters["send_no_buffers"] += 1
            return
        if e.errno in NO_PATH_ERRNOS:
            # The rank's link is down or no route leads there (a link-event impairment, or a
            # switch under test that lost a port): lost like on a dead wire; the transport
            # retransmits once the path is back, or the run's deadline names the flow.
            self.counters["send_no_path"] += 1
            return
        raise e

    # -- receiving ------------------------------------------------------------------------
    def _on_readable(self, rank: _Rank) -> None:
        sock = rank.rx_sock
        buf = self.buf
        mv = memoryview(buf)
        now = self.clock.now()
        endpoint = rank.endpoint
        got = False
        for _ in range(READS_PER_WAKEUP):
            try:
                nbytes, anc, _flags, source = sock.recvmsg_into([buf], ANCILLARY_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            got = True
            tos, gso_size, rx_ns = read_ancillary(anc)
            ce = (tos & 3) == ECN_CE
            count = -(-nbytes // gso_size) if 0 < gso_size < nbytes else 1
            rank.rx_bytes += nbytes + IP_UDP_BYTES * count
            self.counters["packets_received"] += count
            self._count_class(tos, count, nbytes, sent=False)
            # the segments of one read at once: ACKs to one sender, or data for one known QP
            # (the fast paths only for the QP's own peer; anything else goes through the codec,
            # which counts foreign sources as drops)
            if nbytes and buf[0] == Opcode.ACKNOWLEDGE:
                acks = read_ack_run(buf, nbytes, gso_size)
                if (
                    acks is not None
                    and acks[0] in endpoint.senders
                    and endpoint.sender_peers.get(acks[0]) == source
                ):
                    endpoint.senders[acks[0]].on_acks(now=now, psns=acks[1])
                    continue
            else:
                run = read_data_run(buf, nbytes, gso_size) if nbytes else None
                if run is not None:
                    rq = endpoint.receivers.get(run.dest_qp)
                    if rq is not None and endpoint.receiver_peers.get(run.dest_qp) == source:
                        replies = rq.on_data_run(
                            now=now,
                            psn=run.psn,
                            opcodes=run.opcodes,
                            ack_req_at=run.ack_req_at,
                            payload_bytes=run.payload_bytes,
                            last_payload_bytes=run.last_payload_bytes,
                            ce=ce,
                        )
                        if rx_ns:
                            self._observe(run.dest_qp, tos, buf, nbytes, run.psn, rx_ns)
                        if replies:
                            self._send_replies(replies)
                        continue
            for a, b in segments(nbytes, gso_size):
                try:
                    packet = decode(mv[a:b])
                except MalformedPacket:
                    endpoint.drop(now, "malformed")
                    continue
                if type(packet) is DataPacket and packet.dest_qp not in endpoint.receivers:
                    if source[0] not in self.rank_addresses:
                        # only the run's ranks open receive QPs: a stranger's first packet
                        # must not make its address the QP's peer
                        endpoint.drop(now, "foreign_source", packet.dest_qp)
                        continue
                    self._open_receiver(rank, packet.dest_qp, source)
                replies = endpoint.on_packet(now=now, packet=packet, ce=ce, source=source)
                if (
                    rx_ns
                    and a == 0  # the segment the kernel's stamp is for (see _observe)
                    and type(packet) is DataPacket
                    and packet.opcode not in RETH_OPCODES
                    and endpoint.receiver_peers.get(packet.dest_qp) == source
                ):
                    self._observe(packet.dest_qp, tos, mv[a:b], b - a, packet.psn, rx_ns)
                if replies:
                    self._send_replies(replies)
        if got:
            self._handle_events()
            if self.active:
                self._pump(self.clock.now())
            if self.flush_now:
                self._flush(now)

    def _observe(
        self, qpn: int, tos: int, data: bytearray | memoryview, nbytes: int, psn: int, rx_ns: int
    ) -> None:
        """The one-way latency of the first data segment of one read. The kernel stamps a GRO
        batch once, with its first segment's arrival: that segment's latency is exact, the
        others' would be read against the wrong arrival, so one segment per read is measured
        (every packet when they arrive one per read; a sample of them under load)."""
        conn = self.recv_conns.get(qpn)
        if conn is None:
            return
        departed = departed_ns(data, nbytes, psn)
        if not departed:
            return
        # a stamp from the future (a clock step) counts as 0, not as a negative latency
        latency_s = max(rx_ns - departed, 0) * self._target_s_per_ns
        if conn.latency is None:
            conn.latency = LatencyHistogram()
        conn.latency.observe(latency_s)
        by_class = self.latency_classes.get(tos >> 2)
        if by_class is None:
            by_class = self.latency_classes[tos >> 2] = LatencyHistogram()
        by_class.observe(latency_s)

    def _open_receiver(self, rank: _Rank, qpn: int, source: tuple[str, int]) -> None:
        qp = ReceiveQueuePair(qpn=qpn, remote_qp=qpn, params=self.transport, events=self.events)
        peer, sport = source[0], source[1]
        rank.endpoint.add_receiver(qp, peer=(peer, sport))
        address = FlowAddress(
            rank.spec.address, peer, sport, dscp=self.transport.dscp, ecn=ECN_NOT_ECT
        )
        self.recv_conns[qpn] = _RecvConn(
            qpn - 1,
            rank,
            qp,
            self._sport_socket(rank, sport),
            (peer, ROCEV2_UDP_PORT),
            IcrcContext(address),
        )

    def _send_replies(self, replies: list[Packet]) -> None:
        i = 0
        total = len(replies)
        while i < total:
            packet = replies[i]
            conn = self.recv_conns.get(packet.dest_qp)
            if conn is None:
                i += 1
                continue
            j = i + 1
            if type(packet) is AckPacket and self.offloads.gso:
                # the ACKs of one read to one QP leave as one GSO send (IP ids 0, 1, ...)
                limit = min(total, i + self.params.gso_max_segments)
                while (
                    j < limit
                    and type(replies[j]) is AckPacket
                    and replies[j].dest_qp == packet.dest_qp
                ):
                    j += 1
            if j - i > 1:
                used, segment = layout_gso(self.reply_buf, replies[i:j], conn.icrc, ip_id_first=0)
                self._sendmsg(
                    conn.sock,
                    [memoryview(self.reply_buf)[:used]],
                    (gso_cmsg(segment), tos_cmsg(self.tos_ack)),
                    conn.dest,
                    conn.rank,
                )
                conn.rank.tx_bytes += used + IP_UDP_BYTES * (j - i)
                self._count_class(self.tos_ack, j - i, used, sent=True)
            else:
                data = encode(packet, conn.icrc, 0)
                tos = self.tos_cnp if type(packet) is CnpPacket else self.tos_ack
                self._sendmsg(conn.sock, [data], (tos_cmsg(tos),), conn.dest, conn.rank)
                conn.rank.tx_bytes += len(data) + IP_UDP_BYTES
                self._count_class(tos, 1, len(data), sent=True)
            i = j

    # -- events ---------------------------------------------------------------------------
    def _handle_events(self) -> None:
        """Turn the core's events into reports (tuples) and counters; release dependents."""
        events = self.events
        if not events:
            return
        batch = events[:]
        events.clear()
        self._completed = []
        handlers = self._handlers
        for ev in batch:
            handler = handlers.get(type(ev))
            if handler is None:
                self.counters[f"unhandled_{type(ev).__name__}"] += 1
            else:
                handler(ev)
        if self._completed:
            self._deps_done([fid for fid, _ in self._completed], max(t for _, t in self._completed))

    def _on_flow_completed(self, ev: FlowCompleted) -> None:
        conn = self.send_conns[ev.qpn]
        qp = conn.qp
        snap = (qp.packets_sent, qp.packets_retransmitted, conn.cnps_received)
        old = conn.snapshot
        conn.snapshot = snap
        self.out.append(
            (
                "done",
                ev.message_id,
                ev.completed_s,
                snap[0] - old[0],
                snap[1] - old[1],
                snap[2] - old[2],
                conn.conn_id,
                conn.ordinals.pop(ev.message_id, -1),
            )
        )
        self._completed.append((ev.message_id, ev.completed_s))
        if ev.message_id in self.relay:
            self.flush_now = True

    def _on_message_received(self, ev: MessageReceived) -> None:
        rx = self.recv_conns[ev.qpn]
        snap = (rx.qp.ce_packets, rx.cnps_sent)
        old = rx.snapshot
        rx.snapshot = snap
        self.out.append(
            (
                "rx",
                rx.conn_id,
                ev.message_index,
                ev.now_s,
                ev.size_bytes,
                snap[0] - old[0],
                snap[1] - old[1],
            )
        )

    def _on_rate_changed(self, ev: RateChanged) -> None:
        conn = self.send_conns.get(ev.qpn)
        if conn is None:
            return
        # every cut is reported; increases at most once per rate_sample_s per QP
        if ev.reason == "cnp" or ev.now_s - conn.last_rate_sample_s >= self.params.rate_sample_s:
            conn.last_rate_sample_s = ev.now_s
            self.out.append(("rate", conn.rank.spec.rank, ev.qpn, ev.now_s, ev.current_rate_bps))

    def _on_cnp_received(self, ev: CnpReceived) -> None:
        conn = self.send_conns.get(ev.qpn)
        if conn is not None:
            conn.cnps_received += 1
        self.counters["cnps_received"] += 1

    def _on_cnp_sent(self, ev: CnpSent) -> None:
        conn = self.recv_conns.get(ev.qpn)
        if conn is not None:
            conn.cnps_sent += 1
        self.counters["cnps_sent"] += 1

    def _on_retransmitted(self, ev: Retransmitted) -> None:
        self.counters[f"go_back_n_{ev.reason}"] += 1
        self.counters["packets_resent_planned"] += ev.packets

    def _on_packet_dropped(self, ev: PacketDropped) -> None:
        self.drops[ev.reason] += 1

    def _stats(self, now: float) -> dict[str, Any]:
        return {
            "time_s": now,
            "nic": self._nic_changes(),
            "drops": dict(self.drops),  # every drop is a PacketDropped event, counted once
            "counters": dict(self.counters),
            "classes": {dscp: list(row) for dscp, row in self.classes.items()},
            "cpu_s": _cpu_s(),
            "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "run_cpu_s": _cpu_s() - self._cpu_at_start_s if self.started else 0.0,
            "max_tick_gap_s": self.max_tick_gap_s,
            "tick_lateness": self.tick_lateness.to_json(),  # wall seconds
            "gc_pauses": self.gc_pauses.to_json(),  # wall seconds
            "pacing": self._pacing(),
            "latency": {dscp: h.to_wire() for dscp, h in self.latency_classes.items()},
        }

    def _pacing(self) -> dict[str, float]:
        """Bytes sent and bytes the rates allowed but the ticks came too late for (the NICs'
        when line-rate bound, else their queue pairs'), summed over the worker's NICs."""
        nics = {id(r.nic): r.nic for r in self.ranks.values()}.values()
        lost = sum(n.lost_wire_bytes for n in nics)
        lost += sum(c.qp.pacing_lost_bytes for c in self.send_conns.values())
        return {"sent_bytes": float(sum(n.sent_wire_bytes for n in nics)), "lost_bytes": lost}

    def _nic_changes(self) -> dict[int, tuple[int, int]]:
        """Byte counters of the ranks whose counters moved since the last report (a worker
        with a thousand idle endpoints would otherwise send them all at every flush)."""
        out = {}
        sent = self._nic_sent
        for r in self.ranks.values():
            now = (r.tx_bytes, r.rx_bytes)
            if sent.get(r.spec.rank) != now:
                sent[r.spec.rank] = now
                out[r.spec.rank] = now
        return out

    def _queue_pairs(self) -> dict[str, Any]:
        """The tester's per-QP counters, each half where it lives (sent once, at the end: a
        run may have thousands of QPs). Rows are lists in the order of SEND_QP_COLUMNS and
        RECV_QP_COLUMNS, by QP number."""
        return {
            "send_qps": {
                qpn: [
                    c.qp.packets_sent,
                    c.qp.bytes_acked,
                    c.qp.packets_retransmitted,
                    c.qp.acks_received,
                    c.qp.naks_received,
                    c.cnps_received,
                    c.tos >> 2,
                ]
                for qpn, c in self.send_conns.items()
            },
            "recv_qps": {
                qpn: [
                    c.qp.packets_received,
                    c.qp.delivered_bytes,
                    c.qp.drops["out_of_sequence"],
                    c.qp.drops["duplicate"],
                    c.qp.acks_sent,
                    c.qp.naks_sent,
                    c.qp.ce_packets,
                    c.cnps_sent,
                ]
                for qpn, c in self.recv_conns.items()
            },
            "qp_latency": {
                qpn: c.latency.to_wire()
                for qpn, c in self.recv_conns.items()
                if c.latency is not None
            },
        }

    def _flush(self, now: float) -> None:
        self.flush_now = False
        out, self.out = self.out, []
        self.pipe.send(("events", out, self._stats(now)))

    # -- commands -------------------------------------------------------------------------
    def _on_command(self) -> None:
        assert self.loop is not None and self.finished is not None
        while self.pipe.poll():
            try:
                msg = self.pipe.recv()
            except EOFError:
                self._stop()
                return
            kind = msg[0]
            if kind == "go":
                delay = msg[1] - time.perf_counter()
                self.clock = DilatedClock(self.params.tdf, msg[1])
                self.loop.call_later(max(delay, 0.0), self._start)
            elif kind == "deps_done":
                self._deps_done(msg[1], self.clock.now())
                self._pump(self.clock.now())
            elif kind == "flows":
                # flows handed out at run time: the coordinator waits for each completion
                self.relay.update(f.id for f in msg[1])
                self._add_flows(msg[1], msg[2])
                if self.started:
                    self._pump(self.clock.now())
            elif kind == "stop":
                self._stop()
                return

    def _stop(self) -> None:
        assert self.finished is not None
        if not self.finished.done():
            self.finished.set_result(None)

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A callback raised: the worker cannot go on half-working, so it fails (the coordinator
        then fails the run with the message)."""
        del loop
        exc = context.get("exception")
        failure = exc if isinstance(exc, BaseException) else RuntimeError(context.get("message"))
        if self.finished is not None and not self.finished.done():
            self.finished.set_exception(failure)

    def run(self) -> None:
        import uvloop

        loop = uvloop.new_event_loop()
        asyncio.set_event_loop(loop)
        self.loop = loop
        self.finished = loop.create_future()
        loop.set_exception_handler(self._on_loop_error)
        loop.add_reader(self.pipe.fileno(), self._on_command)
        # uvloop made the pipe non-blocking: a send into a full pipe (a big batch of events
        # while the coordinator is busy) would raise mid-message and break its framing.
        # Blocking, a send waits for the coordinator to read (it reads only what poll() says
        # is there, so receiving never blocks the loop).
        os.set_blocking(self.pipe.fileno(), True)
        for rank in self.ranks.values():
            loop.add_reader(rank.rx_sock.fileno(), self._on_readable, rank)
        self.pipe.send(
            ("ready", {"pid": os.getpid(), "gso": self.offloads.gso, "gro": self.offloads.gro})
        )
        try:
            loop.run_until_complete(self.finished)
            now = self.clock.now()
            self._handle_events()
            self.pipe.send(("bye", self.out, {**self._stats(now), **self._queue_pairs()}))
        finally:
            loop.close()
            self.close()

    def close(self) -> None:
        for rank in self.ranks.values():
            rank.rx_sock.close()
            for s in rank.sport_socks.values():
                s.close()


def _ignore(event: object) -> None:
    del event


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_main(spec: WorkerSpec, pipe: Connection) -> None:
    """Process entry point: never outlive the coordinator; report failures on the pipe."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    if os.getppid() == 1:
        sys.exit(1)
    worker: Worker | None = None
    try:
        worker = Worker(spec, pipe)
        worker.run()
    except EmulatorError as e:
        _report(pipe, f"worker {spec.index}: {e}")
        sys.exit(1)
    except Exception as e:
        import traceback

        _report(
            pipe, f"worker {spec.index} crashed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        )
        sys.exit(1)
    finally:
        if worker is not None:
            worker.close()


def _report(pipe: Connection, message: str) -> None:
    with contextlib.suppress(OSError):
        pipe.send(("error", message))
