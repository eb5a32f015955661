"""The receive side of a worker: a rank's socket is readable, and what it reads goes to the queue
pairs.

A GRO read of data for one known QP goes to `ReceiveQueuePair.on_data_run` in one call, a read of
ACKs to `SendQueuePair.on_acks`; anything else (CE marks, gaps, NAKs, unknown QPs) goes packet by
packet through the codec. A receive queue pair opens when a QP's first packet arrives from one of
the run's ranks, so a receiver needs no plan. What the reads produce (replies, events, packets
the ACKs released) is handled before the callback returns.
"""

from __future__ import annotations

import errno
import os
import socket
from collections import Counter
from typing import TYPE_CHECKING

from emulator.engine.clock import DilatedClock
from emulator.engine.ranks import IP_UDP_BYTES, Rank, RecvConn, SendConn
from emulator.engine.sockets import ANCILLARY_BYTES, read_ancillary, segments
from emulator.native.reads import NativeRunReader
from emulator.transport.burst_wire import read_ack_run, read_data_run
from emulator.transport.events import TransportEvent
from emulator.transport.packets import RETH_OPCODES, ROCEV2_UDP_PORT, DataPacket, Opcode, Packet
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.wire import (
    ECN_CE,
    ECN_NOT_ECT,
    FlowAddress,
    IcrcContext,
    MalformedPacket,
    decode,
)

READS_PER_WAKEUP = 64  # bound the work of one readable callback so ticks keep their pace
_NOTHING_TO_READ = (-errno.EAGAIN, -errno.EWOULDBLOCK, -errno.EINTR)  # as recvmsg_into's


class ReceivePath:
    """Reading the rank sockets, as part of a Worker."""

    # the Worker's fields this part uses (set in Worker.__init__)
    transport: TransportParams
    clock: DilatedClock
    events: list[TransportEvent]
    counters: Counter[str]
    rank_addresses: frozenset[str]
    active: dict[int, SendConn]
    recv_conns: dict[int, RecvConn]
    buf: bytearray
    flush_now: bool
    run_reader: NativeRunReader | None = None  # read_data_run in C on the native path

    if TYPE_CHECKING:  # the other parts' methods it calls

        def _count_class(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None: ...

        def _observe(
            self,
            qpn: int,
            tos: int,
            data: bytearray | memoryview,
            nbytes: int,
            psn: int,
            rx_ns: int,
        ) -> None: ...

        def _send_replies(self, replies: list[Packet]) -> None: ...

        def _pump(self, now: float, late_s: float = 0.0) -> None: ...

        def _handle_events(self) -> None: ...

        def _flush(self, now: float) -> None: ...

        def _sport_socket(self, rank: Rank, sport: int) -> socket.socket: ...

    def _on_readable(self, rank: Rank) -> None:
        sock = rank.rx_sock
        buf = self.buf
        mv = memoryview(buf)
        now = self.clock.now()
        endpoint = rank.endpoint
        reader = self.run_reader
        fd = sock.fileno()
        got = False
        for _ in range(READS_PER_WAKEUP):
            if reader is not None:  # the native path: the same read in one C call
                nbytes, tos, gso_size, rx_ns, source = reader.recv(fd)
                if nbytes < 0:
                    if nbytes in _NOTHING_TO_READ:
                        break
                    raise OSError(-nbytes, os.strerror(-nbytes))
            else:
                try:
                    nbytes, anc, _flags, source = sock.recvmsg_into([buf], ANCILLARY_BYTES)
                except (BlockingIOError, InterruptedError):
                    break
                tos, gso_size, rx_ns = read_ancillary(anc)
            got = True
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
                if not nbytes:
                    run = None
                elif reader is not None:
                    run = reader.read(nbytes, gso_size)
                else:
                    run = read_data_run(buf, nbytes, gso_size)
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

    def _open_receiver(self, rank: Rank, qpn: int, source: tuple[str, int]) -> None:
        qp = ReceiveQueuePair(qpn=qpn, remote_qp=qpn, params=self.transport, events=self.events)
        peer, sport = source[0], source[1]
        rank.endpoint.add_receiver(qp, peer=(peer, sport))
        address = FlowAddress(
            rank.spec.address, peer, sport, dscp=self.transport.dscp, ecn=ECN_NOT_ECT
        )
        self.recv_conns[qpn] = RecvConn(
            qpn - 1,
            rank,
            qp,
            self._sport_socket(rank, sport),
            (peer, ROCEV2_UDP_PORT),
            IcrcContext(address),
        )
