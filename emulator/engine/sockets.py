"""UDP sockets for RoCEv2 ranks: GSO on send, GRO and the ToS byte (ECN) on receive.

Linux socket options (include/uapi/linux/udp.h, in.h): UDP_SEGMENT (103) makes one send carry
many datagrams of gso_size bytes; UDP_GRO (104) makes one read return many coalesced datagrams
with their gso_size in a control message; IP_RECVTOS (13) returns the ToS byte (ECN in its low
two bits) with every read, and GRO never coalesces datagrams whose ECN codepoints differ. Data is
sent with Don't Fragment (IP_PMTUDISC_DO) from unconnected sockets: the kernel then gives the
segments of one GSO buffer IP ids 0, 1, 2, ... (docs/architecture.md, "Data path speed"), which the ICRC
covers.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

from emulator.errors import EnvironmentProblem
from emulator.netns import entered

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
IP_RECVTOS = 13
IP_TOS = 1
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33

_GSO_CMSG = struct.Struct("=H")
_INT = struct.Struct("=i")
ANCILLARY_BYTES = socket.CMSG_SPACE(4) * 4 + socket.CMSG_SPACE(16)  # + SO_TIMESTAMPNS
SO_TIMESTAMPNS = 35  # include/uapi/asm-generic/socket.h (SO_TIMESTAMPNS_OLD)
_TIMESPEC = struct.Struct("=qq")


@dataclass(frozen=True)
class Offloads:
    """What the kernel lets this engine use, detected at start and reported in run metadata."""

    gso: bool
    gro: bool


def _set_buffers(sock: socket.socket, size_bytes: int) -> None:
    for force, plain in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size_bytes)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size_bytes)


def open_udp(
    netns: str | None, address: str, port: int, *, gro: bool, buffer_bytes: int
) -> socket.socket:
    """A non-blocking UDP socket bound to address:port inside `netns`."""
    with entered(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        if gro:
            sock.setsockopt(SOL_UDP, UDP_GRO, 1)
        _set_buffers(sock, buffer_bytes)
        sock.bind((address, port))
    except OSError as e:
        sock.close()
        where = f" in namespace {netns}" if netns else ""
        raise EnvironmentProblem(f"cannot open UDP {address}:{port}{where}: {e.strerror}") from None
    sock.setblocking(False)
    return sock


def detect_offloads(gso: str, gro: str) -> Offloads:
    """Probe UDP_SEGMENT and UDP_GRO on a throwaway socket; honour 'on'/'off' choices ('on'
    when the kernel lacks it is an error)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        found = {}
        for name, level, opt, value in (
            ("gso", SOL_UDP, UDP_SEGMENT, 1024),
            ("gro", SOL_UDP, UDP_GRO, 1),
        ):
            try:
                probe.setsockopt(level, opt, value)
                found[name] = True
            except OSError as e:
                if e.errno not in (errno.ENOPROTOOPT, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                found[name] = False
    finally:
        probe.close()
    chosen = {}
    for name, choice in (("gso", gso), ("gro", gro)):
        if choice == "on" and not found[name]:
            raise EnvironmentProblem(f"engine.{name}: on, but this kernel lacks UDP {name.upper()}")
        chosen[name] = found[name] and choice != "off"
    return Offloads(gso=chosen["gso"], gro=chosen["gro"])


def gso_cmsg(segment_bytes: int) -> tuple[int, int, bytes]:
    return (SOL_UDP, UDP_SEGMENT, _GSO_CMSG.pack(segment_bytes))


def tos_cmsg(tos: int) -> tuple[int, int, bytes]:
    return (socket.IPPROTO_IP, IP_TOS, _INT.pack(tos))


def read_ancillary(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, int, int]:
    """(ToS byte, GRO segment size or 0, kernel receive time in CLOCK_REALTIME ns or 0) from
    recvmsg's control messages."""
    tos = 0
    gso_size = 0
    rx_ns = 0
    for level, kind, data in ancdata:
        if level == socket.IPPROTO_IP and kind == IP_TOS and data:
            tos = data[0]
        elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            rx_ns = seconds * 1_000_000_000 + nanoseconds
        elif level == SOL_UDP and kind == UDP_GRO and len(data) >= 2:
            # the kernel writes gso_size as an int (udp_cmsg_recv in net/ipv4/udp.c)
            gso_size = _INT.unpack_from(data.ljust(4, b"\0"))[0] if len(data) >= 4 else data[0]
    return tos, gso_size, rx_ns


def segments(total_bytes: int, gso_size: int) -> list[tuple[int, int]]:
    """(start, end) of every datagram in a read of `total_bytes` (gso_size 0: one datagram)."""
    if gso_size <= 0 or gso_size >= total_bytes:
        return [(0, total_bytes)]
    return [(a, min(a + gso_size, total_bytes)) for a in range(0, total_bytes, gso_size)]
