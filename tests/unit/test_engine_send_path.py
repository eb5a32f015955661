"""The worker's send side when the kernel refuses a GSO send: the packets are lost as on a
congested NIC (counted by why, never raised), and `gso_sends` counts only sends the kernel took."""

from __future__ import annotations

import errno
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.engine.active import ActiveQueuePairs
from emulator.engine.native_path import DataPath
from emulator.engine.nicpacer import NicPacer
from emulator.engine.send_errors import SendFailures
from emulator.engine.send_path import SendPath
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.packets import AckPacket
from emulator.transport.params import TransportParams
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair


class _Socket:
    def __init__(self, error: OSError | None) -> None:
        self.error = error
        self.sent = 0

    def sendmsg(self, *_args: Any) -> int:
        if self.error is not None:
            raise self.error
        self.sent += 1
        return 0


def _no_tally(tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
    del tos, packets, udp_bytes, sent


def _sender(burst_s: float = 1e-4, quantum_bytes: int = 0) -> SendPath:
    """A Python-path SendPath over GSO sockets, its collaborators stand-ins (no AF_XDP); the
    NIC arbiter packet by packet unless given a quantum."""
    counters: Counter[str] = Counter()
    params = SimpleNamespace(
        gso_max_segments=64,
        one_way_latency=False,
        burst_ticks=1.0,
        tick_s=burst_s,
        tdf=1.0,
        nic_quantum_bytes=quantum_bytes,
    )
    return SendPath(
        params,  # type: ignore[arg-type]
        SimpleNamespace(gso=True),  # type: ignore[arg-type]
        counters,
        _no_tally,
        SendFailures(counters, 1024),
        SimpleNamespace(budget=None, send_burst=None, send_replies=None),  # type: ignore[arg-type]
        DataPath(None, None, None, "engine.native: off"),
        BurstBuffer(65536),
        bytearray(65535),
        ActiveQueuePairs(),
        {},
        tos_ack=0,
        tos_cnp=0,
        max_packet_wire_bytes=1024 + 12 + 4 + IPV4_FRAME_OVERHEAD_BYTES,
    )


def _conn(sock: _Socket) -> Any:
    writer = SimpleNamespace(write=lambda burst, gso: burst.count * burst.segment_bytes)
    rank = SimpleNamespace(spec=SimpleNamespace(rank=0))
    return SimpleNamespace(
        writer=writer,
        sock=sock,
        tos=0,
        tos_cmsgs=(),
        dest=("10.0.0.2", 4791),
        rank=rank,
        xdp=None,
        entropy=None,
    )


BURST = Burst(
    dest_qp=1,
    psn=0,
    count=4,
    segment_bytes=1024,
    payload_bytes=996,
    last_payload_bytes=996,
    opcodes=bytes(4),
    ack_req_at=[3],
)


def test_a_refused_gso_send_is_counted_by_reason_not_as_a_send() -> None:
    sender = _sender()
    sender._send_burst(_conn(_Socket(None)), BURST)
    sender._send_burst(_conn(_Socket(BlockingIOError(errno.EAGAIN, "full"))), BURST)
    sender._send_burst(_conn(_Socket(OSError(errno.ENOBUFS, "no buffer space"))), BURST)
    assert sender.counters["gso_sends"] == 1
    assert sender.counters["send_buffer_full"] == 1
    assert sender.counters["send_no_buffers"] == 1


def _arbiter(burst_s: float, quantum_bytes: int = 0) -> SendPath:
    """The NIC arbiter of SendPath.pump over real queue pairs; sends cost nothing."""
    sender = _sender(burst_s, quantum_bytes)
    sender._send_burst = lambda conn, burst: burst.count * burst.segment_bytes  # type: ignore[method-assign]
    return sender


def test_a_nic_whose_queue_pairs_have_nothing_due_is_not_behind() -> None:
    """The NIC's last packet of a message leaves it owing time (budget below zero) with nothing
    else to send: it is not line-rate bound, so the time until its next message, however long,
    is no lost credit (a real NIC idles then). It was counted as pacing deficit before: 1 ms at
    8 Gb/s here, a deficit of hundreds of percent of what a small job sends."""
    line_bps = 8e9  # 1 byte per ns
    sender = _arbiter(burst_s=1e-7)
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024)
    qp = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=line_bps)
    conn = SimpleNamespace(qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0)
    qp.post_send(now=0.0, message_id=1, size_bytes=1024)
    sender.active[1] = conn
    sender.pump(0.0)
    assert qp.packets_sent == 1 and nic.budget_bytes(0.0, -1e-7) < 0  # the NIC owes time
    assert not nic.backlogged  # ... but nothing is waiting for it
    qp.on_ack(now=5e-6, packet=AckPacket(dest_qp=2, psn=0))
    sender.active.completed(1)  # as the worker's reports say of a completed message
    sender.pump(5e-6)
    assert 1 not in sender.active  # done: idle
    qp.post_send(now=1e-3, message_id=2, size_bytes=1024)
    sender.active[1] = conn
    sender.pump(1e-3)
    assert qp.packets_sent == 2
    assert nic.lost_wire_bytes == 0.0 and qp.pacing_lost_bytes == 0.0


def test_a_nic_bound_by_its_rate_is_behind_when_served_late() -> None:
    """The other side: queue pairs with packets due when the NIC's budget ran out, served again
    after more than its bucket, lose the credit the floor cut (the NIC's, not theirs)."""
    line_bps = 8e9
    sender = _arbiter(burst_s=1e-7)
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024)
    qps = [
        SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps) for q in (1, 3)
    ]
    for qp in qps:
        qp.post_send(now=0.0, message_id=qp.qpn, size_bytes=64 * 1024)
        sender.active[qp.qpn] = SimpleNamespace(
            qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0
        )
    sender.pump(1e-6)
    assert nic.backlogged
    sender.pump(11e-6)  # 10 us later with a 0.1 us bucket: about 9.9 us of line rate lost
    assert nic.lost_wire_bytes == pytest.approx(9.9e-6 * line_bps / 8, rel=0.15)
    assert sum(qp.pacing_lost_bytes for qp in qps) == 0.0
    # each queue pair waiting on the NIC waited that long: the time goes into its flow's delay
    lost_s = nic.lost_wire_bytes * 8 / line_bps
    assert [sender_conn.nic_lost_s for sender_conn in sender.active.values()] == [
        pytest.approx(lost_s),
        pytest.approx(lost_s),
    ]


def test_a_behind_nic_served_when_none_of_its_queue_pairs_has_a_packet_due() -> None:
    """A serve in which no queue pair takes a turn (their windows full, waiting for ACKs) still
    ends what the NIC's being behind meant: the credit the floor cut since it was left
    backlogged is its lost credit, it is no longer backlogged, and no queue pair waited on it
    (none was due). Then an ACK opens a window and the next serve sends."""
    line_bps = 8e9
    sender = _arbiter(burst_s=1e-7)
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024, window_packets=40)
    qps = [
        SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps) for q in (1, 3)
    ]
    for qp in qps:
        qp.post_send(now=0.0, message_id=qp.qpn, size_bytes=64 * 1024)
        sender.active[qp.qpn] = SimpleNamespace(
            qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0
        )
    sender.pump(1e-6)
    assert nic.backlogged
    now = 1e-6
    while any(qp.due_to_send(now) for qp in qps):  # fill both windows (bounded: 80 packets)
        assert now < 1e-3
        now += 1e-6
        sender.pump(now)
    assert [qp.packets_sent for qp in qps] == [40, 40]
    sent_before = nic.sent_wire_bytes
    waited = [c.nic_lost_s for c in sender.active.values()]
    nic.backlogged = True  # left behind by its last serve, as with packets still due
    free_at = nic.free_at_s
    later = now + 10e-6
    sender.pump(later)
    floor = later - 1e-7
    assert nic.lost_wire_bytes > 0
    assert not nic.backlogged and nic.sent_wire_bytes == sent_before
    assert [c.nic_lost_s for c in sender.active.values()] == waited
    lost = nic.lost_wire_bytes
    sender.pump(later + 1e-6)  # not behind any more: nothing more lost while idle
    assert nic.lost_wire_bytes == lost
    assert free_at < floor
    qps[0].on_ack(now=later + 2e-6, packet=AckPacket(dest_qp=2, psn=9))
    sender.pump(later + 3e-6)
    assert qps[0].packets_sent > 40 and qps[1].packets_sent == 40


def test_the_arbiter_shares_a_tick_s_budget_among_its_queue_pairs() -> None:
    """A budget of several packets goes round the queue pairs a share at a time, as a NIC's
    arbiter serves its queues in turn packet by packet (it went whole to the first in turn,
    and equal flows then finished up to 15% apart)."""
    line_bps = 8e9
    sender = _arbiter(burst_s=64e-6)  # a tick's credit: about 58 packets of 1024 bytes
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024)
    qps = [
        SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps)
        for q in (1, 3, 5)
    ]
    for qp in qps:
        qp.post_send(now=0.0, message_id=qp.qpn, size_bytes=1 << 20)
        sender.active[qp.qpn] = SimpleNamespace(
            qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0
        )
    sender.pump(0.0)
    sent = [qp.packets_sent for qp in qps]
    assert sum(sent) >= 55 and max(sent) - min(sent) <= 1, sent


def test_the_arbiter_takes_turns_across_ticks_while_other_queue_pairs_come_and_go() -> None:
    """Ticks of one or two packets' credit, three equal queue pairs always backlogged and a
    fourth that joins and leaves (a ring step's QP between its messages): the arbiter's turn
    must pass from queue pair to queue pair, not follow a tick count taken modulo however many
    are active (which favoured some: equal All-to-All flows of a rank finished 6% apart on the
    emulated fabric while the simulator's packet-by-packet arbiter finished them together)."""
    line_bps = 8e9
    packet_s = (1024 + 12 + 4 + IPV4_FRAME_OVERHEAD_BYTES) * 8 / line_bps
    sender = _arbiter(burst_s=packet_s)
    nic = NicPacer(line_bps)
    # no ACKs here: a window that never closes
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024, window_packets=1 << 20)
    qps = [
        SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps)
        for q in (1, 3, 5, 7)
    ]
    conns = {
        qp.qpn: SimpleNamespace(qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0)
        for qp in qps
    }
    for qp in qps:
        qp.post_send(now=0.0, message_id=qp.qpn, size_bytes=1 << 24)
    now = 0.0
    for tick in range(3000):
        # queue pair 7 comes and goes: active one tick in three
        if tick % 3 == 0:
            sender.active[7] = conns[7]
        elif 7 in sender.active:
            del sender.active[7]
        for q in (1, 3, 5):
            sender.active[q] = conns[q]
        sender.pump(now)
        now += packet_s
    sent = [qp.packets_sent for qp in qps[:3]]
    assert min(sent) > 500 and max(sent) - min(sent) <= 2, sent  # it was 1:5 (250 vs 1250)


def test_a_quantum_turn_leaves_as_one_send_and_the_nic_keeps_its_line_rate() -> None:
    """Deficit round robin with a quantum of 4 packets (params.nic_quantum_bytes): three
    backlogged queue pairs on a NIC served every packet's time take turns of 4 packets, each
    turn one send (one GSO buffer: the point of the quantum), in turn; the NIC owes what a turn
    borrows and pays it back, so over the run its wire bytes stay within line rate plus one
    quantum."""
    line_bps = 8e9
    packet_wire = 1024 + 12 + 4 + IPV4_FRAME_OVERHEAD_BYTES
    packet_s = packet_wire * 8 / line_bps
    # each queue pair's own bucket holds 8 packets (as the engine's 4 ticks hold several at
    # line rate): the quantum, not its pacing, bounds the turn
    sender = _sender(burst_s=8 * packet_s, quantum_bytes=4 * 1024)
    runs: list[tuple[int, int]] = []

    def send(conn: Any, burst: Burst) -> int:
        runs.append((conn.qp.qpn, burst.count))
        return burst.count * burst.segment_bytes

    sender._send_burst = send  # type: ignore[method-assign]
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024, window_packets=1 << 20)
    qps = [
        SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps)
        for q in (1, 3, 5)
    ]
    for qp in qps:
        qp.post_send(now=0.0, message_id=qp.qpn, size_bytes=1 << 24)
        sender.active[qp.qpn] = SimpleNamespace(
            qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0
        )
    ticks = 1200
    for tick in range(ticks):
        sender.pump(tick * packet_s)
    assert {count for _, count in runs} == {4}, runs[:10]
    assert [qpn for qpn, _ in runs[:6]] == [1, 3, 5, 1, 3, 5]  # in turn
    sent = [qp.packets_sent for qp in qps]
    assert max(sent) - min(sent) <= 4, sent
    # line rate: what the NIC had time for (its bucket's 8 packets at the start included),
    # plus at most the quantum it may owe
    elapsed_s = (ticks - 1) * packet_s
    assert nic.sent_wire_bytes <= (elapsed_s + 8 * packet_s) * line_bps / 8 + 4 * packet_wire
    assert sum(sent) >= ticks - 8  # ... and it kept up with it


def test_an_af_xdp_port_takes_packet_by_packet_turns_within_its_backlog() -> None:
    """The quantum is the socket path's: a port's backlog (XdpSender.budget) bounds what the
    arbiter hands it, and a turn of the quantum could overrun it, so its queue pairs take a
    packet a turn whatever engine.nic_quantum_bytes says."""
    line_bps = 8e9
    packet_wire = 1024 + 12 + 4 + IPV4_FRAME_OVERHEAD_BYTES
    packet_s = packet_wire * 8 / line_bps
    sender = _sender(burst_s=8 * packet_s, quantum_bytes=4 * 1024)
    sender._xdp_budget = lambda port, budget: min(budget, 2 * packet_wire)  # type: ignore[method-assign]
    runs: list[int] = []

    def send(conn: Any, burst: Burst) -> int:
        runs.append(burst.count)
        return burst.count * burst.segment_bytes

    sender._send_burst = send  # type: ignore[method-assign]
    nic = NicPacer(line_bps)
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024, window_packets=1 << 20)
    for q in (1, 3):
        qp = SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps)
        qp.post_send(now=0.0, message_id=q, size_bytes=1 << 20)
        sender.active[q] = SimpleNamespace(
            qp=qp, rank=SimpleNamespace(nic=nic, xdp=object()), nic_lost_s=0.0
        )
    for tick in range(50):
        sender.pump(tick * packet_s)
    assert runs and set(runs) == {1}, runs[:10]


def test_a_turn_is_the_quantum_whatever_the_bucket_holds() -> None:
    """A queue pair's own bucket holds burst_ticks of wall time, fewer packets the higher the
    TDF; a turn taken from it was shorter at a higher factor, and a small job's marks and
    All-Reduce busbw moved with the TDF (3.1-3.3 GB/s at 4000, 3.5 at 2000). Its credit holds a
    whole turn: with a bucket of one packet the turns are still the quantum's 4."""
    line_bps = 8e9
    packet_s = (1024 + 12 + 4 + IPV4_FRAME_OVERHEAD_BYTES) * 8 / line_bps
    runs: list[int] = []
    for bucket_packets in (1, 8):
        sender = _sender(burst_s=bucket_packets * packet_s, quantum_bytes=4 * 1024)
        counts: list[int] = []

        def send(conn: Any, burst: Burst, counts: list[int] = counts) -> int:
            counts.append(burst.count)
            return burst.count * burst.segment_bytes

        sender._send_burst = send  # type: ignore[method-assign]
        nic = NicPacer(line_bps)
        params = TransportParams(
            congestion_control="none", path_mtu_bytes=1024, window_packets=1 << 20
        )
        for q in (1, 3):
            qp = SendQueuePair(qpn=q, dest_qp=q + 1, params=params, line_rate_bps=line_bps)
            qp.post_send(now=0.0, message_id=q, size_bytes=1 << 20)
            sender.active[q] = SimpleNamespace(
                qp=qp, rank=SimpleNamespace(nic=nic, xdp=None), nic_lost_s=0.0
            )
        for tick in range(1, 400):
            sender.pump(tick * packet_s)
        runs.append(max(set(counts), key=counts.count))
    assert runs == [4, 4]
