"""Python side of emulator.native._burst's sends: a flow's bursts laid out and sent by burst.c.

`NativeBursts` holds the compiled module, the CRC delta tables per segment size and a pointer to
the worker's BurstBuffer; `flow(writer, ...)` gives a `NativeFlow` for one flow's BurstWriter,
which it stands in for: `write` has BurstWriter.write's contract and bytes (the full-size
segments of a compact burst in C, anything else through the BurstWriter itself, as before), and
`layout_send` lays a burst out and hands it to the kernel as GSO buffers in one C call (the
engine's send path, emulator/engine/send_path.py, is its only user). The receive side is
reads.py, the ACKs acks.py, the engine's check of it all selfcheck.py.
"""

from __future__ import annotations

import socket
import struct
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from emulator.transport.burst import Burst
from emulator.transport.burst_wire import (
    BurstBuffer,
    BurstWriter,
    full_segments,
    icrc_delta_rows,
    template_icrc,
)
from emulator.transport.packets import QPN_MASK
from emulator.transport.wire import IcrcContext

_U32 = struct.Struct("=I")  # network-order bytes read as the host's uint32 (sin_addr.s_addr)
_U16 = struct.Struct("=H")
_NET_U16 = struct.Struct("!H")
MAX_BUFFERS = 16  # GSO buffers in one send (burst.c MAX_BUFFERS)
_NO_RESTART = 0xFFFF  # IP ids that never restart within a burst: one GSO buffer


def sockaddr(dest: tuple[str, int]) -> tuple[int, int]:
    """An IPv4 (address, port) as burst.c takes them: the network-order bytes of each as the
    host's integers (what sin_addr.s_addr and sin_port hold)."""
    return _U32.unpack(socket.inet_aton(dest[0]))[0], _U16.unpack(_NET_U16.pack(dest[1]))[0]


def source_address(addr: int) -> str:
    """The dotted address of a sin_addr.s_addr value (see sockaddr)."""
    return socket.inet_ntoa(_U32.pack(addr))


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
        self.addr, self.port = sockaddr(dest) if sock is not None else (0, 0)
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
