"""The tester's per-QP counters: ACKs/NAKs each way and data packets received in the queue pairs
(emulator.transport), and how collectors.queue_pairs joins and sums the two halves."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import pytest

from collectors.queue_pairs import (
    COUNTER_COLUMNS,
    RECV_QP_COLUMNS,
    SEND_QP_COLUMNS,
    SUMMED,
    ConnectionKey,
    QpRow,
    qp_rows,
    rank_totals,
    totals,
)
from emulator.transport.events import Retransmitted
from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
    Packet,
)
from emulator.transport.params import TransportParams
from emulator.transport.qp_counters import recv_qp_counters, send_qp_counters
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair

LINE = 100e9
MTU = 256
INITIAL_PSN = 0xFFFFFD  # the PSNs wrap inside every transfer below


def params(**kw: Any) -> TransportParams:
    base: dict[str, Any] = {
        "congestion_control": "none",
        "path_mtu_bytes": MTU,
        "ack_every_packets": 2,
        "window_packets": 64,
        "retransmit_timeout_s": 1e-3,
    }
    base.update(kw)
    return TransportParams(**base)


def pair(**kw: Any) -> tuple[SendQueuePair, ReceiveQueuePair]:
    p = params(**kw)
    tx = SendQueuePair(qpn=1, dest_qp=2, params=p, line_rate_bps=LINE, initial_psn=INITIAL_PSN)
    rx = ReceiveQueuePair(qpn=2, remote_qp=1, params=p, initial_psn=INITIAL_PSN)
    return tx, rx


def run(
    tx: SendQueuePair,
    rx: ReceiveQueuePair,
    *,
    drop_data: Collection[int] = (),
    drop_acks: Collection[int] = (),
    limit: int = 10_000,
) -> list[DataPacket]:
    """Move packets between tx and rx in memory until every posted message completes: the data
    packets at the transmission indexes in drop_data and the replies at the indexes in drop_acks
    (counted over every reply the receiver makes) are lost. Returns every packet tx handed out."""
    sent: list[DataPacket] = []
    replies = 0
    now = 0.0
    for _ in range(limit):
        if tx.idle:
            return sent
        due = tx.next_transmit_s()
        timer = tx.next_timer_s()
        if due is not None and (timer is None or due <= timer):
            now = max(now, due)
            packet = tx.poll_transmit(now=now)
            assert packet is not None
            sent.append(packet)
            if len(sent) - 1 in drop_data:
                continue
            for reply in rx.on_data(now=now, packet=packet, ce=False):
                replies += 1
                if replies - 1 in drop_acks:
                    continue
                assert isinstance(reply, AckPacket)
                tx.on_ack(now=now, packet=reply)
        else:
            assert timer is not None, "stuck: nothing to send and no timer"
            now = max(now, timer)
            tx.on_timer(now=now)
    raise AssertionError("transfer did not complete")


# -- transport counters --------------------------------------------------------------------


def test_lossless_transfer_counts_match_on_both_sides() -> None:
    tx, rx = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * MTU + 100)  # 9 packets
    sent = run(tx, rx)
    assert len(sent) == 9
    # AckReq on every 2nd packet and on the last: packets 1, 3, 5, 7, 8
    assert [i for i, p in enumerate(sent) if p.ack_req] == [1, 3, 5, 7, 8]
    assert tx.packets_sent == 9
    assert rx.packets_received == 9 == tx.packets_sent
    assert rx.acks_sent == 5
    assert tx.acks_received == 5 == rx.acks_sent
    assert tx.naks_received == 0 and rx.naks_sent == 0
    assert tx.packets_retransmitted == 0
    assert rx.drops == {}
    assert rx.delivered_bytes == tx.bytes_acked == 8 * MTU + 100


def test_one_lost_data_packet_draws_exactly_one_nak() -> None:
    tx, rx = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * MTU + 100)  # 9 packets
    sent = run(tx, rx, drop_data={3})
    # 0, 1 (ACK), 2, [3 lost], 4 (out of sequence: NAK for 3), then 3 and 4 again, 5..8
    first_seq = [(p.psn - INITIAL_PSN) & 0xFFFFFF for p in sent]
    assert first_seq == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8]
    assert tx.packets_sent == 11
    assert tx.packets_retransmitted == 2
    assert rx.packets_received == 10
    assert tx.packets_sent - rx.packets_received == 1  # the one dropped
    assert rx.naks_sent == 1 and tx.naks_received == 1
    assert rx.drops == {"out_of_sequence": 1}
    # ACKs for 1, 3 (resent), 5, 7, 8: none lost, so both ends agree
    assert rx.acks_sent == 5 and tx.acks_received == 5
    retransmits = [e for e in tx.events if isinstance(e, Retransmitted)]
    assert [(e.packets, e.reason) for e in retransmits] == [(2, "nak")]
    assert rx.delivered_bytes == tx.bytes_acked == 8 * MTU + 100


def test_every_packet_past_a_gap_is_a_sequence_error_but_one_nak_per_gap() -> None:
    # The NAK is lost too: everything past the gap is out of sequence until the timeout.
    tx, rx = pair(ack_every_packets=16)
    tx.post_send(now=0.0, message_id=1, size_bytes=6 * MTU)  # 6 packets, AckReq on the last
    sent = run(tx, rx, drop_data={1}, drop_acks={0})
    # 0, [1 lost], 2..5 out of sequence (one NAK, lost), timeout: back to the oldest
    # unacknowledged, 0 (now a duplicate), then 1..5
    assert [(p.psn - INITIAL_PSN) & 0xFFFFFF for p in sent] == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
    assert rx.drops == {"out_of_sequence": 4, "duplicate": 1}
    assert rx.naks_sent == 1 and tx.naks_received == 0
    assert rx.acks_sent == 1 and tx.acks_received == 1
    assert tx.packets_sent == 12 and tx.packets_retransmitted == 6
    assert rx.packets_received == 11
    assert [e.reason for e in tx.events if isinstance(e, Retransmitted)] == ["timeout"]


def test_duplicate_packet_is_received_and_counted_as_duplicate() -> None:
    rx = ReceiveQueuePair(qpn=2, remote_qp=1, params=params(), initial_psn=10)
    first = DataPacket(2, 10, Opcode.SEND_FIRST, False, MTU)
    assert rx.on_data(now=0.0, packet=first, ce=False) == []
    assert rx.on_data(now=0.0, packet=first, ce=False) == []  # no AckReq: no reply
    again = DataPacket(2, 10, Opcode.SEND_FIRST, True, MTU)
    assert rx.on_data(now=0.0, packet=again, ce=False) == [AckPacket(1, 10, AETH_ACK, 0)]
    assert rx.packets_received == 3
    assert rx.drops == {"duplicate": 2}
    assert rx.acks_sent == 1 and rx.naks_sent == 0
    assert rx.delivered_bytes == MTU


def test_lost_ack_resends_everything_and_the_receiver_counts_duplicates() -> None:
    tx, rx = pair(ack_every_packets=16)
    tx.post_send(now=0.0, message_id=1, size_bytes=4 * MTU)  # 4 packets, AckReq on the last
    sent = run(tx, rx, drop_acks={0})
    assert len(sent) == 8  # all four again after the timeout
    assert tx.packets_sent == 8 and tx.packets_retransmitted == 4
    assert rx.packets_received == 8
    assert rx.drops == {"duplicate": 4}
    assert rx.acks_sent == 2  # the lost one, and the re-acknowledgement of the duplicate
    assert tx.acks_received == 1
    assert rx.naks_sent == 0 and tx.naks_received == 0
    assert rx.delivered_bytes == 4 * MTU


def test_stale_and_out_of_window_replies_still_count() -> None:
    tx, _ = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=2 * MTU)
    tx.poll_transmit(now=0.0)
    p1 = tx.poll_transmit(now=1.0)
    assert p1 is not None and p1.ack_req
    tx.on_ack(now=1.0, packet=AckPacket(1, p1.psn, AETH_ACK))
    tx.on_ack(now=1.0, packet=AckPacket(1, p1.psn, AETH_ACK))  # stale: nothing new
    tx.on_ack(now=1.0, packet=AckPacket(1, 12345, AETH_ACK))  # never sent
    tx.on_ack(now=1.0, packet=AckPacket(1, 12345, AETH_NAK_PSN_SEQUENCE_ERROR))
    assert tx.acks_received == 3 and tx.naks_received == 1
    assert tx.drops == {"ack_out_of_window": 2}
    assert tx.idle


def run_args(packets: Sequence[DataPacket]) -> dict[str, Any]:
    """on_data_run's arguments for packets with consecutive PSNs, no RETH, all carrying the
    payload size of the first but the last (what one GRO read of them gives)."""
    assert all(p.payload_bytes == packets[0].payload_bytes for p in packets[:-1])
    return {
        "psn": packets[0].psn,
        "opcodes": [int(p.opcode) for p in packets],
        "ack_req_at": [i for i, p in enumerate(packets) if p.ack_req],
        "payload_bytes": packets[0].payload_bytes,
        "last_payload_bytes": packets[-1].payload_bytes,
    }


def counters(rx: ReceiveQueuePair) -> dict[str, Any]:
    return {
        "packets_received": rx.packets_received,
        "acks_sent": rx.acks_sent,
        "naks_sent": rx.naks_sent,
        "ce_packets": rx.ce_packets,
        "cnps_sent": rx.cnps_sent,
        "delivered_bytes": rx.delivered_bytes,
        "drops": dict(rx.drops),
        "expected_psn": rx.expected_psn,
    }


def send_all(tx: SendQueuePair, limit: int = 1000) -> list[DataPacket]:
    """Every packet tx will hand out without feedback, each when it is due."""
    out: list[DataPacket] = []
    now = 0.0
    for _ in range(limit):
        due = tx.next_transmit_s()
        if due is None:
            return out
        now = max(now, due)
        packet = tx.poll_transmit(now=now)
        assert packet is not None
        out.append(packet)
    raise AssertionError("sender never ran out of packets")


def message_packets(sizes: Sequence[int], *, ack_every: int = 3) -> list[DataPacket]:
    tx = SendQueuePair(
        qpn=1,
        dest_qp=2,
        params=params(ack_every_packets=ack_every),
        line_rate_bps=LINE,
        initial_psn=INITIAL_PSN,
    )
    for i, size in enumerate(sizes):
        tx.post_send(now=0.0, message_id=i, size_bytes=size)
    return send_all(tx)


def _no_per_packet_path(**_: Any) -> list[Packet]:
    raise AssertionError("on_data_run fell back to on_data for an in-order run")


Split = Callable[[list[DataPacket]], tuple[list[DataPacket], list[DataPacket]]]
# Message 0: 7 full packets, AckReq at 2, 5 and 6 (its last); message 1: 4 packets, the last
# 100 bytes, AckReq at 9 and 10. Each case: the packets the receiver gets one by one first, the
# run (one GRO read), whether it is CE-marked, and some of the counters after both.
RUN_CASES: list[tuple[str, Split, bool, dict[str, Any]]] = [
    # the fast path: the whole first message in order
    (
        "in_order",
        lambda ps: ([], ps[:7]),
        False,
        {"packets_received": 7, "acks_sent": 3, "naks_sent": 0, "drops": {}},
    ),
    # the fast path across a message boundary, after the first packets one by one
    (
        "across_messages",
        lambda ps: (ps[:3], ps[3:9]),
        False,
        {"packets_received": 9, "acks_sent": 3, "naks_sent": 0, "drops": {}},
    ),
    # the fast path with a shorter last packet
    (
        "short_last",
        lambda ps: (ps[:7], ps[7:]),
        False,
        {"packets_received": 11, "acks_sent": 5, "delivered_bytes": 10 * MTU + 100},
    ),
    # a gap before the run: every packet is a sequence error, one NAK
    (
        "gap",
        lambda ps: (ps[:2], ps[3:7]),
        False,
        {"packets_received": 6, "acks_sent": 0, "naks_sent": 1, "drops": {"out_of_sequence": 4}},
    ),
    # the run again: duplicates, re-acknowledged where they ask for an ACK
    (
        "duplicates",
        lambda ps: (ps[:7], ps[1:6]),
        False,
        {"packets_received": 12, "acks_sent": 5, "naks_sent": 0, "drops": {"duplicate": 5}},
    ),
    # CE-marked: counted per packet (the slow path), one CNP at this instant
    (
        "ce",
        lambda ps: ([], ps[:7]),
        True,
        {"packets_received": 7, "acks_sent": 3, "ce_packets": 7, "cnps_sent": 1, "drops": {}},
    ),
]
FAST_PATH = ("in_order", "across_messages", "short_last")


@pytest.mark.parametrize(
    ("name", "split", "ce", "expected"), RUN_CASES, ids=[c[0] for c in RUN_CASES]
)
def test_on_data_run_counts_like_on_data_per_packet(
    name: str, split: Split, ce: bool, expected: dict[str, Any]
) -> None:
    packets = message_packets([7 * MTU, 3 * MTU + 100])
    assert [i for i, p in enumerate(packets) if p.ack_req] == [2, 5, 6, 9, 10]
    before, batch = split(packets)
    p = params(ack_every_packets=3)
    one = ReceiveQueuePair(qpn=2, remote_qp=1, params=p, initial_psn=INITIAL_PSN)
    runs = ReceiveQueuePair(qpn=2, remote_qp=1, params=p, initial_psn=INITIAL_PSN)
    for packet in before:
        assert one.on_data(now=0.0, packet=packet, ce=False) == runs.on_data(
            now=0.0, packet=packet, ce=False
        )
    acks_before, cnps_before = runs.acks_sent, runs.cnps_sent
    if name in FAST_PATH:
        runs.on_data = _no_per_packet_path  # type: ignore[method-assign]
    replies_one = [r for q in batch for r in one.on_data(now=0.0, packet=q, ce=ce)]
    replies_run = runs.on_data_run(now=0.0, ce=ce, **run_args(batch))
    assert replies_run == replies_one
    assert counters(runs) == counters(one)
    assert runs.events == one.events
    got = counters(runs)
    assert {k: got[k] for k in expected} == expected
    acks = [r for r in replies_run if isinstance(r, AckPacket)]
    # the counters match the replies the run produced
    assert got["acks_sent"] - acks_before == sum(not r.is_nak for r in acks)
    assert got["naks_sent"] == sum(r.is_nak for r in acks)
    assert got["cnps_sent"] - cnps_before == sum(isinstance(r, CnpPacket) for r in replies_run)


def test_on_acks_counts_every_ack_in_the_batch() -> None:
    tx, rx = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * MTU)
    packets = send_all(tx)
    now = 1.0
    replies = [r for p in packets for r in rx.on_data(now=now, packet=p, ce=False)]
    psns = [r.psn for r in replies if isinstance(r, AckPacket) and not r.is_nak]
    assert len(psns) == 4 == rx.acks_sent
    tx.on_acks(now=now, psns=psns)
    assert tx.acks_received == 4 and tx.naks_received == 0
    assert tx.idle and tx.bytes_acked == 8 * MTU
    # a batch of old ACKs: nothing new, still counted
    tx.on_acks(now=now, psns=psns[:3])
    assert tx.acks_received == 7
    tx.on_acks(now=now, psns=[])
    assert tx.acks_received == 7
    assert tx.drops == {}


def test_on_acks_with_a_psn_never_sent_counts_each_ack_once() -> None:
    tx, _ = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=4 * MTU)
    sent = send_all(tx)
    assert len(sent) == 4
    tx.on_acks(now=1.0, psns=[sent[1].psn, 12345, sent[3].psn])  # falls back to on_ack each
    assert tx.acks_received == 3 and tx.naks_received == 0
    assert tx.drops == {"ack_out_of_window": 1}
    assert tx.idle


def test_on_acks_and_on_ack_agree() -> None:
    batch, single = pair()[0], pair()[0]
    for tx in (batch, single):
        tx.post_send(now=0.0, message_id=1, size_bytes=10 * MTU)
        assert len(send_all(tx)) == 10
    psns = [(INITIAL_PSN + i) & 0xFFFFFF for i in (1, 3, 2, 5)]  # the 2 is overtaken
    batch.on_acks(now=2.0, psns=psns)
    for psn in psns:
        single.on_ack(now=2.0, packet=AckPacket(1, psn, AETH_ACK))
    assert batch.acks_received == single.acks_received == 4
    assert batch.bytes_acked == single.bytes_acked == 6 * MTU
    assert batch.naks_received == single.naks_received == 0
    assert batch.events == single.events


# -- collectors.queue_pairs ------------------------------------------------------------------


def send_half(
    sent: int,
    acked: int,
    resent: int,
    acks: int,
    naks: int,
    cnps: int,
    dscp: int,
    sacks: int = 0,
) -> list[int]:
    return [sent, acked, resent, acks, naks, cnps, sacks, dscp]


def recv_half(
    got: int,
    nbytes: int,
    seq: int,
    dup: int,
    acks: int,
    naks: int,
    ce: int,
    cnps: int,
    reorder: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0),
) -> list[int]:
    """`reorder`: SACKs sent, held out of order, reordered packets, extent sum and max."""
    return [got, nbytes, seq, dup, acks, naks, ce, cnps, *reorder]


CONNECTIONS: dict[ConnectionKey, int] = {
    (1, 0, 0, 49153): 1,  # listed out of order: rows come in connection-id order
    (0, 1, 0, 49152): 0,
    (0, 2, 1, 49154): 2,
    (2, 1, 0, 49155): 3,  # neither half: no row
    (2, 0, 0, 49156): 4,
}
SEND_QPS = {
    1: send_half(100, 25_600, 3, 50, 1, 2, 26),
    2: send_half(10, 2_560, 0, 5, 0, 0, 24),
    3: send_half(7, 1_792, 0, 4, 0, 0, 26),
}
RECV_QPS = {
    1: recv_half(98, 25_600, 2, 1, 51, 1, 9, 3),
    2: recv_half(12, 2_560, 0, 2, 6, 0, 0, 0, (3, 4, 5, 9, 4)),  # duplicates; reordered
    5: recv_half(3, 768, 0, 0, 2, 0, 1, 1, (0, 0, 2, 4, 3)),  # its sender's never came
}


def test_columns_match_the_row() -> None:
    assert len(SEND_QP_COLUMNS) == 8 and len(RECV_QP_COLUMNS) == 13
    assert set(SEND_QP_COLUMNS) | set(RECV_QP_COLUMNS) | {"qpn", "lost_packets"} == set(
        COUNTER_COLUMNS
    )
    assert "dscp" not in SUMMED and "qpn" not in SUMMED and "lost_packets" in SUMMED
    assert "reorder_extent_max" not in SUMMED


def test_qp_rows_join_both_halves() -> None:
    rows = qp_rows(CONNECTIONS, SEND_QPS, RECV_QPS)
    assert [(r.src_rank, r.dst_rank, r.qp, r.udp_sport, r.qpn) for r in rows] == [
        (0, 1, 0, 49152, 1),
        (1, 0, 0, 49153, 2),
        (0, 2, 1, 49154, 3),
        (2, 0, 0, 49156, 5),
    ]
    assert rows[0] == QpRow(
        src_rank=0,
        dst_rank=1,
        qp=0,
        udp_sport=49152,
        qpn=1,
        dscp=26,
        data_packets_sent=100,
        data_bytes_acked=25_600,
        packets_retransmitted=3,
        acks_received=50,
        naks_received=1,
        cnps_received=2,
        data_packets_received=98,
        data_bytes_received=25_600,
        sequence_errors=2,
        duplicates=1,
        acks_sent=51,
        naks_sent=1,
        ce_received=9,
        cnps_sent=3,
        lost_packets=2,
    )


def test_qp_rows_missing_half_counts_zeros_and_loss_is_never_negative() -> None:
    rows = {r.qpn: r for r in qp_rows(CONNECTIONS, SEND_QPS, RECV_QPS)}
    assert rows[2].lost_packets == 0  # 10 sent, 12 received
    # no receive half: nothing arrived, all of it lost
    assert rows[3].data_packets_sent == 7
    assert [getattr(rows[3], c) for c in RECV_QP_COLUMNS] == [0] * len(RECV_QP_COLUMNS)
    assert rows[3].lost_packets == 7
    # no send half: zeros (dscp too), nothing lost
    assert [getattr(rows[5], c) for c in SEND_QP_COLUMNS] == [0] * len(SEND_QP_COLUMNS)
    assert rows[5].data_packets_received == 3 and rows[5].cnps_sent == 1
    assert rows[5].lost_packets == 0
    assert 4 not in rows  # neither half
    assert qp_rows({}, SEND_QPS, RECV_QPS) == []


def test_rank_totals_put_each_side_on_its_rank() -> None:
    by_rank = rank_totals(qp_rows(CONNECTIONS, SEND_QPS, RECV_QPS))
    assert list(by_rank) == ["0", "1", "2"]
    zero = dict.fromkeys(SUMMED, 0)
    # rank 0 sends QPs 1 and 3 and receives QPs 2 and 5
    assert by_rank["0"] == {
        **zero,
        "data_packets_sent": 100 + 7,
        "data_bytes_acked": 25_600 + 1_792,
        "packets_retransmitted": 3,
        "acks_received": 50 + 4,
        "naks_received": 1,
        "cnps_received": 2,
        "data_packets_received": 12 + 3,
        "data_bytes_received": 2_560 + 768,
        "duplicates": 2,
        "acks_sent": 6 + 2,
        "ce_received": 1,
        "cnps_sent": 1,
        "sacks_sent": 3,
        "held_out_of_order": 4,
        "reordered_packets": 5 + 2,
        "reorder_extent_sum": 9 + 4,
        "lost_packets": 2 + 7,
    }
    # rank 1 sends QP 2 and receives QP 1
    assert by_rank["1"] == {
        **zero,
        "data_packets_sent": 10,
        "data_bytes_acked": 2_560,
        "acks_received": 5,
        "data_packets_received": 98,
        "data_bytes_received": 25_600,
        "sequence_errors": 2,
        "duplicates": 1,
        "acks_sent": 51,
        "naks_sent": 1,
        "ce_received": 9,
        "cnps_sent": 3,
    }
    # rank 2 only sends QP 5, whose sender half is missing: all zeros, but listed; it receives
    # QP 3, whose receiver half is missing
    assert by_rank["2"] == zero


def test_rank_totals_of_a_qp_to_itself_and_of_no_rows() -> None:
    rows = qp_rows({(3, 3, 0, 1): 0}, {1: send_half(5, 1280, 1, 2, 1, 0, 26)}, {})
    assert rank_totals(rows) == {
        "3": {
            **dict.fromkeys(SUMMED, 0),
            "data_packets_sent": 5,
            "data_bytes_acked": 1280,
            "packets_retransmitted": 1,
            "acks_received": 2,
            "naks_received": 1,
            "lost_packets": 5,
        }
    }
    assert rank_totals([]) == {}


def test_totals_sum_every_counter_and_count_qps() -> None:
    rows = qp_rows(CONNECTIONS, SEND_QPS, RECV_QPS)
    out = totals(rows)
    assert out == {
        "data_packets_sent": 117,
        "data_bytes_acked": 25_600 + 2_560 + 1_792,
        "packets_retransmitted": 3,
        "acks_received": 59,
        "naks_received": 1,
        "cnps_received": 2,
        "data_packets_received": 98 + 12 + 3,
        "data_bytes_received": 25_600 + 2_560 + 768,
        "sequence_errors": 2,
        "duplicates": 3,
        "acks_sent": 59,
        "naks_sent": 1,
        "ce_received": 10,
        "cnps_sent": 4,
        "sacks_received": 0,
        "sacks_sent": 3,
        "held_out_of_order": 4,
        "reordered_packets": 7,
        "reorder_extent_sum": 13,
        "reorder_extent_max": 4,  # the largest, not the sum
        "lost_packets": 9,
        "queue_pairs": 4,
    }
    # the per-rank totals add up to the run's
    by_rank = rank_totals(rows)
    assert {c: sum(r[c] for r in by_rank.values()) for c in SUMMED} == {c: out[c] for c in SUMMED}
    assert totals([]) == {**dict.fromkeys(SUMMED, 0), "reorder_extent_max": 0, "queue_pairs": 0}
    assert totals(iter(rows))["queue_pairs"] == 4  # any iterable, counted as it goes


def test_rows_from_real_queue_pairs() -> None:
    """The halves as a worker lists them (emulator.engine.counters.Counters.queue_pairs) after a
    transfer that lost one data packet."""
    tx, rx = pair()
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * MTU + 100)
    run(tx, rx, drop_data={3})
    send = send_qp_counters(tx, tx.cnps_received, 26)
    recv = recv_qp_counters(rx, rx.cnps_sent)
    (row,) = qp_rows({(0, 1, 0, 49152): 0}, {1: send}, {1: recv})
    assert row.lost_packets == 1
    assert row.sequence_errors == 1 and row.naks_sent == row.naks_received == 1
    assert row.acks_sent == row.acks_received == 5
    assert row.packets_retransmitted == 2
    # go-back-N: the resends of what the receiver saw ahead of the gap are not reordering; the
    # lost packet's resend is (the wire does not say it is a resend: see the receiver's doc)
    assert row.reordered_packets == 1 and row.held_out_of_order == 0 and row.sacks_sent == 0
    assert row.data_bytes_acked == row.data_bytes_received == 8 * MTU + 100
    assert totals([row])["queue_pairs"] == 1
