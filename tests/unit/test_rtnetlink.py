"""emulator.rtnetlink: requests as the kernel reads them and replies as it lays them out
(include/uapi/linux/netlink.h, rtnetlink.h, if_link.h), built here; a live reading of loopback
against pyroute2's decoding of the same interface (the oracle)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from emulator.errors import EnvironmentProblem
from emulator.rtnetlink import (
    IFINFOMSG,
    LINK_STATS32,
    LINK_STATS64,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    RTM_GETLINK,
    RTM_GETQDISC,
    RTM_NEWLINK,
    RTM_NEWQDISC,
    TCMSG,
    LinkStats,
    RouteSocket,
    dump_request,
    link_request,
    messages,
    parse_link,
)


def attr(kind: int, payload: bytes) -> bytes:
    """One rtattr as the kernel lays it out (padded to 4 bytes)."""
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + bytes(-len(raw) % 4)


def message(kind: int, seq: int, body: bytes) -> bytes:
    """One netlink message (padded to 4 bytes)."""
    raw = NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, 2, seq, 0) + body
    return raw + bytes(-len(raw) % 4)


def _link(index: int, name: str | None, *attrs: bytes) -> bytes:
    named = attr(3, name.encode() + b"\0") if name is not None else b""
    return IFINFOMSG.pack(0, 1, index, 0, 0) + named + b"".join(attrs)


def _qdisc_body() -> bytes:
    return TCMSG.pack(0, 0, 0, 1, 0, 0xFFFFFFFF, 1) + attr(1, b"noqueue\0")


def test_requests_are_what_the_kernel_reads() -> None:
    req = dump_request(RTM_GETQDISC, 5)
    length, kind, flags, seq, _ = NLMSGHDR.unpack_from(req, 0)
    assert (length, kind, flags, seq) == (len(req), RTM_GETQDISC, 0x301, 5)
    assert len(req) == NLMSGHDR.size + TCMSG.size
    req = dump_request(RTM_GETLINK, 6)
    assert NLMSGHDR.unpack_from(req, 0)[:4] == (32, RTM_GETLINK, 0x301, 6)
    req = link_request(7, 42)  # one interface: a plain request, its index in the ifinfomsg
    assert len(req) == 32 and NLMSGHDR.unpack_from(req, 0) == (32, RTM_GETLINK, 1, 42, 0)
    assert IFINFOMSG.unpack_from(req, NLMSGHDR.size)[2] == 7


def test_a_read_holds_several_messages_and_skips_other_requests() -> None:
    link = _link(4, "swp4", attr(4, struct.pack("=I", 9000)))
    data = (
        message(RTM_NEWQDISC, 6, _qdisc_body())  # an abandoned request's
        + message(RTM_NEWLINK, 7, link)
        + message(NLMSG_DONE, 7, struct.pack("=i", 0))
    )
    got = list(messages(data, 7))
    assert [k for k, _, _ in got] == [RTM_NEWLINK, NLMSG_DONE]
    assert parse_link(data, got[0][1], got[0][2]) == LinkStats(4, "swp4", False)


def test_an_error_reply_is_a_clear_error_and_a_truncated_one_too() -> None:
    error = message(NLMSG_ERROR, 3, struct.pack("=i", -1) + bytes(16))
    with pytest.raises(EnvironmentProblem, match="request failed: Operation not permitted"):
        list(messages(error, 3))
    ack = message(NLMSG_ERROR, 3, struct.pack("=i", 0) + bytes(16))
    assert [k for k, _, _ in messages(ack, 3)] == [NLMSG_ERROR]  # errno 0: an acknowledgement
    whole = message(RTM_NEWQDISC, 3, _qdisc_body())
    with pytest.raises(EnvironmentProblem, match="truncated"):
        list(messages(whole[:-8], 3))


def test_link_counters_read_64_bit_first_and_32_bit_else() -> None:
    wide = LINK_STATS64.pack(1, 2, 5_000_000_000_000, 6_000_000_000_000, 0, 0, 7, 8) + bytes(64)
    narrow = LINK_STATS32.pack(10, 20, 300, 400, 0, 0, 70, 80) + bytes(60)
    # the kernel sends IFLA_STATS before IFLA_STATS64: the wide one wins whatever the order
    for attrs in ((attr(1, narrow), attr(23, wide)), (attr(23, wide), attr(1, narrow))):
        data = message(RTM_NEWLINK, 1, _link(2, "eth0", *attrs))
        [(_, start, end)] = list(messages(data, 1))
        assert parse_link(data, start, end) == LinkStats(
            2, "eth0", True, 1, 2, 5_000_000_000_000, 6_000_000_000_000, 7, 8
        )
    data = message(RTM_NEWLINK, 1, _link(3, None, attr(1, narrow)))
    [(_, start, end)] = list(messages(data, 1))
    assert parse_link(data, start, end) == LinkStats(3, None, True, 10, 20, 300, 400, 70, 80)
    short = message(RTM_NEWLINK, 1, _link(3, "x", attr(23, wide[:16])))  # cut: not read
    [(_, start, end)] = list(messages(short, 1))
    assert parse_link(short, start, end) == LinkStats(3, "x", False)


class _Replies:
    """A socket that answers each request with the given reads, in order."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, size: int) -> bytes:
        del size
        if not self.reads:
            raise TimeoutError("timed out")
        return self.reads.pop(0)

    def close(self) -> None:
        pass


def _route(reads: list[bytes]) -> RouteSocket:
    route = RouteSocket.__new__(RouteSocket)
    route.netns, route.seq = "ns1", 0
    route.sock = _Replies(reads)  # type: ignore[assignment]
    return route


def test_a_link_request_skips_an_abandoned_requests_reply_and_gives_up_in_bounds() -> None:
    stats = attr(23, LINK_STATS64.pack(1, 2, 30, 40, 0, 0, 5, 6) + bytes(64))
    route = _route(
        [
            message(RTM_NEWLINK, 99, _link(4, "a", stats)),  # an earlier request's, late
            message(RTM_NEWLINK, 1, _link(4, "a", stats)),
        ]
    )
    assert route.link(4) == LinkStats(4, "a", True, 1, 2, 30, 40, 5, 6)
    stale = [message(RTM_NEWLINK, 99, _link(4, "a", stats))] * 40
    with pytest.raises(EnvironmentProblem, match="no reply about interface 4 in namespace ns1"):
        _route(stale).link(4)


def test_a_dump_reads_until_done_across_reads() -> None:
    route = _route(
        [
            message(RTM_NEWLINK, 1, _link(1, "lo")) + message(RTM_NEWLINK, 1, _link(2, "a")),
            message(RTM_NEWLINK, 1, _link(3, "b")) + message(NLMSG_DONE, 1, bytes(4)),
        ]
    )
    assert {i: link.name for i, link in route.links().items()} == {1: "lo", 2: "a", 3: "b"}


def test_loopback_reads_as_pyroute2_decodes_it() -> None:
    from pyroute2 import IPRoute

    route = RouteSocket(None)
    try:
        [index] = [i for i, link in route.links().items() if link.name == "lo"]
        ours = route.link(index)
        with IPRoute() as ipr:
            (link,) = ipr.get_links(index)
            theirs: dict[str, Any] = link.get_attr("IFLA_STATS64")
    finally:
        route.close()
    assert ours.stats and ours.name == "lo"
    # lo may move between the two reads (other tests): never backwards, within a little
    for field in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
        assert 0 <= theirs[field] - getattr(ours, field) < 1 << 20, field
    assert theirs["tx_dropped"] >= ours.tx_dropped


def test_a_namespace_that_does_not_exist_is_named() -> None:
    with pytest.raises(EnvironmentProblem, match="no-such-netns-here"):
        RouteSocket("no-such-netns-here")
