"""An emulated port serves CNPs in strict priority and everything else in arrival order.

The source (fabrics/spec.py DEFAULT_PRIORITY_DSCPS): NVIDIA's default RoCE configuration puts
CNPs (DSCP 48, switch priority 6) in traffic class 6, scheduled in strict priority ahead of the
RoCE class, which the responder's ACKs share with the data (Cumulus Linux user guide, "RDMA over
Converged Ethernet - RoCE", Port ETS). fabrics/queues.py builds it from HTB: a priority class
that owns the link rate (prio 0) and a data class that borrows it, with u32 filters on the DSCP.
The simulator's ports do the same (tests/unit/test_sim_priority.py).

Here a 500 kb/s port holds a backlog of data datagrams (DSCP 26) when one datagram with DSCP 48
and then one with DSCP 26 are sent: the first must overtake the backlog, the second must not.
The bound is by count, not time: the data queue's length read from the qdisc just after the
DSCP 48 datagram went in (a lower bound on what it found ahead of it) says how many data frames
it must overtake, so how fast this machine's Python sends cannot move it.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from emulator.engine.testbed import PairInfo
from fabrics.iproute import run, tc
from fabrics.queues import LEAF_HANDLE, EgressPort, drop_tail, htb_commands
from tests.system.conftest import SO_RCVBUFFORCE, udp_socket

SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)

pytestmark = pytest.mark.system

RATE_BPS = 500e3
DATA = 300
PORT = 5302
TOS_DATA = 26 << 2 | 2  # DSCP 26, ECT(0)
TOS_CNP = 48 << 2
IN_FLIGHT = 2  # frames the port had dequeued but not yet delivered when the DSCP 48 one came


def _data_queue_packets(netns: str, dev: str) -> int:
    """Packets in the port's data queue (its leaf qdisc) now."""
    for q in json.loads(run(tc("-s", "-j", "qdisc", "show", "dev", dev, netns=netns)) or "[]"):
        if q.get("handle") == LEAF_HANDLE:
            return int(q.get("qlen", 0))
    raise AssertionError(f"no data queue {LEAF_HANDLE} on {dev}")


def _receive(sock: socket.socket, got: list[tuple[bytes, int]], deadline: float) -> None:
    while len(got) < DATA + 2 and time.monotonic() < deadline:
        try:
            data, ancillary, _, _ = sock.recvmsg(2048, 64)
        except TimeoutError:
            continue
        tos = next((d[0] for lvl, kind, d in ancillary if kind == socket.IP_TOS), -1)
        got.append((data[:8], tos))


def test_cnp_dscp_overtakes_the_data_backlog_and_data_dscp_does_not(veth_pair: PairInfo) -> None:
    p = veth_pair
    port = EgressPort("a", p.sender_ns, p.sender_if, RATE_BPS, 4_000_000, 1500, 0.0, None)
    for cmd in htb_commands(port, drop_tail(port)):
        run(cmd)
    rx, tx = udp_socket(p.receiver_ns), udp_socket(p.sender_ns, TOS_DATA)
    with rx, tx:
        rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        # the whole backlog must fit the sender's socket, or sendto blocks until the port drains
        tx.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
        rx.settimeout(0.2)
        rx.bind((p.receiver_addr, PORT))
        got: list[tuple[bytes, int]] = []
        # 300 x 166 wire bytes at 500 kb/s: 0.8 s to drain
        receiver = threading.Thread(target=_receive, args=(rx, got, time.monotonic() + 20))
        receiver.start()
        for _ in range(DATA):
            tx.sendto(b"data0000" + bytes(92), (p.receiver_addr, PORT))
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_CNP)
        tx.sendto(b"cnp-0000" + bytes(8), (p.receiver_addr, PORT))
        # data frames still queued just after: the DSCP 48 one found at least these ahead of it
        queued = _data_queue_packets(p.sender_ns, p.sender_if)
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_DATA)
        tx.sendto(b"ack-0000" + bytes(8), (p.receiver_addr, PORT))
        receiver.join()
    order = [tag[:3] for tag, _ in got]
    tos = {tag[:3]: t for tag, t in got}
    line = (
        f"{len(got)} of {DATA + 2} arrived ({queued} data frames still queued after the DSCP 48 "
        "datagram was sent); it was number "
        f"{order.index(b'cnp') + 1 if b'cnp' in order else None}, the DSCP 26 one number "
        f"{order.index(b'ack') + 1 if b'ack' in order else None}"
    )
    print(line)
    assert len(got) == DATA + 2, line
    assert tos[b"cnp"] == TOS_CNP and tos[b"ack"] == TOS_DATA, tos
    assert queued > DATA // 2, line  # a backlog was there to overtake
    # it overtook every queued data frame (a few were past the qdisc already); the data-class
    # one overtook nothing
    assert order.index(b"cnp") <= DATA - queued + IN_FLIGHT, line
    assert order.index(b"ack") == DATA + 1, line
