"""The receive side of a worker: a rank's socket is readable, and what it reads goes to the queue
pairs.

A GRO read of data for one known QP goes to `ReceiveQueuePair.on_data_run` in one call, a read of
ACKs to `SendQueuePair.on_acks`; anything else (CE marks, gaps, NAKs, unknown QPs) goes packet by
packet through the codec. A receive queue pair opens when a QP's first packet arrives from one of
the run's ranks, so a receiver needs no plan. What the reads produce (replies, events, packets
the ACKs released) is handled before the callback returns. On the native path (emulator/native)
each read, and what it is read as, is one C call, and the ACK reads in a row for one sender QP
go to it in one call.

How long a read's data waited in the socket (the kernel's receive stamp, SO_TIMESTAMPNS, to the
read) is time no NIC spends: a NIC places a packet and answers it as it arrives, while a worker
busy with other ranks reads it later. The wait of the read that completed a message (and of the
ACK read that completed a flow) goes into the flow's engine delay (emulator.engine.reports),
which the verdict judges; every read's wait goes into a histogram (summary engine.receive_wait).
The stamp is of a GRO batch's first segment: the wait read is the batch's longest.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from emulator.engine.clock import DilatedClock
from emulator.engine.counters import CountClass
from emulator.engine.ranks import Rank, RecvConn
from emulator.engine.sockets import ANCILLARY_BYTES, read_ancillary, segments
from emulator.engine.worker_spec import QueuePairAhead
from emulator.latency import LatencyHistogram
from emulator.native.drain import ReceiveDrain
from emulator.native.reads import NativeRunReader
from emulator.transport.burst_wire import DataRun, read_ack_run, read_data_run
from emulator.transport.entropy import entropy_sport, home_sport
from emulator.transport.events import TransportEvent
from emulator.transport.packets import (
    AETH_BYTES,
    BTH_BYTES,
    ICRC_BYTES,
    RETH_OPCODES,
    ROCEV2_UDP_PORT,
    CnpPacket,
    DataPacket,
    Opcode,
    Packet,
)
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

ACK_WIRE_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES  # an ACK's UDP payload
READS_PER_WAKEUP = 64  # bound the work of one readable callback so ticks keep their pace
# On the native path, where a read costs a few microseconds: a worker behind in the main job's
# All-to-All (its eight ranks' sockets all readable, each callback reading more, each round of
# the loop longer) left reads behind at 64 that waited another round, 30 ms or more of wall time
# (tens of thousands a run); at 256, 11 in a run, and the All-to-All's p99 FCT moved by the
# engine's delay +5.7-12.7% against +15.2-17.2% at TDF 4600 (docs/time-dilation.md). The C
# drain reads at most this many per call (burst_drain.c: its waits array).
NATIVE_READS_PER_WAKEUP = 256
_NOTHING_TO_READ = (-errno.EAGAIN, -errno.EWOULDBLOCK, -errno.EINTR)  # as recvmsg_into's


class Observe(Protocol):
    """Counters.observe, as the receive path is given it."""

    def __call__(
        self, qpn: int, tos: int, data: bytearray | memoryview, nbytes: int, psn: int, rx_ns: int
    ) -> None: ...


class ReceivePath:
    """Reading the rank sockets (and, for XdpPacer, one read of a port's) into the queue
    pairs. Opens the receive queue pairs (into `recv_conns`, the worker's table by QP
    number). Given the receive buffer and the native reader (None: the Python path), the
    per-class tally and latency stamps it counts into, the send path's send_replies, the rank
    sockets' sport_socket (a receive queue pair's replies leave from it), and the worker's
    after_reads (what the reads produced: events, sends, a flush)."""

    def __init__(
        self,
        transport: TransportParams,
        clock: DilatedClock,
        events: list[TransportEvent],
        counters: Counter[str],
        rank_addresses: frozenset[str],
        recv_conns: dict[int, RecvConn],
        receive_buffer: bytearray,
        run_reader: NativeRunReader | None,
        count_class: CountClass,
        observe: Observe,
        send_replies: Callable[[list[Packet]], None],
        sport_socket: Callable[[Rank, int], socket.socket],
        after_reads: Callable[[float, Rank | None], None],
        *,
        receive_wait: LatencyHistogram,
        latency: bool,
        drain: ReceiveDrain | None = None,
        tos_ack: int = 0,
        send_failed: Callable[[OSError, list[bytes], tuple[str, int], Rank], None] | None = None,
    ) -> None:
        self.transport = transport
        # per-packet entropy: a data packet's source port is one of its queue pair's; its
        # source is taken as the home port's (emulator.transport.entropy), where the QP's
        # peer is recorded and its ACKs leave from
        self._entropy = transport.entropy_values if transport.entropy == "per_packet" else 0
        self.clock = clock
        self.events = events
        self.counters = counters
        self.rank_addresses = rank_addresses  # only the run's ranks open receive queue pairs
        self.recv_conns = recv_conns
        self.buf = receive_buffer
        self.run_reader = run_reader  # read_data_run in C on the native path
        self._count_class = count_class
        self._observe = observe
        self._send_replies = send_replies
        self._sport_socket = sport_socket
        self._after_reads = after_reads
        self._latency = latency  # the data carries departure stamps (engine.one_way_latency)
        self._wait_histogram = receive_wait
        # wall seconds the last read of a receive QP's data / a send QP's ACKs waited in its
        # socket (the reports read them when the read completes a message or a flow)
        self.data_wait_s: dict[int, float] = {}
        self.ack_wait_s: dict[int, float] = {}
        self._wait_s = 0.0  # the current read's
        # the receive queue pairs' common path in C (emulator/native/drain.py): not with
        # departure stamps to read or per-packet source ports to map back
        self.drain = drain if run_reader is not None and not latency and not self._entropy else None
        self._tos_ack = tos_ack  # the drain's ACKs, counted in their class
        self._send_failed = send_failed

    def on_readable(self, rank: Rank) -> None:
        """The rank's socket is readable: up to READS_PER_WAKEUP reads, then what they produced."""
        if self.run_reader is not None:
            self._on_readable_native(rank, self.run_reader)
            return
        sock = rank.rx_sock
        assert sock is not None
        buf = self.buf
        now = self.clock.now()
        got = False
        for _ in range(READS_PER_WAKEUP):
            try:
                nbytes, anc, _flags, source = sock.recvmsg_into([buf], ANCILLARY_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            got = True
            tos, gso_size, rx_ns = read_ancillary(anc)
            self._read_waited(rx_ns)
            self.one_read(rank, now, buf, nbytes, gso_size, tos, rx_ns, source)
        if got:
            self._after_reads(now, rank)

    def one_read(
        self,
        rank: Rank,
        now: float,
        data: bytearray | memoryview,
        nbytes: int,
        gso_size: int,
        tos: int,
        rx_ns: int,
        source: tuple[str, int],
    ) -> None:
        """One read (a GRO read of a socket, or a run of an AF_XDP port's: data[:nbytes] cut
        every gso_size bytes) to the queue pairs: counted, then ACKs to one sender or data for
        one known QP at once (the fast paths only for the QP's own peer; anything else goes
        through the codec, which counts foreign sources as drops). An AF_XDP port's read is not
        stamped by a kernel: its wait counts as 0 (the worker's lag stands for it)."""
        self._count_read(nbytes, gso_size, tos)
        endpoint = rank.endpoint
        ce = (tos & 3) == ECN_CE
        if nbytes and data[0] == Opcode.ACKNOWLEDGE:
            acks = read_ack_run(data, nbytes, gso_size)
            if (
                acks is not None
                and acks[0] in endpoint.senders
                and endpoint.sender_peers.get(acks[0]) == source
            ):
                endpoint.senders[acks[0]].on_acks(now=now, psns=acks[1])
                self.ack_wait_s[acks[0]] = self._wait_s
                return
        else:
            run = read_data_run(data, nbytes, gso_size) if nbytes else None
            if run is not None and self._data_run(
                rank, run, data, now, nbytes, tos, ce, rx_ns, source
            ):
                return
        self._read_packets(rank, data, now, nbytes, gso_size, tos, ce, rx_ns, source)

    def _read_waited(self, rx_ns: int) -> None:
        """The current read's data arrived at rx_ns (0: not stamped): how long it waited."""
        if not rx_ns:
            self._wait_s = 0.0
            return
        # a stamp from the future (a clock step) counts as no wait
        wait_s = max(time.time_ns() - rx_ns, 0) * 1e-9
        self._wait_s = wait_s
        self._wait_histogram.observe(wait_s)

    def _count_read(self, nbytes: int, gso_size: int, tos: int) -> None:
        """A read of data[:nbytes] cut every gso_size bytes, counted: packets received, its
        traffic class."""
        count = -(-nbytes // gso_size) if 0 < gso_size < nbytes else 1
        self.counters["packets_received"] += count
        self._count_class(tos, count, nbytes, sent=False)

    def _on_readable_native(self, rank: Rank, reader: NativeRunReader) -> None:
        """on_readable on the native path (up to NATIVE_READS_PER_WAKEUP reads): each read and
        what it is read as in C, and with the drain (emulator/native/drain.py) the reads of data
        on the receive queue pairs' common path taken in C as a whole, up to the first read it
        leaves here. ACK reads in a row for one sender QP go to its on_acks together, before
        anything else is read here (the same state and events as one call per read:
        SendQueuePair.on_acks)."""
        assert rank.rx_sock is not None
        fd = rank.rx_sock.fileno()
        buf = self.buf
        now = self.clock.now()
        endpoint = rank.endpoint
        senders = endpoint.senders
        drain = self.drain
        got = False
        acks_qp = -1  # the sender QP whose ACKs are waiting in acks_psns
        acks_psns: list[int] = []
        budget = NATIVE_READS_PER_WAKEUP
        while budget > 0:
            if drain is not None:
                made, nbytes, left, taken = drain.run(fd, rank.spec.rank, budget)
                budget -= made
                if taken:
                    got = True  # counted in C until the report (collect)
                    if drain.d.send_errno:
                        self._drain_send_failed(rank, drain)
                if not left:
                    if nbytes < 0 and nbytes not in _NOTHING_TO_READ:
                        raise OSError(-nbytes, os.strerror(-nbytes))
                    if nbytes < 0 or budget <= 0:
                        break
                    continue
                nbytes, tos, gso_size, rx_ns, source = reader.last(nbytes)
            else:
                nbytes, tos, gso_size, rx_ns, source = reader.recv(fd)
                budget -= 1
                if nbytes < 0:
                    if nbytes in _NOTHING_TO_READ:
                        break
                    raise OSError(-nbytes, os.strerror(-nbytes))
            got = True
            self._read_waited(rx_ns)
            self._count_read(nbytes, gso_size, tos)
            qp = reader.ack_qp
            if qp >= 0 and qp in senders and endpoint.sender_peers.get(qp) == source:
                self.ack_wait_s[qp] = self._wait_s
                if qp == acks_qp:
                    acks_psns += reader.ack_psns()
                else:
                    if acks_psns:
                        senders[acks_qp].on_acks(now=now, psns=acks_psns)
                    acks_qp = qp
                    acks_psns = reader.ack_psns()
                continue
            if acks_psns:
                senders[acks_qp].on_acks(now=now, psns=acks_psns)
                acks_psns = []
                acks_qp = -1
            ce = (tos & 3) == ECN_CE
            if nbytes and buf[0] != Opcode.ACKNOWLEDGE:
                run = reader.read(nbytes, gso_size)
                if run is not None and self._data_run(
                    rank, run, buf, now, nbytes, tos, ce, rx_ns, source
                ):
                    continue
            self._read_packets(rank, buf, now, nbytes, gso_size, tos, ce, rx_ns, source)
        if acks_psns:
            senders[acks_qp].on_acks(now=now, psns=acks_psns)
        if got:
            self._after_reads(now, rank)

    def _drain_send_failed(self, rank: Rank, drain: ReceiveDrain) -> None:
        """An ACK send of the drain's last call failed for a reason a congested or dead wire
        does not explain: raised through the send failures' policy (send_errors.py), naming
        the queue pair's peer."""
        if self._send_failed is None:
            return
        e = int(drain.d.send_errno)
        conn = self.recv_conns[int(drain.d.send_errno_qpn)]
        ack = [bytes(ACK_WIRE_BYTES)]  # what the message names: an ACK's size
        self._send_failed(OSError(e, os.strerror(e)), ack, conn.dest, rank)

    def collect(self) -> None:
        """Fold what the drain took since the last call into the receive queue pairs, the
        counters, the per-class tally and the wait histogram, as the Python
        path and the send path's ACKs count them (the worker's report calls it first: they are
        read only there). Nothing without the drain."""
        drain = self.drain
        if drain is None:
            return
        drain.fold_all()
        t = drain.totals()
        if not t.reads:
            return
        counters = self.counters
        counters["reads_taken_in_c"] += t.reads
        counters["packets_received"] += t.packets
        for dscp, (packets, udp_bytes) in t.classes.items():
            self._count_class(dscp << 2, packets, udp_bytes, sent=False)
        if t.acks:
            self._count_class(self._tos_ack, t.acks, t.ack_bytes, sent=True)
        # refused sends, as send_errors.SendFailures counts them
        for name, count in zip(
            ("send_buffer_full", "send_no_buffers", "send_no_path"), t.refused, strict=True
        ):
            if count:
                counters[name] += count
        self._wait_histogram.merge(LatencyHistogram.from_wire(t.waits))

    def _data_run(
        self,
        rank: Rank,
        run: DataRun,
        data: bytearray | memoryview,
        now: float,
        nbytes: int,
        tos: int,
        ce: bool,
        rx_ns: int,
        source: tuple[str, int],
    ) -> bool:
        """A read of data for one QP to its receive queue pair in one call, if it is a known
        QP's from its own peer (False: the caller takes it packet by packet)."""
        endpoint = rank.endpoint
        if self._entropy:
            source = (source[0], home_sport(source[1], run.psn, self._entropy))
        rq = endpoint.receivers.get(run.dest_qp)
        if rq is None or endpoint.receiver_peers.get(run.dest_qp) != source:
            return False
        if self.drain is not None:
            self.drain.fold(run.dest_qp)  # what C took for it, before Python moves it
        replies = rq.on_data_run(
            now=now,
            psn=run.psn,
            opcodes=run.opcodes,
            ack_req_at=run.ack_req_at,
            payload_bytes=run.payload_bytes,
            last_payload_bytes=run.last_payload_bytes,
            ce=ce,
        )
        if self.drain is not None:
            self.drain.write(run.dest_qp)  # C's copy of its state, after Python changed it
        self.data_wait_s[run.dest_qp] = self._wait_s
        if rx_ns and self._latency:
            self._observe(run.dest_qp, tos, data, nbytes, run.psn, rx_ns)
        if replies:
            self._send_replies(replies)
        return True

    def _read_packets(
        self,
        rank: Rank,
        data: bytearray | memoryview,
        now: float,
        nbytes: int,
        gso_size: int,
        tos: int,
        ce: bool,
        rx_ns: int,
        source: tuple[str, int],
    ) -> None:
        """A read packet by packet through the codec (anything the fast paths do not take)."""
        endpoint = rank.endpoint
        mv = memoryview(data)
        peer = source
        for a, b in segments(nbytes, gso_size):
            try:
                packet = decode(mv[a:b])
            except MalformedPacket:
                endpoint.drop(now, "malformed")
                continue
            source = peer
            if self._entropy and type(packet) is DataPacket:
                source = (peer[0], home_sport(peer[1], packet.psn, self._entropy))
            if type(packet) is DataPacket and packet.dest_qp not in endpoint.receivers:
                if source[0] not in self.rank_addresses:
                    # only the run's ranks open receive QPs: a stranger's first packet
                    # must not make its address the QP's peer
                    endpoint.drop(now, "foreign_source", packet.dest_qp)
                    continue
                self._open_receiver(rank, packet.dest_qp, source)
                self.counters["queue_pairs_opened_in_run"] += 1
            kind = type(packet)
            if kind is DataPacket and self.drain is not None:
                self.drain.fold(packet.dest_qp)
            replies = endpoint.on_packet(now=now, packet=packet, ce=ce, source=source)
            if kind is DataPacket and self.drain is not None:
                self.drain.write(packet.dest_qp)
            if kind is DataPacket:
                self.data_wait_s[packet.dest_qp] = self._wait_s
            elif kind is not CnpPacket:  # an ACK, NAK or SACK for one of the senders
                self.ack_wait_s[packet.dest_qp] = self._wait_s
            if (
                rx_ns
                and self._latency
                and a == 0  # the segment the kernel's stamp is for (see Counters.observe)
                and type(packet) is DataPacket
                and packet.opcode not in RETH_OPCODES
                and endpoint.receiver_peers.get(packet.dest_qp) == source
            ):
                self._observe(packet.dest_qp, tos, mv[a:b], b - a, packet.psn, rx_ns)
            if replies:
                self._send_replies(replies)

    def open_ahead(
        self,
        ranks: dict[int, Rank],
        addresses: dict[int, str],
        queue_pairs: Sequence[QueuePairAhead],
    ) -> None:
        """Open the receive queue pairs the plan will use (of `ranks`, the worker's; from
        `addresses`, every rank's), before the clock starts, for the peers their first packets
        will come from (with per-packet entropy: the home port)."""
        for conn_id, src, dst, _qp, sport, _profile in queue_pairs:
            rank = ranks[dst]
            if conn_id + 1 in self.recv_conns:
                continue
            if self._entropy:
                sport = entropy_sport(sport, 0, self._entropy)
            self._open_receiver(rank, conn_id + 1, (addresses[src], sport)).ahead = True
            self.counters["queue_pairs_opened_ahead"] += 1

    def _open_receiver(self, rank: Rank, qpn: int, source: tuple[str, int]) -> RecvConn:
        qp = ReceiveQueuePair(qpn=qpn, remote_qp=qpn, params=self.transport, events=self.events)
        peer, sport = source[0], source[1]
        rank.endpoint.add_receiver(qp, peer=(peer, sport))
        address = FlowAddress(
            rank.spec.address, peer, sport, dscp=self.transport.dscp, ecn=ECN_NOT_ECT
        )
        xdp = rank.xdp  # its ACKs and CNPs leave through the AF_XDP port (af_xdp)
        conn = self.recv_conns[qpn] = RecvConn(
            qpn - 1,
            rank,
            qp,
            self._sport_socket(rank, sport) if xdp is None else None,
            (peer, ROCEV2_UDP_PORT),
            IcrcContext(address),
            xdp=None if xdp is None else xdp.flow(rank.spec.address, peer, sport),
        )
        if self.drain is not None and conn.sock is not None and rank.rx_sock is not None:
            self.drain.take(
                rank.spec.rank, qp, (peer, sport), conn.sock, conn.dest, self._tos_ack, conn.icrc
            )
        return conn
