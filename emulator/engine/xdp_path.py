"""The af_xdp data path of a worker (`engine.send_path: af_xdp`): bursts and replies handed to
their rank's AF_XDP port (XdpSender, which the send path calls), what the ports receive read like
GRO reads and the ports paced between ticks (XdpPacer, one loop for both: the drain reads what
arrives meanwhile).

Send: a burst is laid out as for one GSO send whose IP ids run 0, 1, 2, ... through the whole
burst (BurstWriter.write, or the native layout, with no restart; on the native path a burst is
up to NATIVE_BUFFERS_PER_POLL GSO buffers' worth), and the port gives segment i IP id i: each
ICRC is for the id the wire carries. Segments the port's backlog cannot take are lost like a send
into a full socket buffer (send_buffer_full; the transport recovers them), a port whose link is
down is send_no_path (ENETDOWN), as on the socket path. The NIC arbiter (SendPath._serve_nic)
releases no more than the port's backlog holds (`XdpSender.budget`).

Pace: each tick releases what the queue pairs and the NIC arbiter allow one tick ahead of now
(the DUT's ranks run at the cap, so about a tick's worth; at most cap x (tick + burst) after an
idle spell), no more than the backlog's limit (xdp_ports.backlog_limit: three ticks at the
cap), and the port's token bucket spreads it at the cap; ACKs and CNPs go ahead of the data
waiting there. While a backlog waits, the worker drains its ports (xdp_ports.PortGroup.drain,
asleep between releases) up to the moment its next tick is due, reading whatever arrives
meanwhile, and then runs that tick at once (the loop's millisecond timers would start it up to
a millisecond late, in which the port would send nothing). Between ticks the event loop still
serves the coordinator's pipe. Released only up to now, a tick's worth would be sent just as
the next tick is due, and any delay would idle the port (the bucket keeps no more than its
depth of the time lost). The Python work between two drains (reads, the tick) costs the port
what exceeds the bucket's depth: on this 2-core VM at 1 Gb/s, bench/engine_throughput.py's
pacing error read -2.6 to -3.2% with the tick ahead, -3.9 to -4.0% without (the socket path,
whose kernel catches up in bursts above the cap: -0.3%). A pacer thread of the port's own (C)
did no better here (it waits for a core its own worker holds) and cost more CPU.

Receive: each run a port hands over (one source and ToS, every payload but the last one size)
goes through ReceivePath.one_read, exactly as a socket's GRO read does, for the rank whose
address it was sent to. Its receive time, for the one-way latency, is when the worker read it:
copy mode gives no kernel stamp, so the latency includes the worker's reaction time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from emulator.engine.counters import CountClass
from emulator.engine.native_path import DataPath
from emulator.engine.ranks import Rank, RecvConn, SendConn
from emulator.engine.send_errors import SendFailures
from emulator.engine.tick_state import TickState
from emulator.engine.xdp_ports import PortGroup, XdpNic
from emulator.native.acks import NativeAckFlow
from emulator.native.burst import NativeFlow
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.packets import AETH_BYTES, BTH_BYTES, ICRC_BYTES, CnpPacket, Packet
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES
from emulator.transport.wire import encode, layout_gso

ACK_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
READS_PER_PORT = 64  # receive calls per port per wakeup (each up to 256 runs)
DRAIN_ROUNDS = 100_000  # drain/read rounds before a tick: a bound, never reached in practice


class OneRead(Protocol):
    """What XdpPacer hands each run to (ReceivePath.one_read)."""

    def __call__(
        self,
        rank: Rank,
        now: float,
        data: bytearray | memoryview,
        nbytes: int,
        gso_size: int,
        tos: int,
        rx_ns: int,
        source: tuple[str, int],
    ) -> None: ...


class XdpSender:
    """Bursts and replies through their rank's port, with the socket path's bytes, counters
    and error handling (the send path hands it every queue pair that has a port flow)."""

    def __init__(
        self,
        counters: Counter[str],
        count_class: CountClass,
        failures: SendFailures,
        data_path: DataPath,
        send_buffer: BurstBuffer,
        reply_buffer: bytearray,
        *,
        latency: bool,
        tos_ack: int,
        tos_cnp: int,
        max_packet_wire_bytes: int,
    ) -> None:
        self.counters = counters
        self._count_class = count_class
        self._send_failed = failures.failed
        self.native = data_path.bursts
        self.native_replies = data_path.replies
        self.gso_buf = send_buffer
        self.reply_buf = reply_buffer
        self.latency = latency  # departure stamps in the data (engine.one_way_latency)
        self.tos_ack = tos_ack
        self.tos_cnp = tos_cnp
        self._max_packet_wire_bytes = max_packet_wire_bytes
        self._native_flows: dict[SendConn, NativeFlow] = {}
        self._native_ack_flows: dict[RecvConn, NativeAckFlow] = {}

    def budget(self, nic: XdpNic, budget: int) -> int:
        """The NIC arbiter's budget cut to what the port's backlog still holds (-1: full)."""
        room = nic.backlog_limit - nic.port.backlog - 1
        if room < 0:
            return -1
        return min(budget, room * self._max_packet_wire_bytes)

    def send_burst(self, conn: SendConn, burst: Burst) -> int:
        """SendPath._send_burst through the rank's port: the same bytes (IP ids 0, 1, ...
        through the burst), counters and error handling; returns the UDP payload bytes handed
        over."""
        rank = conn.rank
        assert conn.xdp is not None and rank.xdp is not None
        count = burst.count
        segment = burst.segment_bytes
        if self.latency:
            # a burst's packets leave back to back at the rank's line rate (dilated)
            departed = time.time_ns()
            spacing = int((segment + IPV4_FRAME_OVERHEAD_BYTES) * rank.ns_per_byte)
        else:
            departed = spacing = 0
        if self.native is not None:
            flow = self._native_flows.get(conn)
            if flow is None:
                flow = self._native_flows[conn] = self.native.flow(conn.writer)
            used = flow.write(burst, departed_ns=departed, spacing_ns=spacing)
        else:
            used = conn.writer.write(burst, departed_ns=departed, spacing_ns=spacing)
        self._to_port(conn, conn.tos, self.gso_buf.data, used, segment, count)
        self.counters["data_packets_sent"] += count
        self._count_class(conn.tos, count, used, sent=True)
        return used

    def send_replies(self, conn: RecvConn, replies: Sequence[Packet]) -> None:
        """ACKs to one QP (one run, IP ids 0, 1, ...) or one CNP or NAK, through the port."""
        rank = conn.rank
        assert conn.xdp is not None and rank.xdp is not None
        count = len(replies)
        data: bytes | bytearray
        if count > 1:
            tos = self.tos_ack
            data = self.reply_buf
            if self.native_replies is not None:
                flow = self._native_ack_flows.get(conn)
                if flow is None:
                    flow = self._native_ack_flows[conn] = self.native_replies.flow(
                        conn.icrc, None, conn.dest, tos
                    )
                used, segment = flow.layout(replies), ACK_BYTES  # type: ignore[arg-type]
            else:
                used, segment = layout_gso(data, replies, conn.icrc, ip_id_first=0)
        else:
            packet = replies[0]
            tos = self.tos_cnp if type(packet) is CnpPacket else self.tos_ack
            data = encode(packet, conn.icrc, 0)
            used = segment = len(data)
        # ahead of the rank's own data waiting there, as a NIC's responder does not wait
        self._to_port(conn, tos, data, used, segment, count, ahead=True)
        self._count_class(tos, count, used, sent=True)

    def _to_port(
        self,
        conn: SendConn | RecvConn,
        tos: int,
        data: bytes | bytearray,
        used: int,
        segment: int,
        count: int,
        *,
        ahead: bool = False,
    ) -> None:
        """data[:used] (`count` segments) handed to the rank's port; what its backlog refuses
        is lost as in a full socket buffer, a failed send as on the socket path."""
        rank = conn.rank
        assert conn.xdp is not None and rank.xdp is not None
        try:
            taken = rank.xdp.port.send(conn.xdp, tos, data, used, segment, ahead=ahead)
        except OSError as e:
            self._send_failed(e, [memoryview(data)[:used]], conn.dest, rank)
        else:
            if taken < count:
                self.counters["send_buffer_full"] += 1
                self.counters["xdp_segments_refused"] += count - taken


class XdpPacer:
    """Reading the ports and pacing their backlogs between ticks (see the module docstring).
    Given the worker's ports with their ranks by address, the receive path's one_read, and
    the worker's after_reads and tick_now (run the next tick at once)."""

    def __init__(
        self,
        ports: dict[XdpNic, dict[str, Rank]],
        group: PortGroup | None,
        ticks: TickState,
        counters: Counter[str],
        receive_buffer: bytearray,
        one_read: OneRead,
        after_reads: Callable[[float], None],
        tick_now: Callable[[], None],
        *,
        latency: bool,
    ) -> None:
        self.ports = ports
        self.group = group
        self.ticks = ticks
        self.clock = ticks.clock
        self.counters = counters
        self.buf = receive_buffer
        self._one_read = one_read
        self._after_reads = after_reads
        self._tick_now = tick_now
        self.latency = latency  # receive times for the one-way latency (engine.one_way_latency)
        self._draining = False

    # -- receive ------------------------------------------------------------------------------
    def read(self, nic: XdpNic, now: float) -> bool:
        """Every run waiting on the port, each to its rank as a GRO read; whether any came."""
        port = nic.port
        ranks = self.ports[nic]
        buf = self.buf
        view = memoryview(buf)
        got = False
        for _ in range(READS_PER_PORT):
            runs = port.receive(buf)
            if not runs:
                break
            got = True
            rx_ns = time.time_ns() if self.latency else 0  # copy mode: the read's time
            for run in runs:
                rank = ranks.get(run.dest)
                if rank is None:  # the program steers only the ranks' addresses here
                    self.counters["xdp_not_for_a_rank"] += run.segments
                    continue
                gso_size = run.segment_bytes if run.segments > 1 else 0
                data = view[run.offset : run.offset + run.nbytes]
                self._one_read(rank, now, data, run.nbytes, gso_size, run.tos, rx_ns, run.source)
        return got

    def on_readable(self, nic: XdpNic) -> None:
        now = self.clock.now()
        if self.read(nic, now):
            self._after_reads(now)
        self.pace()

    # -- pace ---------------------------------------------------------------------------------
    def pace(self) -> None:
        """While the ports have a backlog: drain them until the next tick is due, reading what
        arrives meanwhile, then start that tick now (see the module docstring)."""
        group = self.group
        if group is None or self._draining or not self.ticks.started or not group.backlog:
            return
        self._draining = True
        try:
            due = self.ticks.next_tick_wall
            for _ in range(DRAIN_ROUNDS):
                left_s = due - time.perf_counter()
                if left_s <= 0:
                    break
                left, failed = group.drain(left_s, stop_on_rx=True)
                for _nic, _errno in failed:
                    self.counters["send_no_path"] += 1  # its link went down: backlog dropped
                now = self.clock.now()
                got = False
                for nic in self.ports:
                    got = self.read(nic, now) or got
                if got:
                    self._after_reads(now)
                elif not left:
                    return  # all sent before the tick: it comes on its timer
        finally:
            self._draining = False
        self._tick_now()
