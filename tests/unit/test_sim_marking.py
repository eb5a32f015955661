"""Where a simulated switch port applies the ECN marking law (fabric.ecn_mark_point).

Arrival judges the queue a packet finds, as DCTCP's switch does (Alizadeh et al., SIGCOMM 2010,
section 3.1: an arriving packet is marked if the queue occupancy exceeds K on its arrival) and as
the emulated fabric's eBPF phantom queue does (fabrics/ecn/phantom_marker.c: the queue found,
then the packet joins it). Departure judges the queue a packet leaves behind as it is sent, as
the HPCC ns-3 switch does (switch-node.cc SwitchNotifyDequeue), so the marks fall on the packets
at the head of a standing queue instead of its tail, and reach the receiver sooner.
"""

from __future__ import annotations

import random
from typing import cast

from emulator.sim.engine import Simulator
from emulator.sim.port import Frame, Port
from emulator.transport.marking import EcnMarker
from emulator.transport.packets import Packet
from emulator.transport.params import EcnMarkingParams
from emulator.transport.wire import ECN_CE, ECN_ECT0

# a step at 1,500 bytes: never at or below Kmin, always above Kmax
LAW = EcnMarkingParams(kmin_bytes=1_500, kmax_bytes=1_501, pmax=1.0)


class _Sink:
    name = "sink"

    def __init__(self) -> None:
        self.got: list[Frame] = []

    def receive(self, frame: Frame, port: Port) -> None:
        self.got.append(frame)


def _burst(*, mark_on_arrival: bool) -> tuple[list[int], int, list[int]]:
    """Five 1,000-byte packets arrive at an idle port at once: which ones (by arrival order)
    leave marked, the port's mark count, and which ones its attribution hook heard marked."""
    sim = Simulator()
    port = Port(
        sim,
        "s0:eth1",
        rate_bps=8e9,
        delay_s=0.0,
        buffer_bytes=1 << 20,
        marker=EcnMarker(LAW, random.Random(0)),
        mark_on_arrival=mark_on_arrival,
    )
    sink = _Sink()
    port.peer = sink
    heard: list[int] = []
    port.on_tx = lambda frame, marked: heard.extend([frame.sport - 49152] if marked else [])
    # the packet itself does not matter here (a decoded one: the port sets only the frame's ECN)
    packet = cast(Packet, None)
    frames = [Frame("h0", "h1", 49152 + i, 1_000, ECN_ECT0, packet) for i in range(5)]
    for frame in frames:
        port.send(frame)
    sim.run(until_s=1.0)
    assert [f.sport for f in sink.got] == [f.sport for f in frames]  # FIFO, all delivered
    return [i for i, f in enumerate(sink.got) if f.ecn == ECN_CE], port.marks, heard


def test_on_arrival_the_packets_that_find_a_queue_above_k_are_marked() -> None:
    # the first starts at once; the others find 0, 1000, 2000 and 3000 bytes queued ahead
    assert _burst(mark_on_arrival=True) == ([3, 4], 2, [3, 4])


def test_on_departure_the_packets_that_leave_a_queue_above_k_behind_are_marked() -> None:
    # the second leaves the last three (3000 bytes) behind, the third two (2000), then 1000, 0
    assert _burst(mark_on_arrival=False) == ([1, 2], 2, [1, 2])
