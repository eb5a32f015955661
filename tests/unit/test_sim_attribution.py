"""The simulator's per-instance queue byte-time (emulator/sim/port.py take_attribution): the
integral of each instance's queued bytes over the window, i.e. the sum over its frames of size x
wait, worked out by hand for a port serialising at a known rate. A window-end snapshot would
miss a queue that builds and drains inside the window; the integral does not."""

from __future__ import annotations

import pytest

from emulator.sim.engine import Simulator
from emulator.sim.port import Frame, Port
from emulator.transport.packets import DataPacket
from emulator.transport.wire import ECN_ECT0

RATE_BPS = 8e6  # 1 byte per microsecond
SIZE = 1000  # bytes per frame: 1 ms on the wire


class Sink:
    name = "h1"

    def receive(self, frame: Frame, port: Port) -> None:
        del frame, port


def _frame(tag: int) -> Frame:
    packet = DataPacket(dest_qp=7, psn=0, opcode=4, ack_req=False, payload_bytes=SIZE)
    return Frame("h0", "h1", 49152, SIZE, ECN_ECT0, packet, tag=tag)


def test_byte_time_is_each_frames_size_times_its_wait() -> None:
    sim = Simulator()
    port = Port(sim, "l0:l0-h1", rate_bps=RATE_BPS, delay_s=0.0, buffer_bytes=10**9)
    port.peer = Sink()
    port.attribution = {}
    # at t=0 three frames arrive: tag 1, tag 2, tag 1. The first goes on the wire at once
    # (no wait); the second waits 1 ms, the third 2 ms.
    for tag in (1, 2, 1):
        port.send(_frame(tag))
    sim.run(until_s=0.010)  # all sent by 3 ms; the window ends at 10 ms, the queue empty
    held, _ = port.take_attribution()
    by_tag = {tag: (q, tx, byte_s) for tag, q, tx, _m, _d, byte_s in held}
    assert by_tag[1][:2] == (0, 2 * SIZE) and by_tag[2][:2] == (0, SIZE)
    assert by_tag[1][2] == pytest.approx(SIZE * 0.002)  # 0 + 2 ms
    assert by_tag[2][2] == pytest.approx(SIZE * 0.001)
    # nothing queued at the window's end: the snapshot would have said 0 for both
    # the next window starts from zero and forgets empty tags
    sim.run(until_s=0.020)
    assert port.take_attribution() == ((), ())


def test_a_window_boundary_splits_the_byte_time() -> None:
    sim = Simulator()
    port = Port(sim, "l0:l0-h1", rate_bps=RATE_BPS, delay_s=0.0, buffer_bytes=10**9)
    port.peer = Sink()
    port.attribution = {}
    for _ in range(3):
        port.send(_frame(5))
    # in (0, 1.5 ms]: frame 2 waited 1 ms (done), frame 3 has waited 1.5 ms so far
    sim.run(until_s=0.0015)
    (first,), _ = port.take_attribution()
    assert first[1] == SIZE  # still queued: frame 3 (frame 2 is on the wire)
    assert first[5] == pytest.approx(SIZE * (0.001 + 0.0015))
    sim.run(until_s=0.010)
    (second,), _ = port.take_attribution()
    assert second[5] == pytest.approx(SIZE * 0.0005)  # frame 3's last 0.5 ms
