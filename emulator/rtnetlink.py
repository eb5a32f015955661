"""rtnetlink by hand: requests and replies on a raw NETLINK_ROUTE socket made inside a network
namespace, for counters read every second or more often (NIC bytes, switch ports' qdiscs and
links), without a process (`ip`, `tc`) or pyroute2's decoding per reading.

A socket stays in the namespace it was made in, so one process reads many namespaces: enter
(emulator.netns.entered), make the socket, come back. The layouts are the kernel's
(include/uapi/linux/netlink.h, rtnetlink.h, if_link.h); what a reply carries is decoded by its
reader (collectors.nic, fabrics.qdisc_stats). A RouteSocket holds its socket until close().
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from emulator.errors import EnvironmentProblem
from emulator.netns import entered

# netlink.h, rtnetlink.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_GETLINK, RTM_NEWQDISC, RTM_GETQDISC = 16, 18, 36, 38
# if_link.h: a link's attributes
IFLA_STATS, IFLA_IFNAME, IFLA_STATS64 = 1, 3, 23

NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
RTATTR = struct.Struct("=HH")  # length, type
# rtnl_link_stats64 starts rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors,
# rx_dropped, tx_dropped (u64; u32 in the older IFLA_STATS)
LINK_STATS64 = struct.Struct("=QQQQQQQQ")
LINK_STATS32 = struct.Struct("=IIIIIIII")

READS_PER_REQUEST = 16  # replies to requests an earlier timeout abandoned, skipped at most


def align(n: int) -> int:
    return (n + 3) & ~3


def request(kind: int, seq: int, body: bytes, *, dump: bool = False) -> bytes:
    """One netlink request message of type `kind` with its family header `body`."""
    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def dump_request(kind: int, seq: int) -> bytes:
    """An RTM_GETQDISC or RTM_GETLINK dump request (every qdisc, every link)."""
    body = (
        TCMSG.pack(0, 0, 0, 0, 0, 0, 0) if kind == RTM_GETQDISC else IFINFOMSG.pack(0, 0, 0, 0, 0)
    )
    return request(kind, seq, body, dump=True)


def link_request(index: int, seq: int) -> bytes:
    """An RTM_GETLINK request for one interface index."""
    return request(RTM_GETLINK, seq, IFINFOMSG.pack(0, 0, index, 0, 0))


def attributes(data: bytes | memoryview, off: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, start, end) of each rtattr from `off` to `end`."""
    while off + RTATTR.size <= end:
        size, kind = RTATTR.unpack_from(data, off)
        if size < RTATTR.size or off + size > end:
            return
        yield kind & 0x3FFF, off + RTATTR.size, off + size  # NLA_F_NESTED etc. masked off
        off += align(size)


def messages(data: bytes, seq: int) -> Iterator[tuple[int, int, int]]:
    """(type, body start, body end) of each netlink message in one read that answers `seq`
    (others, left from an abandoned request, are skipped); raises on an error reply."""
    off = 0
    while off + NLMSGHDR.size <= len(data):
        length, kind, _flags, got_seq, _pid = NLMSGHDR.unpack_from(data, off)
        if length < NLMSGHDR.size or off + length > len(data):
            raise EnvironmentProblem("rtnetlink: a truncated reply")
        if got_seq == seq:
            if kind == NLMSG_ERROR:
                (errno,) = struct.unpack_from("=i", data, off + NLMSGHDR.size)
                if errno:
                    raise EnvironmentProblem(f"rtnetlink: request failed: {os.strerror(-errno)}")
            yield kind, off + NLMSGHDR.size, off + length
        off += align(length)


@dataclass(frozen=True)
class LinkStats:
    """An interface's name and counters from one RTM_NEWLINK message (`ip -s link` prints the
    same); stats False: the message carried none."""

    index: int
    name: str | None
    stats: bool
    rx_packets: int = 0
    tx_packets: int = 0
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0


def parse_link(data: bytes | memoryview, off: int, end: int) -> LinkStats:
    """The LinkStats of one RTM_NEWLINK message's body (IFLA_STATS64, else IFLA_STATS)."""
    _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(data, off)
    name = None
    counters: tuple[int, ...] | None = None
    wide = False
    for kind, start, stop in attributes(data, off + IFINFOMSG.size, end):
        if kind == IFLA_IFNAME:
            name = bytes(data[start:stop]).split(b"\0", 1)[0].decode()
        elif kind == IFLA_STATS64 and stop - start >= LINK_STATS64.size:
            counters, wide = LINK_STATS64.unpack_from(data, start), True
        elif kind == IFLA_STATS and not wide and stop - start >= LINK_STATS32.size:
            counters = LINK_STATS32.unpack_from(data, start)
    if counters is None:
        return LinkStats(index, name, False)
    rxp, txp, rxb, txb, _rxe, _txe, rxd, txd = counters
    return LinkStats(index, name, True, rxp, txp, rxb, txb, rxd, txd)


def where(netns: str | None) -> str:
    """A namespace as an error names it."""
    return f"namespace {netns}" if netns else "this namespace"


class RouteSocket:
    """A NETLINK_ROUTE socket made inside `netns` (None: the caller's namespace)."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        with entered(netns):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        try:
            sock.bind((0, 0))
            sock.settimeout(2.0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.seq = 0

    @property
    def where(self) -> str:
        return where(self.netns)

    def _next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return self.seq

    def dump(self, kind: int) -> Iterator[tuple[bytes, int, int, int]]:
        """(reply, type, body start, body end) of every message of one dump."""
        seq = self._next_seq()
        self.sock.send(dump_request(kind, seq))
        while True:
            data = self.sock.recv(1 << 16)
            for mtype, start, end in messages(data, seq):
                if mtype == NLMSG_DONE:
                    return
                yield data, mtype, start, end

    def link(self, index: int) -> LinkStats:
        """One interface's LinkStats (a request for its index alone)."""
        seq = self._next_seq()
        self.sock.send(link_request(index, seq))
        for _ in range(READS_PER_REQUEST):
            data = self.sock.recv(1 << 16)
            for mtype, start, end in messages(data, seq):
                if mtype == RTM_NEWLINK:
                    return parse_link(data, start, end)
        raise EnvironmentProblem(f"rtnetlink: no reply about interface {index} in {self.where}")

    def links(self) -> dict[int, LinkStats]:
        """Every interface of the namespace by index."""
        out = {}
        for data, mtype, start, end in self.dump(RTM_GETLINK):
            if mtype == RTM_NEWLINK:
                link = parse_link(data, start, end)
                out[link.index] = link
        return out

    def close(self) -> None:
        self.sock.close()
