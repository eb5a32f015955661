"""One-way latency: the send stamp BurstWriter lays out in every data segment (checked segment by
segment against the codec, `write_packet` + stamp + `IcrcContext.seal`), `departed_ns` reading it
back, and the LatencyHistogram the receivers fill."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.prometheus import LATENCY_BUCKETS_S
from emulator.latency import (
    BOUNDS_S,
    BUCKETS,
    LOWEST_S,
    LatencyHistogram,
    LatencySummary,
    merged,
)
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import (
    SEND_STAMP,
    STAMP_BYTES,
    BurstBuffer,
    BurstWriter,
    departed_ns,
)
from emulator.transport.packets import (
    BTH_BYTES,
    ICRC_BYTES,
    PSN_MASK,
    RETH_OPCODES,
    DataPacket,
    Opcode,
)
from emulator.transport.params import TransportParams
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, encode, write_packet

ADDRESS = FlowAddress("10.1.0.1", "10.1.0.2", 49152)
OTHER = FlowAddress("10.1.0.7", "10.1.0.2", 49999)
THIRD = FlowAddress("10.1.0.1", "10.1.0.9", 50001)
DEST_QP = 0x123456
T0 = 1_700_000_000_123_456_789  # a CLOCK_REALTIME ns
SPACING = 8_352  # ns per packet
BUFFER_BYTES = 65535 * 2
SEND_OPS = [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY]


# -- helpers -------------------------------------------------------------------------------
def _segment(payload: int) -> int:
    return BTH_BYTES + payload + (-payload & 3) + ICRC_BYTES


def _burst(
    psn: int,
    count: int,
    payload: int,
    last: int | None = None,
    opcodes: Sequence[int] | None = None,
    acks: Sequence[int] = (),
    dest_qp: int = DEST_QP,
) -> Burst:
    """A compact burst: `count` segments from `psn`, the last with `last` payload bytes."""
    last = payload if last is None or count == 1 else last
    ops = bytes(opcodes) if opcodes is not None else bytes([Opcode.SEND_MIDDLE] * count)
    assert len(ops) == count
    return Burst(dest_qp, psn, count, _segment(payload), payload, last, ops, sorted(set(acks)))


def _packets_burst(packets: list[DataPacket]) -> Burst:
    """A burst that carries its packets (every one but the last of the first one's size)."""
    first = packets[0]
    return Burst(
        first.dest_qp,
        first.psn,
        len(packets),
        first.udp_payload_bytes,
        first.payload_bytes,
        packets[-1].payload_bytes,
        bytes(p.opcode for p in packets),
        [i for i, p in enumerate(packets) if p.ack_req],
        packets=packets,
    )


def _carries_stamp(packet: DataPacket) -> bool:
    """A data packet of zeros with room for the stamp right after its BTH (no RETH there)."""
    return (
        packet.payload is None
        and packet.payload_bytes >= STAMP_BYTES
        and packet.opcode not in RETH_OPCODES
    )


def _expected(packet: DataPacket, icrc: IcrcContext, ip_id: int, stamp: bytes) -> bytes:
    """The codec's bytes of the packet, with the stamp at BTH_BYTES when it carries one, then
    sealed (the ICRC covers the stamp)."""
    buf = bytearray(packet.udp_payload_bytes)
    end = write_packet(buf, 0, packet)
    if stamp and _carries_stamp(packet):
        buf[BTH_BYTES : BTH_BYTES + STAMP_BYTES] = stamp
    icrc.seal(ip_id, buf, 0, end)
    return bytes(buf)


def _check(
    writer: BurstWriter,
    burst: Burst,
    *,
    gso: bool = True,
    departed: int = T0,
    spacing: int = SPACING,
) -> list[bytes]:
    """Write the burst and check every segment against _expected, its ICRC and departed_ns;
    return the segments."""
    used = writer.write(burst, gso=gso, departed_ns=departed, spacing_ns=spacing)
    stamping = writer.buffer.stamps and departed != 0
    stamp = SEND_STAMP.pack(departed, burst.psn & PSN_MASK, spacing) if stamping else b""
    out = []
    at = 0
    packets = burst.to_packets()
    for i, packet in enumerate(packets):
        ip_id = i if gso else 0
        expected = _expected(packet, writer.icrc, ip_id, stamp)
        got = bytes(writer.buf[at : at + len(expected)])
        assert got == expected, f"segment {i} of {burst.count}"
        assert writer.icrc.check(ip_id, got), f"ICRC of segment {i}"
        if i < len(packets) - 1:
            assert len(got) == burst.segment_bytes
        if packet.opcode not in RETH_OPCODES and packet.payload is None:
            # (the receiver reads no stamp from a RETH packet; real payload is no stamp either)
            want = departed + i * spacing if stamp and _carries_stamp(packet) else 0
            assert departed_ns(got, len(got), packet.psn) == want, f"departure of segment {i}"
        out.append(got)
        at += len(expected)
    assert at == used == burst.wire_bytes
    return out


def _writer(
    max_segments: int = 64, *, stamps: bool = True, address: FlowAddress = ADDRESS
) -> BurstWriter:
    return BurstWriter(IcrcContext(address), BurstBuffer(BUFFER_BYTES, stamps=stamps), max_segments)


def _qp(verb: str, initial_psn: int, mtu: int = 1024) -> SendQueuePair:
    params = TransportParams(congestion_control="none", path_mtu_bytes=mtu, ack_every_packets=4)
    return SendQueuePair(
        qpn=1,
        dest_qp=DEST_QP,
        params=params,
        line_rate_bps=1e15,
        initial_psn=initial_psn,
        verb=verb,
    )


def _bursts(qp: SendQueuePair, limit: int = 1024) -> list[Burst]:
    out = []
    while limit > 0:
        burst = qp.poll_burst(now=0.0, floor_s=-1.0, max_packets=min(64, limit))
        if burst is None:
            break
        limit -= burst.count
        out.append(burst)
    return out


# -- the stamp on the wire -------------------------------------------------------------------
def test_stamp_bytes_are_little_endian_departure_first_psn_spacing() -> None:
    assert STAMP_BYTES == 16 and SEND_STAMP.format == "<QII"
    writer = _writer()
    burst = _burst(0xABCDEF, 3, 1024)
    segments = _check(writer, burst)
    want = (
        T0.to_bytes(8, "little") + (0xABCDEF).to_bytes(4, "little") + SPACING.to_bytes(4, "little")
    )
    for i, seg in enumerate(segments):
        # the BTH is the codec's, the stamp follows it, the rest of the payload stays zeros
        assert seg[:12] == bytes.fromhex("01 00 ffff 00123456") + (0xABCDEF + i).to_bytes(4, "big")
        assert seg[12:28] == want
        assert seg[28:-4] == bytes(1024 - 16)
    assert [departed_ns(s, len(s), 0xABCDEF + i) for i, s in enumerate(segments)] == [
        1_700_000_000_123_456_789,
        1_700_000_000_123_465_141,
        1_700_000_000_123_473_493,
    ]


@pytest.mark.parametrize("gso", [True, False])
@pytest.mark.parametrize(
    ("name", "burst"),
    [
        ("full segments, one opcode", _burst(100, 16, 1024)),
        (
            "full segments, mixed opcodes and AckReq",
            _burst(7, 6, 4096, opcodes=[0, 1, 1, 2, 4, 0], acks=[3, 4, 5]),
        ),
        ("one segment", _burst(5, 1, 256, opcodes=[Opcode.SEND_ONLY], acks=[0])),
        ("a shorter last segment", _burst(42, 5, 1024, 100, [0, 1, 1, 1, 2], [4])),
        ("last segment of exactly 16 payload bytes", _burst(42, 3, 1024, 16, [0, 1, 2], [2])),
        ("last segment of 15 payload bytes (pad 1)", _burst(42, 3, 1024, 15, [0, 1, 2])),
        ("last segment of 13 payload bytes (pad 3)", _burst(42, 3, 1024, 13, [0, 1, 2])),
        ("odd payload with pad, odd last", _burst(9, 7, 1021, 17, [1] * 6 + [2], [6])),
        ("odd payload with pad, full", _burst(9, 7, 1023)),
        ("last the full size less the pad", _burst(9, 4, 1024, 1023, [0, 1, 1, 2])),
        ("payload of 16", _burst(3, 9, 16)),
        ("payload of 15 (pad 1)", _burst(3, 9, 15)),
        ("payload of 12", _burst(3, 9, 12)),
        ("payload of 0", _burst(3, 4, 0, opcodes=[0, 1, 1, 2])),
        ("24-bit wrap", _burst(0xFFFFFD, 8, 1024, 600, [1] * 7 + [2], [2, 7])),
        ("24-bit wrap, full", _burst(0xFFFFFF, 10, 512)),
        ("starts at the wrap", _burst(0, 3, 512)),
        ("16-bit boundary crossed", _burst(0x12FFFE, 5, 1024, opcodes=[0, 1, 2, 0, 2])),
        ("16-bit boundary reached", _burst(0x12FFFC, 4, 1024)),
        ("more segments than max_segments", _burst(0xFFFFF0, 70, 256, 31, acks=[9, 69])),
        ("more segments, wrapping, full", _burst(0xFFFFE0, 65, 128)),
        ("more segments, short payload", _burst(0xFFFFE0, 66, 8, 3)),
    ],
)
def test_every_segment_is_the_codecs_with_the_stamp(name: str, burst: Burst, gso: bool) -> None:
    _check(_writer(), burst, gso=gso)


@pytest.mark.parametrize("gso", [True, False])
def test_explicit_packets_take_the_codec_path_with_the_stamp(gso: bool) -> None:
    """A RETH (WRITE first/only) keeps its RETH at BTH_BYTES and real payload is not
    overwritten: neither carries a stamp; the zero-payload packets beside them do."""
    first = DataPacket(
        DEST_QP,
        0xFFFFFE,
        Opcode.WRITE_FIRST,
        False,
        1008,
        virtual_address=0x1122334455667788,
        rkey=0xA5A5A5A5,
        dma_length_bytes=4000,
    )
    packets = [
        first,
        DataPacket(DEST_QP, 0xFFFFFF, Opcode.WRITE_MIDDLE, False, 1024),
        DataPacket(DEST_QP, 0, Opcode.WRITE_MIDDLE, True, 1024),
        DataPacket(DEST_QP, 1, Opcode.WRITE_LAST, True, 944),
    ]
    segments = _check(_writer(), _packets_burst(packets), gso=gso)
    assert segments[0][12:20] == bytes.fromhex("1122334455667788")  # the RETH, not a stamp
    assert segments[2][12:28] == SEND_STAMP.pack(T0, 0xFFFFFE, SPACING)
    assert departed_ns(segments[2], len(segments[2]), 0) == T0 + 2 * SPACING
    payload = bytes(range(200))
    sends = [
        DataPacket(DEST_QP, 50, Opcode.SEND_FIRST, False, 200, payload=payload),
        DataPacket(DEST_QP, 51, Opcode.SEND_MIDDLE, False, 200),
        DataPacket(DEST_QP, 52, Opcode.SEND_LAST, True, 20),
    ]
    segments = _check(_writer(), _packets_burst(sends), gso=gso)
    assert segments[0][12:212] == payload


def test_bursts_of_a_queue_pair_near_the_wrap() -> None:
    """What poll_burst hands out (SEND and WRITE, messages ending short, the PSN wrapping)."""
    for verb in ("send", "write"):
        qp = _qp(verb, 0xFFFFF6)
        qp.post_send(now=0.0, message_id=1, size_bytes=5 * 1024)
        qp.post_send(now=0.0, message_id=2, size_bytes=1024)
        qp.post_send(now=0.0, message_id=3, size_bytes=3 * 1024 + 10)
        qp.post_send(now=0.0, message_id=4, size_bytes=70 * 1024 + 7)
        qp.post_send(now=0.0, message_id=5, size_bytes=9)
        bursts = _bursts(qp)
        assert sum(b.count for b in bursts) == 5 + 1 + 4 + 71 + 1
        writer = _writer()
        for burst in bursts:
            _check(writer, burst)
            _check(writer, burst, gso=False)


@settings(max_examples=200, deadline=None)
@given(
    psn=st.one_of(st.integers(PSN_MASK - 80, PSN_MASK), st.integers(0, PSN_MASK)),
    count=st.integers(1, 72),
    payload=st.integers(0, 300),
    last_fraction=st.floats(0.0, 1.0),
    ops=st.lists(st.sampled_from(SEND_OPS), min_size=72, max_size=72),
    acks=st.lists(st.integers(0, 71), max_size=8),
    max_segments=st.sampled_from([1, 4, 64]),
    gso=st.booleans(),
    departed=st.integers(1, (1 << 64) - 1),
    spacing=st.integers(0, (1 << 32) - 1),
    as_packets=st.booleans(),
)
def test_stamped_bytes_match_the_codec_for_any_burst(
    psn: int,
    count: int,
    payload: int,
    last_fraction: float,
    ops: list[int],
    acks: list[int],
    max_segments: int,
    gso: bool,
    departed: int,
    spacing: int,
    as_packets: bool,
) -> None:
    last = int(payload * last_fraction)
    burst = _burst(psn, count, payload, last, ops[:count], [a for a in acks if a < count])
    if as_packets:
        burst = _packets_burst(burst.to_packets())
    writer = _writer(max_segments)
    _check(writer, burst, gso=gso, departed=departed, spacing=spacing)
    # and again in the same buffer (the template already there)
    _check(writer, burst, gso=gso, departed=departed // 2 + 1, spacing=spacing)


# -- departed_ns -----------------------------------------------------------------------------
def test_departed_ns_counts_packets_across_the_psn_wrap() -> None:
    writer = _writer()
    burst = _burst(0xFFFFFC, 9, 512, 100)
    segments = _check(writer, burst, departed=1_000_000_000, spacing=1_000)
    psns = [0xFFFFFC, 0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2, 3, 4]
    assert [departed_ns(s, len(s), p) for s, p in zip(segments, psns, strict=True)] == [
        1_000_000_000,
        1_000_001_000,
        1_000_002_000,
        1_000_003_000,
        1_000_004_000,
        1_000_005_000,
        1_000_006_000,
        1_000_007_000,
        1_000_008_000,
    ]
    # the formula itself: ((psn - first PSN) mod 2^24) x spacing, whatever PSN is asked about
    assert departed_ns(segments[0], len(segments[0]), 0xFFFFFB) == 1_000_000_000 + 16_777_215_000
    assert departed_ns(segments[0], len(segments[0]), 0x00FFFC) == 1_000_000_000 + 65_536_000
    # read inside a bigger receive buffer: only the first nbytes are the segment
    read = bytearray(9000)
    read[: len(segments[5])] = segments[5]
    assert departed_ns(read, len(segments[5]), 1) == 1_000_005_000
    assert departed_ns(memoryview(read), len(segments[5]), 1) == 1_000_005_000
    # the spacing saturates at 32 bits
    segments = _check(writer, _burst(0, 2, 64), departed=5, spacing=(1 << 32) - 1)
    assert departed_ns(segments[1], len(segments[1]), 1) == 5 + (1 << 32) - 1
    writer.write(_burst(0, 2, 64), departed_ns=5, spacing_ns=1 << 40)
    assert departed_ns(writer.buf, _segment(64), 1) == 5 + (1 << 32) - 1


def test_departed_ns_is_zero_without_a_stamp() -> None:
    # a segment too short to hold one (payload 15 + pad 1 is 32 bytes: long enough, zeros)
    for payload, nbytes in [(0, 16), (8, 24), (12, 28), (13, 32), (15, 32)]:
        writer = _writer()
        segments = _check(writer, _burst(10, 3, payload))
        assert [len(s) for s in segments] == [nbytes] * 3
        assert [departed_ns(s, len(s), 10 + i) for i, s in enumerate(segments)] == [0, 0, 0]
    # nbytes says too short even when the bytes behind it hold a stamp
    writer = _writer()
    (seg,) = _check(writer, _burst(10, 1, 64))
    assert departed_ns(seg, len(seg), 10) == T0
    assert departed_ns(seg, BTH_BYTES + STAMP_BYTES + ICRC_BYTES - 1, 10) == 0
    assert departed_ns(seg, BTH_BYTES + STAMP_BYTES + ICRC_BYTES, 10) == T0


@pytest.mark.parametrize(
    "burst",
    [
        _burst(100, 16, 1024),
        _burst(100, 5, 1024, 100),
        _burst(0xFFFFF0, 70, 256, 31),
        _packets_burst(_burst(9, 3, 64).to_packets()),
    ],
)
def test_a_buffer_that_does_not_stamp_leaves_the_payload_zero(burst: Burst) -> None:
    icrc = IcrcContext(ADDRESS)
    writer = BurstWriter(icrc, BurstBuffer(BUFFER_BYTES), 64)
    assert writer.buffer.stamps is False
    for gso in (True, False):
        used = writer.write(burst, gso=gso, departed_ns=T0, spacing_ns=SPACING)
        at = 0
        for i, packet in enumerate(burst.to_packets()):
            expected = encode(packet, icrc, i if gso else 0)
            got = bytes(writer.buf[at : at + len(expected)])
            assert got == expected
            assert got[BTH_BYTES:-ICRC_BYTES] == bytes(len(got) - BTH_BYTES - ICRC_BYTES)
            assert departed_ns(got, len(got), packet.psn) == 0
            at += len(expected)
        assert at == used


# -- the template cache --------------------------------------------------------------------
def test_one_buffer_alternating_shapes_keeps_every_icrc_valid() -> None:
    """Bursts of two shapes (and the codec paths in between) one after the other in one
    buffer, from one writer and from three flows sharing it (other addresses, other
    destination QPs, the same shapes): stamps, QPs, PSNs and ICRCs are each write's own,
    never a previous one's."""
    buf = BurstBuffer(BUFFER_BYTES, stamps=True)
    a = BurstWriter(IcrcContext(ADDRESS), buf, 64)
    flows = [
        (a, DEST_QP),
        (BurstWriter(IcrcContext(OTHER), buf, 64), 0x000777),
        (BurstWriter(IcrcContext(THIRD), buf, 64), DEST_QP),
    ]
    shapes: list[Callable[[int, int], Burst]] = [
        lambda k, q: _burst(
            (0xFFFFF0 + k) & PSN_MASK, 12, 1024, opcodes=[1] * 11 + [2], acks=[11], dest_qp=q
        ),
        lambda k, q: _burst(0xFFFF00 + 3 * k, 20, 256, 40, acks=[4, 19], dest_qp=q),
        # fewer and more segments than the buffer holds of this template
        lambda k, q: _burst(0x00FFF0 + k, 4 + k % 9, 1024, dest_qp=q),
        lambda k, q: _burst(k, 70, 64, 5, dest_qp=q),  # _write_packets
        lambda k, q: _burst(0xABC + k, 8, 15, dest_qp=q),  # no stamp in this shape
    ]
    for k in range(60):
        shape = shapes[k % 2] if k < 20 else shapes[(k * 7 + k // 3) % len(shapes)]
        writer, dest_qp = flows[0] if k < 10 else flows[k % 3]
        burst = shape(k, dest_qp)
        _check(writer, burst, gso=k % 5 != 0, departed=T0 + 1_000_003 * k, spacing=k * 31)
    # same shape, a different departure each time: the ICRC follows the stamp
    icrcs = set()
    for k in range(10):
        segments = _check(a, _burst(77, 6, 512), departed=T0 + k)
        icrcs.add(segments[3][-4:])
    assert len(icrcs) == 10


def test_a_write_without_departure_after_a_stamped_one_is_unstamped() -> None:
    writer = _writer()
    _check(writer, _burst(100, 8, 1024))
    _check(writer, _burst(200, 8, 1024), departed=0, spacing=0)


# -- LatencyHistogram ------------------------------------------------------------------------
def test_bounds_are_twenty_a_decade_from_100_ns_to_10_s() -> None:
    assert len(BOUNDS_S) == 160 and BUCKETS == 161 and LOWEST_S == 1e-7
    assert BOUNDS_S[0] == pytest.approx(1e-7 * 10**0.05, rel=1e-11)
    decades = [BOUNDS_S[20 * d - 1] for d in range(1, 9)]
    assert decades == [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    ratios = BOUNDS_S[1:] / BOUNDS_S[:-1]
    assert np.allclose(ratios, 10**0.05, rtol=1e-10)
    assert LATENCY_BUCKETS_S[:4] == pytest.approx(
        [1.77827941e-7, 3.16227766e-7, 5.62341325e-7, 1e-6]
    )
    assert LATENCY_BUCKETS_S[3::4] == (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


@pytest.mark.parametrize(
    ("value", "index"),
    [
        (0.0, 0),
        (5e-8, 0),
        (1e-7, 0),
        (1.1220184543e-07, 0),  # equals the first bound
        (1.1220184544e-07, 1),
        (1e-6, 19),
        (1.0000000001e-6, 20),
        (9.9999999e-7, 19),
        (1e-5, 39),
        (1e-4, 59),
        (1e-3, 79),
        (1.0, 139),
        (10.0, 159),
        (10.000001, 160),
        (3600.0, 160),
    ],
)
def test_a_value_falls_in_the_bucket_whose_upper_bound_it_does_not_exceed(
    value: float, index: int
) -> None:
    h = LatencyHistogram()
    h.observe(value)
    assert h.counts.index(1) == index and h.count == 1
    assert (h.sum_s, h.max_s) == (value, value)
    if 0 < index < 160:
        assert BOUNDS_S[index - 1] < value <= BOUNDS_S[index]


def _exact_percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@pytest.mark.parametrize(
    "distribution",
    ["uniform 1-1000 us", "log-uniform 200 ns - 5 s", "exponential 20 us", "two modes"],
)
def test_percentiles_are_within_6_percent_and_mean_and_max_exact(distribution: str) -> None:
    rng = random.Random(1234)
    n = 20_000
    if distribution == "uniform 1-1000 us":
        values = [rng.uniform(1e-6, 1e-3) for _ in range(n)]
    elif distribution == "log-uniform 200 ns - 5 s":
        values = [10 ** rng.uniform(math.log10(2e-7), math.log10(5.0)) for _ in range(n)]
    elif distribution == "exponential 20 us":
        values = [2e-7 + rng.expovariate(1 / 20e-6) for _ in range(n)]
    else:
        values = [rng.gauss(5e-6, 2e-7) for _ in range(n // 2)]
        values += [rng.gauss(800e-6, 30e-6) for _ in range(n // 2)]
    h = LatencyHistogram()
    h.add(np.array(values))
    assert h.count == n
    for q in (1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 100.0):
        exact = _exact_percentile(values, q)
        got = h.percentile_s(q)
        assert got is not None
        assert abs(got - exact) <= 0.06 * exact, (q, got, exact)
    top = h.percentile_s(100.0)
    assert top is not None and top <= max(values)
    summary = h.summary_us()
    assert summary.packets == n
    assert summary.avg_us == pytest.approx(math.fsum(values) / n * 1e6, rel=1e-12)
    assert summary.max_us == max(values) * 1e6
    p50, p99 = h.percentile_s(50.0), h.percentile_s(99.0)
    assert p50 is not None and p99 is not None
    assert (summary.p50_us, summary.p99_us) == (p50 * 1e6, p99 * 1e6)


def test_percentile_of_one_value_is_its_buckets_middle_capped_at_the_max() -> None:
    h = LatencyHistogram()
    h.observe(1e-6)
    # bucket 19: (10^-6.05, 10^-6]: its geometric middle 10^-6.025
    assert h.percentile_s(50.0) == pytest.approx(10**-6.025, rel=1e-9)
    h = LatencyHistogram()
    h.observe(1.0000000001e-6)  # just above a bound: the middle of the next bucket is above it
    assert h.percentile_s(50.0) == 1.0000000001e-6
    assert h.percentile_s(0.0) == 1.0000000001e-6
    h = LatencyHistogram()
    for v in (1e-5, 2e-5, 3e-5, 4e-5):
        h.observe(v)
    assert h.percentile_s(25.0) == pytest.approx(10**-5.025, rel=1e-9)  # rank 1: 1e-5
    assert h.percentile_s(25.0001) == pytest.approx(10**-4.675, rel=1e-9)  # rank 2: 2e-5
    summary = h.summary_us()
    assert summary.packets == 4 and summary.avg_us == pytest.approx(25.0, rel=1e-12)
    assert summary.max_us == 4e-5 * 1e6
    assert summary.p50_us == pytest.approx(10**-4.675 * 1e6, rel=1e-9)  # rank 2
    assert summary.p99_us == 4e-5 * 1e6  # rank 4: 10^-4.375 s, capped at the max


def test_empty_histogram() -> None:
    h = LatencyHistogram()
    assert h.count == 0 and h.percentile_s(50.0) is None
    summary = h.summary_us()
    assert summary == LatencySummary(0, None, None, None, None)
    assert summary.to_json() == {
        "packets": 0,
        "avg_us": None,
        "p50_us": None,
        "p99_us": None,
        "max_us": None,
    }
    assert h.cumulative([1e-6, 1e-3]) == [("1e-06", 0.0), ("0.001", 0.0), ("+Inf", 0.0)]
    assert h.to_wire() == ([0] * 161, 0.0, 0.0)
    assert merged([]).to_wire() == h.to_wire()


def _dyadic(rng: random.Random, n: int) -> list[float]:
    """Values whose sums are exact in any order (multiples of 2^-30 s, under 1 s)."""
    return [rng.randrange(1, 1 << 30) * 2.0**-30 for _ in range(n)]


def test_merge_is_observing_everything() -> None:
    rng = random.Random(7)
    parts = [_dyadic(rng, n) for n in (0, 1, 50, 700)]
    parts[2] += [1e-6, 1e-5, 12.5]  # at bounds and above the last one
    everything = LatencyHistogram()
    for part in parts:
        everything.add(np.array(part))
    hs = []
    for part in parts:
        h = LatencyHistogram()
        for v in part:
            h.observe(v)
        hs.append(h)
    one = LatencyHistogram()
    for h in hs:
        one.merge(h)
    assert one.to_wire() == everything.to_wire()
    assert merged(hs).to_wire() == everything.to_wire()
    assert merged(reversed(hs)).to_wire() == everything.to_wire()
    assert everything.max_s == 12.5 and everything.count == 754
    assert [h.count for h in hs] == [0, 1, 53, 700]  # merging left the parts alone


def test_wire_round_trip() -> None:
    rng = random.Random(11)
    h = LatencyHistogram()
    h.add(np.array([*_dyadic(rng, 300), 1e-6, 99.0]))
    wire = h.to_wire()
    back = LatencyHistogram.from_wire(wire)
    assert back.to_wire() == wire
    assert back.summary_us() == h.summary_us()
    # through JSON (a list, not a tuple) as the coordinator reads it
    again = LatencyHistogram.from_wire(json.loads(json.dumps(wire)))
    assert again.to_wire() == wire
    # copies: changing one does not change the other
    wire[0][5] += 1
    back.observe(1e-3)
    assert h.to_wire() == LatencyHistogram.from_wire(h.to_wire()).to_wire()
    assert h.count == 302 and back.count == 303 and sum(wire[0]) == 303


def test_cumulative_at_prometheus_bounds_counts_values_at_or_under_each() -> None:
    h = LatencyHistogram()
    values = [5e-8, 1e-6, 1e-6, 1.0000001e-6, 3e-6, 1e-5, 0.5e-3, 1e-3, 2.0, 10.0, 11.0]
    h.add(np.array(values))
    got = h.cumulative(LATENCY_BUCKETS_S)
    assert len(got) == 33 and got[-1] == ("+Inf", 11.0)
    for (label, count), bound in zip(got[:-1], LATENCY_BUCKETS_S, strict=True):
        assert label == f"{bound:.3g}"
        assert count == sum(1 for v in values if v <= bound)
    table = dict(got)
    assert table["1e-06"] == 3.0
    assert table["1.78e-06"] == 4.0
    assert table["1e-05"] == 6.0
    assert table["0.001"] == 8.0
    assert table["10"] == 10.0
    # bounds given as computed elsewhere (off in the last bit) land on the same buckets
    assert h.cumulative([10**-5.75, 10**-3, 0.1]) == [
        ("1.78e-06", 4.0),
        ("0.001", 8.0),
        ("0.1", 8.0),
        ("+Inf", 11.0),
    ]
