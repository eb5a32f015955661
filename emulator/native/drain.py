"""Python side of emulator.native._burst's drain (burst_drain.c): a rank socket's reads with the
receive queue pairs' common path taken in C, and the synchronisation of their state with the
Python ReceiveQueuePair objects (the engine's receive path, emulator/engine/receive_path.py,
is its user).

The Python ReceiveQueuePair stays the queue pair. C keeps a copy of the few fields that decide
the common path (ReceiveQueuePair.common_path, message_index) and counts what it took, until
the caller folds those counts into the receiver (took_common_path): `fold` before it hands the
receiver one of its packets, `fold_all` before the worker reports (every other reader of a
receiver's state reads it there, or reads what C never changes: reordering, drops). Folding
after every call was a twentieth of a busy worker's samples. The caller copies a receiver's
state back (`write`) after Python handled one of its packets. Only data in order from the
queue pair's own peer,
ending no message and carrying no CE mark, is taken: every table and event is the one the
Python path gives (tests/unit/test_native_drain.py holds the two paths to the same state,
events and wire bytes).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from emulator.latency import BOUNDS_S, BUCKETS
from emulator.native.burst import sockaddr
from emulator.native.reads import NativeRunReader
from emulator.native.rqp_slot import fold_taken, write_state
from emulator.transport.packets import (
    AETH_BYTES,
    BTH_BYTES,
    FIRST_OPCODES,
    ICRC_BYTES,
    LAST_OPCODES,
)
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.wire import IcrcContext

_ACK_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
_PREFIXES = 128  # burst_drain.c DRAIN_ACKS: the IP ids one GSO send of ACKs uses


class ReceiveDrain:
    """A worker's receive queue pairs whose common path C takes, by QP number, and the reads
    of its rank sockets through them (one reader's buffer and fields: `reader`)."""

    def __init__(
        self, reader: NativeRunReader, reply_buf: bytearray, *, gso: bool, max_segments: int
    ) -> None:
        self.reader = reader
        ffi: Any = reader.ffi
        lib: Any = reader.lib
        self.ffi, self.lib = ffi, lib
        d = lib.drain_new()
        if d == ffi.NULL:
            raise MemoryError("burst_drain.c: drain_new")
        self.d: Any = ffi.gc(d, lib.drain_free)
        for op in range(256):
            self.d.flags[op] = (lib.DRAIN_FIRST if op in FIRST_OPCODES else 0) | (
                lib.DRAIN_LAST if op in LAST_OPCODES else 0
            )
        self.d.gso = 1 if gso else 0
        self.d.max_segments = max_segments
        if lib.DRAIN_WAIT_BUCKETS != BUCKETS:
            raise RuntimeError("burst_drain.c: DRAIN_WAIT_BUCKETS is not emulator.latency.BUCKETS")
        self.d.wait_bounds = BOUNDS_S.tolist()
        # rx_drain's arguments that stay the same, in the struct (rx_drain_fd); the buffers
        # they point into are kept alive here
        self._reply = ffi.from_buffer(reply_buf)
        self._opcodes = ffi.from_buffer("uint8_t[]", reader.run_opcodes)
        d.buf, d.len = reader.buf_ptr, reader.buf_bytes
        d.fields, d.rx_ns = reader.rx_fields, reader.rx_ns
        d.max_psns, d.psns = reader.max_run, reader.ack_psn_array
        d.run_opcodes = self._opcodes
        d.reply_buf, d.reply_bytes = self._reply, len(reply_buf)
        self._rx_drain_fd = lib.rx_drain_fd
        self.receivers: dict[int, ReceiveQueuePair] = {}
        self._prefixes: dict[int, Any] = {}  # each taken QP's ICRC prefixes, which C reads

    def take(
        self,
        rank_index: int,
        receiver: ReceiveQueuePair,
        peer: tuple[str, int],
        ack_sock: socket.socket,
        ack_dest: tuple[str, int],
        ack_tos: int,
        icrc: IcrcContext,
    ) -> bool:
        """Let C take `receiver`'s common path on rank `rank_index`'s reads, for data from
        `peer` (address, UDP source port), answering from `ack_sock` to `ack_dest` with ToS
        `ack_tos` and the queue pair's ICRC context (False: it stays Python's)."""
        slot = self.lib.drain_rqp(self.d, receiver.qpn)
        if slot == self.ffi.NULL or rank_index < 0:
            return False  # not a 24-bit QP number or a rank index (or out of memory): Python's
        slot.rank = rank_index
        slot.peer_addr = sockaddr((peer[0], 0))[0]
        slot.peer_port = peer[1]
        slot.remote_qp = receiver.remote_qp
        slot.ack_fd = ack_sock.fileno()
        slot.ack_addr, slot.ack_port = sockaddr(ack_dest)
        slot.ack_tos = ack_tos
        prefixes = self._prefixes[receiver.qpn] = self.ffi.new(
            f"uint32_t[{_PREFIXES}]", [icrc.prefix_crc(i, _ACK_BYTES) for i in range(_PREFIXES)]
        )
        slot.prefixes = prefixes
        slot.packets = slot.bytes = slot.acks = 0
        self.receivers[receiver.qpn] = receiver
        self.write(receiver.qpn)
        receiver.on_recording = lambda: self.write(receiver.qpn)
        return True

    def write(self, qpn: int) -> None:
        """Copy the receiver's state to C after Python handled one of its packets (what C
        took before is folded in first)."""
        receiver = self.receivers.get(qpn)
        if receiver is None:
            return
        self.fold(qpn)
        write_state(receiver, self.d.q[qpn])

    def run(self, fd: int, rank_index: int, max_reads: int) -> tuple[int, int, bool, int]:
        """Up to max_reads reads of socket `fd` (rank `rank_index`'s), the common path's
        taken: (reads made, the last read's bytes or -errno, whether that read is left to
        the caller: in the reader's buffer, read by reader.last(), and how many reads C took).
        What C took is in its slots until `fold` or `fold_all`; what the reads carried is added
        to the drain's totals, which `totals` hands out (and an ACK send that failed for another
        reason than a full buffer or a missing path is in `self.d.send_errno`)."""
        d = self.d
        made = self._rx_drain_fd(d, fd, rank_index, max_reads)
        return made, d.got, d.left != 0, d.reads

    def fold(self, qpn: int) -> None:
        """What C took for receiver `qpn` since the last fold, into it (before Python reads or
        changes the receiver; nothing for a queue pair C does not take)."""
        receiver = self.receivers.get(qpn)
        if receiver is not None:
            slot = self.d.q[qpn]
            if slot.packets or slot.acks:
                fold_taken(receiver, slot)

    def fold_all(self) -> None:
        """`fold` for every receiver C took for since the last fold_all."""
        d = self.d
        if not d.n_dirty:
            return
        for qpn in self.ffi.unpack(d.dirty, d.n_dirty):
            self.fold(qpn)
        self.lib.drain_unlist(d)

    def totals(self) -> DrainTotals:
        """What the calls took since the last `totals`, and zero them: reads, data packets,
        ACKs and their bytes, refused ACK sends, per DSCP (packets, UDP bytes), and the reads'
        waits as a LatencyHistogram's wire form (counts, sum, max)."""
        t = self.d.totals
        ffi = self.ffi
        classes = self.lib.DRAIN_CLASSES
        packets = ffi.unpack(t.class_packets, classes)
        udp_bytes = ffi.unpack(t.class_bytes, classes)
        out = DrainTotals(
            reads=int(t.reads),
            packets=int(t.packets),
            acks=int(t.acks),
            ack_bytes=int(t.ack_bytes),
            refused=(int(t.buffer_full), int(t.no_buffers), int(t.no_path)),
            classes={
                dscp: (packets[dscp], udp_bytes[dscp]) for dscp in range(classes) if packets[dscp]
            },
            waits=(ffi.unpack(t.wait_counts, BUCKETS), float(t.wait_sum_s), float(t.wait_max_s)),
        )
        ffi.memmove(ffi.addressof(t), bytes(ffi.sizeof(t)), ffi.sizeof(t))
        return out


@dataclass(frozen=True)
class DrainTotals:
    """What a ReceiveDrain took between two `totals` calls (see there)."""

    reads: int
    packets: int
    acks: int
    ack_bytes: int
    refused: tuple[int, int, int]  # ACK sends refused: buffer full, no buffers, no path
    classes: dict[int, tuple[int, int]]
    waits: tuple[list[int], float, float]
