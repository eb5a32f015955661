"""poll_burst with `buffers` > 1 (the native send path's several GSO buffers per poll) hands out
what polls of one buffer each would: over a serve (polls until nothing is due or the NIC's
budget is spent), the same packets in the same order, pacing times, AckReq bits, events and
state, through message ends, go-back-N and rate changes. Only the grouping may differ where a
burst ends early (a shorter packet ends a burst either way). Times are compared to rounding:
one poll adds k spacings to its first time where k polls add one at a time."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from emulator.transport.burst import Burst
from emulator.transport.packets import AETH_NAK_PSN_SEQUENCE_ERROR, AckPacket, DataPacket
from emulator.transport.params import TransportParams
from emulator.transport.sender import SendQueuePair

DEST_QP = 0x000321


def _qp(cc: str, mtu: int, ack_every: int, window: int, initial_psn: int) -> SendQueuePair:
    params = TransportParams(
        congestion_control=cc,
        path_mtu_bytes=mtu,
        ack_every_packets=ack_every,
        window_packets=window,
    )
    return SendQueuePair(
        qpn=1, dest_qp=DEST_QP, params=params, line_rate_bps=10e9, initial_psn=initial_psn
    )


def _wire(p: DataPacket) -> tuple[object, ...]:
    return (p.dest_qp, p.psn, p.opcode, p.ack_req, p.payload_bytes, p.dma_length_bytes)


def _fields(event: object) -> tuple[object, ...]:
    """An event's fields, times rounded (they may differ in the last bits: see above)."""
    values = dataclasses.astuple(event)  # type: ignore[call-overload]
    return (type(event), *(round(v, 12) if isinstance(v, float) else v for v in values))


def _serve(
    qp: SendQueuePair, now: float, floor_s: float, max_packets: int, buffers: int, budget: int
) -> list[Burst]:
    """Polls until nothing is due or `budget` packets are taken (the NIC's budget)."""
    out = []
    while budget > 0:
        burst = qp.poll_burst(
            now=now, floor_s=floor_s, max_packets=min(max_packets, budget), buffers=buffers
        )
        if burst is None:
            break
        out.append(burst)
        budget -= burst.count
    return out


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=4),
    mtu=st.sampled_from([256, 1024, 4096]),
    ack_every=st.integers(1, 20),
    window=st.integers(1, 3000),
    cc=st.sampled_from(["none", "dcqcn"]),
    k=st.integers(2, 6),
    per_buffer=st.sampled_from([7, 64]),
    initial_psn=st.integers((1 << 24) - 500, (1 << 24) - 1),
    events=st.lists(st.sampled_from(["tick", "ack", "nak", "cnp"]), min_size=1, max_size=40),
    budget=st.integers(1, 2000),
)
def test_a_poll_of_several_buffers_is_the_polls_in_a_row(
    sizes: list[int],
    mtu: int,
    ack_every: int,
    window: int,
    cc: str,
    k: int,
    per_buffer: int,
    initial_psn: int,
    events: list[str],
    budget: int,
) -> None:
    chained = _qp(cc, mtu, ack_every, window, initial_psn)
    joined = _qp(cc, mtu, ack_every, window, initial_psn)
    for qp in (chained, joined):
        for i, size in enumerate(sizes):
            qp.post_send(now=0.0, message_id=i, size_bytes=size)
    now = 0.0
    sent: list[DataPacket] = []
    for event in events:
        now += 2e-4
        if event == "ack" and sent:
            for qp in (chained, joined):
                qp.on_ack(now=now, packet=AckPacket(DEST_QP, sent[len(sent) // 2].psn))
        elif event == "nak" and sent:
            nak = AckPacket(DEST_QP, sent[len(sent) // 3].psn, AETH_NAK_PSN_SEQUENCE_ERROR)
            for qp in (chained, joined):
                qp.on_ack(now=now, packet=nak)
        elif event == "cnp":
            for qp in (chained, joined):
                qp.on_cnp(now=now)
        floor = now - 1e-4
        ref = _serve(chained, now, floor, per_buffer, 1, budget)
        got = _serve(joined, now, floor, k * per_buffer, k, budget)
        want = [_wire(p) for b in ref for p in b.to_packets()]
        assert [_wire(p) for b in got for p in b.to_packets()] == want
        assert sum(b.retransmitted for b in got) == sum(b.retransmitted for b in ref)
        assert len(got) <= len(ref)
        sent.extend(p for b in got for p in b.to_packets())
        assert [_fields(e) for e in joined.events] == [_fields(e) for e in chained.events]
        assert joined.packets_sent == chained.packets_sent
        for ours, theirs in (
            (joined.next_transmit_s(), chained.next_transmit_s()),
            (joined.next_timer_s(), chained.next_timer_s()),
            (joined.pacing_lost_bytes, chained.pacing_lost_bytes),
        ):
            assert (ours is None) == (theirs is None)
            assert ours == theirs or ours == approx(theirs, rel=1e-9, abs=1e-15)


def test_one_poll_takes_several_full_buffers() -> None:
    """The case it is for: a lone queue pair with a long message and credit for more than a
    GSO buffer gets four buffers' worth (62 segments of 1024 bytes fill one) in one poll."""
    chained = _qp("none", 1024, 16, 4096, 0)
    joined = _qp("none", 1024, 16, 4096, 0)
    for qp in (chained, joined):
        qp.post_send(now=0.0, message_id=1, size_bytes=1 << 20)
    ref = _serve(chained, 1e-3, 0.0, 64, 1, 4 * 62)
    got = _serve(joined, 1e-3, 0.0, 4 * 64, 4, 4 * 62)
    assert [b.count for b in ref] == [62] * 4 and [b.count for b in got] == [4 * 62]
    assert [_wire(p) for p in got[0].to_packets()] == [
        _wire(p) for b in ref for p in b.to_packets()
    ]
