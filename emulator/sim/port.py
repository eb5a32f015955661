"""A link's sending end: an output port with a byte buffer, ECN marking (on the queue a packet
finds as it arrives, as the emulated fabric's markers do, or on the queue it leaves behind as it
departs, as the HPCC ns-3 switch does: fabric.ecn_mark_point), serialization at the link rate, a
propagation delay to the peer, and PFC's pause of its data queue.

Frames whose DSCP the fabric serves in strict priority (fabric.priority_dscps: CNPs, DSCP 48,
as a switch in NVIDIA's default RoCE configuration does, fabrics/spec.py) go in a priority queue
ahead of the data queue; data, ACKs and NAKs (their QP's class) share the data queue in arrival
order. Only the data queue counts for ECN, the buffer and PFC.

PFC (IEEE 802.1Qbb) is modelled for the one lossless data priority: the switch at the far end
counts, per ingress port, the data-class bytes it holds that came in on this link (PfcIngress);
above XOFF it sends a PAUSE back, and this port then holds its data queue (priority frames still
go: they ride a priority PFC does not pause) until a RESUME comes at XON. A lossless port never
tail-drops data (the pause bounds its queue instead); the far end drops only what overflows the
headroom above XOFF, which is sized for what is in flight while the PAUSE travels.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from emulator.sim.engine import Simulator
from emulator.transport.marking import EcnMarker
from emulator.transport.packets import ROCEV2_UDP_PORT, Packet
from emulator.transport.stream import StreamDatagram
from emulator.transport.wire import ECN_CE, ECN_ECT0, ECN_ECT1

# ECN-capable codepoints (RFC 3168 section 5: a congested router marks either; the eBPF marker
# does the same, fabrics/ecn/phantom_marker.c); a not-ECT packet passes unmarked
ECT = (ECN_ECT0, ECN_ECT1)

# A PFC frame is a minimum-size MAC control frame: 64 bytes, plus preamble and inter-frame gap
# (IEEE 802.3 clause 31 and 802.1Qbb): 84 bytes of link time.
PFC_FRAME_WIRE_BYTES = 84


@dataclass(slots=True)
class Frame:
    """A packet on a link. `packet` is a descriptor, or the whole IPv4 packet as bytes when the
    fabric carries real encoded bytes. `mhash` is the flow's ECMP hash (symmetric, so both
    directions of a connection share it); `tag` says whose it is (a flow's collective, for
    attribution); `ingress` is the PFC account it is charged to while a switch holds it."""

    src: str
    dst: str
    sport: int
    size_bytes: int  # bytes on the link, framing included
    ecn: int
    packet: Packet | StreamDatagram | bytes
    control: bool = False  # ACK, NAK or CNP: travels from the receiver back to the sender
    mhash: int = 0
    tag: int = -1
    ingress: PfcIngress | None = None
    marked_here: bool = False  # CE set on arrival at the port now holding it (for on_tx)
    priority: bool = False  # its DSCP is in fabric.priority_dscps: the strict-priority queue
    flow: int = -1  # the flow (message) it carries or answers, for attribution
    dport: int = ROCEV2_UDP_PORT  # the data's UDP destination port (a stream's own)


class Node(Protocol):
    name: str

    def receive(self, frame: Frame, port: Port) -> None: ...


class SharedBuffer:
    """A switch's shared packet buffer as the HPCC ns-3 MMU sees it: the dynamic PFC threshold
    is (buffer - total headroom - bytes held) >> pfc_a_shift (switch-mmu.cc GetPfcThreshold)."""

    __slots__ = ("free_bytes", "shift", "used")

    def __init__(self, buffer_bytes: int, headroom_total_bytes: int, shift: int) -> None:
        self.free_bytes = max(0, buffer_bytes - headroom_total_bytes)
        self.shift = shift
        self.used = 0

    def threshold(self) -> int:
        return max(0, self.free_bytes - self.used) >> self.shift


class PfcIngress:
    """One switch ingress port's PFC account, as the HPCC ns-3 MMU keeps it (switch-mmu.cc):
    data bytes held that came in on this port, in the shared buffer up to the XOFF threshold and
    in the port's headroom beyond it. It pauses `upstream` once anything is in the headroom or
    the shared part reaches XOFF (CheckShouldPause), and resumes it once the headroom is empty
    and the shared part is `xon_offset` below XOFF (CheckShouldResume). A frame that finds the
    headroom full is dropped (CheckIngressAdmission): the pause came too late. XOFF is
    `xoff_bytes`, or with a `pool` the switch's dynamic threshold (HPCC's default)."""

    __slots__ = (
        "drops",
        "hdrm",
        "headroom_bytes",
        "max_bytes",
        "paused",
        "pool",
        "shared",
        "upstream",
        "xoff",
        "xon_offset",
    )

    def __init__(
        self,
        upstream: Port,
        xoff_bytes: int,
        xon_offset: int,
        headroom_bytes: int,
        pool: SharedBuffer | None = None,
    ) -> None:
        self.upstream = upstream
        self.xoff = xoff_bytes
        self.xon_offset = xon_offset
        self.headroom_bytes = headroom_bytes
        self.pool = pool
        self.shared = 0
        self.hdrm = 0
        self.max_bytes = 0
        self.paused = False
        self.drops = 0

    def threshold(self) -> int:
        """XOFF now: the static one, or the switch's dynamic threshold."""
        return self.xoff if self.pool is None else self.pool.threshold()

    @property
    def held_bytes(self) -> int:
        return self.shared + self.hdrm

    def admit(self, frame: Frame) -> bool:
        """Charge an arriving data frame; False when it overflows the headroom (dropped)."""
        size = frame.size_bytes
        pool = self.pool
        threshold = self.xoff if pool is None else pool.threshold()
        if self.shared + size > threshold:
            if self.hdrm + size > self.headroom_bytes:
                self.drops += 1
                return False
            self.hdrm += size
        else:
            self.shared += size
            if pool is not None:
                pool.used += size
        held = self.shared + self.hdrm
        if held > self.max_bytes:
            self.max_bytes = held
        frame.ingress = self
        # HPCC updates the accounting first, then asks CheckShouldPause with the threshold
        # of the buffer as it is now (a dynamic one just shrank by this frame)
        if pool is not None:
            threshold = pool.threshold()
        if not self.paused and (self.hdrm > 0 or self.shared >= threshold):
            self.paused = True
            self.upstream.signal_pause(True)
        return True

    def release(self, size_bytes: int) -> None:
        """The switch sent (or dropped) a frame charged here."""
        hdrm = self.hdrm
        if hdrm:
            from_hdrm = hdrm if hdrm < size_bytes else size_bytes
            self.hdrm = hdrm - from_hdrm
            size_bytes -= from_hdrm
        if size_bytes:
            self.shared -= size_bytes
            if self.pool is not None:
                self.pool.used -= size_bytes
        if (
            self.paused
            and self.hdrm == 0
            and (self.shared == 0 or self.shared + self.xon_offset <= self.threshold())
        ):
            self.paused = False
            self.upstream.signal_pause(False)


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
        mark_on_arrival: bool = False,
        loss_probability: float = 0.0,
        rng: random.Random | None = None,
        lossless: bool = False,
    ) -> None:
        self.sim = sim
        self.name = name
        self.rate_bps = rate_bps
        self.delay_s = delay_s
        self.buffer_bytes = buffer_bytes
        self.marker = marker
        self.mark_on_arrival = mark_on_arrival
        self.loss_probability = loss_probability
        self.lossless = lossless  # PFC guards its data: no tail drop
        self._rng = rng if rng is not None else random.Random(0)
        self.peer: Node | None = None
        self.on_idle: Callable[[], None] | None = None  # hosts pull packets when idle
        self.on_tx: Callable[[Frame, bool], None] | None = None  # attribution: (frame, marked)
        self._data: deque[Frame] = deque()
        self._priority: deque[Frame] = deque()
        self.queued_bytes = 0
        self.busy = False
        self.up = True
        # PFC: the far end asked this port to hold its data
        self.paused = False
        self._paused_since = 0.0
        self.paused_s = 0.0  # total time paused, to the last resume
        self.pause_frames = 0  # PAUSE (XOFF) frames received
        self.resume_frames = 0
        # counters
        self.tx_frames = 0
        self.tx_bytes = 0
        self.drops = 0
        self.losses = 0  # frames sent but lost on the link (loss_probability, a cable down)
        self.lost_bytes = 0  # their bytes: what the far end did not receive of tx_bytes
        self.marks = 0
        self.max_queued_bytes = 0
        self.queue_samples: list[tuple[float, int]] | None = None
        # attribution (None: off): per tag (collective instance) [bytes queued now, and bytes
        # sent, marks, drops and the queue's byte-time (byte-seconds) since the last
        # take_attribution, and when its queued bytes last changed] of the data queue, and the
        # flow of every frame marked here since then
        self.attribution: dict[int, list[Any]] | None = None
        self.marked_flows: list[int] = []

    def send(self, frame: Frame) -> None:
        if not self.up:
            self._drop(frame)
            return
        if frame.priority:
            self._priority.append(frame)
        else:
            queued = self.queued_bytes + frame.size_bytes
            if queued > self.buffer_bytes and not self.lossless:
                self._drop(frame)
                return
            marker = self.marker
            # On arrival, the law judges the queue the packet finds (without itself), as the
            # eBPF phantom queue does (fabrics/ecn/phantom_marker.c) and DCTCP's rule says.
            if (
                self.mark_on_arrival
                and marker is not None
                and frame.ecn in ECT
                and marker.should_mark(self.queued_bytes)
            ):
                self._mark(frame)
                frame.marked_here = True
            self.queued_bytes = queued
            if self.attribution is not None:
                self._queue_change(self._account(frame.tag), frame.size_bytes)
            if queued > self.max_queued_bytes:
                self.max_queued_bytes = queued
            if self.queue_samples is not None:
                self.queue_samples.append((self.sim.now, queued))
            self._data.append(frame)
        if not self.busy:
            self._start()

    def take_attribution(
        self,
    ) -> tuple[tuple[tuple[int, int, int, int, int, float], ...], tuple[int, ...]]:
        """Since the last call: (tag, bytes queued now, bytes sent, marks, drops, queue
        byte-seconds) of every tag with any, and the flows marked. The byte-seconds are exact:
        the integral of the tag's queued bytes over the window (each frame's size times its
        wait), as the emulated fabric's marker measures it (fabrics/ecn/phantom_marker.c).
        The counts start again; a tag with nothing queued is forgotten until its next frame."""
        assert self.attribution is not None
        now = self.sim.now
        for entry in self.attribution.values():
            self._queue_change(entry, 0)  # the byte-time up to now
        held = tuple(
            (tag, q, tx, m, d, byte_s)
            for tag, (q, tx, m, d, byte_s, _) in self.attribution.items()
            if q or tx or m or d or byte_s
        )
        self.attribution = {
            tag: [e[0], 0, 0, 0, 0.0, now] for tag, e in self.attribution.items() if e[0]
        }
        marked = tuple(self.marked_flows)
        self.marked_flows.clear()
        return held, marked

    def _account(self, tag: int) -> list[Any]:
        assert self.attribution is not None
        entry = self.attribution.get(tag)
        if entry is None:
            entry = self.attribution[tag] = [0, 0, 0, 0, 0.0, self.sim.now]
        return entry

    def _queue_change(self, entry: list[Any], delta_bytes: int) -> None:
        """A tag's queued bytes change now: what they held since the last change first."""
        now = self.sim.now
        entry[4] += entry[0] * (now - entry[5])
        entry[5] = now
        entry[0] += delta_bytes

    def _mark(self, frame: Frame) -> None:
        frame.ecn = ECN_CE
        if isinstance(frame.packet, bytes):
            frame.packet = _set_ce(frame.packet)
        self.marks += 1
        if self.attribution is not None:
            self._account(frame.tag)[2] += 1
            self.marked_flows.append(frame.flow)

    def _drop(self, frame: Frame) -> None:
        self.drops += 1
        if self.attribution is not None:
            self._account(frame.tag)[3] += 1
        if frame.ingress is not None:
            frame.ingress.release(frame.size_bytes)
            frame.ingress = None

    def _start(self) -> None:
        if self._priority:
            frame = self._priority.popleft()
        elif self._data and not self.paused:
            frame = self._data.popleft()
            self.queued_bytes -= frame.size_bytes
            if self.attribution is not None:
                entry = self._account(frame.tag)
                self._queue_change(entry, -frame.size_bytes)
                entry[1] += frame.size_bytes
            if frame.ingress is not None:
                frame.ingress.release(frame.size_bytes)
                frame.ingress = None
            marker = self.marker
            if self.mark_on_arrival:
                marked = frame.marked_here
                frame.marked_here = False
            else:
                # On departure, on the queue left behind, as the HPCC ns-3 switch does: the
                # mark then reaches the receiver without waiting behind the queue it reports.
                marked = (
                    marker is not None
                    and frame.ecn in ECT
                    and marker.should_mark(self.queued_bytes)
                )
                if marked:
                    self._mark(frame)
            if self.on_tx is not None:
                self.on_tx(frame, marked)
        else:
            return  # paused with only data queued: the resume restarts it
        self.busy = True
        sim = self.sim
        done = sim.now + frame.size_bytes * 8 / self.rate_bps
        self.tx_frames += 1
        self.tx_bytes += frame.size_bytes
        if self.loss_probability and self._rng.random() < self.loss_probability:
            self._lose(frame)
            sim.at(done, self._done)
        elif self.delay_s:
            sim.at(done, self._done)
            sim.at(done + self.delay_s, self._deliver, frame)
        else:  # no propagation delay: one event ends the frame and hands it over
            sim.at(done, self._done_deliver, frame)

    def _done_deliver(self, frame: Frame) -> None:
        self._done()
        self._deliver(frame)

    def _deliver(self, frame: Frame) -> None:
        if not self.up:
            self._lose(frame)  # on the wire when the cable went down
            return
        assert self.peer is not None
        self.peer.receive(frame, self)

    def _lose(self, frame: Frame) -> None:
        """A frame sent (in tx_bytes) that never reaches the far end."""
        self.losses += 1
        self.lost_bytes += frame.size_bytes

    def _done(self) -> None:
        self.busy = False
        if self._priority or (self._data and not self.paused):
            self._start()
        elif self.on_idle is not None and not self.paused:
            self.on_idle()

    # -- PFC ------------------------------------------------------------------------------
    def signal_pause(self, pause: bool) -> None:
        """The far end's ingress crossed XOFF (pause) or XON (resume): its PFC frame reaches
        this port after the frame's own time on the link and the propagation delay."""
        delay = PFC_FRAME_WIRE_BYTES * 8 / self.rate_bps + self.delay_s
        self.sim.at(self.sim.now + delay, self._set_paused, pause)

    def _set_paused(self, pause: bool) -> None:
        now = self.sim.now
        if pause:
            self.pause_frames += 1
            if not self.paused:
                self.paused = True
                self._paused_since = now
            return
        self.resume_frames += 1
        if self.paused:
            self.paused = False
            self.paused_s += now - self._paused_since
            if not self.busy:
                if self._data or self._priority:
                    self._start()
                elif self.on_idle is not None:
                    self.on_idle()

    def paused_s_until(self, now: float) -> float:
        """Total paused time, the pause in progress included."""
        return self.paused_s + (now - self._paused_since if self.paused else 0.0)

    # -- link events ----------------------------------------------------------------------
    def set_up(self, up: bool) -> None:
        """Cable up or down: going down loses what is queued (as an interface going down
        flushes its qdisc) and what is on the wire."""
        if up == self.up:
            return
        self.up = up
        if up:
            return
        for frame in (*self._priority, *self._data):
            self._drop(frame)
        self._priority.clear()
        self._data.clear()
        self.queued_bytes = 0
        for entry in (self.attribution or {}).values():
            self._queue_change(entry, -entry[0])


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


__all__ = ["PFC_FRAME_WIRE_BYTES", "Frame", "Node", "PfcIngress", "Port", "SharedBuffer"]
