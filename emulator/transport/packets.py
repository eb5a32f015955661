"""Transport packets as small immutable descriptors: what the queue pairs produce and consume.

Descriptors are never changed after construction (the sender resends the same objects), but
are not frozen dataclasses: a frozen one costs five times as much to build (about 2 us against
0.35 us), once per packet on the hot path. The queue-pair logic works on these; `emulator.transport.wire` turns them into RoCEv2 bytes and
back, so the in-memory fabric can move descriptors (fast) while the engine moves bytes, with the
same protocol code on both. Sizes follow the RoCEv2 layout (IBTA vol. 1 ch. 9 and annex A17).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

ROCEV2_UDP_PORT = 4791  # IANA-assigned RoCEv2 port (IBTA annex A17)
BTH_BYTES = 12
RETH_BYTES = 16
AETH_BYTES = 4
ICRC_BYTES = 4
CNP_RESERVED_BYTES = 16
SACKETH_HEAD_BYTES = 4  # bitmap words (1 byte), base PSN (3 bytes)
SACK_WORD_BYTES = 8
SACK_MAX_WORDS = 16  # 1024 packets: transport.params SACK_MAX_PACKETS
IPV4_HEADER_BYTES = 20
IPV6_HEADER_BYTES = 40
UDP_HEADER_BYTES = 8
# Ethernet header + FCS + preamble/SFD + inter-frame gap: what a frame costs on a link beyond
# its IP packet (IEEE 802.3).
ETHERNET_OVERHEAD_BYTES = 14 + 4 + 8 + 12

# The attribution tag: the 6 reserved bits of the BTH byte after the P_Key (FECN, BECN, then
# Resv6a), where the engine writes the attribution class of every data packet it sends on the
# emulated fabric, for the switches' eBPF marker to count by (fabrics/ecn/phantom_marker.c). The
# ICRC treats that whole byte as variant (replaced by ones: IBA vol. 1 section 7.8.1, "Resv8a"
# of the BTH, which annex A17 keeps for RoCEv2), so the tag changes no ICRC; receivers ignore
# reserved bits (decode and read_data_run here do). 0 is untagged (ACKs, NAKs, CNPs, a run
# without attribution); 1..63 are classes (emulator/planning/attribution.py).
ATTRIBUTION_TAG_AT = 4  # offset in the BTH
ATTRIBUTION_TAG_MASK = 0x3F
ATTRIBUTION_TAG_SHIFT = 24  # in the BTH's FECN/BECN/Resv6a + destination QP word
PSN_MODULUS = 1 << 24
PSN_MASK = PSN_MODULUS - 1
QPN_MASK = (1 << 24) - 1


class Opcode(IntEnum):
    """BTH opcodes used here: RC transport (0x00..0x1f) and the RoCEv2 CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_ONLY = 0x04
    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_ONLY = 0x0A
    ACKNOWLEDGE = 0x11
    CNP = 0x81
    # This project's selective acknowledgement (docs/multipath.md, "The SACK on the wire"): the
    # RC ACKNOWLEDGE opcode in the range IBTA vol. 1 section 9.2 (table 35) leaves to
    # manufacturers (transport bits 110: 0xC0-0xDF), so no RC responder mistakes it for an ACK.
    SELECTIVE_ACKNOWLEDGE = 0xD1


DATA_OPCODES = frozenset(
    {
        Opcode.SEND_FIRST,
        Opcode.SEND_MIDDLE,
        Opcode.SEND_LAST,
        Opcode.SEND_ONLY,
        Opcode.WRITE_FIRST,
        Opcode.WRITE_MIDDLE,
        Opcode.WRITE_LAST,
        Opcode.WRITE_ONLY,
    }
)
RETH_OPCODES = frozenset({Opcode.WRITE_FIRST, Opcode.WRITE_ONLY})
FIRST_OPCODES = frozenset(
    {Opcode.SEND_FIRST, Opcode.SEND_ONLY, Opcode.WRITE_FIRST, Opcode.WRITE_ONLY}
)
LAST_OPCODES = frozenset({Opcode.SEND_LAST, Opcode.SEND_ONLY, Opcode.WRITE_LAST, Opcode.WRITE_ONLY})

# Opcodes by (verb, position) so the sender picks them from a table, not a chain of ifs.
SEGMENT_OPCODES: dict[str, dict[str, Opcode]] = {
    "send": {
        "first": Opcode.SEND_FIRST,
        "middle": Opcode.SEND_MIDDLE,
        "last": Opcode.SEND_LAST,
        "only": Opcode.SEND_ONLY,
    },
    "write": {
        "first": Opcode.WRITE_FIRST,
        "middle": Opcode.WRITE_MIDDLE,
        "last": Opcode.WRITE_LAST,
        "only": Opcode.WRITE_ONLY,
    },
}

# AETH syndrome (IBTA vol. 1 9.7.5.1): bits 6..5 = 00 ACK (bits 4..0 credit count, 31 = none
# advertised), 11 NAK (bits 4..0 NAK code, 0 = PSN sequence error).
AETH_ACK = 0x1F
AETH_NAK_PSN_SEQUENCE_ERROR = 0x60


def aeth_is_nak(syndrome: int) -> bool:
    return (syndrome & 0x60) == 0x60


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b on the 24-bit PSN circle, in -2**23 .. 2**23-1."""
    return ((a - b + (1 << 23)) & PSN_MASK) - (1 << 23)


@dataclass(slots=True)
class DataPacket:
    """An RC SEND or WRITE packet. `offset_bytes` is the payload's position in its message: not on
    the wire (the receiver counts bytes itself), carried so a simulation can check delivery order
    without real payload. `payload` is the content when there is one (None: zeros)."""

    dest_qp: int
    psn: int
    opcode: int
    ack_req: bool
    payload_bytes: int
    offset_bytes: int = 0
    payload: bytes | None = None
    # RETH, on WRITE first/only only
    virtual_address: int = 0
    rkey: int = 0
    dma_length_bytes: int = 0

    @property
    def pad_bytes(self) -> int:
        return -self.payload_bytes & 3

    @property
    def udp_payload_bytes(self) -> int:
        reth = RETH_BYTES if self.opcode in RETH_OPCODES else 0
        return BTH_BYTES + reth + self.payload_bytes + self.pad_bytes + ICRC_BYTES


@dataclass(slots=True)
class AckPacket:
    """An RC ACKNOWLEDGE (ACK or NAK by syndrome) for every PSN up to and including `psn`
    (for a NAK: the PSN the responder expects)."""

    dest_qp: int
    psn: int
    syndrome: int = AETH_ACK
    msn: int = 0

    @property
    def is_nak(self) -> bool:
        return aeth_is_nak(self.syndrome)

    @property
    def udp_payload_bytes(self) -> int:
        return BTH_BYTES + AETH_BYTES + ICRC_BYTES


@dataclass(slots=True)
class SackPacket:
    """A selective acknowledgement: every PSN up to and including `psn` (cumulative, as an ACK),
    and of the PSNs from `base_psn` on, those whose bit is set in `bitmap` (bit i: base_psn + i)
    are held by the responder. `words`: the bitmap's length in 64-bit words on the wire."""

    dest_qp: int
    psn: int
    base_psn: int
    bitmap: int
    words: int = 1
    msn: int = 0
    syndrome: int = AETH_ACK

    @property
    def is_nak(self) -> bool:
        return False

    @property
    def udp_payload_bytes(self) -> int:
        return (
            BTH_BYTES + AETH_BYTES + SACKETH_HEAD_BYTES + SACK_WORD_BYTES * self.words + ICRC_BYTES
        )


def sack_words(bitmap: int) -> int:
    """64-bit words a SACK needs for `bitmap` (at least one)."""
    return max(1, -(-bitmap.bit_length() // 64))


@dataclass(slots=True)
class CnpPacket:
    """RoCEv2 congestion notification packet to the QP that must slow down (IBTA annex A17.9.3)."""

    dest_qp: int

    @property
    def udp_payload_bytes(self) -> int:
        return BTH_BYTES + CNP_RESERVED_BYTES + ICRC_BYTES


Packet = DataPacket | AckPacket | SackPacket | CnpPacket
