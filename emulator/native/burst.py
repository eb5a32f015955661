"""Python side of emulator.native._burst: a flow's bursts laid out (and sent) by burst.c.

`NativeBursts` holds the compiled module, the CRC delta tables per segment size and a pointer to
the worker's BurstBuffer; `flow(writer, ...)` gives a `NativeFlow` for one flow's BurstWriter,
which it stands in for: `write` has BurstWriter.write's contract and bytes (the full-size
segments of a compact burst in C, anything else through the BurstWriter itself, as before), and
`layout_send` lays a burst out and hands it to the kernel as one UDP GSO send in one C call
(the engine's send path, emulator/engine/send_path.py, is its only user).

`NativeRunReader` is the receive side's `read_data_run` in C (a GRO read as one DataRun), and
`NativeReplies` lays out and sends the ACKs a read produces.

`self_check` compares the C layout with BurstWriter's and the C reader with read_data_run on a
few bursts: the engine runs it before it trusts the module (emulator/engine/native_path.py).
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from emulator.transport.burst import Burst
from emulator.transport.burst_wire import (
    RUN_OPCODES,
    BurstBuffer,
    BurstWriter,
    DataRun,
    full_segments,
    icrc_delta_rows,
    read_data_run,
    template_icrc,
)
from emulator.transport.packets import (
    AETH_BYTES,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    BTH_BYTES,
    ICRC_BYTES,
    PSN_MASK,
    QPN_MASK,
    AckPacket,
    Opcode,
)
from emulator.transport.wire import FlowAddress, IcrcContext, encode, layout_gso

_U32 = struct.Struct("=I")  # network-order bytes read as the host's uint32 (sin_addr.s_addr)
_U16 = struct.Struct("=H")
_NET_U16 = struct.Struct("!H")
_MAX_RUN = 128  # segments the C reader takes at once (a GRO read holds at most 64)
MAX_BUFFERS = 16  # GSO buffers in one send (burst.c MAX_BUFFERS)
_ACK_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
_MAX_ACKS = 128  # in one GSO send (engine.gso_max_segments at most)
_NO_RESTART = 0xFFFF  # IP ids that never restart within a burst: one GSO buffer


class NativeBursts:
    """The compiled module and what every flow of one BurstBuffer shares."""

    def __init__(self, module: ModuleType, buffer: BurstBuffer) -> None:
        self.ffi: Any = module.ffi
        self.lib: Any = module.lib
        self.buffer = buffer
        self.buf_ptr = self.ffi.from_buffer(buffer.data)
        self.buf_bytes = len(buffer.data)
        # per segment size: the delta rows (kept alive) and a pointer C reads them through
        self._tables: dict[int, tuple[npt.NDArray[np.uint32], Any]] = {}

    def tables(self, segment: int) -> Any:
        entry = self._tables.get(segment)
        if entry is None:
            rows = icrc_delta_rows(segment)
            entry = self._tables[segment] = (rows, self.ffi.from_buffer("uint32_t[]", rows))
        return entry[1]

    def flow(
        self,
        writer: BurstWriter,
        sock: socket.socket | None = None,
        dest: tuple[str, int] = ("", 0),
        tos: int = -1,
    ) -> NativeFlow:
        """A flow's stand-in for `writer` (which must lay out in this object's buffer); with
        `sock` and `dest` it can also send (tos >= 0: an IP_TOS control message per send)."""
        if writer.buffer is not self.buffer:
            raise ValueError("the writer lays out in another buffer")
        return NativeFlow(self, writer, sock, dest, tos)


class NativeFlow:
    """One flow's bursts through burst.c (see the module docstring)."""

    __slots__ = (
        "addr",
        "bases",
        "fd",
        "icrc",
        "lib",
        "native",
        "port",
        "results",
        "stamps",
        "tos",
        "writer",
    )

    def __init__(
        self,
        native: NativeBursts,
        writer: BurstWriter,
        sock: socket.socket | None,
        dest: tuple[str, int],
        tos: int,
    ) -> None:
        self.native = native
        self.lib = native.lib
        self.writer = writer
        self.icrc: IcrcContext = writer.icrc
        self.stamps = 1 if native.buffer.stamps else 0
        # (segment, payload bytes, dest QP) -> (the template's ICRC, the segment's tables)
        self.bases: dict[tuple[int, int, int], tuple[int, Any]] = {}
        self.fd = sock.fileno() if sock is not None else -1
        self.addr = _U32.unpack(socket.inet_aton(dest[0]))[0] if sock is not None else 0
        self.port = _U16.unpack(_NET_U16.pack(dest[1]))[0]
        self.tos = tos
        self.results = native.ffi.new(f"long[{MAX_BUFFERS}]")  # per GSO buffer of a send

    def _base(self, burst: Burst) -> tuple[int, Any]:
        key = (burst.segment_bytes, burst.payload_bytes, burst.dest_qp)
        base = self.bases.get(key)
        if base is None:
            crc = template_icrc(self.icrc, key[0], key[1], key[2] & QPN_MASK)
            base = self.bases[key] = (crc, self.native.tables(key[0]))
        return base

    def _fill(self, segment: int, payload_bytes: int, used: int) -> int:
        """1 when the buffer must be reset to the template first (another form, or not enough
        of it); the buffer then holds this form's template up to `used` (as BurstWriter keeps
        track, so both can write into one buffer)."""
        held = self.native.buffer
        form = (segment, payload_bytes)
        if held.template != form or held.template_bytes < used:
            held.template = form
            held.template_bytes = used
            return 1
        return 0

    def write(
        self,
        burst: Burst,
        *,
        gso: bool = True,
        departed_ns: int = 0,
        spacing_ns: int = 0,
        ids_every: int = 0,
    ) -> int:
        """BurstWriter.write (same arguments, same bytes), the full-size segments of a compact
        burst laid out in C, whatever their number (up to what the buffer holds)."""
        writer = self.writer
        if burst.packets is not None:
            return writer.write(
                burst, gso=gso, departed_ns=departed_ns, spacing_ns=spacing_ns, ids_every=ids_every
            )
        if burst.wire_bytes > self.native.buf_bytes:
            raise ValueError(f"a {burst.wire_bytes}-byte burst does not fit the buffer")
        full = full_segments(burst)
        segment = burst.segment_bytes
        used = full * segment
        # the IP ids: i % every (a GSO buffer of `every` segments at a time), all 0 without GSO
        every = (ids_every or _NO_RESTART) if gso else 0
        if full:
            base, tables = self._base(burst)
            acks = burst.ack_req_at
            if acks and acks[-1] >= full:
                acks = acks[:-1]
            done = self.lib.rocev2_layout(
                self.native.buf_ptr,
                self.native.buf_bytes,
                tables,
                base,
                segment,
                burst.payload_bytes,
                full,
                burst.dest_qp,
                burst.tag,
                burst.tags if burst.tags is not None else self.native.ffi.NULL,
                burst.psn,
                burst.opcodes,
                acks,
                len(acks),
                self.stamps,
                departed_ns,
                min(spacing_ns, 0xFFFFFFFF),
                every,
                self._fill(segment, burst.payload_bytes, used),
            )
            if done != used:
                raise ValueError(f"burst.c refused a {full}-segment burst ({done})")
        if full == burst.count:
            return used
        stamp = writer.send_stamp(burst, departed_ns, spacing_ns)
        return writer.write_last(burst, used, stamp, full % every if every else 0)

    def layout_send(self, burst: Burst, departed_ns: int, spacing_ns: int, per_buffer: int) -> int:
        """Lay out a compact burst whose segments are all full-size and send it as GSO buffers
        of `per_buffer` segments (one sendmmsg; a buffer of one segment as a plain datagram):
        the number of buffers; `results` holds what each send returned (bytes or -errno)."""
        segment = burst.segment_bytes
        count = burst.count
        base, tables = self._base(burst)
        native = self.native
        return int(
            self.lib.rocev2_layout_send(
                self.fd,
                self.addr,
                self.port,
                self.tos,
                native.buf_ptr,
                native.buf_bytes,
                tables,
                base,
                segment,
                burst.payload_bytes,
                count,
                burst.dest_qp,
                burst.tag,
                burst.tags if burst.tags is not None else native.ffi.NULL,
                burst.psn,
                burst.opcodes,
                burst.ack_req_at,
                len(burst.ack_req_at),
                self.stamps,
                departed_ns,
                min(spacing_ns, 0xFFFFFFFF),
                per_buffer,
                self._fill(segment, burst.payload_bytes, count * segment),
                self.results,
            )
        )

    def send(self, used: int, segment_bytes: int, per_buffer: int) -> int:
        """Send buf[:used] as laid out, as GSO buffers of `per_buffer` segments: as
        layout_send."""
        return int(
            self.lib.rocev2_send_buffers(
                self.fd,
                self.addr,
                self.port,
                self.tos,
                self.native.buf_ptr,
                used,
                segment_bytes,
                per_buffer,
                self.results,
            )
        )

    def send_datagram(self, used: int) -> int:
        """Send buf[:used] as one datagram: the bytes the kernel took, or -errno."""
        native = self.native
        return int(
            self.lib.rocev2_send(self.fd, native.buf_ptr, used, 0, self.tos, self.addr, self.port)
        )


class NativeRunReader:
    """A worker's reads in C, into one receive buffer: `recv` (recvmsg_into and read_ancillary
    of emulator/engine/sockets.py in one call) and `read` (burst_wire.read_data_run: the same
    DataRun, or None, for the GRO read held in buf[:nbytes])."""

    __slots__ = (
        "_acks",
        "_buf",
        "_data",
        "_ffi",
        "_fields",
        "_lib",
        "_opcodes",
        "_run_opcodes",
        "_rx",
        "_rx_ns",
        "_sources",
    )

    def __init__(self, module: ModuleType, buf: bytearray) -> None:
        self._ffi: Any = module.ffi
        self._lib: Any = module.lib
        self._data = buf
        self._buf = self._ffi.from_buffer(buf)
        self._fields = self._ffi.new("uint32_t[5]")
        self._opcodes = self._ffi.new(f"uint8_t[{_MAX_RUN}]")
        self._acks = self._ffi.new(f"uint32_t[{_MAX_RUN}]")
        self._run_opcodes = bytes(1 if op in RUN_OPCODES else 0 for op in range(256))
        self._rx = self._ffi.new("uint32_t[4]")
        self._rx_ns = self._ffi.new("uint64_t[1]")
        self._sources: dict[int, tuple[str, int]] = {}  # source address and port, as Python's

    def recv(self, fd: int) -> tuple[int, int, int, int, tuple[str, int]]:
        """One read from socket `fd` into the buffer: (bytes read, ToS byte, GRO segment size
        or 0, kernel receive time in ns or 0, (source address, port)); bytes read is -errno
        when the read failed (-EAGAIN: nothing to read)."""
        got = self._lib.rocev2_recv(fd, self._buf, len(self._data), self._rx, self._rx_ns)
        if got < 0:
            return got, 0, 0, 0, ("", 0)
        rx = self._rx
        key = rx[2] << 16 | rx[3]
        source = self._sources.get(key)
        if source is None:
            if len(self._sources) >= 4096:  # strangers must not grow it without bound
                self._sources.clear()
            source = self._sources[key] = (socket.inet_ntoa(_U32.pack(rx[2])), rx[3])
        return got, rx[0], rx[1], self._rx_ns[0], source

    def read(self, nbytes: int, segment_bytes: int) -> DataRun | None:
        count = self._lib.rocev2_read_data_run(
            self._buf,
            nbytes,
            segment_bytes,
            self._run_opcodes,
            _MAX_RUN,
            self._fields,
            self._opcodes,
            self._acks,
        )
        if count <= 0:
            if count < 0:  # more segments than a GRO read holds: read them in Python
                return read_data_run(self._data, nbytes, segment_bytes)
            return None
        qp, psn, payload, last_payload, n_acks = self._fields
        ffi = self._ffi
        return DataRun(
            qp,
            psn,
            ffi.buffer(self._opcodes, count)[:],
            ffi.unpack(self._acks, n_acks) if n_acks else [],
            payload,
            last_payload,
        )


class NativeReplies:
    """The ACKs (and NAKs) one read produces, laid out and sent by burst.c in one call, in a
    worker's reply buffer: the bytes wire.encode and wire.layout_gso write."""

    def __init__(self, module: ModuleType, buf: bytearray) -> None:
        self.ffi: Any = module.ffi
        self.lib: Any = module.lib
        self.buf = buf
        self.buf_ptr = self.ffi.from_buffer(buf)
        self.buf_bytes = len(buf)

    def flow(
        self, icrc: IcrcContext, sock: socket.socket | None, dest: tuple[str, int], tos: int
    ) -> NativeAckFlow:
        """The ACKs of one receive queue pair (its ICRC context, socket and peer; tos >= 0:
        an IP_TOS control message per send)."""
        return NativeAckFlow(self, icrc, sock, dest, tos)


class NativeAckFlow:
    """One receive queue pair's ACKs through burst.c."""

    __slots__ = ("addr", "fd", "lib", "port", "prefixes", "replies", "tos")

    def __init__(
        self,
        replies: NativeReplies,
        icrc: IcrcContext,
        sock: socket.socket | None,
        dest: tuple[str, int],
        tos: int,
    ) -> None:
        self.replies = replies
        self.lib = replies.lib
        # the CRC after the pseudo-header of a 20-byte ACK with each IP id a GSO send gives
        self.prefixes = replies.ffi.new(
            f"uint32_t[{_MAX_ACKS}]", [icrc.prefix_crc(i, _ACK_BYTES) for i in range(_MAX_ACKS)]
        )
        self.fd = sock.fileno() if sock is not None else -1
        self.addr = _U32.unpack(socket.inet_aton(dest[0]))[0] if sock is not None else 0
        self.port = _U16.unpack(_NET_U16.pack(dest[1]))[0]
        self.tos = tos

    @staticmethod
    def _fields(acks: Sequence[AckPacket]) -> tuple[list[int], list[int]]:
        return [a.psn for a in acks], [a.syndrome << 24 | (a.msn & 0xFFFFFF) for a in acks]

    def layout(self, acks: Sequence[AckPacket]) -> int:
        """Lay the ACKs (one destination QP, at most _MAX_ACKS) out at the buffer's start:
        the bytes used."""
        psns, aeths = self._fields(acks)
        r = self.replies
        return int(
            self.lib.rocev2_layout_acks(
                r.buf_ptr, r.buf_bytes, self.prefixes, acks[0].dest_qp, psns, aeths, len(acks)
            )
        )

    def send(self, acks: Sequence[AckPacket]) -> int:
        """layout, then one GSO send (a datagram for one ACK): the bytes the kernel took, or
        -errno."""
        psns, aeths = self._fields(acks)
        r = self.replies
        return int(
            self.lib.rocev2_send_acks(
                self.fd,
                self.addr,
                self.port,
                self.tos,
                r.buf_ptr,
                r.buf_bytes,
                self.prefixes,
                acks[0].dest_qp,
                psns,
                aeths,
                len(acks),
            )
        )


# -- the engine's self-check -------------------------------------------------------------

_CHECK_ADDRESS = FlowAddress("10.11.12.13", "10.11.12.14", 49999, dscp=26)
_MIDDLE = int(Opcode.SEND_MIDDLE)


def _check_bursts() -> list[tuple[Burst, bool, int]]:
    """(burst, gso, departed_ns): PSN wraps, AckReq patterns, mixed opcodes, per-segment tags,
    shorter last segments, one segment, the smallest and largest MTU."""
    ops = bytes([Opcode.SEND_FIRST, *[_MIDDLE] * 13, Opcode.SEND_LAST])
    return [
        (
            Burst(
                0x123456,
                PSN_MASK - 30,
                64,
                1040,
                1024,
                1024,
                bytes([_MIDDLE]) * 64,
                [15, 31, 47, 63],
                tag=5,
            ),
            True,
            1_700_000_000_123_456_789,
        ),
        (Burst(0x000777, 5, 15, 4112, 4096, 4096, ops, [14], tags=bytes(range(15))), True, 0),
        (Burst(0x000777, 0xFFFFF0, 15, 4112, 4096, 4096, ops, [0, 9, 14], tag=63), False, 42),
        (
            Burst(
                0x00ABCD,
                1000,
                7,
                272,
                256,
                100,
                bytes([_MIDDLE] * 6 + [Opcode.SEND_LAST]),
                [6],
                tag=1,
            ),
            True,
            7,
        ),
        (Burst(0x00ABCD, PSN_MASK, 1, 1040, 1024, 1024, bytes([Opcode.SEND_ONLY]), [0]), True, 9),
        (Burst(0x00ABCD, 3, 3, 28, 10, 10, bytes([_MIDDLE]) * 3, [1]), True, 11),
    ]


def self_check(module: ModuleType, max_segments: int = 64) -> str:
    """ "" when burst.c lays out the check bursts byte for byte as BurstWriter does (with and
    without stamps, GSO on and off) and its send reports errors as -errno; else why not."""
    for stamps in (False, True):
        ours = BurstBuffer(65535 * 2, stamps=stamps)
        theirs = BurstBuffer(65535 * 2, stamps=stamps)
        icrc = IcrcContext(_CHECK_ADDRESS)
        native = NativeBursts(module, ours)
        flow = native.flow(BurstWriter(icrc, ours, max_segments))
        reference = BurstWriter(icrc, theirs, max_segments)
        for i, (burst, gso, departed) in enumerate(_check_bursts()):
            spacing = 8 * burst.segment_bytes
            for every in (0, 7):  # one GSO buffer; GSO buffers of 7 segments each
                got = flow.write(
                    burst, gso=gso, departed_ns=departed, spacing_ns=spacing, ids_every=every
                )
                want = reference.write(
                    burst, gso=gso, departed_ns=departed, spacing_ns=spacing, ids_every=every
                )
                if got != want or ours.data[:got] != theirs.data[:want]:
                    return (
                        "its layout differs from the Python writer's "
                        f"(check burst {i}, stamps {stamps}, ids every {every})"
                    )
    why = _check_reader(module) or _check_acks(module)
    if why:
        return why
    sent = NativeBursts(module, BurstBuffer(64)).lib.rocev2_send(-1, b"x", 1, 0, -1, 0, 0)
    if sent != -errno.EBADF:
        return f"its send on a closed descriptor returned {sent}, not -EBADF"
    return ""


def _check_reader(module: ModuleType) -> str:
    """The C reader against read_data_run on the check bursts as received (one GRO read each),
    and on reads that are not runs (another QP, a gap, a RETH, a wrap, a bad pad count)."""
    buf = bytearray(65535 * 2)
    reader = NativeRunReader(module, buf)
    writer = BurstWriter(IcrcContext(_CHECK_ADDRESS), BurstBuffer(65535 * 2), 64)
    cases: list[tuple[bytes, int]] = []
    for burst, gso, departed in _check_bursts():
        used = writer.write(burst, gso=gso, departed_ns=departed)
        data = bytes(writer.buf[:used])
        cases.append((data, burst.segment_bytes))
        segment = burst.segment_bytes
        if burst.count > 2:
            spoiled = bytearray(data)
            spoiled[segment + 7] ^= 1  # the second segment's QP
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[2 * segment + 11] ^= 4  # a gap
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[segment] = Opcode.WRITE_FIRST  # a RETH
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[1] ^= 1  # a transport header version
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[segment + 4] ^= 0x15  # only the tag: still a run
            cases.append((bytes(spoiled), segment))
        cases.append((data[:segment], 0))  # one datagram alone
        cases.append((data[:15], 0))  # too short
    for i, (data, segment) in enumerate(cases):
        buf[: len(data)] = data
        got = reader.read(len(data), segment)
        want = read_data_run(buf, len(data), segment)
        if (got is None) != (want is None) or (
            got is not None
            and want is not None
            and (
                (got.dest_qp, got.psn, tuple(got.opcodes), got.ack_req_at)
                != (want.dest_qp, want.psn, tuple(want.opcodes), want.ack_req_at)
                or (got.payload_bytes, got.last_payload_bytes)
                != (want.payload_bytes, want.last_payload_bytes)
            )
        ):
            return f"its reader differs from read_data_run (check read {i})"
    return ""


def _check_acks(module: ModuleType) -> str:
    """The C ACK layout against wire.encode (one ACK) and wire.layout_gso (several)."""
    icrc = IcrcContext(_CHECK_ADDRESS)
    buf = bytearray(65535)
    flow = NativeReplies(module, buf).flow(icrc, None, ("", 0), -1)
    groups = [
        [AckPacket(0x00ABCD, PSN_MASK, 0x1F, 0xFFFFFF)],
        [AckPacket(0x123456, 5, AETH_NAK_PSN_SEQUENCE_ERROR, 77)],
        [AckPacket(0x000777, (PSN_MASK - 3 + i) & PSN_MASK, 0x1F, i) for i in range(9)],
    ]
    for i, acks in enumerate(groups):
        used = flow.layout(acks)
        if len(acks) == 1:
            want = encode(acks[0], icrc, 0)
        else:
            reference = bytearray(65535)
            want = bytes(reference[: layout_gso(reference, acks, icrc, ip_id_first=0)[0]])
        if bytes(buf[:used]) != want:
            return f"its ACKs differ from the codec's (check group {i})"
    return ""
