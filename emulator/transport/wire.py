"""RoCEv2 wire codec: BTH, RETH, AETH, CNP and ICRC over IPv4 (and IPv6) UDP.

Layout (IBTA vol. 1 ch. 9; RoCEv2 is annex A17): UDP destination port 4791, then the 12-byte
BTH (opcode; SE/M/PadCnt/TVer; P_Key; FECN/BECN/6 reserved bits + 24-bit destination QP;
AckReq/7 reserved bits + 24-bit PSN), then RETH (WRITE first/only: 64-bit VA, R_Key, DMA length)
or AETH (ACK: syndrome + 24-bit MSN) or 16 reserved bytes (CNP), the payload padded to 4 bytes,
and a 4-byte ICRC. The selective acknowledgement (opcode 0xD1, docs/multipath.md) is an ACK's
BTH and AETH followed by a SACKETH: bitmap words (1 byte), base PSN (3 bytes), then the words
(64 bits each, big-endian; bit j of word w stands for PSN base + 64w + j).

ICRC: CRC-32 (the Ethernet polynomial, zlib.crc32's values; emulator.transport.crc computes it)
over 8 bytes of 0xFF standing in for the IB LRH, then the IP header with ToS/traffic class,
TTL/hop limit, IPv4 header checksum (and IPv6 flow label) set to ones, the UDP header with its
checksum set to ones, the BTH with its FECN/BECN/reserved byte set to ones, and everything after
the BTH up to the ICRC. It is stored least significant byte first. scapy.contrib.roce (BTH.compute_icrc) and the Linux rxe driver
(rxe_icrc.c) do the same; a ConnectX-4 Lx CNP capture checks it in the tests.

The kernel writes the IP and UDP headers, but the ICRC covers them, so a builder is told the
addresses, ports, IP identification and total length the wire will carry. With UDP GSO the
kernel numbers the segments of one buffer with consecutive IP ids: `layout_gso` takes the first.

Hot path: struct.pack_into and crc32 on memoryviews, no per-packet objects beyond the
descriptors the queue pair already made.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.transport.crc import crc32
from emulator.transport.packets import (
    AETH_BYTES,
    BTH_BYTES,
    CNP_RESERVED_BYTES,
    DATA_OPCODES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    IPV6_HEADER_BYTES,
    PSN_MASK,
    QPN_MASK,
    RETH_BYTES,
    RETH_OPCODES,
    ROCEV2_UDP_PORT,
    SACK_MAX_WORDS,
    SACK_WORD_BYTES,
    SACKETH_HEAD_BYTES,
    UDP_HEADER_BYTES,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
    Packet,
    SackPacket,
)

_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_AETH = struct.Struct("!I")
_ICRC = struct.Struct("<I")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")
_M64 = (1 << 64) - 1
_LEN_ID = struct.Struct("!HH")
_MASKED_BTH_BYTE = b"\xff"

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3
PKEY_DEFAULT = 0xFFFF
IPV4_DONT_FRAGMENT = 0x4000
_LRH_STANDIN = b"\xff" * 8
_ZEROS = bytes(4096 + 4)


class MalformedPacket(ValueError):
    """A datagram that is not a well-formed RoCEv2 packet of a kind this codec knows."""


def _ipv4_checksum(header: bytes | bytearray) -> int:
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True)
class FlowAddress:
    """What the IP and UDP headers of one flow carry, as far as the ICRC covers it."""

    src: str
    dst: str
    sport: int
    dport: int = ROCEV2_UDP_PORT
    dscp: int = 0
    ecn: int = ECN_ECT0
    ttl: int = 64
    dont_fragment: bool = True

    @property
    def is_ipv6(self) -> bool:
        return ipaddress.ip_address(self.src).version == 6

    @property
    def ip_header_bytes(self) -> int:
        return IPV6_HEADER_BYTES if self.is_ipv6 else IPV4_HEADER_BYTES


class IcrcContext:
    """Computes ICRCs for one flow. Keeps the masked pseudo-header (8 x 0xFF, IP, UDP) of the flow
    in a scratch buffer and only rewrites the IP id and lengths per packet."""

    __slots__ = ("_ip_len_at", "_ipv6", "_scratch", "_udp_len_at", "address")

    def __init__(self, address: FlowAddress) -> None:
        self.address = address
        self._ipv6 = address.is_ipv6
        src = ipaddress.ip_address(address.src).packed
        dst = ipaddress.ip_address(address.dst).packed
        if self._ipv6:
            # version 6, traffic class and flow label masked to ones; hop limit ones
            ip = struct.pack("!IHBB16s16s", 0x6FFFFFFF, 0, 17, 0xFF, src, dst)
            self._ip_len_at = 8 + 4  # payload length
        else:
            flags = IPV4_DONT_FRAGMENT if address.dont_fragment else 0
            ip = _IPV4.pack(0x45, 0xFF, 0, 0, flags, 0xFF, 17, 0xFFFF, src, dst)
            self._ip_len_at = 8 + 2  # total length, then identification
        udp = _UDP.pack(address.sport, address.dport, 0, 0xFFFF)
        self._scratch = bytearray(_LRH_STANDIN + ip + udp)
        self._udp_len_at = len(self._scratch) - 4

    def prefix_crc(self, ip_id: int, udp_payload_bytes: int) -> int:
        """CRC-32 state after the pseudo-header of a packet with this UDP payload size."""
        scratch = self._scratch
        udp_len = UDP_HEADER_BYTES + udp_payload_bytes
        if self._ipv6:
            _U16.pack_into(scratch, self._ip_len_at, udp_len)
        else:
            _LEN_ID.pack_into(scratch, self._ip_len_at, IPV4_HEADER_BYTES + udp_len, ip_id & 0xFFFF)
        _U16.pack_into(scratch, self._udp_len_at, udp_len)
        return crc32(scratch)

    def compute(self, ip_id: int, udp_payload: memoryview | bytes | bytearray) -> int:
        """ICRC of a packet whose UDP payload (BTH .. end, ICRC included) is `udp_payload`."""
        mv = memoryview(udp_payload)
        crc = self.prefix_crc(ip_id, len(mv))
        crc = crc32(mv[:4], crc)
        # FECN, BECN and the 6 reserved bits as ones: IBA vol. 1 section 7.8.1 makes the BTH's
        # "Resv8a" byte a variant field, and annex A17 (RoCEv2) keeps it so (Linux rxe_icrc.c:
        # bth->qpn |= ~BTH_QPN_MASK; scapy BTH.compute_icrc: fecn, becn, resv6 = 1). The
        # attribution tag lives there (packets.ATTRIBUTION_TAG_AT): it never changes an ICRC.
        crc = crc32(_MASKED_BTH_BYTE, crc)
        return crc32(mv[5:-ICRC_BYTES], crc)

    def seal(self, ip_id: int, buf: bytearray | memoryview, start: int, end: int) -> None:
        """Write the ICRC into the last 4 bytes of the packet buf[start:end]."""
        _ICRC.pack_into(buf, end - ICRC_BYTES, self.compute(ip_id, memoryview(buf)[start:end]))

    def check(self, ip_id: int, udp_payload: memoryview | bytes | bytearray) -> bool:
        if len(udp_payload) < BTH_BYTES + ICRC_BYTES:
            return False
        (stored,) = _ICRC.unpack_from(udp_payload, len(udp_payload) - ICRC_BYTES)
        return bool(stored == self.compute(ip_id, udp_payload))


def _write_bth(
    buf: bytearray | memoryview,
    at: int,
    opcode: int,
    dest_qp: int,
    psn: int,
    *,
    ack_req: bool = False,
    pad_count: int = 0,
    becn: bool = False,
    fecn: bool = False,
    solicited: bool = False,
) -> None:
    flags = (solicited << 7) | (pad_count << 4)  # M=0, TVer=0
    qp_word = (fecn << 31) | (becn << 30) | (dest_qp & QPN_MASK)
    _BTH.pack_into(
        buf, at, opcode, flags, PKEY_DEFAULT, qp_word, (ack_req << 31) | (psn & PSN_MASK)
    )


def write_packet(buf: bytearray | memoryview, at: int, packet: Packet) -> int:
    """Write the UDP payload of `packet` (ICRC left as zeros) at buf[at:]; return its end."""
    if type(packet) is DataPacket:
        n = packet.payload_bytes
        pad = -n & 3
        _write_bth(
            buf,
            at,
            packet.opcode,
            packet.dest_qp,
            packet.psn,
            ack_req=packet.ack_req,
            pad_count=pad,
        )
        o = at + BTH_BYTES
        if packet.opcode in RETH_OPCODES:
            _RETH.pack_into(buf, o, packet.virtual_address, packet.rkey, packet.dma_length_bytes)
            o += RETH_BYTES
        end = o + n + pad
        data = packet.payload
        if data is None:
            buf[o:end] = _ZEROS[: n + pad]
        else:
            buf[o : o + n] = data
            buf[o + n : end] = _ZEROS[:pad]
        buf[end : end + ICRC_BYTES] = _ZEROS[:ICRC_BYTES]
        return end + ICRC_BYTES
    if type(packet) is AckPacket:
        _write_bth(buf, at, Opcode.ACKNOWLEDGE, packet.dest_qp, packet.psn)
        _AETH.pack_into(buf, at + BTH_BYTES, (packet.syndrome << 24) | (packet.msn & 0xFFFFFF))
        end = at + BTH_BYTES + AETH_BYTES
        buf[end : end + ICRC_BYTES] = _ZEROS[:ICRC_BYTES]
        return end + ICRC_BYTES
    if type(packet) is SackPacket:
        _write_bth(buf, at, Opcode.SELECTIVE_ACKNOWLEDGE, packet.dest_qp, packet.psn)
        o = at + BTH_BYTES
        _AETH.pack_into(buf, o, (packet.syndrome << 24) | (packet.msn & 0xFFFFFF))
        o += AETH_BYTES
        words = packet.words
        if not 1 <= words <= SACK_MAX_WORDS or packet.bitmap >> (64 * words):
            raise ValueError(f"SACK bitmap does not fit {words} words")
        _AETH.pack_into(buf, o, (words << 24) | (packet.base_psn & PSN_MASK))
        o += SACKETH_HEAD_BYTES
        # word w holds PSNs base + 64w .. base + 64w + 63, bit j (LSB first) for base + 64w + j
        buf[o : o + SACK_WORD_BYTES * words] = b"".join(
            _U64.pack((packet.bitmap >> (64 * w)) & _M64) for w in range(words)
        )
        end = o + SACK_WORD_BYTES * words
        buf[end : end + ICRC_BYTES] = _ZEROS[:ICRC_BYTES]
        return end + ICRC_BYTES
    if type(packet) is CnpPacket:
        _write_bth(buf, at, Opcode.CNP, packet.dest_qp, 0, becn=True)
        end = at + BTH_BYTES + CNP_RESERVED_BYTES + ICRC_BYTES
        buf[at + BTH_BYTES : end] = _ZEROS[: CNP_RESERVED_BYTES + ICRC_BYTES]
        return end
    raise TypeError(f"not a transport packet: {packet!r}")


def encode(packet: Packet, icrc: IcrcContext, ip_id: int = 0) -> bytes:
    """The UDP payload of one packet with its ICRC for the given flow and IP identification."""
    buf = bytearray(packet.udp_payload_bytes)
    end = write_packet(buf, 0, packet)
    icrc.seal(ip_id, buf, 0, end)
    return bytes(buf)


def layout_gso(
    buf: bytearray,
    packets: Sequence[Packet],
    icrc: IcrcContext,
    *,
    ip_id_first: int,
) -> tuple[int, int]:
    """Lay out `packets` back to back in `buf` as one UDP GSO buffer, each with the ICRC for IP id
    ip_id_first + i (the kernel numbers GSO segments consecutively). Returns (bytes used, segment
    size). GSO cuts the buffer every segment-size bytes, so every packet but the last must have the
    same size: send a WRITE first (it has a RETH) in a buffer of its own."""
    if not packets:
        return 0, 0
    segment = packets[0].udp_payload_bytes
    mv = memoryview(buf)
    at = 0
    last = len(packets) - 1
    prefix_crc = icrc.prefix_crc
    for i, packet in enumerate(packets):
        if type(packet) is not DataPacket:
            end = write_packet(buf, at, packet)
            icrc.seal(ip_id_first + i, buf, at, end)
        else:
            # Data packets inline: the BTH is written with its FECN/BECN byte masked to ones so
            # one CRC pass covers BTH and payload, then the byte gets its real value (0).
            n = packet.payload_bytes
            pad = -n & 3
            opcode = packet.opcode
            _BTH.pack_into(
                buf,
                at,
                opcode,
                pad << 4,
                PKEY_DEFAULT,
                0xFF000000 | packet.dest_qp,
                (packet.ack_req << 31) | packet.psn,
            )
            o = at + BTH_BYTES
            if opcode in RETH_OPCODES:
                _RETH.pack_into(
                    buf, o, packet.virtual_address, packet.rkey, packet.dma_length_bytes
                )
                o += RETH_BYTES
            data = packet.payload
            if data is None:
                buf[o : o + n + pad] = _ZEROS[: n + pad]
            else:
                buf[o : o + n] = data
                if pad:
                    buf[o + n : o + n + pad] = _ZEROS[:pad]
            body_end = o + n + pad
            end = body_end + ICRC_BYTES
            crc = crc32(mv[at:body_end], prefix_crc(ip_id_first + i, end - at))
            _ICRC.pack_into(buf, body_end, crc)
            buf[at + 4] = 0
        size = end - at
        if size != segment and not (i == last and size < segment):
            raise ValueError(
                f"packet {i} is {size} bytes, the GSO segment size is {segment}: only the last "
                "may be shorter"
            )
        at = end
    return at, segment


def decode(data: bytes | bytearray | memoryview, *, with_payload: bool = True) -> Packet:
    """Parse one RoCEv2 UDP payload into a descriptor; MalformedPacket if it is not one.
    `with_payload=False` skips copying the payload (the receiver of synthetic traffic only needs
    its length). The ICRC is not checked here (a UDP socket does not see the IP id it covers):
    use IcrcContext.check where the IP header is known."""
    mv = memoryview(data)
    size = len(mv)
    if size < BTH_BYTES + ICRC_BYTES:
        raise MalformedPacket(f"{size} bytes is shorter than BTH + ICRC")
    opcode, flags, _pkey, qp_word, psn_word = _BTH.unpack_from(mv, 0)
    dest_qp = qp_word & QPN_MASK
    psn = psn_word & PSN_MASK
    if flags & 0x0F:
        raise MalformedPacket(f"BTH transport header version {flags & 0x0F} is not 0")
    if opcode in DATA_OPCODES:
        at = BTH_BYTES
        va = rkey = dma = 0
        if opcode in RETH_OPCODES:
            if size < BTH_BYTES + RETH_BYTES + ICRC_BYTES:
                raise MalformedPacket("WRITE first/only shorter than BTH + RETH + ICRC")
            va, rkey, dma = _RETH.unpack_from(mv, at)
            at += RETH_BYTES
        pad = (flags >> 4) & 3
        n = size - at - ICRC_BYTES - pad
        if n < 0:
            raise MalformedPacket(f"pad count {pad} longer than the payload")
        return DataPacket(
            dest_qp,
            psn,
            opcode,
            bool(psn_word >> 31),
            n,
            0,
            bytes(mv[at : at + n]) if with_payload else None,
            va,
            rkey,
            dma,
        )
    if opcode == Opcode.ACKNOWLEDGE:
        if size != BTH_BYTES + AETH_BYTES + ICRC_BYTES:
            raise MalformedPacket(f"ACK of {size} bytes, expected {BTH_BYTES + AETH_BYTES + 4}")
        (aeth,) = _AETH.unpack_from(mv, BTH_BYTES)
        return AckPacket(dest_qp, psn, aeth >> 24, aeth & 0xFFFFFF)
    if opcode == Opcode.SELECTIVE_ACKNOWLEDGE:
        head = BTH_BYTES + AETH_BYTES + SACKETH_HEAD_BYTES
        if size < head + SACK_WORD_BYTES + ICRC_BYTES:
            raise MalformedPacket(f"SACK of {size} bytes is shorter than one bitmap word")
        (aeth,) = _AETH.unpack_from(mv, BTH_BYTES)
        (sacketh,) = _AETH.unpack_from(mv, BTH_BYTES + AETH_BYTES)
        words = sacketh >> 24
        if not 1 <= words <= SACK_MAX_WORDS or size != head + SACK_WORD_BYTES * words + ICRC_BYTES:
            raise MalformedPacket(f"SACK of {size} bytes does not hold its {words} bitmap words")
        bitmap = 0
        for w in range(words):
            (word,) = _U64.unpack_from(mv, head + SACK_WORD_BYTES * w)
            bitmap |= word << (64 * w)
        return SackPacket(
            dest_qp, psn, sacketh & PSN_MASK, bitmap, words, aeth & 0xFFFFFF, aeth >> 24
        )
    if opcode == Opcode.CNP:
        if size < BTH_BYTES + ICRC_BYTES:
            raise MalformedPacket("CNP too short")
        return CnpPacket(dest_qp)
    raise MalformedPacket(f"BTH opcode 0x{opcode:02x} is not handled")


def ipv4_packet(
    packet: Packet, address: FlowAddress, *, ip_id: int, ecn: int | None = None
) -> bytes:
    """A whole IPv4 packet (IP + UDP + RoCEv2) as the wire carries it, ICRC included; the UDP
    checksum is 0 as RoCEv2 senders usually leave it (RFC 768 allows it for IPv4)."""
    payload = encode(packet, IcrcContext(address), ip_id)
    return ipv4_udp_packet(address, payload, ip_id=ip_id, ecn=ecn)


def ipv4_udp_packet(
    address: FlowAddress, payload: bytes, *, ip_id: int, ecn: int | None = None
) -> bytes:
    """An IPv4/UDP packet carrying `payload` (UDP checksum 0, as RFC 768 allows for IPv4)."""
    tos = (address.dscp << 2) | (address.ecn if ecn is None else ecn)
    flags = IPV4_DONT_FRAGMENT if address.dont_fragment else 0
    total = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + len(payload)
    src = ipaddress.IPv4Address(address.src).packed
    dst = ipaddress.IPv4Address(address.dst).packed
    hdr = bytearray(
        _IPV4.pack(0x45, tos, total, ip_id & 0xFFFF, flags, address.ttl, 17, 0, src, dst)
    )
    _U16.pack_into(hdr, 10, _ipv4_checksum(hdr))
    udp = _UDP.pack(address.sport, address.dport, UDP_HEADER_BYTES + len(payload), 0)
    return bytes(hdr) + udp + payload


@dataclass(frozen=True)
class Ipv4Datagram:
    """The parts of a captured IPv4 RoCEv2 packet the transport needs."""

    address: FlowAddress
    ip_id: int
    ecn: int
    udp_payload: bytes
    icrc_ok: bool


def parse_ipv4_packet(data: bytes | bytearray | memoryview) -> Ipv4Datagram:
    """Split a captured IPv4/UDP packet and check its ICRC; MalformedPacket if it is not RoCEv2."""
    mv = memoryview(data)
    if len(mv) < IPV4_HEADER_BYTES + UDP_HEADER_BYTES:
        raise MalformedPacket("shorter than IPv4 + UDP headers")
    vihl, tos, total, ip_id, flags, ttl, proto, _ck, src, dst = _IPV4.unpack_from(mv, 0)
    if vihl != 0x45 or proto != 17:
        raise MalformedPacket("not an IPv4 UDP packet without options")
    if total > len(mv):
        raise MalformedPacket(f"IP total length {total} beyond the {len(mv)} captured bytes")
    sport, dport, udp_len, _ = _UDP.unpack_from(mv, IPV4_HEADER_BYTES)
    if dport != ROCEV2_UDP_PORT:
        raise MalformedPacket(f"UDP destination port {dport} is not {ROCEV2_UDP_PORT}")
    start = IPV4_HEADER_BYTES + UDP_HEADER_BYTES
    if udp_len != total - IPV4_HEADER_BYTES:
        raise MalformedPacket("UDP length disagrees with the IP total length")
    payload = bytes(mv[start:total])
    address = FlowAddress(
        str(ipaddress.IPv4Address(src)),
        str(ipaddress.IPv4Address(dst)),
        sport,
        dport,
        dscp=tos >> 2,
        ecn=tos & 3,
        ttl=ttl,
        dont_fragment=bool(flags & IPV4_DONT_FRAGMENT),
    )
    ok = IcrcContext(address).check(ip_id, payload)
    return Ipv4Datagram(address, ip_id, tos & 3, payload, ok)
