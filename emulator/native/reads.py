"""Python side of emulator.native._burst's reads: a rank socket's read and the parsing of a GRO
read as one run of data packets, in C (the engine's receive path, emulator/engine/
receive_path.py, is their user)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from emulator.native.burst import source_address
from emulator.transport.burst_wire import RUN_OPCODES, DataRun, read_data_run

_MAX_RUN = 128  # segments the C reader takes at once (a GRO read holds at most 64)


class NativeRunReader:
    """A worker's reads in C, into one receive buffer: `recv` (recvmsg_into and read_ancillary
    of emulator/engine/sockets.py in one call, and burst_wire.read_ack_run of what it read:
    `ack_qp`, `ack_psns`) and `read` (burst_wire.read_data_run: the same DataRun, or None, for
    the GRO read held in buf[:nbytes])."""

    __slots__ = (
        "_ack_psns",
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
        self._rx = self._ffi.new("uint32_t[6]")
        self._ack_psns = self._ffi.new(f"uint32_t[{_MAX_RUN}]")
        self._rx_ns = self._ffi.new("uint64_t[1]")
        self._sources: dict[int, tuple[str, int]] = {}  # source address and port, as Python's

    # what burst_drain.c's reads fill, as recv does (emulator/native/drain.py)
    ffi = property(lambda self: self._ffi)
    lib = property(lambda self: self._lib)
    buf_ptr = property(lambda self: self._buf)
    buf_bytes = property(lambda self: len(self._data))
    rx_fields = property(lambda self: self._rx)
    rx_ns = property(lambda self: self._rx_ns)
    ack_psn_array = property(lambda self: self._ack_psns)
    run_opcodes = property(lambda self: self._run_opcodes)
    max_run = _MAX_RUN

    def recv(self, fd: int) -> tuple[int, int, int, int, tuple[str, int]]:
        """One read from socket `fd` into the buffer: (bytes read, ToS byte, GRO segment size
        or 0, kernel receive time in ns or 0, (source address, port)); bytes read is -errno
        when the read failed (-EAGAIN: nothing to read)."""
        got = self._lib.rocev2_recv(
            fd, self._buf, len(self._data), self._rx, self._rx_ns, _MAX_RUN, self._ack_psns
        )
        return self.last(got)

    def last(self, got: int) -> tuple[int, int, int, int, tuple[str, int]]:
        """recv's answer for the read already made into the buffer and fields (`got`: its
        bytes or -errno)."""
        if got < 0:
            return got, 0, 0, 0, ("", 0)
        rx = self._rx
        key = rx[2] << 16 | rx[3]
        source = self._sources.get(key)
        if source is None:
            if len(self._sources) >= 4096:  # strangers must not grow it without bound
                self._sources.clear()
            source = self._sources[key] = (source_address(rx[2]), rx[3])
        return got, rx[0], rx[1], self._rx_ns[0], source

    @property
    def ack_qp(self) -> int:
        """The destination QP of the last read when it was a run of ACKs (read_ack_run), else
        -1."""
        return -1 if self._rx[5] == 0 else int(self._rx[4])

    def ack_psns(self) -> list[int]:
        """The PSNs the last read's ACKs acknowledge (when ack_qp >= 0)."""
        psns: list[int] = self._ffi.unpack(self._ack_psns, self._rx[5])
        return psns

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
