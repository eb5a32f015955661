"""Selective repeat (transport.reliability: selective) against hand-computed cases, its SACK on the
wire against scapy, and reordering counted as RFC 4737 defines it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP

from emulator.transport.events import FlowCompleted, MessageReceived, Retransmitted
from emulator.transport.packets import (
    AckPacket,
    DataPacket,
    Opcode,
    SackPacket,
    sack_words,
)
from emulator.transport.params import SACK_MAX_PACKETS, TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sack import Scoreboard
from emulator.transport.scapy_layers import SACKETH
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, decode, encode, ipv4_packet

MTU = 1024
SELECTIVE = TransportParams(
    congestion_control="none", path_mtu_bytes=MTU, reliability="selective", ack_every_packets=4
)
GO_BACK_N = TransportParams(congestion_control="none", path_mtu_bytes=MTU, ack_every_packets=4)


def _drain(tx: SendQueuePair, now: float) -> list[DataPacket]:
    """Everything the requester sends from `now` on (its pacing: a packet per ns at most)."""
    out = []
    for i in range(1000):
        p = tx.poll_transmit(now=now + i * 1e-9)
        if p is not None:
            out.append(p)
        elif tx.next_transmit_s() is None:
            break
    return out


def _data(psn: int, opcode: Opcode = Opcode.SEND_MIDDLE, ack_req: bool = False) -> DataPacket:
    return DataPacket(1, psn, int(opcode), ack_req, MTU)


# -- the responder ------------------------------------------------------------------------


def test_responder_holds_out_of_order_packets_and_completes_the_message_once_in_order() -> None:
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=SELECTIVE)
    first, last = Opcode.SEND_FIRST, Opcode.SEND_LAST
    # 0 arrives, then 2 and 3 (1 is late): 2 opens a gap and is answered with a SACK
    assert rx.on_data(now=0.0, packet=_data(0, first), ce=False) == []
    out = rx.on_data(now=1.0, packet=_data(2), ce=False)
    assert out == [SackPacket(1, 0, 1, 0b10, 1, 0)]  # cumulative 0; of 1, 2, ...: 2 held
    out = rx.on_data(now=2.0, packet=_data(3, last, ack_req=True), ce=False)
    assert out == [SackPacket(1, 0, 1, 0b110, 1, 0)]
    assert not [e for e in rx.events if isinstance(e, MessageReceived)]
    assert rx.drops == {}
    # 1 fills the gap: 1, 2, 3 are taken in order, the message completes, one ACK covers all
    out = rx.on_data(now=3.0, packet=_data(1), ce=False)
    assert out == [AckPacket(1, 3, msn=1)]
    received = [e for e in rx.events if isinstance(e, MessageReceived)]
    assert len(received) == 1 and received[0].size_bytes == 4 * MTU
    assert rx.delivered_bytes == 4 * MTU
    assert rx.held_packets == 2
    # RFC 4737: 1 came after 3, two below the highest seen
    assert (rx.reordered_packets, rx.reorder_extent_max, rx.reorder_extent_sum) == (1, 2, 2)


def test_go_back_n_responder_drops_what_is_ahead_and_does_not_count_resends_as_reordered() -> None:
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=GO_BACK_N)
    rx.on_data(now=0.0, packet=_data(0, Opcode.SEND_FIRST), ce=False)
    out = rx.on_data(now=1.0, packet=_data(2), ce=False)
    assert out[0].is_nak and rx.drops["out_of_sequence"] == 1
    # the late original of 1: reordered (extent 1); the resend of 2 after it: not
    rx.on_data(now=2.0, packet=_data(1), ce=False)
    rx.on_data(now=3.0, packet=_data(2, Opcode.SEND_LAST), ce=False)
    assert (rx.reordered_packets, rx.reorder_extent_max) == (1, 1)
    assert rx.expected_psn == 3


def test_responder_answers_a_duplicate_of_a_held_packet_with_a_sack() -> None:
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=SELECTIVE)
    rx.on_data(now=0.0, packet=_data(0, Opcode.SEND_FIRST), ce=False)
    rx.on_data(now=0.0, packet=_data(5), ce=False)
    out = rx.on_data(now=0.0, packet=_data(5, ack_req=True), ce=False)
    assert rx.drops["duplicate"] == 1
    assert out == [SackPacket(1, 0, 1, 1 << 4, 1, 0)]


# -- the requester's scoreboard --------------------------------------------------------------


def test_scoreboard_declares_a_hole_lost_only_after_the_allowance() -> None:
    board = Scoreboard(allowance=3)
    # una 0, sent 0..9; held: 2, 3 (two above hole 0 and 1): not yet lost
    assert board.on_sack(0, 10, 0, 0b1100) == []
    # 4 held too: three above 0 and 1, which are lost; 5.. not (nothing above them)
    assert board.on_sack(0, 10, 0, 0b11100) == [0, 1]
    # the same holes are not declared twice; 6 lost once 7, 8, 9 are held
    assert board.on_sack(0, 10, 0, 0b1110011100) == [5, 6]
    assert board.resend_pending(0) and board.next_resend() == 0
    assert board.run_length(0, 10) == 2
    board.take(2)
    assert board.next_resend() == 5 and board.run_length(0, 10) == 2


def test_scoreboard_timeout_resends_every_packet_not_held() -> None:
    board = Scoreboard(allowance=8)
    board.on_sack(0, 6, 0, 0b10100)
    assert board.all_lost(0, 6) == 4  # 0, 1, 3, 5
    got = []
    while board.resend_pending(0):
        got.append(board.next_resend())
        board.take(1)
    assert got == [0, 1, 3, 5]


def test_scoreboard_drops_what_became_acknowledged_or_held_from_the_queue() -> None:
    board = Scoreboard(allowance=1)
    assert board.on_sack(0, 8, 0, 0b100) == [0, 1]
    board.advance(1)  # 0 acknowledged: una 1, held bit for 2 is now bit 1
    assert board.held == 0b10
    assert board.resend_pending(1) and board.next_resend() == 1


def test_requester_resends_only_the_lost_packet_after_the_allowance() -> None:
    params = TransportParams(
        congestion_control="none",
        path_mtu_bytes=MTU,
        reliability="selective",
        reorder_allowance_packets=2,
    )
    tx = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=1e12)
    tx.post_send(now=0.0, message_id=7, size_bytes=6 * MTU)
    assert [p.psn for p in _drain(tx, 1.0)] == [0, 1, 2, 3, 4, 5]
    # 1 is missing: 0 cumulative, 2 held (one above: not lost yet)
    tx.on_ack(now=2.0, packet=SackPacket(1, 0, 1, 0b10, 1))
    assert _drain(tx, 2.0) == []
    # 2 and 3 held: 1 is lost, and only 1 leaves again, asking for an answer
    tx.on_ack(now=3.0, packet=SackPacket(1, 0, 1, 0b110, 1))
    again = _drain(tx, 3.0)
    assert [(p.psn, p.ack_req) for p in again] == [(1, True)]
    assert tx.packets_retransmitted == 1
    assert [e.reason for e in tx.events if isinstance(e, Retransmitted)] == ["sack"]
    tx.on_ack(now=4.0, packet=AckPacket(1, 5))
    assert [e.message_id for e in tx.events if isinstance(e, FlowCompleted)] == [7]


def test_requester_timeout_resends_what_is_not_held_in_one_burst_per_run() -> None:
    params = TransportParams(
        congestion_control="none",
        path_mtu_bytes=MTU,
        reliability="selective",
        retransmit_timeout_s=1.0,
    )
    tx = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=1e12)
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * MTU)
    burst = tx.poll_burst(now=0.0, floor_s=-1.0, max_packets=64)
    assert burst is not None and burst.count == 8
    tx.on_ack(now=0.1, packet=SackPacket(1, 1, 2, 0b1100, 1))  # 0, 1 acked; 4, 5 held
    tx.on_timer(now=5.0)
    runs = []
    while (b := tx.poll_burst(now=5.0, floor_s=4.0, max_packets=64)) is not None:
        runs.append((b.psn, b.count, b.retransmitted))
    assert runs == [(2, 2, 2), (6, 2, 2)]


# -- the two reliabilities through a channel that reorders and loses --------------------------


def _transfer(params: TransportParams, seed: int, loss: set[int]) -> tuple[int, int, int]:
    """Send one 64-packet message through a channel that delivers each packet after a random
    delay of up to 8 packet times (reordering) and loses the first transmission of the packets
    in `loss`; returns (resent packets, delivered bytes, completions)."""
    rng = random.Random(seed)
    tx = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=MTU * 8 / 1e-6)
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=params)
    tx.post_send(now=0.0, message_id=1, size_bytes=64 * MTU)
    in_flight: list[tuple[float, int, object]] = []
    seen: set[int] = set()
    now = 0.0
    order = 0
    for _ in range(200_000):
        if tx.idle:
            break
        p = tx.poll_transmit(now=now)
        if p is not None:
            first = p.psn not in seen
            seen.add(p.psn)
            if not (first and p.psn in loss):
                order += 1
                in_flight.append((now + rng.uniform(0, 8e-6), order, p))
        in_flight.sort(key=lambda x: (x[0], x[1]))
        while in_flight and in_flight[0][0] <= now:
            _, _, pkt = in_flight.pop(0)
            if isinstance(pkt, DataPacket):
                for reply in rx.on_data(now=now, packet=pkt, ce=False):
                    order += 1
                    in_flight.append((now + 1e-6, order, reply))
            else:
                tx.on_ack(now=now, packet=pkt)  # type: ignore[arg-type]
        timer = tx.next_timer_s()
        if timer is not None and timer <= now:
            tx.on_timer(now=now)
        now += 1e-6
    done = sum(isinstance(e, FlowCompleted) for e in tx.events)
    return tx.packets_retransmitted, rx.delivered_bytes, done


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_selective_delivers_every_byte_with_fewer_resends_than_go_back_n(seed: int) -> None:
    loss = {10, 30, 31, 50}
    sel = _transfer(dataclass_replace(SELECTIVE, retransmit_timeout_s=1e-4), seed, loss)
    gbn = _transfer(dataclass_replace(GO_BACK_N, retransmit_timeout_s=1e-4), seed, loss)
    assert sel[1:] == (64 * MTU, 1) and gbn[1:] == (64 * MTU, 1)
    # selective sends again about what was lost (a late packet taken for lost may go twice);
    # go-back-N resends the window after each gap and after every reordering
    assert len(loss) <= sel[0] < gbn[0]


def dataclass_replace(params: TransportParams, **changes: object) -> TransportParams:
    import dataclasses

    return dataclasses.replace(params, **changes)  # type: ignore[arg-type]


# -- the wire -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    psn=st.integers(0, (1 << 24) - 1),
    base=st.integers(0, (1 << 24) - 1),
    bits=st.integers(1, (1 << SACK_MAX_PACKETS) - 1),
    msn=st.integers(0, (1 << 24) - 1),
)
def test_sack_round_trips_and_scapy_reads_the_same_with_a_valid_icrc(
    psn: int, base: int, bits: int, msn: int
) -> None:
    sack = SackPacket(77, psn, base, bits, sack_words(bits), msn)
    address = FlowAddress("10.0.0.1", "10.0.0.2", 4791)
    assert decode(encode(sack, IcrcContext(address), ip_id=3)) == sack
    wire = ipv4_packet(sack, address, ip_id=3)
    parsed = IP(wire)
    assert parsed[BTH].opcode == 0xD1 and parsed[BTH].psn == psn and parsed[BTH].dqpn == 77
    assert parsed[AETH].msn == msn
    held = [(base + i) & 0xFFFFFF for i in range(bits.bit_length()) if bits >> i & 1]
    assert parsed[SACKETH].held_psns() == held
    again = parsed.copy()
    again[BTH].icrc = None  # scapy computes the ICRC: it must be ours
    assert IP(raw(again))[BTH].icrc == parsed[BTH].icrc


def test_a_selective_window_beyond_the_bitmap_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="window_packets"):
        TransportParams(reliability="selective", window_packets=SACK_MAX_PACKETS + 1)
    TransportParams(reliability="go_back_n", window_packets=SACK_MAX_PACKETS + 1)
