"""A link's sending end: an output port with a byte buffer (tail drop), ECN marking at dequeue,
serialization at the link rate and a propagation delay to the peer.

Control frames (ACK, NAK, CNP) go in a strict-priority queue ahead of data, as CNPs usually are
(NVIDIA sends them with cnp_dscp 48); only the data queue counts for ECN and the buffer.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from emulator.sim.engine import Simulator
from emulator.transport.marking import EcnMarker
from emulator.transport.packets import Packet
from emulator.transport.wire import ECN_CE, ECN_ECT0


@dataclass(slots=True)
class Frame:
    """A packet on a link. `packet` is a descriptor, or the whole IPv4 packet as bytes when the
    fabric carries real encoded bytes."""

    src: str
    dst: str
    sport: int
    size_bytes: int  # bytes on the link, framing included
    ecn: int
    packet: Packet | bytes
    control: bool = False


class Node(Protocol):
    name: str

    def receive(self, frame: Frame, port: Port) -> None: ...


class Port:
    def __init__(
        self,
        sim: Simulator,
        name: str,
        *,
        rate_bps: float,
        delay_s: float,
        buffer_bytes: int,
        marker: EcnMarker | None = None,
        loss_probability: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self.sim = sim
        self.name = name
        self.rate_bps = rate_bps
        self.delay_s = delay_s
        self.buffer_bytes = buffer_bytes
        self.marker = marker
        self.loss_probability = loss_probability
        self._rng = rng if rng is not None else random.Random(0)
        self.peer: Node | None = None
        self.on_idle: Callable[[], None] | None = None  # hosts pull packets when idle
        self._data: deque[Frame] = deque()
        self._control: deque[Frame] = deque()
        self.queued_bytes = 0
        self.busy = False
        # counters
        self.tx_frames = 0
        self.tx_bytes = 0
        self.drops = 0
        self.losses = 0
        self.marks = 0
        self.max_queued_bytes = 0
        self.queue_samples: list[tuple[float, int]] | None = None

    def send(self, frame: Frame) -> None:
        if frame.control:
            self._control.append(frame)
        else:
            queued = self.queued_bytes
            if queued + frame.size_bytes > self.buffer_bytes:
                self.drops += 1
                return
            queued += frame.size_bytes
            self.queued_bytes = queued
            if queued > self.max_queued_bytes:
                self.max_queued_bytes = queued
            if self.queue_samples is not None:
                self.queue_samples.append((self.sim.now, queued))
            self._data.append(frame)
        if not self.busy:
            self._start()

    def _start(self) -> None:
        if self._control:
            frame = self._control.popleft()
        else:
            frame = self._data.popleft()
            self.queued_bytes -= frame.size_bytes
            marker = self.marker
            # Marking at dequeue on the queue left behind, as the HPCC ns-3 switch does: the
            # mark then reaches the receiver without waiting behind the queue it reports.
            if (
                marker is not None
                and frame.ecn == ECN_ECT0
                and marker.should_mark(self.queued_bytes)
            ):
                frame.ecn = ECN_CE
                if isinstance(frame.packet, bytes):
                    frame.packet = _set_ce(frame.packet)
                self.marks += 1
        self.busy = True
        sim = self.sim
        done = sim.now + frame.size_bytes * 8 / self.rate_bps
        sim.at(done, self._done)
        self.tx_frames += 1
        self.tx_bytes += frame.size_bytes
        if self.loss_probability and self._rng.random() < self.loss_probability:
            self.losses += 1
            return
        sim.at(done + self.delay_s, self._deliver, frame)

    def _deliver(self, frame: Frame) -> None:
        assert self.peer is not None
        self.peer.receive(frame, self)

    def _done(self) -> None:
        self.busy = False
        if self._control or self._data:
            self._start()
        elif self.on_idle is not None:
            self.on_idle()


def _set_ce(ip_packet: bytes) -> bytes:
    """Set ECN CE in an IPv4 header and fix its checksum (RFC 1624 incremental update)."""
    data = bytearray(ip_packet)
    old = (data[0] << 8) | data[1]
    data[1] |= ECN_CE
    new = (data[0] << 8) | data[1]
    checksum = (data[10] << 8) | data[11]
    total = (~checksum & 0xFFFF) + (~old & 0xFFFF) + new
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF
    data[10], data[11] = checksum >> 8, checksum & 0xFF
    return bytes(data)
