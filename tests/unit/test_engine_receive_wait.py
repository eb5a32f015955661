"""How long a read waited in its socket (emulator.engine.receive_path) and how it enters a flow's
engine delay (emulator.engine.reports): the kernel's receive stamp is the arrival, not the read;
a completion carries the longer of the worker's lag and its read's wait."""

from __future__ import annotations

import select
import socket
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.engine.clock import DilatedClock
from emulator.engine.receive_path import ReceivePath
from emulator.engine.reports import EventReports
from emulator.engine.sockets import ANCILLARY_BYTES, SO_TIMESTAMPNS, read_ancillary
from emulator.latency import LatencyHistogram
from emulator.transport.events import FlowCompleted, MessageReceived
from emulator.transport.params import TransportParams

HELD_S = 0.03


def _receive_path(histogram: LatencyHistogram) -> ReceivePath:
    def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not reached")

    return ReceivePath(
        TransportParams(),
        DilatedClock(1.0),
        [],
        Counter(),
        frozenset(),
        {},
        bytearray(64),
        None,
        unused,
        unused,
        unused,
        unused,
        unused,
        receive_wait=histogram,
        latency=False,
    )


def test_a_datagram_read_later_waited_as_long_in_the_socket() -> None:
    """The stamp SO_TIMESTAMPNS gives is the datagram's arrival: read HELD_S later, the read
    waited at least HELD_S (a stamp at the read would make every wait about 0)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # The kernel turns arrival stamping on for everyone when a socket first asks, through
        # deferred work (net_enable_timestamp); until then a datagram is stamped when it is
        # read. One datagram through first, with time for that work to run.
        tx.sendto(b"w", rx.getsockname())
        assert select.select([rx], [], [], 5)[0]
        time.sleep(0.05)
        rx.recv(16)
        tx.sendto(b"x" * 100, rx.getsockname())
        assert select.select([rx], [], [], 5)[0]
        time.sleep(HELD_S)
        _, anc, _, _ = rx.recvmsg_into([bytearray(2048)], ANCILLARY_BYTES)
        _, _, rx_ns = read_ancillary(anc)
    finally:
        rx.close()
        tx.close()
    histogram = LatencyHistogram()
    path = _receive_path(histogram)
    path._read_waited(rx_ns)
    assert HELD_S <= path._wait_s < 5.0
    assert histogram.count == 1 and histogram.max_s == path._wait_s


def test_an_unstamped_read_waits_nothing_and_a_stamp_from_the_future_counts_as_0() -> None:
    histogram = LatencyHistogram()
    path = _receive_path(histogram)
    path._read_waited(0)  # no stamp (AF_XDP, or the option refused): not a sample
    assert path._wait_s == 0.0 and histogram.count == 0
    path._read_waited(time.time_ns() + 10**9)  # the clock stepped back after the stamp
    assert path._wait_s == 0.0 and histogram.count == 1


@pytest.mark.parametrize(
    ("lag_s", "wait_s", "expected_s"), [(0.001, 0.004, 0.004), (0.006, 0.004, 0.006)]
)
def test_a_completion_carries_the_longer_of_the_lag_and_its_reads_wait(
    lag_s: float, wait_s: float, expected_s: float
) -> None:
    """The receiver's report of a message and the sender's of a flow carry, as their engine
    delay, the wait of the read that completed them (by QP) or the worker's lag if longer."""
    events: list[Any] = []
    out: list[tuple[Any, ...]] = []
    conn = SimpleNamespace(
        qp=SimpleNamespace(packets_sent=0, packets_retransmitted=0, pacing_lost_s=0.0),
        cnps_received=0,
        nic_lost_s=0.0,
        snapshot=(0, 0, 0, 0.0),
        conn_id=3,
        ordinals={11: 0},
    )
    rx_conn = SimpleNamespace(
        snapshot=(0, 0, 0), cnps_sent=0, conn_id=3, qp=SimpleNamespace(reordered_packets=2)
    )
    reports = EventReports(
        events,
        out,
        Counter(),
        Counter(),
        {5: conn},  # type: ignore[dict-item]
        {7: rx_conn},  # type: ignore[dict-item]
        lambda: lag_s,
        lambda ids, t: None,
        lambda qpn: None,
        relay=(),
        rate_sample_s=1.0,
        data_wait_s={7: wait_s},
        ack_wait_s={5: wait_s},
    )
    events += [MessageReceived(7, 0, 4096, 1.0, 0), FlowCompleted(5, 11, 4096, 0.5, 1.0)]
    reports.handle_events()
    rx = next(o for o in out if o[0] == "rx")
    done = next(o for o in out if o[0] == "done")
    assert rx[7] == expected_s and done[8] == expected_s
    assert rx[8] == 2  # the receiver's reordered packets since its last message
