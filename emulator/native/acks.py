"""Python side of emulator.native._burst's ACKs: the ACKs (and NAKs) a read produces, laid out
with their ICRCs and sent by burst.c in one call (emulator/engine/send_path.py is its user)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from emulator.native.burst import sockaddr
from emulator.transport.packets import AETH_BYTES, BTH_BYTES, ICRC_BYTES, AckPacket
from emulator.transport.wire import IcrcContext

_ACK_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
_MAX_ACKS = 128  # in one GSO send (engine.gso_max_segments at most)


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
        self.addr, self.port = sockaddr(dest) if sock is not None else (0, 0)
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
