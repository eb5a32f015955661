"""Engine pacing (token bucket over the sender's due times) and GSO batch cutting, with the real
transport queue pair and literal rates."""

from __future__ import annotations

from emulator.engine.pacing import GSO_MAX_BUFFER_BYTES, gso_batches, take_due
from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair

MTU = 1024
WIRE_BYTES = 12 + MTU + 4 + IPV4_FRAME_OVERHEAD_BYTES  # what the sender counts per packet


def _sender(rate_bps: float, window: int = 1 << 20) -> SendQueuePair:
    params = TransportParams(congestion_control="none", path_mtu_bytes=MTU, window_packets=window)
    qp = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=rate_bps)
    qp.post_send(now=0.0, message_id=1, size_bytes=MTU * 100_000)
    return qp


def test_ticks_release_exactly_the_rate_and_never_more() -> None:
    rate = 100e6
    qp = _sender(rate)
    tick = 0.001
    sent_at: list[tuple[float, int]] = []
    for i in range(1, 1001):
        now = i * tick
        got = take_due(qp, now=now, floor_s=now - 2 * tick, max_packets=10_000)
        sent_at.append((now, len(got)))
    total = sum(n for _, n in sent_at)
    per_tick = rate * tick / (WIRE_BYTES * 8)
    # one second at 100 Mb/s, plus the bucket (2 ticks) the sender starts with
    assert rate / (WIRE_BYTES * 8) - 1 <= total <= rate / (WIRE_BYTES * 8) + 2 * per_tick + 1
    # a window of 5 ticks carries at most 5 ticks of rate (plus the initial bucket in the first)
    first = sum(n for _, n in sent_at[:5])
    assert first <= 7 * per_tick + 1
    for i in range(1, len(sent_at) - 5):
        window = sum(n for _, n in sent_at[i : i + 5])
        assert 5 * per_tick - 1 <= window <= 5 * per_tick + 1


def test_late_tick_is_made_up_only_up_to_the_bucket_depth() -> None:
    rate = 80e6
    qp = _sender(rate)
    per_ms = rate * 0.001 / (WIRE_BYTES * 8)
    take_due(qp, now=0.001, floor_s=-0.001, max_packets=10_000)
    # the loop stalls for 50 ms: only 2 ms of credit (the bucket) may come out at once
    got = take_due(qp, now=0.051, floor_s=0.051 - 0.002, max_packets=10_000)
    assert len(got) <= 2 * per_ms + 1
    assert len(got) >= 2 * per_ms - 1


def test_idle_sender_does_not_burst_when_work_arrives() -> None:
    rate = 1e9
    params = TransportParams(congestion_control="none", path_mtu_bytes=MTU)
    qp = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=rate)
    assert take_due(qp, now=5.0, floor_s=4.999, max_packets=100) == []
    qp.post_send(now=5.0, message_id=1, size_bytes=MTU * 1000)
    got = take_due(qp, now=5.0, floor_s=5.0 - 0.001, max_packets=10_000)
    assert len(got) <= 1e9 * 0.001 / (WIRE_BYTES * 8) + 1


def test_window_blocks_release_until_acked() -> None:
    qp = _sender(1e12, window=8)
    got = take_due(qp, now=1.0, floor_s=0.0, max_packets=10_000)
    assert len(got) == 8 and [p.psn for p in got] == list(range(8))


def _pkt(payload: int, opcode: int = Opcode.SEND_MIDDLE) -> DataPacket:
    return DataPacket(1, 0, opcode, False, payload)


def test_gso_batches_cut_at_size_changes_segments_and_64k() -> None:
    packets = [_pkt(1024)] * 100 + [_pkt(512)] + [_pkt(1024)] * 3
    batches = gso_batches(packets, max_segments=64)
    assert [len(b) for b in batches] == [
        GSO_MAX_BUFFER_BYTES // 1040,
        100 - GSO_MAX_BUFFER_BYTES // 1040 + 1,
        3,
    ]
    # only the last of a batch may be shorter than the first
    for b in batches:
        assert all(p.udp_payload_bytes == b[0].udp_payload_bytes for p in b[:-1])
        assert sum(p.udp_payload_bytes for p in b) <= GSO_MAX_BUFFER_BYTES
    assert sum(len(b) for b in batches) == len(packets)


def test_gso_batches_never_put_a_bigger_packet_after_a_smaller_one() -> None:
    packets = [_pkt(100), _pkt(1024), _pkt(1024)]
    assert [len(b) for b in gso_batches(packets, max_segments=64)] == [1, 2]
    assert [len(b) for b in gso_batches([_pkt(4096)] * 20, max_segments=8)] == [8, 8, 4]
