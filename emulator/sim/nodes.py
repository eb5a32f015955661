"""Hosts that run the transport core, and switches that forward by destination with ECMP."""

from __future__ import annotations

import math
import struct
import zlib
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from emulator.sim.engine import Simulator
from emulator.sim.port import Frame, Port
from emulator.transport.entropy import entropy_sport
from emulator.transport.events import TransportEvent
from emulator.transport.grant import TIMER_SLACK_S
from emulator.transport.packets import (
    IPV4_HEADER_BYTES,
    ROCEV2_UDP_PORT,
    UDP_HEADER_BYTES,
    CnpPacket,
    DataPacket,
    Packet,
)
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair
from emulator.transport.stream import StreamDatagram, StreamSink, StreamSource
from emulator.transport.wire import (
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    FlowAddress,
    MalformedPacket,
    ipv4_packet,
    ipv4_udp_packet,
    parse_ipv4_packet,
)

if TYPE_CHECKING:
    from emulator.sim.native_sqp import SendOffload

_FLOW_KEY = struct.Struct("!16s16sHI")


class Switch:
    """Forwards frames to the output port toward their destination host; with several equal-cost
    ports, picks one by a hash of (source, destination, UDP source port) so a flow stays on one
    path and different source ports spread (as fib_multipath_hash_policy=1 does in Linux)."""

    def __init__(self, name: str, *, seed: int = 0) -> None:
        self.name = name
        self.routes: dict[str, list[Port]] = {}
        self._seed = seed & 0xFFFFFFFF

    def receive(self, frame: Frame, port: Port) -> None:
        ports = self.routes[frame.dst]
        if len(ports) == 1:
            ports[0].send(frame)
            return
        key = _FLOW_KEY.pack(frame.src.encode(), frame.dst.encode(), frame.sport, self._seed)
        ports[zlib.crc32(key) % len(ports)].send(frame)


class Host:
    """A NIC running the transport: pulls paced packets from its send QPs whenever its link is
    idle (round robin among QPs whose pacing time has come), answers data with ACK/NAK/CNP, and
    runs each QP's timers. With `wire_bytes` every packet is encoded to real IPv4/RoCEv2 bytes
    (ICRC for the IP id it carries) and parsed and ICRC-checked on arrival."""

    def __init__(
        self,
        sim: Simulator,
        name: str,
        address: str,
        *,
        wire_bytes: bool = False,
        events: list[TransportEvent] | None = None,
        dscp: int = 26,
        ack_dscp: int = 26,
        cnp_dscp: int = 48,
        ecn_bits: tuple[int, int, int] = (ECN_ECT0, ECN_NOT_ECT, ECN_NOT_ECT),
        priority_dscps: frozenset[int] = frozenset({48}),
    ) -> None:
        from emulator.transport.endpoint import RoceEndpoint

        self.sim = sim
        self.name = name
        self.address = address
        self.wire_bytes = wire_bytes
        self._dscp = (dscp, ack_dscp, cnp_dscp)  # data, ACK and NAK, CNP
        self._ecn = ecn_bits  # the same three kinds (transport.data_ecn, ack_ecn, cnp_ecn)
        # metrics.capture (with wire_bytes): (time, first snap bytes, length) of each packet
        # handed to the NIC or arriving, up to capture_limit
        self.capture: list[tuple[float, bytes, int]] | None = None
        self.capture_limit = 0
        self.capture_snap = 0
        # which of them the ports serve in strict priority (fabric.priority_dscps)
        self._priority = tuple(d in priority_dscps for d in self._dscp)
        self.events: list[TransportEvent] = events if events is not None else []
        self.endpoint = RoceEndpoint(self.events)
        self.nic: Port | None = None
        self._active: deque[SendQueuePair] = deque()  # QPs with work, in round-robin order
        self._active_set: set[int] = set()
        # qpn -> (peer host, peer address, UDP source port, ECMP hash, tag)
        self._qp_route: dict[int, tuple[str, str, int, int, int]] = {}
        self._rx_route: dict[int, tuple[str, str, int, int, int]] = {}
        # per-packet entropy (transport.entropy): qpn -> (values, ECMP hash of a source port,
        # the hashes so far by port)
        self._qp_entropy: dict[int, tuple[int, Callable[[int], int], dict[int, int]]] = {}
        self._wakeup_at = math.inf
        self._timer_at: dict[int, float] = {}
        self._ip_id = 0
        # attribution: message (flow) id -> its tag (collective instance); frames carry both
        self.message_tags: dict[int, int] = {}
        self.bad_icrc = 0
        self.peers: dict[str, Host] = {}
        # the scenario's streams (emulator.transport.stream): sent from here, counted here
        self.stream_sink: StreamSink | None = None
        # the C fabric's offer to take a receive QP's common path (emulator/sim/native_rqp.py)
        self.receive_offload: Callable[[ReceiveQueuePair], bool] | None = None
        # the C fabric's NIC arbiter for this host, and its number there (native_sqp.py): the
        # round robin below then runs in C, which sends what each QP's grant allows
        self.send_offload: SendOffload | None = None
        self.arbiter = -1

    def attach(self, nic: Port) -> None:
        self.nic = nic
        nic.on_idle = self._pull

    # -- set-up --------------------------------------------------------------------------
    def add_sender(
        self,
        qp: SendQueuePair,
        *,
        dst: Host,
        sport: int,
        mhash: int = 0,
        tag: int = -1,
        entropy: tuple[int, Callable[[int], int]] | None = None,
    ) -> None:
        """`entropy`: (values, the ECMP hash of a source port) for a queue pair whose packets
        each carry one of `values` source ports (emulator.transport.entropy)."""
        self.endpoint.add_sender(qp)
        self._qp_route[qp.qpn] = (dst.name, dst.address, sport, mhash, tag)
        if entropy is not None:
            self._qp_entropy[qp.qpn] = (entropy[0], entropy[1], {sport: mhash})
        self.peers[dst.name] = dst

    def add_receiver(
        self, qp: ReceiveQueuePair, *, src: Host, sport: int, mhash: int = 0, tag: int = -1
    ) -> None:
        self.endpoint.add_receiver(qp)
        self._rx_route[qp.qpn] = (src.name, src.address, sport, mhash, tag)
        offload = self.receive_offload
        # not with wire bytes (decoded here) or a sender of the same number (woken per packet)
        if offload is not None and not self.wire_bytes and qp.qpn not in self.endpoint.senders:
            offload(qp)

    def settle(self, qp: SendQueuePair) -> None:
        """Bring `qp` up to date before reading it: a NIC arbiter in C may have sent packets
        of its grant that it has not folded in yet (native_sqp.py)."""
        tx = self.send_offload
        if tx is not None:
            tx.settle(qp)

    def post(
        self, qp: SendQueuePair, *, message_id: int, size_bytes: int, payload: bytes | None = None
    ) -> None:
        tx = self.send_offload
        if tx is not None:
            tx.revoke(qp)
        qp.post_send(
            now=self.sim.now, message_id=message_id, size_bytes=size_bytes, payload=payload
        )
        self._activate(qp)
        if tx is not None:
            tx.grant(self, qp)
        self._kick()

    # -- transmit ------------------------------------------------------------------------
    def _kick(self) -> None:
        nic = self.nic
        if nic is not None and not nic.busy:
            tx = self.send_offload
            if tx is None:
                self._pull()
            else:
                tx.pull(self)  # in C, or back here when C cannot decide

    def _pull(self) -> None:
        """The NIC is idle: send the next eligible data packet, or sleep until one is due (a
        NIC its switch paused sends no data; the resume calls this again).

        Round robin over the QPs that have work (`_active`, in turn order): one that sends goes
        to the back; one with nothing to send (blocked on ACKs or done) leaves until a post, an
        ACK or a timer gives it work again (_activate), so idle QPs cost nothing here."""
        nic = self.nic
        if nic is not None and nic.paused:
            return
        tx = self.send_offload
        if tx is None:
            self._round_robin(None)
            return
        tx.load_ring(self)  # the C arbiter's ring, to go round here this once
        try:
            self._round_robin(tx)
        finally:
            tx.store_ring(self)

    def _round_robin(self, tx: SendOffload | None) -> None:
        now = self.sim.now
        active = self._active
        earliest = math.inf
        for _ in range(len(active)):
            qp = active.popleft()
            due = qp.next_transmit_s()
            if due is None:
                self._active_set.discard(qp.qpn)
                continue
            if due <= now + 1e-12:
                if tx is not None:
                    tx.revoke(qp)
                packet = qp.poll_transmit(now=now)
                if tx is not None and packet is None:
                    tx.grant(self, qp)
                if packet is not None:
                    active.append(qp)
                    self._transmit_data(qp, packet)
                    self._arm_timer(qp)
                    if tx is not None:
                        tx.grant(self, qp)
                    return
                due = qp.next_transmit_s()
                if due is None:
                    self._active_set.discard(qp.qpn)
                    continue
            active.append(qp)
            if due < earliest:
                earliest = due
        if earliest < self._wakeup_at:
            self._wakeup_at = earliest
            if tx is None:
                self.sim.at(earliest, self._wakeup)
            else:
                tx.wake(self, earliest)

    def _activate(self, qp: SendQueuePair) -> None:
        tx = self.send_offload
        if tx is not None:
            tx.activate(self, qp)
        elif qp.qpn not in self._active_set and qp.next_transmit_s() is not None:
            self._active_set.add(qp.qpn)
            self._active.append(qp)

    def _wakeup(self) -> None:
        if self.sim.now + 1e-12 < self._wakeup_at:
            return  # superseded by an earlier wake-up that already ran
        self._wakeup_at = math.inf
        self._kick()

    def _frame(
        self,
        packet: Packet,
        route: tuple[str, str, int, int, int],
        *,
        data: bool,
        flow: int = -1,
        tag: int | None = None,
    ) -> Frame:
        dst, dst_addr, sport, mhash, route_tag = route
        if tag is None:
            tag = route_tag
        size = packet.udp_payload_bytes + IPV4_FRAME_OVERHEAD_BYTES
        kind = 0 if data else 2 if type(packet) is CnpPacket else 1
        ecn = self._ecn[kind]
        body: Packet | bytes = packet
        if self.wire_bytes:
            self._ip_id = (self._ip_id + 1) & 0xFFFF
            address = FlowAddress(self.address, dst_addr, sport, dscp=self._dscp[kind], ecn=ecn)
            body = ipv4_packet(packet, address, ip_id=self._ip_id)
            if self.capture is not None:
                self._captured(body)
        priority = self._priority[kind]
        return Frame(
            self.name,
            dst,
            sport,
            size,
            ecn,
            body,
            not data,
            mhash,
            tag,
            priority=priority,
            flow=flow,
        )

    def _captured(self, packet: bytes) -> None:
        capture = self.capture
        if capture is not None and len(capture) < self.capture_limit:
            capture.append((self.sim.now, packet[: self.capture_snap], len(packet)))

    def _transmit_data(self, qp: SendQueuePair, packet: DataPacket) -> None:
        assert self.nic is not None
        flow = qp.message_id_sent
        tag = self.message_tags.get(flow)
        route = self._qp_route[qp.qpn]
        entropy = self._qp_entropy.get(qp.qpn) if self._qp_entropy else None
        if entropy is not None:
            values, hash_of, hashes = entropy
            sport = entropy_sport(route[2], packet.psn, values)
            mhash = hashes.get(sport)
            if mhash is None:
                mhash = hashes[sport] = hash_of(sport)
            route = (route[0], route[1], sport, mhash, route[4])
        self.nic.send(self._frame(packet, route, data=True, flow=flow, tag=tag))

    # -- streams -------------------------------------------------------------------------
    def add_stream(
        self, source: StreamSource, *, dst: Host, dport: int, dscp: int, ecn: int, priority: bool
    ) -> None:
        """Send `source`'s datagrams to `dst` on their schedule (a stream's frames queue at the
        NIC like the transport's answers: nothing paces them but their own schedule)."""
        due = source.next_due_s()
        if due is not None:
            self.sim.at(due, self._stream_due, source, dst, dport, dscp, ecn, priority)

    def _stream_due(
        self, source: StreamSource, dst: Host, dport: int, dscp: int, ecn: int, priority: bool
    ) -> None:
        nic = self.nic
        assert nic is not None
        size = source.payload_bytes + IPV4_FRAME_OVERHEAD_BYTES
        if not nic.lossless and nic.queued_bytes + size > nic.buffer_bytes:
            # the NIC's queue is full (its link paused, or slower than the stream): a NIC holds
            # its generator rather than drop its own frames; the frame leaves late, and counts so
            self.sim.at(
                self.sim.now + size * 8 / nic.rate_bps,
                self._stream_due,
                source,
                dst,
                dport,
                dscp,
                ecn,
                priority,
            )
            return
        for sport, head in source.poll(self.sim.now, limit=1):
            body: StreamDatagram | bytes = StreamDatagram(head, source.payload_bytes)
            if self.wire_bytes:
                self._ip_id = (self._ip_id + 1) & 0xFFFF
                address = FlowAddress(self.address, dst.address, sport, dport, dscp=dscp, ecn=ecn)
                payload = head + bytes(source.payload_bytes - len(head))
                body = ipv4_udp_packet(address, payload, ip_id=self._ip_id)
                if self.capture is not None:
                    self._captured(body)
            nic.send(
                Frame(self.name, dst.name, sport, size, ecn, body, priority=priority, dport=dport)
            )
        self.add_stream(source, dst=dst, dport=dport, dscp=dscp, ecn=ecn, priority=priority)

    def _stream_received(self, frame: Frame, body: StreamDatagram | bytes) -> None:
        sink = self.stream_sink
        if isinstance(body, StreamDatagram):
            if sink is not None:
                sink.on_datagram(self.sim.now, body.head, frame.ecn, body.payload_bytes)
            else:
                self.endpoint.drops["malformed"] += 1
            return
        payload = body[IPV4_HEADER_BYTES + UDP_HEADER_BYTES :]
        if sink is None:
            self.endpoint.drops["malformed"] += 1
            return
        sink.on_datagram(self.sim.now, payload, body[1] & 3)

    # -- receive -------------------------------------------------------------------------
    def receive(self, frame: Frame, port: Port) -> None:
        now = self.sim.now
        endpoint = self.endpoint
        if frame.dport != ROCEV2_UDP_PORT:
            stream = cast("StreamDatagram | bytes", frame.packet)
            if self.capture is not None and isinstance(stream, bytes):
                self._captured(stream)
            self._stream_received(frame, stream)
            return
        body = cast("Packet | bytes", frame.packet)
        if isinstance(body, bytes):
            if self.capture is not None:
                self._captured(body)
            try:
                datagram = parse_ipv4_packet(body)
            except MalformedPacket:
                endpoint.drops["malformed"] += 1
                return
            if not datagram.icrc_ok:
                self.bad_icrc += 1
                endpoint.drops["bad_icrc"] += 1
                return
            self._revoke_for(body)
            replies = endpoint.on_datagram(
                now=now, data=datagram.udp_payload, ce=datagram.ecn == ECN_CE
            )
        else:
            self._revoke_for(body)
            replies = endpoint.on_packet(now=now, packet=body, ce=frame.ecn == ECN_CE)
        local_qpn = _dest_qp(body)
        if replies:
            assert self.nic is not None
            route = self._rx_route.get(local_qpn) or (
                frame.src,
                "0.0.0.0",
                frame.sport,
                frame.mhash,
                frame.tag,
            )
            for reply in replies:
                # an ACK, NAK or CNP is the traffic of the data it answers
                self.nic.send(self._frame(reply, route, data=False, flow=frame.flow, tag=frame.tag))
        sender = endpoint.senders.get(local_qpn)
        if sender is not None:
            self._activate(sender)
            self._arm_timer(sender)
            tx = self.send_offload
            if tx is not None:
                tx.grant(self, sender)
            self._kick()

    def _revoke_for(self, body: Packet | bytes) -> None:
        """Before the endpoint takes a packet: the C arbiter sends no more of the grant of the
        sender it may change (an ACK, NAK, SACK or CNP for it)."""
        tx = self.send_offload
        if tx is not None:
            sender = self.endpoint.senders.get(_dest_qp(body))
            if sender is not None:
                tx.revoke(sender)

    # -- timers --------------------------------------------------------------------------
    def _arm_timer(self, qp: SendQueuePair) -> None:
        deadline = qp.next_timer_s()
        if deadline is None:
            return
        scheduled = self._timer_at.get(qp.qpn, math.inf)
        if deadline < scheduled - TIMER_SLACK_S:
            self._timer_at[qp.qpn] = deadline
            tx = self.send_offload
            if tx is None:
                self.sim.at(deadline, self._timer, qp)
            else:
                tx.arm(self, qp, deadline)  # in C, which runs it only when not stale

    def _timer(self, qp: SendQueuePair) -> None:
        now = self.sim.now
        scheduled = self._timer_at.get(qp.qpn, math.inf)
        if now + 1e-12 < scheduled:
            return  # a stale timer: an earlier one replaced it
        tx = self.send_offload
        if tx is not None:
            tx.revoke(qp)  # its grant counted on this timer staying armed
        self._timer_at[qp.qpn] = math.inf
        if tx is not None:
            tx.disarm(qp)
        deadline = qp.next_timer_s()
        fired = deadline is not None and deadline <= now + 1e-12
        if fired:
            qp.on_timer(now=now)
            self._activate(qp)
        # armed and granted again before the NIC is kicked, as after a packet (receive): a
        # kick while it is revoked hands the C arbiter's whole pull to Python
        self._arm_timer(qp)
        if tx is not None:
            tx.grant(self, qp)
        if fired:
            self._kick()

    def drop_counts(self) -> Counter[str]:
        return self.endpoint.drop_counts()


def _dest_qp(body: Packet | bytes) -> int:
    """The destination QP a frame's BTH names (-1 when too short to say)."""
    if isinstance(body, bytes):
        at = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + 5  # BTH bytes 5..7
        return int.from_bytes(body[at : at + 3], "big") if len(body) >= at + 3 else -1
    return body.dest_qp
