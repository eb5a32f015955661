"""Every qdisc's counters in a network namespace over rtnetlink, as `tc -s -j qdisc show` gives
them (the fields fabrics.counters and the markers read), and its interfaces' counters as
`ip -s -j link show` does, without a process per reading.

A `tc` process per switch namespace cost about 6 ms of CPU (fork, exec, JSON) each second of a
run, all at once on the run's own two cores: the engine's workers lost their CPU for that long
at every port sample. Here one NETLINK_ROUTE socket per namespace, made inside it
(emulator.rtnetlink), asks for an RTM_GETQDISC dump; the replies are decoded by hand
(include/uapi/linux/pkt_sched.h, gen_stats.h). The interface names come from an RTM_GETLINK dump
on the same socket, asked again when a qdisc names an index not seen.

Holds a socket per namespace read: close() releases them (a socket keeps its namespace alive).
"""

from __future__ import annotations

import struct
from typing import Any

from emulator.errors import EnvironmentProblem
from emulator.rtnetlink import (
    RTM_GETQDISC,
    RTM_NEWQDISC,
    TCMSG,
    LinkStats,
    RouteSocket,
    attributes,
    where,
)

# pkt_sched.h / rtnetlink.h: a qdisc's attributes; gen_stats.h: TCA_STATS2's nested ones
TCA_KIND, TCA_STATS2, TCA_XSTATS = 1, 7, 4
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_APP, TCA_STATS_PKT64 = 1, 3, 4, 8
TC_H_ROOT = 0xFFFFFFFF

GNET_BASIC = struct.Struct("=QI")  # bytes, packets
GNET_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
RED_XSTATS = struct.Struct("=IIII")  # early, pdrop, other, marked (tc_red_xstats)


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


class _Namespace:
    """One namespace's socket and its interfaces' names."""

    def __init__(self, netns: str | None) -> None:
        self.route = RouteSocket(netns)
        self.names: dict[int, str] = {}

    def links(self) -> dict[int, LinkStats]:
        links = self.route.links()
        self.names = {i: link.name for i, link in links.items() if link.name is not None}
        return links


class QdiscStats:
    """Reads every qdisc (and interface) of a namespace, keyed by interface name."""

    def __init__(self) -> None:
        self._ns: dict[str | None, _Namespace] = {}

    def _namespace(self, netns: str | None) -> _Namespace:
        ns = self._ns.get(netns)
        if ns is None:
            ns = _Namespace(netns)
            try:
                ns.links()
            except BaseException:
                ns.route.close()
                raise
            self._ns[netns] = ns
        return ns

    def read(self, netns: str | None) -> list[dict[str, Any]]:
        """Every qdisc in `netns` (None: this one) as `tc -s -j qdisc show` lists them: dev,
        kind, handle, root or parent, bytes, packets, drops, backlog, qlen, requeues,
        overlimits, and RED's early, pdrop, other and marked."""
        try:
            ns = self._namespace(netns)
            out: list[tuple[int, dict[str, Any]]] = []
            for data, mtype, start, end in ns.route.dump(RTM_GETQDISC):
                if mtype == RTM_NEWQDISC:
                    out.append(parse_qdisc(data, start, end))
            if any(index not in ns.names for index, _ in out):
                ns.links()  # an interface made since: its name
        except OSError as exc:
            raise EnvironmentProblem(
                f"rtnetlink: reading the qdiscs of {where(netns)}: {exc}"
            ) from exc
        for index, q in out:
            q["dev"] = ns.names.get(index, f"if{index}")
        return [q for _, q in out]

    def links(self, netns: str | None) -> dict[str, LinkStats]:
        """Every named interface in `netns` and its counters (`ip -s -j link show`'s stats64)."""
        try:
            links = self._namespace(netns).links()
        except OSError as exc:
            raise EnvironmentProblem(
                f"rtnetlink: reading the links of {where(netns)}: {exc}"
            ) from exc
        return {link.name: link for link in links.values() if link.name is not None}

    def close(self) -> None:
        for ns in self._ns.values():
            ns.route.close()
        self._ns.clear()
