"""Bursts: `poll_burst` hands out what take_due + gso_batches (one poll_transmit per packet) would,
the burst writer puts the same bytes on the wire as the per-packet codec, `read_data_run` reads
them back, and `on_data_run` answers like on_data packet by packet."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.engine.pacing import gso_batches, take_due
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer, BurstWriter, read_ack_run, read_data_run
from emulator.transport.congestion import CongestionControl
from emulator.transport.events import MessageReceived
from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    AckPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, encode, layout_gso

ADDRESS = FlowAddress("10.1.0.1", "10.1.0.2", 49152)
TICK_S = 1e-4


def _qp(
    verb: str = "send", initial_psn: int = 0, line_rate_bps: float = 1e15, **kw: Any
) -> SendQueuePair:
    params = TransportParams(congestion_control="none", **kw)
    return SendQueuePair(
        qpn=1,
        dest_qp=0x123456,
        params=params,
        line_rate_bps=line_rate_bps,
        initial_psn=initial_psn,
        verb=verb,
    )


def _wire(p: DataPacket) -> tuple[Any, ...]:
    """What a data packet puts on the wire (its message offset is not there)."""
    return (p.dest_qp, p.psn, p.opcode, p.ack_req, p.payload_bytes, p.payload, p.dma_length_bytes)


def _bursts(qp: SendQueuePair, now: float, floor_s: float, limit: int = 1024) -> list[Burst]:
    out = []
    while limit > 0:
        burst = qp.poll_burst(now=now, floor_s=floor_s, max_packets=min(64, limit))
        if burst is None:
            break
        limit -= burst.count
        out.append(burst)
    return out


def _check_bytes(burst: Burst, gso: bool = True) -> None:
    """The writer's buffer, segment by segment, against encode() of the same packets."""
    icrc = IcrcContext(ADDRESS)
    writer = BurstWriter(icrc, BurstBuffer(65535 * 2), 64)
    used = writer.write(burst, gso=gso)
    at = 0
    for i, packet in enumerate(burst.to_packets()):
        expected = encode(packet, icrc, i if gso else 0)
        assert bytes(writer.buf[at : at + len(expected)]) == expected, f"segment {i}"
        if i < burst.count - 1:
            assert len(expected) == burst.segment_bytes
        at += len(expected)
    assert at == used == burst.wire_bytes


def test_burst_is_the_packets_poll_transmit_gives() -> None:
    a = _qp(path_mtu_bytes=1024, ack_every_packets=4, initial_psn=0xFFFFFA)
    b = _qp(path_mtu_bytes=1024, ack_every_packets=4, initial_psn=0xFFFFFA)
    for qp in (a, b):
        qp.post_send(now=0.0, message_id=1, size_bytes=5 * 1024)
        qp.post_send(now=0.0, message_id=2, size_bytes=1024)  # an ONLY of full size
        qp.post_send(now=0.0, message_id=3, size_bytes=3 * 1024 + 10)  # ends short
        qp.post_send(now=0.0, message_id=4, size_bytes=2048)
    ref = [list(x) for x in gso_batches(take_due(a, now=0.0, floor_s=-1.0, max_packets=1024), 64)]
    got = _bursts(b, 0.0, -1.0)
    assert [[_wire(p) for p in x] for x in ref] == [[_wire(p) for p in x.to_packets()] for x in got]
    # one buffer up to the short last packet of message 3, then message 4
    assert [x.count for x in got] == [10, 2]
    first = got[0]
    assert first.psn == 0xFFFFFA and first.segment_bytes == 12 + 1024 + 4
    assert first.opcodes == bytes([0, 1, 1, 1, 2, 4, 0, 1, 1, 2])
    assert first.ack_req_at == [3, 4, 5, 9]  # every 4th since the last one, every message end
    assert first.last_payload_bytes == 10 and first.last_segment_bytes == 12 + 12 + 4
    for burst in got:
        _check_bytes(burst)
        _check_bytes(burst, gso=False)


def test_burst_bytes_after_go_back_n_and_psn_wrap() -> None:
    qp = _qp(path_mtu_bytes=256, initial_psn=0xFFFFF0, window_packets=40)
    qp.post_send(now=0.0, message_id=1, size_bytes=100 * 256 + 3)
    sent = [p for burst in _bursts(qp, 0.0, -1.0) for p in burst.to_packets()]
    assert len(sent) == 40  # the window
    qp.on_ack(now=1e-3, packet=AckPacket(0x123456, sent[9].psn, AETH_NAK_PSN_SEQUENCE_ERROR))
    again = _bursts(qp, 1e-3, 0.0)
    resent = [p for burst in again for p in burst.to_packets()]
    assert [_wire(p) for p in resent[:31]] == [_wire(p) for p in sent[9:]]
    assert again[0].retransmitted == 31 and qp.packets_retransmitted == 31
    assert resent[31].psn == (sent[-1].psn + 1) & 0xFFFFFF  # then new packets (9 more)
    assert len(resent) == 40
    for burst in again:
        _check_bytes(burst)


def test_an_ack_during_go_back_n_moves_the_resend_cursor() -> None:
    """An ACK beyond what was resent so far (a late ACK of the first transmission) skips those
    packets, burst or not; one that only covers resent packets changes nothing."""
    a = _qp(path_mtu_bytes=256, initial_psn=0xFFFFFC)
    b = _qp(path_mtu_bytes=256, initial_psn=0xFFFFFC)
    for qp in (a, b):
        qp.post_send(now=0.0, message_id=1, size_bytes=6 * 256)
        qp.post_send(now=0.0, message_id=2, size_bytes=6 * 256)
    sent = take_due(a, now=0.0, floor_s=-1.0, max_packets=100)
    assert [_wire(p) for p in sent] == [
        _wire(p) for x in _bursts(b, 0.0, -1.0) for p in x.to_packets()
    ]
    nak = AckPacket(0x123456, sent[2].psn, AETH_NAK_PSN_SEQUENCE_ERROR)
    late = AckPacket(0x123456, sent[7].psn, AETH_ACK)
    for qp in (a, b):
        qp.on_ack(now=1e-3, packet=nak)
    first = take_due(a, now=1e-3, floor_s=0.0, max_packets=3)
    assert [p.psn for p in first] == [sent[i].psn for i in (2, 3, 4)]
    assert [_wire(p) for p in first] == [_wire(p) for p in _bursts(b, 1e-3, 0.0, 3)[0].to_packets()]
    for qp in (a, b):
        qp.on_ack(now=2e-3, packet=late)  # message 1 completes; resend goes on at sent[8]
    rest = take_due(a, now=2e-3, floor_s=1e-3, max_packets=100)
    assert [p.psn for p in rest] == [sent[i].psn for i in (8, 9, 10, 11)]
    assert [_wire(p) for p in rest] == [
        _wire(p) for x in _bursts(b, 2e-3, 1e-3) for p in x.to_packets()
    ]
    assert a.events == b.events and b.packets_retransmitted == a.packets_retransmitted == 7
    assert b.bytes_acked == 8 * 256


def test_write_first_and_payload_bursts_take_the_codec_path() -> None:
    qp = _qp(verb="write", path_mtu_bytes=512)
    qp.post_send(now=0.0, message_id=1, size_bytes=3 * 512)
    qp.post_send(now=0.0, message_id=2, size_bytes=500, payload=bytes(range(250)) * 2)
    got = _bursts(qp, 0.0, -1.0)
    # the RETH packet and the shorter middle one after it; the last; the only (bigger: RETH)
    assert [x.count for x in got] == [2, 1, 1]
    assert got[0].opcodes == bytes([Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE])
    assert got[0].packets is not None and got[0].packets[0].dma_length_bytes == 3 * 512
    assert got[2].packets is not None and got[2].packets[0].payload == bytes(range(250)) * 2
    for burst in got:
        _check_bytes(burst)


def test_burst_paces_like_take_due_and_never_beyond_the_rate() -> None:
    rate = 1e9
    a = _qp(path_mtu_bytes=4096, line_rate_bps=rate, window_packets=1 << 20)
    b = _qp(path_mtu_bytes=4096, line_rate_bps=rate, window_packets=1 << 20)
    for qp in (a, b):
        qp.post_send(now=0.0, message_id=1, size_bytes=4096 * 20_000)
    sent_a = sent_b = 0
    now = 0.0
    for tick in range(400):
        now = tick * 1e-3 + (0.0007 if tick % 7 == 0 else 0.0)  # some ticks late
        floor = now - 2e-3
        sent_a += len(take_due(a, now=now, floor_s=floor, max_packets=1024))
        sent_b += sum(x.count for x in _bursts(b, now, floor))
        assert abs(sent_a - sent_b) <= 1
    wire_bits = (12 + 4096 + 4 + 20 + 8 + 38) * 8
    assert sent_b * wire_bits / rate <= now + 2e-3 + wire_bits / rate
    assert sent_b * wire_bits / rate >= now - 2e-3
    assert b.next_transmit_s() == pytest.approx(a.next_transmit_s(), rel=1e-9)


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9000), min_size=1, max_size=5),
    mtu=st.sampled_from([256, 1024, 4096]),
    ack_every=st.integers(1, 20),
    window=st.integers(1, 200),
    verb=st.sampled_from(["send", "write"]),
    initial_psn=st.integers((1 << 24) - 60, (1 << 24) - 1),
    losses=st.lists(st.booleans(), max_size=300),
    per_tick=st.sampled_from([3, 17, 1024]),
)
def test_burst_and_per_packet_senders_stay_identical_through_losses(
    sizes: list[int],
    mtu: int,
    ack_every: int,
    window: int,
    verb: str,
    initial_psn: int,
    losses: list[bool],
    per_tick: int,
) -> None:
    """Twin queue pairs, one driven packet by packet (take_due + gso_batches), one by bursts, over
    a lossy wire with one receiver answering the first: every tick they send the same packets in
    the same GSO batches, and they see the same ACKs, NAKs, timeouts and events. A small
    per-tick budget makes ACKs arrive while a go-back-N resend is under way."""
    kw = {
        "path_mtu_bytes": mtu,
        "ack_every_packets": ack_every,
        "window_packets": window,
        "retransmit_timeout_s": 5 * TICK_S,
    }
    a = _qp(verb, initial_psn, **kw)
    b = _qp(verb, initial_psn, **kw)
    c = _qp(verb, initial_psn, **kw)
    rx = ReceiveQueuePair(
        qpn=0x123456,
        remote_qp=1,
        params=TransportParams(window_packets=window),
        initial_psn=initial_psn,
    )
    for i, size in enumerate(sizes):
        for qp in (a, b, c):
            qp.post_send(now=0.0, message_id=i, size_bytes=size)
    lost = iter(losses)
    for tick in range(3000):
        if a.idle:
            break
        now = tick * TICK_S
        for qp in (a, b, c):
            deadline = qp.next_timer_s()
            if deadline is not None and deadline <= now:
                qp.on_timer(now=now)
        floor = now - 2 * TICK_S
        ref = gso_batches(take_due(a, now=now, floor_s=floor, max_packets=per_tick), 64)
        got = _bursts(b, now, floor, per_tick)
        # a third polled only when due_to_send says so (as the NIC's arbiter does) sends the same
        # and counts the same pacing deficit
        asked = _bursts(c, now, floor, per_tick) if c.due_to_send(now) else []
        assert [x.to_packets() for x in asked] == [x.to_packets() for x in got]
        assert [[_wire(p) for p in x] for x in ref] == [
            [_wire(p) for p in x.to_packets()] for x in got
        ]
        for burst in got:
            _check_bytes(burst)
        for batch in ref:
            for packet in batch:
                if next(lost, False):
                    continue
                for reply in rx.on_data(now=now, packet=packet, ce=False):
                    if isinstance(reply, AckPacket) and not next(lost, False):
                        for qp in (a, b, c):
                            qp.on_ack(now=now, packet=reply)
        assert a.events == b.events == c.events
        assert (b.pacing_lost_bytes, b.pacing_lost_s) == (c.pacing_lost_bytes, c.pacing_lost_s)
        assert (a.packets_sent, a.packets_retransmitted, a.bytes_acked, a.idle) == (
            b.packets_sent,
            b.packets_retransmitted,
            b.bytes_acked,
            b.idle,
        )
    assert a.idle and b.idle
    assert b.bytes_acked == sum(sizes)


def test_poll_burst_refuses_a_queue_pair_paced_by_max_burst() -> None:
    params = TransportParams(congestion_control="none")
    qp = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=1e9, max_burst_s=1e-3)
    qp.post_send(now=0.0, message_id=1, size_bytes=10)
    with pytest.raises(ValueError, match="max_burst_s"):
        qp.poll_burst(now=0.0, floor_s=0.0, max_packets=64)


# -- receiving -----------------------------------------------------------------------------
def test_read_data_run_reads_back_what_the_writer_wrote() -> None:
    qp = _qp(path_mtu_bytes=1024, ack_every_packets=5, initial_psn=100)
    qp.post_send(now=0.0, message_id=1, size_bytes=20 * 1024 + 6)
    burst = _bursts(qp, 0.0, -1.0)[0]
    writer = BurstWriter(IcrcContext(ADDRESS), BurstBuffer(65535 * 2), 64)
    used = writer.write(burst)
    run = read_data_run(writer.buf, used, burst.segment_bytes)
    assert run is not None
    assert (run.dest_qp, run.psn, run.payload_bytes, run.last_payload_bytes) == (
        0x123456,
        100,
        1024,
        6,
    )
    assert bytes(run.opcodes) == burst.opcodes and run.ack_req_at == burst.ack_req_at
    # a datagram alone (no GRO) is a run of one
    one = read_data_run(writer.buf, burst.segment_bytes, 0)
    assert one is not None and one.opcodes == (0,) and one.payload_bytes == 1024
    # a gap in the PSNs, or another QP, is not a run
    mangled = bytearray(writer.buf[:used])
    mangled[3 * burst.segment_bytes + 11] ^= 1
    assert read_data_run(mangled, used, burst.segment_bytes) is None
    mangled = bytearray(writer.buf[:used])
    mangled[2 * burst.segment_bytes + 7] ^= 1
    assert read_data_run(mangled, used, burst.segment_bytes) is None
    mangled = bytearray(writer.buf[:used])
    mangled[0] = Opcode.ACKNOWLEDGE
    assert read_data_run(mangled, used, burst.segment_bytes) is None


_SEND_OPS = [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY]


def _state(rx: ReceiveQueuePair) -> tuple[Any, ...]:
    return (
        rx.expected_psn,
        rx.delivered_bytes,
        rx.ce_packets,
        rx.cnps_sent,
        dict(rx.drops),
        rx._message_index,
        rx._message_offset,
        rx._in_message,
        rx._nak_sent,
    )


@st.composite
def _runs(draw: st.DrawFn) -> list[tuple[int, list[int], list[int], int, int, bool]]:
    """Runs near the expected PSN: mostly well-formed streams, sometimes not."""
    out = []
    psn = 1000
    for _ in range(draw(st.integers(1, 8))):
        count = draw(st.integers(1, 40))
        if draw(st.booleans()):
            ops = [Opcode.SEND_MIDDLE] * count
            for i in draw(st.lists(st.integers(0, count - 1), max_size=3)):
                ops[i] = Opcode.SEND_LAST
                if i + 1 < count:
                    ops[i + 1] = Opcode.SEND_FIRST
        else:
            ops = draw(st.lists(st.sampled_from(_SEND_OPS), min_size=count, max_size=count))
        acks = sorted(set(draw(st.lists(st.integers(0, count - 1), max_size=6))))
        start = psn + draw(st.sampled_from([0, 0, 0, 1, -3, 5]))
        out.append(
            (
                start,
                [int(op) for op in ops],
                acks,
                256,
                draw(st.integers(0, 256)),
                draw(st.booleans()) and draw(st.booleans()),
            )
        )
        psn = start + count
    return out


@settings(max_examples=200, deadline=None)
@given(runs=_runs(), in_message=st.booleans())
def test_on_data_run_answers_like_on_data_per_packet(
    runs: list[tuple[int, list[int], list[int], int, int, bool]], in_message: bool
) -> None:
    params = TransportParams(window_packets=64)
    one = ReceiveQueuePair(qpn=9, remote_qp=4, params=params, initial_psn=1000)
    many = ReceiveQueuePair(qpn=9, remote_qp=4, params=params, initial_psn=1000)
    for rx in (one, many):
        rx._in_message = in_message
    now = 0.0
    for psn, ops, acks, payload, last_payload, ce in runs:
        now += 1e-5
        expected = []
        for i, op in enumerate(ops):
            n = last_payload if i == len(ops) - 1 else payload
            packet = DataPacket(9, psn + i, op, i in acks, n)
            expected.extend(one.on_data(now=now, packet=packet, ce=ce))
        got = many.on_data_run(
            now=now,
            psn=psn,
            opcodes=ops,
            ack_req_at=acks,
            payload_bytes=payload,
            last_payload_bytes=last_payload,
            ce=ce,
        )
        assert got == expected
        assert _state(many) == _state(one)
        assert many.events == one.events


def test_on_data_run_fast_path_acks_and_message_ends() -> None:
    rx = ReceiveQueuePair(qpn=9, remote_qp=4, params=TransportParams(), initial_psn=0xFFFFFE)
    ops = [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY]
    replies = rx.on_data_run(
        now=1.0,
        psn=0xFFFFFE,
        opcodes=ops,
        ack_req_at=[1, 2, 3],
        payload_bytes=1024,
        last_payload_bytes=7,
        ce=False,
    )
    assert replies == [
        AckPacket(4, 0xFFFFFF, AETH_ACK, 0),
        AckPacket(4, 0, AETH_ACK, 1),
        AckPacket(4, 1, AETH_ACK, 2),
    ]
    assert rx.expected_psn == 2 and rx.delivered_bytes == 3 * 1024 + 7
    assert rx.events == [MessageReceived(9, 0, 3 * 1024, 1.0), MessageReceived(9, 1, 7, 1.0)]
    assert not rx.drops


@settings(max_examples=150, deadline=None)
@given(
    offsets=st.lists(st.integers(-5, 25), min_size=1, max_size=12),
    nak_first=st.booleans(),
)
def test_on_acks_is_on_ack_for_each(offsets: list[int], nak_first: bool) -> None:
    """A read's worth of ACKs at once: the same completions, drops and go-back-N state as one
    on_ack per ACK, also with stale ACKs and ones for PSNs never sent."""
    a = _qp(path_mtu_bytes=256, initial_psn=0xFFFFF8)
    b = _qp(path_mtu_bytes=256, initial_psn=0xFFFFF8)
    for qp in (a, b):
        for i in range(4):
            qp.post_send(now=0.0, message_id=i, size_bytes=5 * 256 - i)
    sent = take_due(a, now=0.0, floor_s=-1.0, max_packets=20)
    _bursts(b, 0.0, -1.0, 20)
    if nak_first:
        for qp in (a, b):
            qp.on_ack(now=1e-3, packet=AckPacket(1, sent[3].psn, AETH_NAK_PSN_SEQUENCE_ERROR))
            qp.on_ack(now=1e-3, packet=AckPacket(1, sent[0].psn, AETH_ACK))
    psns = [(sent[0].psn + k) & 0xFFFFFF for k in offsets]
    for psn in psns:
        a.on_ack(now=2e-3, packet=AckPacket(1, psn, AETH_ACK))
    b.on_acks(now=2e-3, psns=psns)
    assert a.events == b.events
    assert (a.bytes_acked, dict(a.drops), a.idle) == (b.bytes_acked, dict(b.drops), b.idle)
    # (a burst's packet times are first + i * spacing, not a running sum: equal to rounding)
    assert b.next_timer_s() == pytest.approx(a.next_timer_s(), abs=1e-12)
    rest_a = take_due(a, now=3e-3, floor_s=2e-3, max_packets=100)
    rest_b = [p for x in _bursts(b, 3e-3, 2e-3) for p in x.to_packets()]
    assert [_wire(p) for p in rest_a] == [_wire(p) for p in rest_b]


def test_read_ack_run_takes_acks_to_one_qp_only() -> None:
    icrc = IcrcContext(ADDRESS)
    buf = bytearray(2000)
    acks = [AckPacket(7, psn, AETH_ACK, 3) for psn in (5, 9, 0xFFFFFF)]
    used, segment = layout_gso(buf, acks, icrc, ip_id_first=0)
    assert read_ack_run(buf, used, segment) == (7, [5, 9, 0xFFFFFF])
    assert read_ack_run(buf, segment, 0) == (7, [5])
    with_nak = [*acks[:2], AckPacket(7, 10, AETH_NAK_PSN_SEQUENCE_ERROR)]
    used, segment = layout_gso(buf, with_nak, icrc, ip_id_first=0)
    assert read_ack_run(buf, used, segment) is None
    two_qps = [*acks[:2], AckPacket(8, 10, AETH_ACK)]
    used, segment = layout_gso(buf, two_qps, icrc, ip_id_first=0)
    assert read_ack_run(buf, used, segment) is None


def test_dcqcn_byte_counter_increases_end_bursts_like_packet_by_packet() -> None:
    """With DCQCN active (after a CNP) its byte counter raises the rate every few packets: a
    burst ends at each raise and the rest is spaced at the new rate, so both ways send the same
    packets per tick and report the same rate changes (times equal up to rounding)."""
    from emulator.transport.events import RateChanged
    from emulator.transport.params import DcqcnParams

    params = TransportParams(
        congestion_control="dcqcn",
        path_mtu_bytes=1024,
        window_packets=1 << 20,
        dcqcn=DcqcnParams(rpg_byte_reset_bytes=5000, rpg_time_reset_us=1e6),
    )
    a, b = (SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=1e9) for _ in range(2))
    for qp in (a, b):
        qp.post_send(now=0.0, message_id=1, size_bytes=1024 * 5000)
        qp.on_cnp(now=0.0)
    counts_a, counts_b = [], []
    for tick in range(1, 200):
        now = tick * TICK_S
        if tick % 25 == 0:  # keep it cutting and climbing back
            for qp in (a, b):
                qp.on_cnp(now=now)
        counts_a.append(len(take_due(a, now=now, floor_s=now - 2 * TICK_S, max_packets=1024)))
        counts_b.append(sum(x.count for x in _bursts(b, now, now - 2 * TICK_S)))
    changes_a = [e for e in a.events if isinstance(e, RateChanged)]
    changes_b = [e for e in b.events if isinstance(e, RateChanged)]
    assert sum(e.reason != "cnp" for e in changes_a) > 30  # the byte counter really fired
    assert [e.current_rate_bps for e in changes_b] == [e.current_rate_bps for e in changes_a]
    assert [e.now_s for e in changes_b] == pytest.approx([e.now_s for e in changes_a], abs=1e-12)
    assert all(abs(x - y) <= 1 for x, y in zip(counts_a, counts_b, strict=True))
    assert abs(sum(counts_a) - sum(counts_b)) <= 1


def test_pacing_deficit_counts_credit_cut_while_backlogged() -> None:
    """A queue pair with data that is polled late loses the credit the floor cuts (its rate
    allowed those bytes); one polled on time, or one that had nothing to send, loses none."""
    qp = _qp(line_rate_bps=1e9)
    qp.post_send(now=0.0, message_id=1, size_bytes=1 << 20)
    assert qp.poll_burst(now=0.0, floor_s=0.0, max_packets=4) is not None
    assert qp.pacing_lost_bytes == 0.0
    due = qp.next_transmit_s()
    assert due is not None
    # polled 1 ms after it was due, with a bucket of 0.1 ms: 0.9 ms at 1 Gb/s is lost
    late = due + 1e-3
    assert qp.poll_burst(now=late, floor_s=late - 1e-4, max_packets=64) is not None
    assert qp.pacing_lost_bytes == pytest.approx(0.9e-3 * 1e9 / 8)
    assert qp.pacing_lost_s == pytest.approx(0.9e-3)  # the time it could have been sending
    # the caller says its NIC was the bottleneck: not the queue pair's deficit
    before = qp.pacing_lost_bytes
    due = qp.next_transmit_s()
    assert due is not None
    qp.poll_burst(now=due + 1e-3, floor_s=due + 0.9e-3, max_packets=1, count_lost=False)
    assert qp.pacing_lost_bytes == before
    # an idle queue pair posted to later is not behind for the time it had nothing
    idle = _qp(line_rate_bps=1e9)
    idle.post_send(now=0.0, message_id=1, size_bytes=1000)
    assert idle.poll_burst(now=0.0, floor_s=0.0, max_packets=4) is not None
    assert idle.poll_burst(now=1.0, floor_s=0.9, max_packets=4) is None  # nothing to send
    idle.post_send(now=2.0, message_id=2, size_bytes=1000)
    assert idle.poll_burst(now=2.0, floor_s=1.9, max_packets=4) is not None
    assert idle.pacing_lost_bytes == 0.0


def test_due_to_send_records_a_queue_pair_left_with_nothing_as_poll_burst_does() -> None:
    """A queue pair backlogged with a go-back-N resend that a late ACK of the first transmission
    then ends has nothing to send: asked by due_to_send instead of polled, it too must not count
    the time until its next message as pacing it lost."""
    lost = []
    for ask in (False, True):
        qp = _qp(line_rate_bps=1e9, path_mtu_bytes=256)
        qp.post_send(now=0.0, message_id=1, size_bytes=8 * 256)
        sent = [p for x in _bursts(qp, 0.0, -1.0) for p in x.to_packets()]
        qp.on_ack(now=1e-3, packet=AckPacket(0x123456, sent[0].psn, AETH_NAK_PSN_SEQUENCE_ERROR))
        assert qp.poll_burst(now=1e-3, floor_s=0.0, max_packets=2) is not None  # backlogged
        qp.on_ack(now=2e-3, packet=AckPacket(0x123456, sent[-1].psn, AETH_ACK))
        assert qp.next_transmit_s() is None  # every packet acknowledged: nothing to resend
        if ask:
            assert not qp.due_to_send(3e-3)
        else:
            assert qp.poll_burst(now=3e-3, floor_s=2e-3, max_packets=4) is None
        qp.post_send(now=1.0, message_id=2, size_bytes=256)
        assert qp.poll_burst(now=1.0, floor_s=0.9, max_packets=4) is not None
        lost.append(qp.pacing_lost_bytes)
    assert lost == [0.0, 0.0]


class _StepRate(CongestionControl):
    """A controller the test moves: a CNP drops it to a crawl, a timer restores line rate."""

    def __init__(self, params: TransportParams, *, line_rate_bps: float) -> None:
        super().__init__(params, line_rate_bps=line_rate_bps)
        self.rate = line_rate_bps

    @property
    def rate_bps(self) -> float:
        return self.rate

    def on_cnp(self, *, now: float) -> bool:
        self.rate = 1e6
        return True

    def on_timer(self, *, now: float) -> bool:
        self.rate = self.line_rate_bps
        return True


def test_a_queue_pair_that_speeds_up_sends_from_the_change_not_before_it() -> None:
    """A token bucket earns credit at the rate in force (RFC 2697: tokens are added CIR times a
    second), so a rate change counts from the moment it happens, never back to the last packet.
    A QP held to 1 Mb/s for 1 ms (under a packet of credit) and then restored to 1 Gb/s sends
    its next packet at the restore, with no burst of what 1 Gb/s would have earned since its
    last packet, and that credit is no pacing deficit (it was counted as one before)."""
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024)
    cc = _StepRate(params, line_rate_bps=1e9)
    qp = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=1e9, cc=cc)
    qp.post_send(now=0.0, message_id=1, size_bytes=1 << 20)
    assert qp.poll_burst(now=0.0, floor_s=0.0, max_packets=1) is not None
    qp.on_cnp(now=1e-6)  # a crawl: the next packet ~8 ms away
    due = qp.next_transmit_s()
    assert due is not None and due > 5e-3
    qp.on_timer(now=1e-3)  # back to line rate
    assert qp.next_transmit_s() == 1e-3
    # polled at the restore with a 0.5 ms bucket: one packet, nothing lost
    burst = qp.poll_burst(now=1e-3, floor_s=0.5e-3, max_packets=64)
    assert burst is not None and burst.count == 1
    assert qp.pacing_lost_bytes == 0.0
    # a change that leaves the next packet in the future keeps it there (spaced from the last)
    qp.on_cnp(now=1e-3)
    assert qp.next_transmit_s() == pytest.approx(1e-3 + (1024 + 12 + 4 + 54) * 8 / 1e6, rel=0.05)
