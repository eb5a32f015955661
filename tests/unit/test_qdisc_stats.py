"""fabrics.qdisc_stats decodes rtnetlink qdisc dumps as the kernel lays them out
(include/uapi/linux/pkt_sched.h, gen_stats.h): built replies here; the system test
(tests/system/test_qdisc_stats.py) holds the decoding to tc's own output on a live port. The
netlink messages around them: tests/unit/test_rtnetlink.py."""

from __future__ import annotations

import struct

from emulator.rtnetlink import RTM_NEWQDISC, TCMSG, messages
from fabrics.qdisc_stats import (
    GNET_BASIC,
    GNET_QUEUE,
    RED_XSTATS,
    TC_H_ROOT,
    handle_text,
    parse_qdisc,
)
from tests.unit.test_rtnetlink import attr, message

NLA_F_NESTED = 1 << 15


def _qdisc(ifindex: int, handle: int, parent: int, kind: str, *, red: bool = False) -> bytes:
    stats = (
        attr(1, GNET_BASIC.pack(123_456_789_012, 4242) + bytes(4))  # padded as the kernel does
        + attr(3, GNET_QUEUE.pack(7, 9000, 11, 1, 5))
        + attr(8, struct.pack("=Q", 5_000_000_000))  # packets past 32 bits
    )
    if red:
        stats += attr(4, RED_XSTATS.pack(2, 3, 4, 99))
    return TCMSG.pack(0, 0, 0, ifindex, handle, parent, 1) + (
        attr(1, kind.encode() + b"\0") + attr(2, b"opts") + attr(7 | NLA_F_NESTED, stats)
    )


def test_a_qdisc_reads_as_tc_prints_it() -> None:
    body = _qdisc(3, 0x100000, 0x10020, "red", red=True)
    data = message(RTM_NEWQDISC, 9, body)
    [(kind, start, end)] = list(messages(data, 9))
    assert kind == RTM_NEWQDISC
    index, q = parse_qdisc(data, start, end)
    assert index == 3
    assert q == {
        "kind": "red",
        "handle": "10:",
        "parent": "1:20",
        "bytes": 123_456_789_012,
        "packets": 5_000_000_000,
        "qlen": 7,
        "backlog": 9000,
        "drops": 11,
        "requeues": 1,
        "overlimits": 5,
        "early": 2,
        "pdrop": 3,
        "other": 4,
        "marked": 99,
    }
    _, root = parse_qdisc(*_one(message(RTM_NEWQDISC, 1, _qdisc(2, 0x10000, TC_H_ROOT, "htb"))))
    assert root["root"] is True and "parent" not in root and root["handle"] == "1:"
    assert "marked" not in root  # extended statistics are read for RED only


def _one(data: bytes) -> tuple[bytes, int, int]:
    [(_, start, end)] = list(messages(data, 1))
    return data, start, end


def test_handles_print_as_tc_prints_them() -> None:
    assert handle_text(0) == "0:"
    assert handle_text(0xFFFF0000) == "ffff:"
    assert handle_text(0xFFFFFFF1) == "ffff:fff1"
    assert handle_text(0x10020) == "1:20"
