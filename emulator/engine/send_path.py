"""The send side of a worker: what the queue pairs' pacers release goes onto the wire as GSO
batches, each NIC's queue pairs served in turn within its line rate; the ACKs and CNPs a read
produces go back the same way.

A send that fails because a buffer is full or the path is down loses its packets as a congested
or dead wire would (counted; the transport recovers them); anything else is fatal
(emulator/engine/send_errors.py). A queue pair with an AF_XDP flow (engine.send_path af_xdp)
sends through its rank's port instead (emulator/engine/xdp_path.py), with the same bytes and
counters.
"""

from __future__ import annotations

import bisect
import os
import socket
import time
from collections import Counter
from collections.abc import Sequence

from emulator.engine.active import ActiveQueuePairs, NicQueuePairs
from emulator.engine.counters import CountClass
from emulator.engine.native_path import NATIVE_BUFFERS_PER_POLL, DataPath
from emulator.engine.nicpacer import NicPacer
from emulator.engine.pacing import GSO_MAX_BUFFER_BYTES
from emulator.engine.params import EngineParams
from emulator.engine.ranks import Rank, RecvConn, SendConn
from emulator.engine.send_errors import SendFailures
from emulator.engine.sockets import Offloads, gso_cmsg, tos_cmsg
from emulator.engine.xdp_path import XdpSender
from emulator.native.acks import NativeAckFlow
from emulator.native.burst import NativeFlow
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.packets import (
    AETH_BYTES,
    BTH_BYTES,
    ICRC_BYTES,
    AckPacket,
    CnpPacket,
    Packet,
)
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair
from emulator.transport.wire import encode, layout_gso

# what a full packet carries besides its payload: BTH, ICRC, IPv4/UDP and Ethernet framing
_HEADROOM_BYTES = BTH_BYTES + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES


def _due_by(qp: SendQueuePair, now: float) -> bool:
    due = qp.next_transmit_s()
    return due is not None and due <= now


class SendPath:
    """Sending: the tick's bursts and the replies to what was read. Serves `active` (the send
    queue pairs with something posted, which the flows add to) and looks the receive queue
    pairs up in `recv_conns` for replies. Given the buffers the bursts and ACKs are laid out
    in, the data path (native or Python), the AF_XDP sender, the policy for refused sends, and
    the named counters and per-class tally it counts into."""

    def __init__(
        self,
        params: EngineParams,
        offloads: Offloads,
        counters: Counter[str],
        count_class: CountClass,
        failures: SendFailures,
        xdp: XdpSender,
        data_path: DataPath,
        send_buffer: BurstBuffer,
        reply_buffer: bytearray,
        active: ActiveQueuePairs,
        recv_conns: dict[int, RecvConn],
        *,
        tos_ack: int,
        tos_cnp: int,
        max_packet_wire_bytes: int,
    ) -> None:
        self.params = params
        self.offloads = offloads
        self.counters = counters
        self._count_class = count_class
        self._send_failed = failures.failed
        self._xdp_budget = xdp.budget
        self._send_burst_xdp = xdp.send_burst
        self._send_replies_xdp = xdp.send_replies
        self.active = active
        self.recv_conns = recv_conns
        self.latency = params.one_way_latency  # departure stamps in the data
        self.gso_view = memoryview(send_buffer.data)
        self.reply_buf = reply_buffer
        self.tos_ack = tos_ack
        self.tos_cnp = tos_cnp
        self._burst_s = params.burst_ticks * params.tick_s / params.tdf
        self._max_packet_wire_bytes = max_packet_wire_bytes
        # the quantum in packets of the path MTU's payload
        payload = max(1, max_packet_wire_bytes - _HEADROOM_BYTES)
        self._quantum_packets = max(1, params.nic_quantum_bytes // payload)
        self._gso_cmsgs: dict[tuple[int, int], list[tuple[int, int, bytes]]] = {}
        # the native burst path (emulator/engine/native_path.py; None: the Python path) and its
        # per-flow state
        self.native = data_path.bursts
        self._native_flows: dict[SendConn, NativeFlow] = {}
        # GSO buffers a lone queue pair takes per poll (native: several)
        self._buffers_per_poll = 1 if self.native is None else NATIVE_BUFFERS_PER_POLL
        self.native_replies = data_path.replies  # ACKs laid out and sent in C (native path)
        self._native_ack_flows: dict[RecvConn, NativeAckFlow] = {}

    def pump(self, now: float, late_s: float = 0.0, read_nic: NicPacer | None = None) -> None:
        """Send what every active queue pair's pacer released by `now`, within its NIC's rate;
        after a read on one rank's socket (`read_nic`: its NIC) only the NICs that read can
        have given work to (ActiveQueuePairs.nics_after_read)."""
        # A token bucket of depth burst_s (+ how late this tick is): enough for a tick that
        # fires late without losing rate, never a catch-up burst after idling or a stall.
        floor = now - self._burst_s - late_s
        max_segments = self.params.gso_max_segments if self.offloads.gso else 64
        if read_nic is None:
            groups = self.active.nics()
            self.active.served_all()
        else:
            groups = self.active.nics_after_read(read_nic)
        for group in groups:
            self._serve_nic(group, now, floor, max_segments)
        self.active.sweep_idle()

    def _serve_nic(self, group: NicQueuePairs, now: float, floor: float, max_segments: int) -> None:
        """A NIC's transmit arbiter: its queue pairs in turn, one GSO burst each per round,
        until none has a packet due or the NIC's line-rate budget is spent (each queue pair
        paces itself at its own rate; together they must not exceed the NIC's)."""
        nic = group.nic
        qpns, by_qpn = group.qpns, group.conns
        # Round robin that resumes where the last tick stopped, in QP-number order: a turn
        # counted by ticks modulo the number of active queue pairs favoured some of them
        # whenever others came and went (1:5 between equal ones in a unit test).
        # Only those with a packet due take a turn (poll_burst hands the others nothing): 1,024
        # queue pairs behind one NIC, most waiting for ACKs, each worked out a turn after every
        # read (tests/system/test_switch_scale.py). The first round's shares still divide the
        # budget among all of them, as before.
        due = [qpn for qpn in qpns if by_qpn[qpn].qp.due_to_send(now)]
        if not due:
            # what a serve with no turn changes (half the serves after reads at TDF 4600):
            # the credit a backlogged NIC lost, and it is no longer backlogged
            nic.start_tick(floor)
            nic.backlogged = False
            return
        start = bisect.bisect_right(due, nic.last_served_qpn)
        order = [(qpn, by_qpn[qpn]) for qpn in (*due[start:], *due[:start])]
        conns = order
        packet_wire = self._max_packet_wire_bytes
        lost = nic.lost_wire_bytes
        nic.start_tick(floor)
        if nic.lost_wire_bytes > lost:
            # the NIC could have been sending that long: each queue pair waiting on it waited
            lost_s = (nic.lost_wire_bytes - lost) * 8 / nic.line_rate_bps
            for _, conn in conns:
                if _due_by(conn.qp, now):
                    conn.nic_lost_s += lost_s
        # a NIC that was line-rate bound accounts the lost credit itself, not its queue pairs
        count_lost = not nic.backlogged
        xdp = by_qpn[qpns[0]].rank.xdp  # an AF_XDP port takes no more than its backlog holds
        # turns of the arbiter's quantum on the socket path; a port's backlog bounds its own
        quantum = self._quantum_packets if xdp is None else 1
        quantum_bits = packet_wire * 8
        budget = nic.budget_bytes(now, floor)
        if xdp is not None:
            budget = self._xdp_budget(xdp, budget)
        in_round = len(qpns)
        while order and budget >= 0:
            waiting = []
            # Each queue pair's share of this round's budget (at least a packet), as a NIC's
            # arbiter serves its queues packet by packet: whole-budget bursts to whoever is
            # first in turn would make equal flows finish far apart.
            # A turn is at least the arbiter's quantum (params.nic_quantum_bytes): the NIC
            # may then owe up to a quantum, which its next ticks' budget pays back.
            share = max(quantum, (1 + budget // packet_wire) // in_round)
            # One queue pair left in the round takes its next GSO buffers in a row anyway: on
            # the native path it takes several in one poll, sent in one call (the same
            # packets; the Python layer's cost per buffer divided by their number).
            buffers = self._buffers_per_poll if in_round == 1 else 1
            for qpn, conn in order:
                qp_floor = floor
                if quantum > 1:
                    # a queue pair's credit holds at least a turn: its bucket (burst_ticks of
                    # wall time) holds fewer packets the higher the TDF, and a turn cut by it
                    # made the runs, the marks and the busbw move with the factor (a small job's
                    # All-Reduce 3.1-3.3 GB/s at TDF 4000, 3.5 at 2000)
                    qp_floor = min(floor, now - quantum * quantum_bits / conn.qp.cc.rate_bps)
                burst = conn.qp.poll_burst(
                    now=now,
                    floor_s=qp_floor,
                    max_packets=min(
                        max_segments * buffers, share, max(quantum, 1 + budget // packet_wire)
                    ),
                    max_bytes=GSO_MAX_BUFFER_BYTES,
                    count_lost=count_lost,
                    buffers=buffers,
                )
                if burst is None:
                    continue
                used = self._send_burst(conn, burst)
                nic.consume(floor, used + burst.count * IPV4_FRAME_OVERHEAD_BYTES)
                nic.last_served_qpn = qpn
                budget = nic.budget_bytes(now, floor)
                if xdp is not None:
                    budget = self._xdp_budget(xdp, budget)
                waiting.append((qpn, conn))
                if budget < 0:
                    break
            order = waiting
            in_round = len(order)
        # Line-rate bound only if a queue pair still has a packet due: a NIC whose budget is
        # spent by its queue pairs' last packets is not behind while they wait for ACKs or go
        # idle, and must not count the time until its next message as lost credit.
        nic.backlogged = budget < 0 and any(_due_by(conn.qp, now) for _, conn in conns)

    def _send_burst(self, conn: SendConn, burst: Burst) -> int:
        """One GSO send of the burst's segments (one send per segment without GSO); returns
        the UDP payload bytes handed to the kernel."""
        if conn.xdp is not None:
            return self._send_burst_xdp(conn, burst)
        if conn.entropy is not None:
            return self._send_burst_entropy(conn, burst)
        if self.native is not None:
            return self._send_burst_native(conn, burst)
        sock = conn.sock
        assert sock is not None
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
            self._sendmsg(sock, [view[:used]], conn.tos_cmsgs, conn.dest, conn.rank)
        elif gso:
            segment = burst.segment_bytes
            cmsg = self._gso_cmsgs.get((segment, conn.tos))
            if cmsg is None:
                cmsg = self._gso_cmsgs[(segment, conn.tos)] = [gso_cmsg(segment), *conn.tos_cmsgs]
            buffers = [view[:used]]
            try:
                sock.sendmsg(buffers, cmsg, 0, conn.dest)  # _sendmsg, inlined
            except OSError as e:
                self._send_failed(e, buffers, conn.dest, conn.rank)
            else:
                self.counters["gso_sends"] += 1  # sends the kernel took
        else:
            segment = burst.segment_bytes
            for at in range(0, used, segment):
                end = min(at + segment, used)
                self._sendmsg(sock, [view[at:end]], conn.tos_cmsgs, conn.dest, conn.rank)
        self.counters["data_packets_sent"] += count
        self._count_class(conn.tos, count, used, sent=True)
        return used

    def _send_burst_entropy(self, conn: SendConn, burst: Burst) -> int:
        """_send_burst for a queue pair with per-packet source ports: each segment a datagram
        of its own from its port's socket, its ICRC for that port (emulator.engine.entropy_ports)."""
        ports = conn.entropy
        assert ports is not None
        view = self.gso_view
        spacing = 0
        departed = 0
        if self.latency:
            spacing = int((burst.segment_bytes + IPV4_FRAME_OVERHEAD_BYTES) * conn.rank.ns_per_byte)
            departed = time.time_ns()
        total = 0
        for i, one in enumerate(burst.split()):
            sock, writer = ports.port(one.psn)
            if self.latency:
                used = writer.write(one, gso=False, departed_ns=departed + i * spacing)
            else:
                used = writer.write(one, gso=False)
            self._sendmsg(sock, [view[:used]], conn.tos_cmsgs, conn.dest, conn.rank)
            total += used
        count = burst.count
        self.counters["data_packets_sent"] += count
        self._count_class(conn.tos, count, total, sent=True)
        return total

    def _send_burst_native(self, conn: SendConn, burst: Burst) -> int:
        """_send_burst on the native path: the same bytes, counters and error handling, the
        layout and the sends in C (one call for a burst of full-size segments). A burst of
        more segments than one GSO buffer holds (see _serve_nic) leaves as several GSO
        buffers in one sendmmsg, each counted as its own send."""
        flow = self._native_flows.get(conn)
        if flow is None:
            assert self.native is not None
            tos = conn.tos if conn.tos_cmsgs else -1  # a cmsg only where the socket's differs
            flow = self._native_flows[conn] = self.native.flow(
                conn.writer, conn.sock, conn.dest, tos
            )
        count = burst.count
        segment = burst.segment_bytes
        if self.latency:
            # a burst's packets leave back to back at the rank's line rate (dilated)
            departed = time.time_ns()
            spacing = int((segment + IPV4_FRAME_OVERHEAD_BYTES) * conn.rank.ns_per_byte)
        else:
            departed = spacing = 0
        if self.offloads.gso:
            # segments per GSO buffer: the kernel's limit and 64 KB (IP ids restart in each)
            per_buffer = min(self.params.gso_max_segments, GSO_MAX_BUFFER_BYTES // segment or 1)
            if burst.packets is None and burst.last_payload_bytes == burst.payload_bytes:
                used = count * segment
                buffers = flow.layout_send(burst, departed, spacing, per_buffer)
            else:
                used = flow.write(
                    burst, departed_ns=departed, spacing_ns=spacing, ids_every=per_buffer
                )
                buffers = flow.send(used, segment, per_buffer)
            if buffers < 0:
                raise ValueError(f"emulator.native refused a {count}-segment burst ({buffers})")
            results = flow.results
            buffer_bytes = per_buffer * segment
            for b in range(buffers):
                sent = results[b]
                size = min(buffer_bytes, used - b * buffer_bytes)
                if sent < 0:
                    self._native_send_failed(-sent, size, conn)
                elif size > segment:
                    self.counters["gso_sends"] += 1  # sends the kernel took
        elif count == 1:
            used = flow.write(burst, gso=False, departed_ns=departed, spacing_ns=spacing)
            sent = flow.send_datagram(used)
            if sent < 0:
                self._native_send_failed(-sent, used, conn)
        else:
            # one send per segment (no GSO here): the Python path's sends
            used = flow.write(burst, gso=False, departed_ns=departed, spacing_ns=spacing)
            view = self.gso_view
            assert conn.sock is not None
            for at in range(0, used, segment):
                end = min(at + segment, used)
                self._sendmsg(conn.sock, [view[at:end]], conn.tos_cmsgs, conn.dest, conn.rank)
        self.counters["data_packets_sent"] += count
        self._count_class(conn.tos, count, used, sent=True)
        return used

    def _native_send_failed(self, error: int, size_bytes: int, conn: SendConn) -> None:
        """A native send the kernel refused with errno `error`: as a refused Python send."""
        failure = OSError(error, os.strerror(error))  # the errno's subclass, as Python raises
        self._send_failed(failure, [self.gso_view[:size_bytes]], conn.dest, conn.rank)

    def _sendmsg(
        self,
        sock: socket.socket,
        buffers: list[bytes] | list[memoryview],
        ancillary: Sequence[tuple[int, int, bytes]],
        dest: tuple[str, int],
        rank: Rank,
    ) -> None:
        try:
            sock.sendmsg(buffers, ancillary, 0, dest)
        except OSError as e:
            self._send_failed(e, buffers, dest, rank)

    def send_replies(self, replies: list[Packet]) -> None:
        """What one read produced (ACKs, NAKs, CNPs), each to its receive queue pair's peer."""
        i = 0
        total = len(replies)
        while i < total:
            packet = replies[i]
            conn = self.recv_conns.get(packet.dest_qp)
            if conn is None:
                i += 1
                continue
            j = i + 1
            if type(packet) is AckPacket and (self.offloads.gso or conn.xdp is not None):
                # the ACKs of one read to one QP leave as one GSO send (IP ids 0, 1, ...)
                limit = min(total, i + self.params.gso_max_segments)
                while (
                    j < limit
                    and type(replies[j]) is AckPacket
                    and replies[j].dest_qp == packet.dest_qp
                ):
                    j += 1
            if conn.xdp is not None:
                self._send_replies_xdp(conn, replies[i:j])
            elif type(packet) is AckPacket and self.native_replies is not None:
                self._send_acks_native(conn, replies[i:j])  # type: ignore[arg-type]
            elif conn.sock is None:
                raise AssertionError("a receive queue pair with neither a socket nor a port")
            elif j - i > 1:
                used, segment = layout_gso(self.reply_buf, replies[i:j], conn.icrc, ip_id_first=0)
                self._sendmsg(
                    conn.sock,
                    [memoryview(self.reply_buf)[:used]],
                    (gso_cmsg(segment), tos_cmsg(self.tos_ack)),
                    conn.dest,
                    conn.rank,
                )
                self._count_class(self.tos_ack, j - i, used, sent=True)
            else:
                data = encode(packet, conn.icrc, 0)
                tos = self.tos_cnp if type(packet) is CnpPacket else self.tos_ack
                self._sendmsg(conn.sock, [data], (tos_cmsg(tos),), conn.dest, conn.rank)
                self._count_class(tos, 1, len(data), sent=True)
            i = j

    def _send_acks_native(self, conn: RecvConn, acks: list[AckPacket]) -> None:
        """ACKs to one QP on the native path: the bytes, send and counters of the Python
        path's (one GSO send, or one datagram for one ACK), laid out and sent in C."""
        flow = self._native_ack_flows.get(conn)
        if flow is None:
            assert self.native_replies is not None
            flow = self._native_ack_flows[conn] = self.native_replies.flow(
                conn.icrc, conn.sock, conn.dest, self.tos_ack
            )
        sent = flow.send(acks)
        used = len(acks) * (BTH_BYTES + AETH_BYTES + ICRC_BYTES)
        if sent < 0:
            failure = OSError(-sent, os.strerror(-sent))
            self._send_failed(failure, [memoryview(self.reply_buf)[:used]], conn.dest, conn.rank)
        self._count_class(self.tos_ack, len(acks), used, sent=True)
