"""Wire codec against scapy.contrib.roce (the oracle) and a real ConnectX-4 Lx CNP capture."""

from __future__ import annotations

import pathlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, CNPPadding, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    SEGMENT_OPCODES,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
    psn_add,
    psn_diff,
)
from emulator.transport.wire import (
    FlowAddress,
    IcrcContext,
    MalformedPacket,
    decode,
    encode,
    ipv4_packet,
    layout_gso,
    parse_ipv4_packet,
)

FIXTURE = pathlib.Path(__file__).parents[1] / "integration" / "fixtures" / "cnp_connectx4lx.hex"
ADDRESS = FlowAddress("10.0.0.1", "10.0.0.2", 49152, dscp=26)


def golden_cnp_ip_bytes() -> bytes:
    lines = [ln for ln in FIXTURE.read_text().splitlines() if not ln.startswith("#")]
    frame = bytes.fromhex("".join(lines).replace(" ", ""))
    return frame[14:]  # drop the Ethernet header


def test_golden_connectx4_cnp_parses_with_valid_icrc() -> None:
    datagram = parse_ipv4_packet(golden_cnp_ip_bytes())
    assert datagram.icrc_ok
    assert datagram.address.src == "10.0.17.1" and datagram.address.dst == "10.0.18.1"
    assert datagram.address.dscp == 48 and datagram.ecn == 2 and datagram.ip_id == 0x718C
    assert decode(datagram.udp_payload) == CnpPacket(dest_qp=0x118)
    assert datagram.udp_payload[-4:] == bytes.fromhex("82fd002a")


def test_golden_cnp_rebuilt_by_us_is_byte_identical() -> None:
    golden = golden_cnp_ip_bytes()
    address = FlowAddress("10.0.17.1", "10.0.18.1", 0, dscp=48, ecn=2, ttl=64)
    built = ipv4_packet(CnpPacket(0x118), address, ip_id=0x718C)
    # The NIC left the UDP checksum 0 and so do we; everything else must match to the byte.
    assert built == golden


def test_icrc_changes_with_ip_id_and_not_with_masked_fields() -> None:
    ctx = IcrcContext(ADDRESS)
    payload = encode(DataPacket(5, 7, Opcode.SEND_ONLY, True, 64), ctx, ip_id=1)
    assert ctx.check(1, payload)
    assert not ctx.check(2, payload)  # IP id is covered: GSO segments need their own ICRC
    # ToS/ECN and TTL are masked: a CE mark on the way does not break the ICRC
    marked = FlowAddress("10.0.0.1", "10.0.0.2", 49152, dscp=3, ecn=3, ttl=5)
    assert IcrcContext(marked).check(1, payload)
    # FECN/BECN are masked too
    flipped = bytearray(payload)
    flipped[4] |= 0xC0
    assert ctx.check(1, flipped)
    flipped[20] ^= 1  # payload is covered
    assert not ctx.check(1, flipped)


SAMPLE_PACKETS = [
    DataPacket(0x1234, 0xFFFFFF, Opcode.SEND_FIRST, False, 1024, payload=bytes(range(256)) * 4),
    DataPacket(0x1234, 0, Opcode.SEND_MIDDLE, True, 256, payload=b"\xab" * 256),
    DataPacket(0x1234, 1, Opcode.SEND_LAST, True, 13, payload=b"last-13-bytes"),
    DataPacket(0x22, 9, Opcode.SEND_ONLY, True, 0, payload=b""),
    DataPacket(
        0x22,
        9,
        Opcode.WRITE_FIRST,
        False,
        512,
        payload=b"w" * 512,
        virtual_address=0x7F0000001000,
        rkey=0xBEEF,
        dma_length_bytes=4000,
    ),
    DataPacket(0x22, 10, Opcode.WRITE_MIDDLE, False, 512, payload=b"m" * 512),
    DataPacket(0x22, 11, Opcode.WRITE_LAST, True, 7, payload=b"1234567"),
    DataPacket(0x22, 12, Opcode.WRITE_ONLY, True, 5, payload=b"hello", rkey=1, dma_length_bytes=5),
    AckPacket(0x33, 100, AETH_ACK, 4),
    AckPacket(0x33, 100, AETH_NAK_PSN_SEQUENCE_ERROR, 4),
    CnpPacket(0xABCDEF),
]


@pytest.mark.parametrize("packet", SAMPLE_PACKETS, ids=lambda p: type(p).__name__)
def test_every_kind_we_build_parses_in_scapy_with_same_fields_and_valid_icrc(packet) -> None:
    wire = ipv4_packet(packet, ADDRESS, ip_id=4321)
    parsed = IP(wire)
    bth = parsed[BTH]
    assert parsed[UDP].dport == 4791 and parsed[UDP].sport == 49152
    assert bth.dqpn == packet.dest_qp
    assert bth.pkey == 0xFFFF and bth.version == 0
    # scapy recomputes the ICRC when the field is cleared: it must equal ours
    again = parsed.copy()
    again[BTH].icrc = None
    assert raw(again)[-4:] == wire[-4:]
    if isinstance(packet, DataPacket):
        assert bth.opcode == packet.opcode and bth.psn == packet.psn
        assert bth.ackreq == packet.ack_req and bth.padcount == packet.pad_bytes
        body = raw(bth.payload)
        if packet.opcode in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY):
            va, rkey, dma = struct.unpack("!QII", body[:16])
            assert (va, rkey, dma) == (packet.virtual_address, packet.rkey, packet.dma_length_bytes)
            body = body[16:]
        assert body[: packet.payload_bytes] == packet.payload
    elif isinstance(packet, AckPacket):
        assert bth.opcode == 0x11 and bth.psn == packet.psn
        assert parsed[AETH].syndrome == packet.syndrome and parsed[AETH].msn == packet.msn
    else:
        assert bth.opcode == 0x81 and bth.becn == 1 and bth.fecn == 0
        assert parsed[CNPPadding].reserved1 == 0 and parsed[CNPPadding].reserved2 == 0
    assert parse_ipv4_packet(wire).icrc_ok
    assert decode(parse_ipv4_packet(wire).udp_payload) == packet


def test_packets_scapy_builds_parse_in_ours() -> None:
    ip = IP(src="192.168.1.2", dst="192.168.1.3", id=77, tos=0x6A, ttl=9, flags="DF")
    cases = [
        (
            UDP(sport=1234, dport=4791)
            / BTH(opcode=0x04, dqpn=0x42, psn=0xABCDE, ackreq=1)
            / Raw(b"abcd" * 8),
            DataPacket(0x42, 0xABCDE, 0x04, True, 32, 0, b"abcd" * 8),
        ),
        (
            UDP(sport=1234, dport=4791)
            / BTH(opcode=0x11, dqpn=0x43, psn=77)
            / AETH(syndrome=0x60, msn=3),
            AckPacket(0x43, 77, 0x60, 3),
        ),
        (UDP(sport=1234, dport=4791) / cnp(dqpn=0x44), CnpPacket(0x44)),
    ]
    for layers, expected in cases:
        wire = raw(ip / layers)
        datagram = parse_ipv4_packet(wire)
        assert datagram.icrc_ok
        assert decode(datagram.udp_payload) == expected


def test_ipv6_icrc_agrees_with_scapy() -> None:
    pkt = (
        IPv6(src="fd00::1", dst="fd00::2", tc=0x6A, fl=0x12345, hlim=7)
        / UDP(sport=5555, dport=4791)
        / BTH(opcode=0x04, dqpn=9, psn=3)
        / Raw(b"x" * 16)
    )
    wire = raw(pkt)
    ctx = IcrcContext(FlowAddress("fd00::1", "fd00::2", 5555))
    assert ctx.check(0, wire[48:])
    assert encode(DataPacket(9, 3, 0x04, False, 16, 0, b"x" * 16), ctx)[-4:] == wire[-4:]


def test_gso_layout_gives_each_segment_the_icrc_of_its_ip_id() -> None:
    ctx = IcrcContext(ADDRESS)
    packets = [
        DataPacket(
            7, psn_add(0xFFFFFE, i), Opcode.SEND_MIDDLE, False, 1024, payload=bytes([i]) * 1024
        )
        for i in range(5)
    ]
    packets.append(DataPacket(7, 3, Opcode.SEND_LAST, True, 100, payload=b"z" * 100))
    buf = bytearray(64 * 1024)
    used, segment = layout_gso(buf, packets, ctx, ip_id_first=65534)
    assert segment == 12 + 1024 + 4 and used == 5 * segment + 12 + 100 + 4
    for i, packet in enumerate(packets):
        chunk = bytes(buf[i * segment : min((i + 1) * segment, used)])
        ip_id = (65534 + i) & 0xFFFF  # the kernel's IP id wraps at 16 bits
        assert ctx.check(ip_id, chunk)
        assert decode(chunk) == packet
        # and scapy agrees on the packet as the wire carries it
        wire = raw(
            IP(src="10.0.0.1", dst="10.0.0.2", id=ip_id, flags="DF", tos=0x68)
            / UDP(sport=49152, dport=4791)
            / Raw(chunk)
        )
        assert parse_ipv4_packet(wire).icrc_ok
    with pytest.raises(ValueError, match="only the last"):
        layout_gso(buf, [packets[-1], packets[0]], ctx, ip_id_first=0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x04" * 15,
        bytes([0x11]) + bytes(15),
        bytes([0x06]) + bytes(18),
        bytes([0x42]) + bytes(20),
        bytes([0x04, 0x01]) + bytes(14),
    ],
)
def test_malformed_datagrams_raise_malformed_packet(data: bytes) -> None:
    with pytest.raises(MalformedPacket):
        decode(data)


def test_psn_arithmetic_wraps_at_24_bits() -> None:
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_diff(0, 0xFFFFFF) == 1
    assert psn_diff(0xFFFFFF, 0) == -1
    assert psn_diff(5, 5) == 0


data_packets = st.builds(
    lambda qp, psn, verb, pos, ack, payload, va, rkey: DataPacket(
        qp,
        psn,
        SEGMENT_OPCODES[verb][pos],
        ack,
        len(payload),
        0,
        payload,
        *(
            (va, rkey, len(payload))
            if (verb, pos) in {("write", "first"), ("write", "only")}
            else (0, 0, 0)
        ),
    ),
    st.integers(0, (1 << 24) - 1),
    st.integers(0, (1 << 24) - 1),
    st.sampled_from(["send", "write"]),
    st.sampled_from(["first", "middle", "last", "only"]),
    st.booleans(),
    st.binary(max_size=300),
    st.integers(0, (1 << 64) - 1),
    st.integers(0, (1 << 32) - 1),
)
any_packet = st.one_of(
    data_packets,
    st.builds(
        AckPacket,
        st.integers(0, (1 << 24) - 1),
        st.integers(0, (1 << 24) - 1),
        st.sampled_from([AETH_ACK, AETH_NAK_PSN_SEQUENCE_ERROR, 0x00]),
        st.integers(0, (1 << 24) - 1),
    ),
    st.builds(CnpPacket, st.integers(0, (1 << 24) - 1)),
)


@settings(max_examples=200, deadline=None)
@given(any_packet, st.integers(0, 0xFFFF), st.integers(1, 65535))
def test_roundtrip_random_fields(packet, ip_id: int, sport: int) -> None:
    address = FlowAddress("172.16.5.4", "172.16.9.8", sport, dscp=26)
    wire = ipv4_packet(packet, address, ip_id=ip_id)
    datagram = parse_ipv4_packet(wire)
    assert datagram.icrc_ok and datagram.ip_id == ip_id
    assert decode(datagram.udp_payload) == packet
    # the ICRC really is CRC-32 little-endian over the masked pseudo-header
    expected = zlib.crc32(b"\xff" * 8 + _masked(wire)) & 0xFFFFFFFF
    assert struct.unpack("<I", wire[-4:])[0] == expected


def _masked(wire: bytes) -> bytes:
    b = bytearray(wire[:-4])
    b[1] = 0xFF  # ToS
    b[8] = 0xFF  # TTL
    b[10:12] = b"\xff\xff"  # IP checksum
    b[26:28] = b"\xff\xff"  # UDP checksum
    b[28 + 4] = 0xFF  # FECN/BECN/reserved
    return bytes(b)
