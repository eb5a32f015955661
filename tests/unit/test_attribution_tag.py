"""The attribution tag on the wire: the engine writes a class into the 6 reserved bits of each
data packet's BTH byte 4 (emulator.transport.packets.ATTRIBUTION_TAG_AT). Checked here: tagged
packets are valid RoCEv2 for scapy (the oracle) with the ICRC of the untagged packet, every
segment of a burst carries its message's tag (also across messages, on the general path and on
a shorter last segment), and receivers ignore the bits (decode, read_data_run)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer, BurstWriter, read_data_run
from emulator.transport.events import MessageReceived
from emulator.transport.packets import ATTRIBUTION_TAG_AT, DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, decode, parse_ipv4_packet

ADDRESS = FlowAddress("10.1.0.1", "10.1.0.2", 49152)
MTU = 1024


def _qp(verb: str = "send") -> SendQueuePair:
    params = TransportParams(congestion_control="none", path_mtu_bytes=MTU)
    return SendQueuePair(qpn=1, dest_qp=0x123456, params=params, line_rate_bps=1e15, verb=verb)


def _burst(messages: list[tuple[int, int]], verb: str = "send", max_packets: int = 64) -> Burst:
    """One burst of the messages (size, tag) posted on one QP."""
    qp = _qp(verb)
    for i, (size, tag) in enumerate(messages):
        qp.post_send(now=0.0, message_id=i, size_bytes=size, tag=tag)
    burst = qp.poll_burst(now=1.0, floor_s=0.0, max_packets=max_packets)
    assert burst is not None
    return burst


def _segments(burst: Burst, gso: bool = True) -> list[bytes]:
    writer = BurstWriter(IcrcContext(ADDRESS), BurstBuffer(65535 * 2), 64)
    used = writer.write(burst, gso=gso)
    data = bytes(writer.buf[:used])
    cuts = [*range(0, used, burst.segment_bytes), used]
    return [data[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def _wire(segment: bytes, ip_id: int, **ip: Any) -> bytes:
    """The segment as the wire carries it (the kernel's IPv4 and UDP headers)."""
    return raw(
        IP(src=ADDRESS.src, dst=ADDRESS.dst, id=ip_id, flags="DF", tos=0x02, **ip)
        / UDP(sport=ADDRESS.sport, dport=4791)
        / Raw(segment)
    )


def _untag(segment: bytes) -> bytes:
    out = bytearray(segment)
    out[ATTRIBUTION_TAG_AT] = 0
    return bytes(out)


@pytest.mark.parametrize("tag", [1, 2, 37, 63])
def test_tagged_packets_are_valid_rocev2_for_scapy_with_the_untagged_icrc(tag: int) -> None:
    # 5.5 MTUs: four middle segments on the compact path, a shorter last one via the codec
    size = 5 * MTU + MTU // 2
    tagged = _segments(_burst([(size, tag)]))
    plain = _segments(_burst([(size, 0)]))
    assert len(tagged) == 6
    for i, (seg, untagged) in enumerate(zip(tagged, plain, strict=True)):
        assert seg[ATTRIBUTION_TAG_AT] == tag, f"segment {i}"
        # the tag is the only difference, and the ICRC (the last 4 bytes) is the same
        assert _untag(seg) == untagged
        assert seg[-4:] == untagged[-4:]
        wire = _wire(seg, ip_id=i)
        parsed = IP(wire)
        bth = parsed[BTH]
        assert (bth.fecn, bth.becn, bth.resv6) == (0, 0, tag)
        assert bth.dqpn == 0x123456 and bth.pkey == 0xFFFF and bth.version == 0
        again = parsed.copy()
        again[BTH].icrc = None  # scapy recomputes it: the same as ours
        assert raw(again)[-4:] == seg[-4:]
        assert parse_ipv4_packet(wire).icrc_ok
        # a CE mark on the way (ToS is masked) leaves it valid too
        assert parse_ipv4_packet(_wire(seg, ip_id=i, ttl=3)).icrc_ok
        # a receiver reads the same packet as untagged
        assert decode(seg) == decode(untagged)


def test_a_burst_across_messages_carries_each_message_tag() -> None:
    burst = _burst([(2 * MTU, 5), (3 * MTU, 9)])
    assert burst.count == 5 and burst.tags == bytes([5, 5, 9, 9, 9])
    segments = _segments(burst)
    assert [s[ATTRIBUTION_TAG_AT] for s in segments] == [5, 5, 9, 9, 9]
    for i, seg in enumerate(segments):
        assert parse_ipv4_packet(_wire(seg, ip_id=i)).icrc_ok
    # without GSO every segment leaves alone (IP id 0): still its tag, still valid
    for seg in _segments(burst, gso=False):
        assert parse_ipv4_packet(_wire(seg, ip_id=0)).icrc_ok
    # the receiver reads the read as one run of the QP, the tags aside
    data = b"".join(segments)
    run = read_data_run(data, len(data), burst.segment_bytes)
    plain = b"".join(_untag(s) for s in segments)
    assert run is not None and run == read_data_run(plain, len(plain), burst.segment_bytes)
    # one tag for the whole burst: no per-segment tags
    assert _burst([(2 * MTU, 5), (3 * MTU, 5)]).tags is None


def test_the_general_path_tags_every_segment() -> None:
    # a WRITE ONLY carries a RETH: a burst of them goes through the codec packet by packet
    burst = _burst([(MTU, 12), (MTU, 13), (MTU, 13), (MTU, 12)], verb="write")
    assert burst.packets is not None and burst.count == 4
    segments = []
    writer = BurstWriter(IcrcContext(ADDRESS), BurstBuffer(65535 * 2), 64)
    used = writer.write(burst)
    at = 0
    for packet in burst.to_packets():
        end = at + packet.udp_payload_bytes
        segments.append(bytes(writer.buf[at:end]))
        at = end
    assert at == used
    assert [s[ATTRIBUTION_TAG_AT] for s in segments] == [12, 13, 13, 12]
    for i, seg in enumerate(segments):
        assert parse_ipv4_packet(_wire(seg, ip_id=i)).icrc_ok
        assert IP(_wire(seg, ip_id=i))[BTH].resv6 == seg[ATTRIBUTION_TAG_AT]


def test_a_tag_beyond_six_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="attribution tag 64"):
        _qp().post_send(now=0.0, message_id=1, size_bytes=10, tag=64)


def test_read_data_run_still_refuses_another_qp_or_fecn_in_the_read() -> None:
    segments = _segments(_burst([(3 * MTU, 4)]))
    for at, bit in ((ATTRIBUTION_TAG_AT, 0x80), (ATTRIBUTION_TAG_AT + 3, 0x01)):
        changed = bytearray(segments[1])
        changed[at] ^= bit  # FECN, or the destination QP's low bit
        data = segments[0] + bytes(changed) + segments[2]
        assert read_data_run(data, len(data), len(segments[0])) is None


def test_each_message_counts_the_ce_marks_received_until_it_completed() -> None:
    # message A's last packet, then B's first two, CE-marked, in one read: A's completion says
    # 0 CE so far, whenever its event is handled
    rx = ReceiveQueuePair(qpn=1, remote_qp=1, params=TransportParams())
    rx.on_data(now=0.0, packet=DataPacket(1, 0, Opcode.SEND_ONLY, True, 100), ce=False)
    rx.on_data(now=0.0, packet=DataPacket(1, 1, Opcode.SEND_FIRST, False, MTU), ce=True)
    rx.on_data(now=0.0, packet=DataPacket(1, 2, Opcode.SEND_LAST, True, 10), ce=True)
    done = [e for e in rx.events if isinstance(e, MessageReceived)]
    assert [(e.message_index, e.ce_packets) for e in done] == [(0, 0), (1, 2)]
    assert rx.ce_packets == 2
