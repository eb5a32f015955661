"""A worker's flows: the send queue pair each flow's connection gets, and when a flow starts.

A flow starts once the flows it depends on are done (here or, as the coordinator relays, in
another worker) and its start delay is over; starting posts it to its connection's queue pair,
which the tick then sends from.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from collections import Counter
from collections.abc import Sequence
from typing import Any

from emulator.engine.active import ActiveQueuePairs
from emulator.engine.entropy_ports import EntropyPorts
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow
from emulator.engine.ranks import RankSockets, SendConn
from emulator.engine.sockets import tos_cmsg
from emulator.engine.tick_state import TickState
from emulator.engine.worker_spec import QueuePairAhead
from emulator.transport.burst_wire import BurstBuffer, BurstWriter
from emulator.transport.events import TransportEvent
from emulator.transport.packets import ROCEV2_UDP_PORT
from emulator.transport.params import TransportParams
from emulator.transport.qp_profile import QpProfile
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext


class FlowStarts:
    """The worker's flows and when they start. Owns the flows, their dependencies and delays,
    and opens the send queue pairs (into `send_conns`, the worker's table by QP number); a
    started flow's queue pair goes into `active`, which the send path serves. Given the rank
    sockets (a queue pair's rank and socket), the buffer the bursts are laid out in, the
    events and report lists, and the tick state (the clock, whether the run started)."""

    def __init__(
        self,
        addresses: dict[int, str],
        profiles: Sequence[QpProfile],
        params: EngineParams,
        transport: TransportParams,
        rank_sockets: RankSockets,
        send_buffer: BurstBuffer,
        events: list[TransportEvent],
        out: list[tuple[Any, ...]],
        ticks: TickState,
        send_conns: dict[int, SendConn],
        active: ActiveQueuePairs,
        counters: Counter[str],
    ) -> None:
        self.addresses = addresses  # every rank's address (destinations)
        self.profiles = profiles
        self.params = params
        self.transport = transport
        self.rank_sockets = rank_sockets
        self.gso_buf = send_buffer
        self.events = events
        self.out = out
        self.ticks = ticks
        self.send_conns = send_conns
        self.active = active
        self.counters = counters
        self.flows: dict[int, EngineFlow] = {}
        self.connections: dict[tuple[int, int, int, int], int] = {}
        self.waiting: dict[int, int] = {}  # flow id -> dependencies not done yet
        self.dependents: dict[int, list[int]] = {}
        self.done_flows: set[int] = set()
        self.delayed: list[tuple[float, int]] = []  # (start time, flow id), a heap
        self._profile_params: dict[int, TransportParams] = {}

    def add(
        self, flows: Sequence[EngineFlow], connections: dict[tuple[int, int, int, int], int]
    ) -> None:
        """Flows and their connections (EngineFlow.connection_key -> conn id): each new
        connection's queue pair opened, each flow ready once its dependencies are done."""
        self.connections.update(connections)
        for f in flows:
            conn_id = connections[f.connection_key]
            if conn_id + 1 not in self.send_conns:
                self.open(conn_id, f.src, f.dst, f.qp, f.udp_sport, f.profile)
                if self.ticks.started:
                    self.counters["queue_pairs_opened_in_run"] += 1
            self.flows[f.id] = f
        for f in flows:
            pending = [d for d in set(f.deps) if d not in self.done_flows]
            self.waiting[f.id] = len(pending)
            for d in pending:
                self.dependents.setdefault(d, []).append(f.id)
            if not pending and self.ticks.started:
                self._ready(f, self.ticks.clock.now())

    def open(
        self, conn_id: int, src: int, dst: int, qp_index: int, sport: int, profile: int
    ) -> SendConn:
        """Open the send queue pair of a connection (rank `src` to `dst`, its QP index, UDP
        source port and QP profile): its QP, its socket, its ICRC context. The worker opens the
        plan's before the clock starts (engine.plan: a queue pair opened at first use cost a
        worker ~50 us, 12 ms at an All-to-All's start); the flows open any other as it comes."""
        qpn = conn_id + 1
        rank = self.rank_sockets.ranks[src]
        dst_address = self.addresses[dst]
        params, rate_bps, dscp = self._profile(profile, qp_index, rank.spec.line_rate_bps)
        qp = SendQueuePair(
            qpn=qpn,
            dest_qp=qpn,
            params=params,
            line_rate_bps=rate_bps,
            verb=self.profiles[profile].verb if profile else "send",
            events=self.events,
        )
        address = FlowAddress(rank.spec.address, dst_address, sport, dscp=self.transport.dscp)
        entropy = None
        if params.entropy == "per_packet":
            entropy = EntropyPorts(
                address,
                params.entropy_values,
                functools.partial(self.rank_sockets.sport_socket, rank),
                self.gso_buf,
                self.params.gso_max_segments,
            )
            address = dataclasses.replace(address, sport=entropy.home_sport)
        # its ACKs, NAKs and CNPs come from the receiver's socket bound to our source
        # port (with per-packet entropy: the home port, emulator.transport.entropy)
        rank.endpoint.add_sender(qp, peer=(dst_address, address.sport))
        icrc = IcrcContext(address)
        tos = dscp << 2 | self.transport.data_ecn_bits
        xdp = rank.xdp  # its interface's AF_XDP port sends for it (af_xdp)
        conn = self.send_conns[qpn] = SendConn(
            conn_id,
            rank,
            qp,
            self.rank_sockets.sport_socket(rank, address.sport) if xdp is None else None,
            (dst_address, ROCEV2_UDP_PORT),
            icrc,
            BurstWriter(icrc, self.gso_buf, self.params.gso_max_segments),
            tos=tos,
            tos_cmsgs=() if tos == self.rank_sockets.tos_data else (tos_cmsg(tos),),
            xdp=None if xdp is None else xdp.flow(rank.spec.address, dst_address, sport),
            entropy=entropy,
        )
        return conn

    def open_ahead(self, queue_pairs: Sequence[QueuePairAhead]) -> None:
        """Open the send queue pairs the plan will use, before the clock starts (their flows
        come later, from the coordinator)."""
        for conn_id, src, dst, qp_index, sport, profile in queue_pairs:
            if conn_id + 1 not in self.send_conns:
                self.open(conn_id, src, dst, qp_index, sport, profile).ahead = True
                self.counters["queue_pairs_opened_ahead"] += 1

    def start(self, now: float) -> None:
        """The run starts: every flow with nothing to wait for is ready."""
        for f in self.flows.values():
            if self.waiting.get(f.id) == 0:
                self._ready(f, now)

    def post_delayed(self, now: float) -> None:
        """Post the flows whose start delay is over by `now`."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, fid = heapq.heappop(delayed)
            self._post(self.flows[fid], now)

    def _profile(
        self, profile: int, qp_index: int, line_rate_bps: float
    ) -> tuple[TransportParams, float, int]:
        """The transport parameters, starting (and highest) rate and data DSCP of a new QP."""
        t = self.transport
        if profile == 0:
            return t, line_rate_bps, t.data_dscp(qp_index)
        p = self.profiles[profile]
        changes: dict[str, Any] = {}
        if p.congestion_control is not None:
            changes["congestion_control"] = p.congestion_control
        if p.path_mtu_bytes is not None:
            changes["path_mtu_bytes"] = p.path_mtu_bytes
        params = self._profile_params.get(profile)
        if params is None:
            params = self._profile_params[profile] = dataclasses.replace(t, **changes)
        rate = min(line_rate_bps, p.max_rate_bps or line_rate_bps)
        return params, rate, t.data_dscp(qp_index) if p.dscp is None else p.dscp

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
            conn.snapshot = (
                qp.packets_sent,
                qp.packets_retransmitted,
                conn.cnps_received,
                qp.pacing_lost_s + conn.nic_lost_s,
            )
        qp.post_send(now=now, message_id=flow.id, size_bytes=flow.bytes, tag=flow.tag)
        conn.ordinals[flow.id] = conn.next_ordinal
        conn.next_ordinal += 1
        self.active[qpn] = conn
        self.out.append(("started", flow.id, now))

    def deps_done(self, flow_ids: Sequence[int], now: float) -> None:
        """Flows done (here or in another worker): the flows waiting only for them are ready."""
        for fid in flow_ids:
            if fid in self.done_flows:
                continue
            self.done_flows.add(fid)
            for child in self.dependents.pop(fid, ()):
                self.waiting[child] -= 1
                if self.waiting[child] == 0:
                    self._ready(self.flows[child], now)
