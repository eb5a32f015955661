"""fabrics.qdisc_stats reads over rtnetlink what `tc -s -j qdisc show` prints: every qdisc of
a namespace and its counters, with a queue standing in it.

A port as the fabric builds it (HTB root, the data class's drop-tail leaf, the priority class's
leaf: the eBPF marker's, as this kernel has no sch_red) plus a clsact qdisc, at a rate so low
that a burst of datagrams leaves a queue that barely moves: some were sent (HTB's burst), some
are queued, some dropped at the leaf's limit. (RED's marks, read from its extended statistics
where the kernel has it, are tested on a built reply in tests/unit/test_qdisc_stats.py.) The netlink reading is taken between two of tc's; when the
two tc readings agree (nothing moved in between), the netlink one must equal them field by
field, for every qdisc.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time

import pytest

from emulator.engine.testbed import PairInfo
from fabrics.ecn.markers import EbpfMarker
from fabrics.iproute import Cmd, in_netns, run
from fabrics.qdisc_stats import QdiscStats
from fabrics.queues import LEAF_HANDLE, ROOT_HANDLE, EgressPort, htb_commands

pytestmark = pytest.mark.system

RATE_BPS = 16_000  # 2 KB/s: the queue moves one 1 KB datagram every half second
FIELDS = (
    "dev",
    "kind",
    "handle",
    "root",
    "parent",
    "bytes",
    "packets",
    "drops",
    "backlog",
    "qlen",
    "requeues",
    "overlimits",
    "early",
    "pdrop",
    "other",
    "marked",
)
SETTLE_S = 20.0


def _tc(netns: str) -> list[dict[str, object]]:
    qdiscs = json.loads(run(Cmd("tc", ("-s", "-j", "qdisc", "show"), netns)) or "[]")
    return [{k: q[k] for k in FIELDS if k in q} for q in qdiscs]


def test_netlink_reads_what_tc_prints(veth_pair: PairInfo) -> None:
    p = veth_pair
    port = EgressPort(
        "a",
        p.sender_ns,
        p.sender_if,
        RATE_BPS,
        60_000,
        9000,
        0.0,
        None,
    )
    for cmd in htb_commands(port, EbpfMarker().leaf_qdisc(port)):
        run(cmd)
    run(Cmd("tc", ("qdisc", "add", "dev", p.sender_if, "clsact"), p.sender_ns))
    with in_netns(p.sender_ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(120):
            # a full socket buffer refuses one: that frame never reached the port
            with contextlib.suppress(OSError):
                sock.sendto(bytes(1000), (p.receiver_addr, 5000))
    finally:
        sock.close()

    reader = QdiscStats()
    try:
        deadline = time.monotonic() + SETTLE_S
        tries = []
        while time.monotonic() < deadline:
            before = _tc(p.sender_ns)
            mine = [{k: q[k] for k in FIELDS if k in q} for q in reader.read(p.sender_ns)]
            after = _tc(p.sender_ns)
            tries.append(before == after)
            print(f"try {len(tries)}: tc's two readings {'agree' if before == after else 'differ'}")
            if before == after:
                break
        else:
            pytest.fail(f"the queue moved between tc's readings in all {len(tries)} tries")
        assert mine == before
        by_handle = {q["handle"]: q for q in mine}
        leaf = by_handle[LEAF_HANDLE]
        print(json.dumps(mine))
        # the reading has what the test is for: a standing queue and drops
        assert leaf["backlog"] > 0 and leaf["qlen"] > 0 and leaf["drops"] > 0
        assert by_handle[ROOT_HANDLE]["kind"] == "htb" and by_handle[ROOT_HANDLE]["root"]
        assert by_handle[ROOT_HANDLE]["drops"] > 0 and by_handle[ROOT_HANDLE]["qlen"] > 0
        assert any(q["kind"] == "clsact" for q in mine)
    finally:
        reader.close()
    assert not reader._ns, "the sockets were released"
