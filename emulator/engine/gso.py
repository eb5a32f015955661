"""Fast GSO buffer layout: many same-size RoCEv2 packets and their ICRCs without a CRC per packet.

The transport's `layout_gso` writes each packet and runs CRC-32 over all of it. Within one
engine buffer most packets differ only in the BTH opcode byte, the PSN word (AckReq + PSN) and
the IP identification the kernel will give the segment (0, 1, 2, ...); the payload is zeros.
CRC-32 is affine over GF(2): for equal-length inputs crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0), so
the ICRC of a packet is the ICRC of a template with those bytes zero, XOR one precomputed table
entry per varying byte (and a byte's table is linear in its bits: 8 CRCs build 256 entries).
The layout becomes a copy of the template block plus three table lookups per packet (the PSN
word's tables are combined per 16 bits).
Anything else (RETH, real payload, a shorter last packet) goes through the transport's own
writer. tests/unit/test_engine_gso.py checks the result byte for byte against `layout_gso`.

This is the layout for a list of descriptors; the engine's send path now takes compact bursts
from the queue pairs and lays them out with `emulator.transport.burst_wire.BurstWriter`, the
same tables applied with numpy to all segments at once.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from emulator.transport.burst_wire import crc_byte_tables
from emulator.transport.packets import (
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    QPN_MASK,
    RETH_OPCODES,
    UDP_HEADER_BYTES,
    DataPacket,
    Opcode,
)
from emulator.transport.wire import PKEY_DEFAULT, IcrcContext, layout_gso, write_packet

U32 = npt.NDArray[np.uint32]
# Where the varying bytes sit in the ICRC input: 8 bytes standing in for the LRH, then the IPv4
# header (identification at 4..5), the UDP header, then the BTH (opcode at 0, PSN word at 8..11).
_LRH = 8
_IP_ID_AT = _LRH + 4
_BTH_AT = _LRH + IPV4_HEADER_BYTES + UDP_HEADER_BYTES
_OPCODE_AT = _BTH_AT
_PSN_WORD_AT = _BTH_AT + 8


class _Tables:
    """CRC deltas for one segment size (they depend only on the input length, not on the flow):
    by opcode, by the PSN word's high and low 16 bits, and by segment index (the IP id)."""

    __slots__ = ("by_index", "high", "low", "opcode")

    def __init__(self, segment: int, max_segments: int) -> None:
        length = _LRH + IPV4_HEADER_BYTES + UDP_HEADER_BYTES + segment - ICRC_BYTES
        op, w0, w1, w2, w3, id_hi, id_lo = crc_byte_tables(
            length,
            [_OPCODE_AT, *range(_PSN_WORD_AT, _PSN_WORD_AT + 4), _IP_ID_AT, _IP_ID_AT + 1],
        )
        self.opcode: list[int] = op.tolist()
        self.high: list[int] = (w0[:, None] ^ w1[None, :]).ravel().tolist()
        self.low: list[int] = (w2[:, None] ^ w3[None, :]).ravel().tolist()
        ids = np.arange(max_segments, dtype=np.uint32)
        self.by_index: list[int] = (id_hi[ids >> 8] ^ id_lo[ids & 0xFF]).tolist()


_TABLES: dict[tuple[int, int], _Tables] = {}


def _tables(segment: int, max_segments: int) -> _Tables:
    t = _TABLES.get((segment, max_segments))
    if t is None:
        t = _TABLES[(segment, max_segments)] = _Tables(segment, max_segments)
    return t


class _Shape:
    """Template packet and its ICRC for one segment size and destination QP of one flow."""

    __slots__ = ("base", "block", "tables")

    def __init__(self, icrc: IcrcContext, segment: int, dest_qp: int, max_segments: int) -> None:
        template = bytearray(segment)  # opcode 0, PSN word 0, zero payload, ICRC 0
        # P_Key and destination QP as write_packet writes them (FECN/BECN clear)
        struct.pack_into("!BBHI", template, 0, 0, 0, PKEY_DEFAULT, dest_qp & QPN_MASK)
        self.base = icrc.compute(0, template)
        self.block = memoryview(bytes(template) * max_segments)
        self.tables = _tables(segment, max_segments)


_WRITE_FIRST = int(Opcode.WRITE_FIRST)
_WRITE_ONLY = int(Opcode.WRITE_ONLY)
assert frozenset({_WRITE_FIRST, _WRITE_ONLY}) == RETH_OPCODES
_PSN_WORD = struct.Struct(">I").pack_into
_ICRC = struct.Struct("<I").pack_into


class GsoWriter:
    """Lays out GSO buffers for one flow (one IcrcContext)."""

    def __init__(self, icrc: IcrcContext, max_segments: int) -> None:
        self.icrc = icrc
        self.max_segments = max_segments
        self._shapes: dict[tuple[int, int], _Shape] = {}

    def _shape(self, segment: int, dest_qp: int) -> _Shape:
        shape = self._shapes.get((segment, dest_qp))
        if shape is None:
            shape = _Shape(self.icrc, segment, dest_qp, self.max_segments)
            self._shapes[(segment, dest_qp)] = shape
        return shape

    def layout(self, buf: bytearray, packets: Sequence[DataPacket]) -> tuple[int, int]:
        """Same contract as emulator.transport.wire.layout_gso with ip_id_first=0."""
        first = packets[0]
        segment = first.udp_payload_bytes
        qp = first.dest_qp
        size = first.payload_bytes
        fast = 0
        for p in packets:
            if p.payload is not None or p.payload_bytes != size or p.dest_qp != qp:
                break
            if p.opcode == _WRITE_FIRST or p.opcode == _WRITE_ONLY:  # carry a RETH
                break
            fast += 1
        if fast < 2 or len(packets) > self.max_segments or segment % 4:
            return layout_gso(buf, packets, self.icrc, ip_id_first=0)
        shape = self._shape(segment, qp)
        t = shape.tables
        op_t, high_t, low_t, index_t = t.opcode, t.high, t.low, t.by_index
        base = shape.base
        used = fast * segment
        buf[:used] = shape.block[:used]
        at = 0
        crc_at = segment - ICRC_BYTES
        for i in range(fast):
            p = packets[i]
            word = (p.ack_req << 31) | p.psn
            opcode = p.opcode
            buf[at] = opcode
            _PSN_WORD(buf, at + 8, word)
            _ICRC(
                buf,
                at + crc_at,
                base ^ op_t[opcode] ^ high_t[word >> 16] ^ low_t[word & 0xFFFF] ^ index_t[i],
            )
            at += segment
        for i in range(fast, len(packets)):
            end = write_packet(buf, at, packets[i])
            self.icrc.seal(i, buf, at, end)
            at = end
        return at, segment
