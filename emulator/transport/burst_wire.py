"""RoCEv2 bytes of a whole Burst in one buffer (one UDP GSO send), with every segment's ICRC.

Within a burst the segments differ only in the BTH opcode byte, the PSN word (AckReq + PSN), the
attribution tag (the BTH's reserved bits, masked to ones in the ICRC: free) and the IP
identification the kernel gives each segment (0, 1, 2, ... for a GSO buffer from an
unconnected socket with DF set; 0 for a datagram sent alone): the payload is zeros and the
rest of the header is the flow's. CRC-32 is affine over GF(2): for equal-length inputs
crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0), so the ICRC of a segment is the ICRC of a template with
those bytes zero, XOR one table entry per varying byte (a byte's 256 entries follow from its 8
single-bit deltas; the PSN word's tables are combined per 16 bits). The layout is then a copy
of a template block and a few numpy operations over all segments at once: no per-segment
Python work. A burst the compact form does not describe (RETH, real payload), and a shorter
last segment, go through the codec's own writer (`emulator.transport.wire`).
tests/unit/test_transport_burst.py checks the bytes segment by segment against `encode`.

`read_data_run` is the receiving side: the segments of one GRO read, when they are data packets
of one QP with consecutive PSNs, as one DataRun (one struct call reads every BTH), for
ReceiveQueuePair.on_data_run; anything else is left to `decode`, one packet at a time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np
import numpy.typing as npt

from emulator.transport.burst import Burst
from emulator.transport.crc import crc32
from emulator.transport.packets import (
    AETH_BYTES,
    ATTRIBUTION_TAG_AT,
    ATTRIBUTION_TAG_SHIFT,
    BTH_BYTES,
    DATA_OPCODES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    PSN_MASK,
    QPN_MASK,
    RETH_OPCODES,
    UDP_HEADER_BYTES,
    DataPacket,
    Opcode,
    aeth_is_nak,
)
from emulator.transport.wire import PKEY_DEFAULT, IcrcContext, write_packet

U32 = npt.NDArray[np.uint32]
# Where the varying bytes sit in the ICRC input: 8 bytes standing in for the LRH, then the IPv4
# header (identification at 4..5), the UDP header, then the BTH (opcode at 0, PSN word at 8..11).
_LRH = 8
_IP_ID_AT = _LRH + 4
_BTH_AT = _LRH + IPV4_HEADER_BYTES + UDP_HEADER_BYTES
_OPCODE_AT = _BTH_AT
_PSN_WORD_AT = _BTH_AT + 8
_STAMP_AT = _BTH_AT + BTH_BYTES  # a SEND's payload starts right after the BTH
_ACK_REQ = np.uint32(1 << 31)
# The send stamp in the first payload bytes of every data packet (one-way latency), the same in
# every segment of a burst so the ICRC changes by one constant: when the burst's first packet
# left (CLOCK_REALTIME ns), its PSN, and the wire time of one packet at the sender's line rate
# (ns); packet p left at departed_ns + ((p - first_psn) mod 2^24) x spacing_ns.
SEND_STAMP = struct.Struct("<QII")
STAMP_BYTES = SEND_STAMP.size


def crc_byte_tables(length: int, positions: Sequence[int]) -> list[U32]:
    """For each position, the 256 CRC-32 deltas of that byte taking each value in a zero input
    of `length` bytes."""
    zero = crc32(bytes(length))
    tables = []
    for at in positions:
        basis = []
        for bit in range(8):
            probe = bytearray(length)
            probe[at] = 1 << bit
            basis.append(crc32(probe) ^ zero)
        table = np.zeros(256, dtype=np.uint32)
        for v in range(1, 256):
            low = v & -v
            table[v] = table[v ^ low] ^ basis[low.bit_length() - 1]
        tables.append(table)
    return tables


# The rows of `icrc_delta_rows`: the opcode byte, the PSN word's 4 bytes (AckReq byte first), the
# IP identification's 2 bytes (high first), the send stamp's bytes.
DELTA_ROW_POSITIONS = (
    _OPCODE_AT,
    *range(_PSN_WORD_AT, _PSN_WORD_AT + 4),
    _IP_ID_AT,
    _IP_ID_AT + 1,
    *range(_STAMP_AT, _STAMP_AT + STAMP_BYTES),
)


def icrc_delta_rows(segment: int) -> U32:
    """The CRC deltas of every byte a burst varies, for full segments of `segment` bytes: one row
    of 256 per DELTA_ROW_POSITIONS entry (the stamp's rows are zero when the segment cannot hold
    a stamp), C-contiguous (emulator/native/burst.c reads it as a flat array)."""
    length = _LRH + IPV4_HEADER_BYTES + UDP_HEADER_BYTES + segment - ICRC_BYTES
    fits = [at for at in DELTA_ROW_POSITIONS if at < length]
    rows = np.zeros((len(DELTA_ROW_POSITIONS), 256), dtype=np.uint32)
    rows[: len(fits)] = crc_byte_tables(length, fits)
    if length - _STAMP_AT < STAMP_BYTES:
        rows[DELTA_ROW_POSITIONS.index(_STAMP_AT) :] = 0  # never stamped (see _Tables.stamp)
    return np.ascontiguousarray(rows)


def template_icrc(icrc: IcrcContext, segment: int, payload_bytes: int, dest_qp: int) -> int:
    """ICRC of a flow's template segment: opcode 0, PSN word 0, IP id 0, zero payload of
    `payload_bytes` (its pad count in the flags), this destination QP; the byte tables' deltas
    XOR onto it (see the module docstring)."""
    template = bytearray(segment)
    struct.pack_into("!BBHI", template, 0, 0, (-payload_bytes & 3) << 4, PKEY_DEFAULT, dest_qp)
    return icrc.compute(0, template)


class _Tables:
    """CRC deltas for one segment size (they depend only on the input length, not on the flow):
    by opcode, by the PSN word's high and low 16 bits, and by segment index (the IP id)."""

    __slots__ = ("by_index", "high", "low", "opcode", "segment", "stamp")

    def __init__(self, segment: int, max_segments: int) -> None:
        self.segment = segment
        length = _LRH + IPV4_HEADER_BYTES + UDP_HEADER_BYTES + segment - ICRC_BYTES
        op, w0, w1, w2, w3, id_hi, id_lo = crc_byte_tables(
            length,
            [_OPCODE_AT, *range(_PSN_WORD_AT, _PSN_WORD_AT + 4), _IP_ID_AT, _IP_ID_AT + 1],
        )
        self.opcode: U32 = op
        self.high: U32 = (w0[:, None] ^ w1[None, :]).ravel()
        self.low: U32 = (w2[:, None] ^ w3[None, :]).ravel()
        ids = np.arange(max_segments, dtype=np.uint32)
        self.by_index: U32 = id_hi[ids >> 8] ^ id_lo[ids & 0xFF]
        # the send stamp's bytes (when the payload holds them): one table per byte
        room = length - _STAMP_AT >= STAMP_BYTES
        self.stamp: list[list[int]] = (
            [t.tolist() for t in crc_byte_tables(length, range(_STAMP_AT, _STAMP_AT + STAMP_BYTES))]
            if room
            else []
        )

    def stamp_delta(self, stamp: bytes) -> int:
        """What a send stamp in the payload adds to every full segment's ICRC."""
        delta = 0
        for table, byte in zip(self.stamp, stamp, strict=True):
            delta ^= table[byte]
        return delta


_TABLES: dict[tuple[int, int], _Tables] = {}


def _tables(segment: int, max_segments: int) -> _Tables:
    t = _TABLES.get((segment, max_segments))
    if t is None:
        t = _TABLES[(segment, max_segments)] = _Tables(segment, max_segments)
    return t


class _Layout:
    """Template segments and a structured view of one buffer, for one segment size and payload
    size: shared by every flow laying out bursts in that buffer (a worker's thousands of QPs
    would otherwise each hold a 64-segment template block)."""

    __slots__ = ("block", "parts", "stamps", "tables")

    def __init__(self, buf: bytearray, segment: int, payload_bytes: int, max_segments: int):
        template = bytearray(segment)  # opcode 0, PSN word 0, dest QP 0, zero payload, ICRC 0
        pad = -payload_bytes & 3
        # flags (pad count) and P_Key as write_packet writes them; the QP word is per flow
        struct.pack_into("!BBH", template, 0, 0, pad << 4, PKEY_DEFAULT)
        self.tables = _tables(segment, max_segments)
        self.block = memoryview(bytes(template) * max_segments)
        # the send-time field, when the payload can hold one
        stamped = payload_bytes >= STAMP_BYTES and bool(self.tables.stamp)
        extra = (["stamp"], [f"V{STAMP_BYTES}"], [BTH_BYTES]) if stamped else ([], [], [])
        fields = np.dtype(
            {
                "names": ["opcode", "qp_word", "psn_word", "icrc", *extra[0]],
                "formats": ["u1", ">u4", ">u4", "<u4", *extra[1]],
                "offsets": [0, 4, 8, segment - ICRC_BYTES, *extra[2]],
                "itemsize": segment,
            }
        )
        view = np.ndarray((min(len(buf) // segment, max_segments),), dtype=fields, buffer=buf)
        self.stamps = [view[:n]["stamp"] if stamped else None for n in range(len(view) + 1)]
        index = np.arange(max_segments, dtype=np.uint32)
        # per segment count: the fields of that many segments of buf and their indexes (made
        # once: numpy's per-call cost is most of a write)
        self.parts = [
            (
                view[:n]["opcode"],
                view[:n]["qp_word"],
                view[:n]["psn_word"],
                view[:n]["icrc"],
                index[:n],
            )
            for n in range(len(view) + 1)
        ]


class _Shape:
    """One flow's view of a layout: the template's ICRC with its destination QP, folded into
    the per-index deltas (a few hundred bytes per flow)."""

    __slots__ = ("by_index", "dest_qp", "layout", "tables")

    def __init__(
        self, icrc: IcrcContext, layout: _Layout, segment: int, payload_bytes: int, dest_qp: int
    ) -> None:
        base = np.uint32(template_icrc(icrc, segment, payload_bytes, dest_qp & QPN_MASK))
        self.layout = layout
        self.tables = layout.tables
        self.dest_qp = dest_qp & QPN_MASK
        self.by_index: U32 = self.tables.by_index ^ base  # the template's ICRC folded in


class BurstBuffer:
    """The buffer bursts are laid out in (one per engine worker, shared by its flows), and which
    template it already holds: segments differ from a template only in the bytes every write
    sets, so a write of the same shape copies no template bytes."""

    __slots__ = ("data", "layouts", "stamps", "template", "template_bytes")

    def __init__(self, size_bytes: int, *, stamps: bool = False) -> None:
        """`stamps`: every data packet laid out here carries its send stamp in its first
        payload bytes (one-way latency); all or none, so the template's zeros stay true."""
        self.data = bytearray(size_bytes)
        self.stamps = stamps
        self.layouts: dict[tuple[int, int, int], _Layout] = {}
        self.template: tuple[int, int] | None = None  # (segment, payload bytes) it holds
        self.template_bytes = 0  # how much of data holds that template

    def layout(self, segment: int, payload_bytes: int, max_segments: int) -> _Layout:
        key = (segment, payload_bytes, max_segments)
        layout = self.layouts.get(key)
        if layout is None:
            layout = self.layouts[key] = _Layout(self.data, segment, payload_bytes, max_segments)
        return layout


class BurstWriter:
    """Lays out the bursts of one flow (one IcrcContext) in a BurstBuffer the caller sends."""

    def __init__(self, icrc: IcrcContext, buf: BurstBuffer, max_segments: int) -> None:
        self.icrc = icrc
        self.buffer = buf
        self.buf = buf.data
        self.max_segments = max_segments
        self._shapes: dict[tuple[int, int, int], _Shape] = {}
        self._ack_bits: dict[tuple[int, int, tuple[int, ...]], tuple[U32, U32]] = {}

    def _shape(self, key: tuple[int, int, int]) -> _Shape:
        shape = self._shapes.get(key)
        if shape is None:
            segment, payload_bytes, dest_qp = key
            layout = self.buffer.layout(segment, payload_bytes, self.max_segments)
            shape = _Shape(self.icrc, layout, segment, payload_bytes, dest_qp)
            self._shapes[key] = shape
        return shape

    def _ack_pattern(self, shape: _Shape, full: int, acks: tuple[int, ...]) -> tuple[U32, U32]:
        """AckReq bits of `full` segments set at `acks`, and what they add to the ICRCs (cached:
        a flow repeats a few patterns)."""
        key = (shape.tables.segment, full, acks)
        pattern = self._ack_bits.get(key)
        if pattern is None:
            if len(self._ack_bits) >= 4096:
                self._ack_bits.clear()
            bits = np.zeros(full, dtype=np.uint32)
            bits[list(acks)] = _ACK_REQ
            crc = np.zeros(full, dtype=np.uint32)
            crc[list(acks)] = shape.tables.high[_ACK_REQ >> 16]  # the CRC is linear in the bit
            pattern = self._ack_bits[key] = (bits, crc)
        return pattern

    def write(
        self,
        burst: Burst,
        *,
        gso: bool = True,
        departed_ns: int = 0,
        spacing_ns: int = 0,
        ids_every: int = 0,
    ) -> int:
        """Write the burst's segments back to back at buf[0:]; return the bytes used. Each
        segment's ICRC is for the IP id the wire will carry: its index in a GSO buffer, or 0
        when `gso` is False (every segment then leaves as a datagram of its own); with
        `ids_every`, the burst leaves as GSO buffers of that many segments each (the last may
        hold fewer), whose ids each restart at 0. With a stamping buffer, every segment carries
        the send stamp (see SEND_STAMP)."""
        stamp = self.send_stamp(burst, departed_ns, spacing_ns)
        count = burst.count
        segment = burst.segment_bytes
        if burst.wire_bytes > len(self.buf):
            raise ValueError(f"a {burst.wire_bytes}-byte burst does not fit the buffer")
        if burst.packets is not None or count > self.max_segments or 0 < ids_every < count:
            tags = burst.tags if burst.tags is not None else bytes((burst.tag,)) * count
            return self._write_packets(burst.to_packets(), gso, stamp, tags, ids_every)
        full = full_segments(burst)
        buf = self.buf
        if full:
            shape = self._shape((segment, burst.payload_bytes, burst.dest_qp))
            layout = shape.layout
            t = shape.tables
            used = full * segment
            held = self.buffer
            form = (segment, burst.payload_bytes)
            if held.template != form or held.template_bytes < used:
                buf[:used] = layout.block[:used]
                held.template = form
                held.template_bytes = used
            psn = burst.psn
            opcodes = burst.opcodes
            first_op = opcodes[0]
            same_op = opcodes.count(first_op, 0, full) == full
            opcode_field, qp_field, psn_field, icrc_field, index = layout.parts[full]
            by_index = shape.by_index[:full]
            # the layout is shared: every flow writes its QP, with the attribution tag in the
            # byte above it (masked to ones in the ICRC: nothing to fold into it)
            if burst.tags is None:
                qp_field[...] = shape.dest_qp | burst.tag << ATTRIBUTION_TAG_SHIFT
            else:
                tag_words = np.frombuffer(burst.tags, np.uint8, full).astype(np.uint32)
                qp_field[...] = tag_words << ATTRIBUTION_TAG_SHIFT | shape.dest_qp
            words = index + np.uint32(psn)
            low = psn & 0xFFFF
            if low + full <= 0x10000:
                # the PSNs' high bits are the same for all (no 24-bit wrap either): the CRC of
                # the low 16 bits is a slice of the table, the rest one value
                crc = t.low[low : low + full] ^ (by_index if gso else shape.by_index[0])
                constant = t.high[psn >> 16]
                if same_op:
                    constant ^= t.opcode[first_op]
                crc ^= constant
            else:
                words &= np.uint32(PSN_MASK)
                crc = t.high[words >> 16] ^ t.low[words & np.uint32(0xFFFF)]
                crc ^= by_index if gso else shape.by_index[0]
                if same_op:
                    crc ^= t.opcode[first_op]
            if not same_op:
                ops = np.frombuffer(opcodes, np.uint8, full)
                crc ^= t.opcode[ops]
                opcode_field[...] = ops
            else:
                opcode_field[...] = first_op
            acks = burst.ack_req_at
            if acks:
                in_full = tuple(acks) if acks[-1] < full else tuple(acks[:-1])
                if in_full:
                    bits, ack_crc = self._ack_pattern(shape, full, in_full)
                    words |= bits
                    crc ^= ack_crc
            if stamp:
                stamps = layout.stamps[full]
                if stamps is not None:
                    stamps[...] = stamp
                    crc ^= np.uint32(t.stamp_delta(stamp))
            psn_field[...] = words
            icrc_field[...] = crc
        if full == count:
            return full * segment
        return self.write_last(burst, full * segment, stamp, count - 1 if gso else 0)

    def send_stamp(self, burst: Burst, departed_ns: int, spacing_ns: int) -> bytes:
        """The send stamp write() puts in the burst's segments (b"": the buffer does not stamp)."""
        if self.buffer.stamps and departed_ns:
            return SEND_STAMP.pack(departed_ns, burst.psn & PSN_MASK, min(spacing_ns, 0xFFFFFFFF))
        if self.buffer.stamps:
            return bytes(STAMP_BYTES)  # the field may hold an earlier burst's stamp
        return b""

    def write_last(self, burst: Burst, at: int, stamp: bytes, ip_id: int) -> int:
        """A shorter last segment at buf[at:], its ICRC for `ip_id`, through the codec (it
        overwrites the template there); returns its end."""
        buf = self.buf
        count = burst.count
        self.buffer.template_bytes = min(self.buffer.template_bytes, at)
        last = count - 1
        packet = DataPacket(
            burst.dest_qp,
            (burst.psn + last) & PSN_MASK,
            burst.opcodes[last],
            bool(burst.ack_req_at) and burst.ack_req_at[-1] == last,
            burst.last_payload_bytes,
        )
        end = write_packet(buf, at, packet)
        buf[at + ATTRIBUTION_TAG_AT] = burst.tag if burst.tags is None else burst.tags[last]
        if stamp and packet.payload_bytes >= STAMP_BYTES:
            buf[at + BTH_BYTES : at + BTH_BYTES + STAMP_BYTES] = stamp
        self.icrc.seal(ip_id, buf, at, end)
        return end

    def _write_packets(
        self, packets: Sequence[DataPacket], gso: bool, stamp: bytes, tags: bytes, ids_every: int
    ) -> int:
        buf = self.buf
        self.buffer.template = None
        at = 0
        for i, packet in enumerate(packets):
            end = write_packet(buf, at, packet)
            buf[at + ATTRIBUTION_TAG_AT] = tags[i]
            if (
                stamp
                and packet.payload is None
                and packet.payload_bytes >= STAMP_BYTES
                and packet.opcode not in RETH_OPCODES
            ):
                buf[at + BTH_BYTES : at + BTH_BYTES + STAMP_BYTES] = stamp
            self.icrc.seal((i % ids_every if ids_every else i) if gso else 0, buf, at, end)
            at = end
        return at


def full_segments(burst: Burst) -> int:
    """How many of a compact burst's segments are full-size (all, or all but a shorter last)."""
    return burst.count if burst.last_payload_bytes == burst.payload_bytes else burst.count - 1


def departed_ns(data: bytes | bytearray | memoryview, nbytes: int, psn: int) -> int:
    """When the data segment at data[0:] with this PSN left its sender (CLOCK_REALTIME ns),
    from the send stamp BurstWriter laid out; 0 when it carries none (too short, not stamped)."""
    if nbytes < BTH_BYTES + STAMP_BYTES + ICRC_BYTES:
        return 0
    departed, first_psn, spacing_ns = SEND_STAMP.unpack_from(data, BTH_BYTES)
    if not departed:
        return 0
    return int(departed + ((psn - first_psn) & PSN_MASK) * spacing_ns)


@dataclass(frozen=True, slots=True)
class DataRun:
    """Data packets of one QP with consecutive PSNs, without a RETH (see read_data_run)."""

    dest_qp: int
    psn: int
    opcodes: Sequence[int]  # a tuple, or bytes (emulator/native's reader)
    ack_req_at: list[int]
    payload_bytes: int  # of every packet but the last
    last_payload_bytes: int


RUN_OPCODES = frozenset(int(op) for op in DATA_OPCODES - RETH_OPCODES)  # what a DataRun holds
_RUN_FORMATS: dict[tuple[int, int], struct.Struct] = {}
_NO_ACK_REQ_ABOVE = (1 << 31) - 1
# FECN, BECN and the destination QP must agree within a run; the 6 reserved bits between them
# (the attribution tag) are ignored on receipt, as reserved bits are
_RUN_SAME_BITS = 0xC0000000 | QPN_MASK


def _run_format(segment: int, count: int) -> struct.Struct:
    fmt = _RUN_FORMATS.get((segment, count))
    if fmt is None:
        if len(_RUN_FORMATS) >= 1024:
            _RUN_FORMATS.clear()
        body = f"BBHII{segment - BTH_BYTES}x" * (count - 1)
        fmt = _RUN_FORMATS[(segment, count)] = struct.Struct(f"!{body}BBHII")
    return fmt


def read_data_run(
    data: bytes | bytearray | memoryview, nbytes: int, segment_bytes: int
) -> DataRun | None:
    """The datagrams of data[:nbytes], cut every segment_bytes (0: one datagram), as a DataRun
    when they are data packets without RETH of one QP (same FECN/BECN too; the reserved bits,
    where the attribution tag is, may differ), with consecutive PSNs (not wrapping within the
    run) and valid pad counts; None otherwise. The ICRC is not checked (as in decode)."""
    if 0 < segment_bytes < nbytes:
        count = -(-nbytes // segment_bytes)
        segment = segment_bytes
    else:
        count = 1
        segment = nbytes
    last_bytes = nbytes - (count - 1) * segment
    if last_bytes < BTH_BYTES + ICRC_BYTES:
        return None
    values = _run_format(segment, count).unpack_from(data)
    opcodes = values[0::5]
    if not RUN_OPCODES.issuperset(opcodes):
        return None
    qp_words = values[3::5]
    first_word = qp_words[0]
    if qp_words.count(first_word) != count and any(
        (w ^ first_word) & _RUN_SAME_BITS for w in qp_words
    ):
        return None  # another QP (or FECN/BECN) within the read; attribution tags may differ
    flags = values[1::5]
    first_flags = flags[0]
    last_flags = flags[-1]
    if (first_flags | last_flags) & 0x0F:
        return None
    if count > 1 and flags[:-1].count(first_flags) != count - 1:
        return None
    words = values[4::5]
    psn = words[0] & PSN_MASK
    if psn + count - 1 > PSN_MASK:
        return None  # wraps: rare, left to the per-packet path
    if count > 1 and [w & PSN_MASK for w in words] != list(range(psn, psn + count)):
        return None
    payload = segment - BTH_BYTES - ICRC_BYTES - ((first_flags >> 4) & 3)
    last_payload = last_bytes - BTH_BYTES - ICRC_BYTES - ((last_flags >> 4) & 3)
    if payload < 0 or last_payload < 0:
        return None
    acks = list(compress(range(count), map(_NO_ACK_REQ_ABOVE.__lt__, words)))
    return DataRun(qp_words[0] & QPN_MASK, psn, opcodes, acks, payload, last_payload)


_ACK_SEGMENT_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
_ACK_FORMATS: dict[int, struct.Struct] = {}
_ONE_ACK = struct.Struct("!BBHIII")


def read_ack_run(
    data: bytes | bytearray | memoryview, nbytes: int, segment_bytes: int
) -> tuple[int, list[int]] | None:
    """The datagrams of data[:nbytes] (cut every segment_bytes, 0: one) as (destination QP, the
    PSNs they acknowledge) when every one is an ACK (not a NAK) to the same QP; None otherwise."""
    size = segment_bytes if 0 < segment_bytes < nbytes else nbytes
    if size != _ACK_SEGMENT_BYTES or nbytes % size:
        return None
    count = nbytes // size
    if count == 1:  # the usual read: one ACK
        opcode, flags, _, qp_word, psn_word, aeth = _ONE_ACK.unpack_from(data)
        if opcode != Opcode.ACKNOWLEDGE or flags & 0x0F or aeth_is_nak(aeth >> 24):
            return None
        return qp_word & QPN_MASK, [psn_word & PSN_MASK]
    fmt = _ACK_FORMATS.get(count)
    if fmt is None:
        fmt = _ACK_FORMATS[count] = struct.Struct("!" + "BBHIII4x" * count)
    values = fmt.unpack_from(data)
    opcodes = values[0::6]
    if opcodes.count(Opcode.ACKNOWLEDGE) != count:
        return None
    qp_words = values[3::6]
    if qp_words.count(qp_words[0]) != count or any(f & 0x0F for f in values[1::6]):
        return None
    if any(aeth_is_nak(aeth >> 24) for aeth in values[5::6]):
        return None
    return qp_words[0] & QPN_MASK, [w & PSN_MASK for w in values[4::6]]
