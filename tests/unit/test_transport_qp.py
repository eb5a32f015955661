"""Queue pairs: segmentation, PSNs, AckReq, window, go-back-N, completion, receiver rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.transport.endpoint import RoceEndpoint
from emulator.transport.events import (
    CnpSent,
    FlowCompleted,
    MessagePosted,
    MessageReceived,
    PacketDropped,
    Retransmitted,
)
from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair

LINE = 100e9


def sender(**kw: int | float | str) -> SendQueuePair:
    params = TransportParams(congestion_control="none", **kw)  # type: ignore[arg-type]
    return SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=LINE, initial_psn=0xFFFFFE)


def drain(qp: SendQueuePair, now: float = 0.0, limit: int = 1000) -> list[DataPacket]:
    out = []
    for _ in range(limit):
        due = qp.next_transmit_s()
        if due is None:
            break
        now = max(now, due)
        packet = qp.poll_transmit(now=now)
        assert packet is not None
        out.append(packet)
    return out


def test_segmentation_psn_wrap_and_ack_request() -> None:
    qp = sender(path_mtu_bytes=4096, ack_every_packets=16)
    qp.post_send(now=0.0, message_id=7, size_bytes=10_000)
    packets = drain(qp)
    assert [p.payload_bytes for p in packets] == [4096, 4096, 1808]
    assert [p.opcode for p in packets] == [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST]
    assert [p.psn for p in packets] == [0xFFFFFE, 0xFFFFFF, 0]
    assert [p.ack_req for p in packets] == [False, False, True]
    assert [p.offset_bytes for p in packets] == [0, 4096, 8192]


def test_ack_request_every_n_and_on_last() -> None:
    qp = sender(path_mtu_bytes=256, ack_every_packets=2)
    qp.post_send(now=0.0, message_id=1, size_bytes=5 * 256)
    qp.post_send(now=0.0, message_id=2, size_bytes=100)
    packets = drain(qp)
    assert [p.ack_req for p in packets] == [False, True, False, True, True, True]
    assert packets[-1].opcode == Opcode.SEND_ONLY


def test_pacing_spaces_packets_by_their_wire_time() -> None:
    qp = sender(path_mtu_bytes=1024)
    qp.post_send(now=0.0, message_id=1, size_bytes=4096)
    first = qp.poll_transmit(now=0.0)
    assert first is not None
    assert qp.poll_transmit(now=0.0) is None
    wire_bits = (first.udp_payload_bytes + IPV4_FRAME_OVERHEAD_BYTES) * 8
    assert qp.next_transmit_s() == pytest.approx(wire_bits / LINE)


def test_window_limits_unacknowledged_packets() -> None:
    qp = sender(path_mtu_bytes=256, window_packets=4)
    qp.post_send(now=0.0, message_id=1, size_bytes=10 * 256)
    assert len(drain(qp)) == 4 and qp.next_transmit_s() is None
    qp.on_ack(now=1e-5, packet=AckPacket(1, 0xFFFFFF, AETH_ACK))  # acks PSNs ffffe, fffff
    assert [p.psn for p in drain(qp, 1e-5)] == [2, 3]


def test_completion_only_when_last_byte_acknowledged() -> None:
    qp = sender(path_mtu_bytes=1024)
    qp.post_send(now=0.5, message_id=9, size_bytes=3000)
    packets = drain(qp, 0.5)
    qp.on_ack(now=0.6, packet=AckPacket(1, packets[1].psn, AETH_ACK))
    assert not [e for e in qp.events if isinstance(e, FlowCompleted)]
    qp.on_ack(now=0.7, packet=AckPacket(1, packets[2].psn, AETH_ACK))
    done = [e for e in qp.events if isinstance(e, FlowCompleted)]
    assert done == [FlowCompleted(1, 9, 3000, 0.5, 0.7)]
    assert done[0].fct_s == pytest.approx(0.2)
    assert qp.idle and qp.bytes_acked == 3000


def test_go_back_n_on_nak() -> None:
    qp = sender(path_mtu_bytes=256)
    qp.post_send(now=0.0, message_id=1, size_bytes=6 * 256)
    packets = drain(qp)
    psns = [p.psn for p in packets]
    qp.on_ack(now=1e-5, packet=AckPacket(1, psns[2], AETH_NAK_PSN_SEQUENCE_ERROR))
    again = drain(qp, 1e-5)
    assert [p.psn for p in again] == psns[2:]
    assert again == packets[2:]  # the same packets, byte for byte
    assert [e for e in qp.events if isinstance(e, Retransmitted)] == [
        Retransmitted(1, 1e-5, psns[2], 4, "nak")
    ]


def test_go_back_n_on_timeout() -> None:
    qp = sender(path_mtu_bytes=256, retransmit_timeout_s=0.001)
    qp.post_send(now=0.0, message_id=1, size_bytes=3 * 256)
    packets = drain(qp)
    # the timer starts when the last packet (the one asking for an ACK) leaves
    wire_s = (packets[0].udp_payload_bytes + IPV4_FRAME_OVERHEAD_BYTES) * 8 / LINE
    assert qp.next_timer_s() == pytest.approx(0.001 + 2 * wire_s)
    qp.on_timer(now=0.0009)
    assert qp.next_transmit_s() is None
    qp.on_timer(now=0.0011)
    assert drain(qp, 0.0011) == packets
    assert [e.reason for e in qp.events if isinstance(e, Retransmitted)] == ["timeout"]


def test_stale_and_impossible_acks_are_harmless() -> None:
    qp = sender(path_mtu_bytes=256)
    qp.post_send(now=0.0, message_id=1, size_bytes=2 * 256)
    packets = drain(qp)
    qp.on_ack(now=1e-6, packet=AckPacket(1, packets[0].psn, AETH_ACK))
    qp.on_ack(now=2e-6, packet=AckPacket(1, packets[0].psn - 1, AETH_ACK))  # older: ignored
    qp.on_ack(now=3e-6, packet=AckPacket(1, 12345, AETH_ACK))  # never sent
    assert qp.drops["ack_out_of_window"] == 1
    assert not qp.idle


def receiver(window: int = 64) -> ReceiveQueuePair:
    params = TransportParams(window_packets=window)
    return ReceiveQueuePair(
        qpn=2, remote_qp=1, params=params, initial_psn=10, record_deliveries=True
    )


def data(
    psn: int, opcode: Opcode = Opcode.SEND_MIDDLE, ack: bool = False, n: int = 100, offset: int = 0
) -> DataPacket:
    return DataPacket(2, psn, opcode, ack, n, offset)


def test_receiver_accepts_in_order_and_coalesces_acks() -> None:
    rx = receiver()
    assert rx.on_data(now=0.0, packet=data(10, Opcode.SEND_FIRST), ce=False) == []
    assert rx.on_data(now=0.0, packet=data(11, ack=True, offset=100), ce=False) == [
        AckPacket(1, 11, AETH_ACK, 0)
    ]
    assert rx.on_data(now=0.0, packet=data(12, Opcode.SEND_LAST, True, 50, 200), ce=False) == [
        AckPacket(1, 12, AETH_ACK, 1)
    ]
    assert rx.delivered_bytes == 250
    assert [(m, off, p.offset_bytes) for m, off, p in rx.deliveries or []] == [
        (0, 0, 0),
        (0, 100, 100),
        (0, 200, 200),
    ]
    assert [e for e in rx.events if isinstance(e, MessageReceived)] == [
        MessageReceived(2, 0, 250, 0.0)
    ]


def test_one_nak_per_out_of_sequence_episode_and_duplicates_dropped() -> None:
    rx = receiver()
    rx.on_data(now=0.0, packet=data(10, Opcode.SEND_FIRST), ce=False)
    # 11 lost: 12, 13, 14 arrive -> exactly one NAK for 11
    replies = [r for psn in (12, 13, 14) for r in rx.on_data(now=0.0, packet=data(psn), ce=False)]
    assert replies == [AckPacket(1, 11, AETH_NAK_PSN_SEQUENCE_ERROR, 0)]
    # go-back: 11.. arrive again; 10 again is a duplicate that asks for an ACK
    rx.on_data(now=0.0, packet=data(11), ce=False)
    assert rx.on_data(now=0.0, packet=data(10, Opcode.SEND_FIRST, ack=True), ce=False) == [
        AckPacket(1, 11, AETH_ACK, 0)
    ]
    # a new gap is a new episode: a new NAK
    assert rx.on_data(now=0.0, packet=data(14), ce=False) == [
        AckPacket(1, 12, AETH_NAK_PSN_SEQUENCE_ERROR, 0)
    ]
    assert rx.drops == {"out_of_sequence": 4, "duplicate": 1}
    assert rx.delivered_bytes == 200
    rx.on_data(now=0.0, packet=data(10 + 5000), ce=False)
    assert rx.drops["psn_out_of_window"] == 1


def test_receiver_reports_ce_to_notification_point() -> None:
    rx = receiver()
    out = rx.on_data(now=0.0, packet=data(10, Opcode.SEND_FIRST), ce=True)
    assert out == [CnpPacket(1)]
    assert rx.on_data(now=1e-6, packet=data(11), ce=True) == []  # paced (4 us)
    assert rx.on_data(now=5e-6, packet=data(5), ce=True) == [CnpPacket(1)]  # even a duplicate
    assert rx.ce_packets == 3
    assert [e for e in rx.events if isinstance(e, CnpSent)] == [CnpSent(2, 0.0), CnpSent(2, 5e-6)]


def test_endpoint_counts_bad_packets_and_never_raises() -> None:
    ep = RoceEndpoint()
    params = TransportParams()
    ep.add_sender(
        SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=LINE, events=ep.events)
    )
    ep.add_receiver(ReceiveQueuePair(qpn=2, remote_qp=1, params=params, events=ep.events))
    assert ep.on_datagram(now=0.0, data=b"\x00\x01", ce=False) == []
    assert ep.on_datagram(now=0.0, data=bytes([0x42]) + bytes(20), ce=False) == []
    assert (
        ep.on_packet(now=0.0, packet=DataPacket(99, 0, Opcode.SEND_ONLY, True, 1), ce=False) == []
    )
    assert ep.on_packet(now=0.0, packet=CnpPacket(77), ce=False) == []
    assert ep.on_packet(now=0.0, packet=AckPacket(78, 0), ce=False) == []
    ep.on_packet(now=0.0, packet=DataPacket(2, 5, Opcode.SEND_MIDDLE, False, 1), ce=False)
    assert ep.drop_counts() == {
        "malformed": 2,
        "unknown_qpn": 2,
        "cnp_unknown_qp": 1,
        "out_of_sequence": 1,
    }
    assert sum(isinstance(e, PacketDropped) for e in ep.events) == 6
    # a CNP for the known sender reaches its congestion control
    ep.on_packet(now=0.0, packet=CnpPacket(1), ce=False)
    assert ep.senders[1].cnps_received == 1
    ep.senders[1].on_timer(now=4e-6)  # the cut comes at the end of the monitor period
    assert ep.senders[1].rate_bps < LINE


def test_poll_batch_groups_gso_sized_segments_and_paces_by_tick() -> None:
    params = TransportParams(congestion_control="none", path_mtu_bytes=1024)
    qp = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=LINE, max_burst_s=1e-3)
    qp.post_send(now=0.0, message_id=1, size_bytes=10 * 1024 + 100)
    qp.post_send(now=0.0, message_id=2, size_bytes=3000)
    first = qp.poll_batch(now=0.0, max_packets=64)
    assert [p.payload_bytes for p in first] == [1024] * 10 + [100]
    second = qp.poll_batch(now=0.0, max_packets=2)
    assert [p.payload_bytes for p in second] == [1024, 1024]
    assert [p.payload_bytes for p in qp.poll_batch(now=0.0, max_packets=64)] == [952]
    assert [e.message_id for e in qp.events if isinstance(e, MessagePosted)] == [1, 2]

    slow = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=1e9, max_burst_s=1e-3)
    slow.post_send(now=0.0, message_id=1, size_bytes=1000 * 1024)
    wire_s = (12 + 1024 + 4 + IPV4_FRAME_OVERHEAD_BYTES) * 8 / 1e9
    owed = int(1e-3 / wire_s)  # one tick of credit at 1 Gb/s
    assert owed <= len(slow.poll_batch(now=0.0, max_packets=10_000)) <= owed + 1
    assert owed - 1 <= len(slow.poll_batch(now=1e-3, max_packets=10_000)) <= owed + 1


@settings(max_examples=150, deadline=None)
@given(
    losses=st.lists(st.booleans(), max_size=400),
    size_bytes=st.integers(0, 40_000),
    mtu=st.sampled_from([256, 1024, 4096]),
    ack_every=st.integers(1, 8),
    window=st.integers(1, 16),
    initial_psn=st.integers((1 << 24) - 40, (1 << 24) - 1),
)
def test_any_loss_pattern_delivers_every_byte_once_in_order(
    losses: list[bool], size_bytes: int, mtu: int, ack_every: int, window: int, initial_psn: int
) -> None:
    """A sender and a receiver joined by a wire that drops the packets `losses` says (data and
    ACKs alike, then nothing): the message completes and arrives exactly once, in order."""
    params = TransportParams(
        congestion_control="none",
        path_mtu_bytes=mtu,
        ack_every_packets=ack_every,
        window_packets=window,
        retransmit_timeout_s=1e-3,
    )
    tx = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=LINE, initial_psn=initial_psn)
    rx = ReceiveQueuePair(
        qpn=2, remote_qp=1, params=params, initial_psn=initial_psn, record_deliveries=True
    )
    lost = iter(losses)
    now = 0.0
    payload = bytes(i & 0xFF for i in range(size_bytes))
    tx.post_send(now=now, message_id=5, size_bytes=size_bytes, payload=payload)
    for _ in range(100_000):
        if any(isinstance(e, FlowCompleted) for e in tx.events):
            break
        due = tx.next_transmit_s()
        timer = tx.next_timer_s()
        if due is not None and (timer is None or due <= timer):
            now = max(now, due)
            packet = tx.poll_transmit(now=now)
            assert packet is not None
            if next(lost, False):
                continue
            for reply in rx.on_data(now=now, packet=packet, ce=False):
                if isinstance(reply, AckPacket) and not next(lost, False):
                    tx.on_ack(now=now, packet=reply)
        else:
            assert timer is not None, "stuck: nothing to send and no timer"
            now = max(now, timer)
            tx.on_timer(now=now)
    assert [e.size_bytes for e in tx.events if isinstance(e, FlowCompleted)] == [size_bytes]
    assert rx.delivered_bytes == size_bytes
    assert b"".join(p.payload or b"" for _, _, p in rx.deliveries or []) == payload
    assert [off for _, off, _ in rx.deliveries or []] == [
        p.offset_bytes for _, _, p in rx.deliveries or []
    ]


def test_packets_for_a_qp_from_anyone_but_its_peer_are_counted_and_ignored() -> None:
    ep = RoceEndpoint()
    params = TransportParams()
    tx = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=LINE, events=ep.events)
    ep.add_sender(tx, peer=("10.0.0.2", 50000))
    rx = ReceiveQueuePair(qpn=2, remote_qp=1, params=params, events=ep.events)
    ep.add_receiver(rx, peer=("10.0.0.2", 50001))
    tx.post_send(now=0.0, message_id=7, size_bytes=100)  # one packet, PSN 0
    assert len(tx.poll_batch(now=0.0, max_packets=8)) == 1
    forger = ("10.0.0.66", 50000)
    wrong_port = ("10.0.0.2", 50009)
    # a forged CNP does not lower the rate, a forged ACK does not complete the message
    assert ep.on_packet(now=1e-6, packet=CnpPacket(1), ce=False, source=forger) == []
    assert ep.on_packet(now=1e-6, packet=CnpPacket(1), ce=False, source=wrong_port) == []
    tx.on_timer(now=1e-3)  # no decrease check is pending: the forged CNPs never reached DCQCN
    assert tx.rate_bps == LINE and tx.cnps_received == 0
    ep.on_packet(now=1e-6, packet=AckPacket(1, 0), ce=False, source=forger)
    assert not tx.idle
    # forged data does not enter the receiver's sequence, even with the right PSN
    ep.on_packet(
        now=1e-6, packet=DataPacket(2, 0, Opcode.SEND_ONLY, True, 1), ce=True, source=forger
    )
    assert rx.ce_packets == 0
    assert ep.drop_counts() == {"foreign_source": 4}
    assert sum(isinstance(e, PacketDropped) for e in ep.events) == 4
    # the peer's own CNP and ACK do count
    ep.on_packet(now=2e-3, packet=CnpPacket(1), ce=False, source=("10.0.0.2", 50000))
    tx.on_timer(now=2e-3 + 4e-6)
    assert tx.rate_bps < LINE and tx.cnps_received == 1
    ep.on_packet(now=2e-6, packet=AckPacket(1, 0), ce=False, source=("10.0.0.2", 50000))
    assert tx.idle
