"""Every qdisc's counters in a network namespace over rtnetlink, as `tc -s -j qdisc show` gives
them (the fields fabrics.counters and the markers read), without a process per reading.

A `tc` process per switch namespace cost about 6 ms of CPU (fork, exec, JSON) each second of a
run, all at once on the run's own two cores: the engine's workers lost their CPU for that long
at every port sample. Here one raw NETLINK_ROUTE socket per namespace, made inside it (a socket
stays in the namespace it was made in), asks for an RTM_GETQDISC dump; the replies are decoded
by hand (include/uapi/linux/rtnetlink.h, pkt_sched.h, gen_stats.h). The interface names come
from an RTM_GETLINK dump on the same socket, asked again when a qdisc names an index not seen.

Holds a socket per namespace read: close() releases them (a socket keeps its namespace alive).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

from emulator.errors import EnvironmentProblem

# netlink.h, rtnetlink.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_GETLINK, RTM_NEWQDISC, RTM_GETQDISC = 16, 18, 36, 38
IFLA_IFNAME = 3
# pkt_sched.h / rtnetlink.h: a qdisc's attributes; gen_stats.h: TCA_STATS2's nested ones
TCA_KIND, TCA_STATS2, TCA_XSTATS = 1, 7, 4
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_APP, TCA_STATS_PKT64 = 1, 3, 4, 8
TC_H_ROOT = 0xFFFFFFFF

NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
RTATTR = struct.Struct("=HH")  # length, type
GNET_BASIC = struct.Struct("=QI")  # bytes, packets
GNET_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
RED_XSTATS = struct.Struct("=IIII")  # early, pdrop, other, marked (tc_red_xstats)


def _align(n: int) -> int:
    return (n + 3) & ~3


def dump_request(kind: int, seq: int) -> bytes:
    """An RTM_GETQDISC or RTM_GETLINK dump request (every qdisc, every link)."""
    body = (
        TCMSG.pack(0, 0, 0, 0, 0, 0, 0) if kind == RTM_GETQDISC else IFINFOMSG.pack(0, 0, 0, 0, 0)
    )
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def attributes(data: bytes | memoryview, off: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, start, end) of each rtattr from `off` to `end`."""
    while off + RTATTR.size <= end:
        size, kind = RTATTR.unpack_from(data, off)
        if size < RTATTR.size or off + size > end:
            return
        yield kind & 0x3FFF, off + RTATTR.size, off + size  # NLA_F_NESTED etc. masked off
        off += _align(size)


def handle_text(handle: int) -> str:
    """A qdisc handle as tc prints it: major:minor in hex, the minor left out when 0."""
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:" if not minor else f"{major:x}:{minor:x}"


def parse_qdisc(data: bytes | memoryview, off: int, end: int) -> tuple[int, dict[str, Any]]:
    """(interface index, the fields tc -s -j prints) of one RTM_NEWQDISC message's body."""
    _family, _p1, _p2, ifindex, handle, parent, _info = TCMSG.unpack_from(data, off)
    q: dict[str, Any] = {"kind": "", "handle": handle_text(handle)}
    if parent == TC_H_ROOT:
        q["root"] = True
    else:
        q["parent"] = handle_text(parent)
    xstats: tuple[int, int] | None = None
    for kind, start, stop in attributes(data, off + TCMSG.size, end):
        if kind == TCA_KIND:
            q["kind"] = bytes(data[start:stop]).split(b"\0", 1)[0].decode()
        elif kind == TCA_XSTATS and xstats is None:
            xstats = (start, stop)
        elif kind == TCA_STATS2:
            for sub, s0, s1 in attributes(data, start, stop):
                if sub == TCA_STATS_BASIC and s1 - s0 >= GNET_BASIC.size:
                    q["bytes"], q["packets"] = GNET_BASIC.unpack_from(data, s0)
                elif sub == TCA_STATS_PKT64 and s1 - s0 >= 8:
                    (q["packets"],) = struct.unpack_from("=Q", data, s0)
                elif sub == TCA_STATS_QUEUE and s1 - s0 >= GNET_QUEUE.size:
                    qlen, backlog, drops, requeues, overlimits = GNET_QUEUE.unpack_from(data, s0)
                    q.update(
                        qlen=qlen,
                        backlog=backlog,
                        drops=drops,
                        requeues=requeues,
                        overlimits=overlimits,
                    )
                elif sub == TCA_STATS_APP:
                    xstats = (s0, s1)  # tc prints these over TCA_XSTATS
    if q["kind"] == "red" and xstats is not None and xstats[1] - xstats[0] >= RED_XSTATS.size:
        q["early"], q["pdrop"], q["other"], q["marked"] = RED_XSTATS.unpack_from(data, xstats[0])
    return ifindex, q


def parse_link_name(data: bytes | memoryview, off: int, end: int) -> tuple[int, str | None]:
    """(index, name) of one RTM_NEWLINK message's body."""
    _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(data, off)
    for kind, start, stop in attributes(data, off + IFINFOMSG.size, end):
        if kind == IFLA_IFNAME:
            return index, bytes(data[start:stop]).split(b"\0", 1)[0].decode()
    return index, None


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
                    raise EnvironmentProblem(f"rtnetlink: dump failed: {os.strerror(-errno)}")
            yield kind, off + NLMSGHDR.size, off + length
        off += _align(length)


class _Namespace:
    """One namespace's socket and its interfaces' names."""

    def __init__(self, netns: str | None) -> None:
        from pyroute2.netns import popns, pushns

        self.netns = netns
        if netns:
            pushns(netns)
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            if netns:
                popns()
        try:
            sock.bind((0, 0))
            sock.settimeout(2.0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.seq = 0
        self.names: dict[int, str] = {}

    def dump(self, kind: int) -> Iterator[tuple[bytes, int, int, int]]:
        """(reply, type, body start, body end) of every message of one dump."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        seq = self.seq
        self.sock.send(dump_request(kind, seq))
        while True:
            data = self.sock.recv(1 << 16)
            for mtype, start, end in messages(data, seq):
                if mtype == NLMSG_DONE:
                    return
                yield data, mtype, start, end

    def links(self) -> None:
        names = {}
        for data, mtype, start, end in self.dump(RTM_GETLINK):
            if mtype == RTM_NEWLINK:
                index, name = parse_link_name(data, start, end)
                if name is not None:
                    names[index] = name
        self.names = names


class QdiscStats:
    """Reads every qdisc of a namespace, keyed by interface name (tc's JSON fields)."""

    def __init__(self) -> None:
        self._ns: dict[str | None, _Namespace] = {}

    def read(self, netns: str | None) -> list[dict[str, Any]]:
        """Every qdisc in `netns` (None: this one) as `tc -s -j qdisc show` lists them: dev,
        kind, handle, root or parent, bytes, packets, drops, backlog, qlen, requeues,
        overlimits, and RED's early, pdrop, other and marked."""
        ns = self._ns.get(netns)
        try:
            if ns is None:
                ns = self._ns[netns] = _Namespace(netns)
                ns.links()
            out: list[tuple[int, dict[str, Any]]] = []
            for data, mtype, start, end in ns.dump(RTM_GETQDISC):
                if mtype == RTM_NEWQDISC:
                    out.append(parse_qdisc(data, start, end))
            if any(index not in ns.names for index, _ in out):
                ns.links()  # an interface made since: its name
        except OSError as exc:
            where = f"namespace {netns}" if netns else "this namespace"
            raise EnvironmentProblem(f"rtnetlink: reading the qdiscs of {where}: {exc}") from exc
        for index, q in out:
            q["dev"] = ns.names.get(index, f"if{index}")
        return [q for _, q in out]

    def close(self) -> None:
        for ns in self._ns.values():
            ns.sock.close()
        self._ns.clear()
