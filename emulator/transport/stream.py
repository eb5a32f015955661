"""Stateless packet streams: a hardware tester's plain flows (OTG `flows`), sans-I/O.

A stream sends IPv4/UDP datagrams of one size at a fixed rate, with no acknowledgement, no
retransmission and no congestion control: what a tester offers a switch to see what it drops,
marks and pauses. Each datagram's payload starts with a signature, as a tester's instrumentation
does, so the receiving side can count per stream, see gaps and reordering, and take the latency:

    magic (2 bytes, 0xE7 0x5A) | stream index (2) | sequence number (4) | send time (8, ns)

all big-endian, zero padding after it. The send time is the sender's clock at the datagram's
handoff (target time on the emulated fabric). A datagram that does not carry the signature, or
names an unknown stream, is counted as malformed and dropped.

Sizes follow the tester's convention: `frame_bytes` is the Ethernet frame with its FCS (64 at
least), so the UDP payload is frame_bytes - 18 - 20 - 8, and a rate in percent of line rate
counts the 20 bytes of preamble and inter-frame gap each frame also takes on the wire.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from emulator.transport.packets import IPV4_HEADER_BYTES, UDP_HEADER_BYTES

MAGIC = 0xE75A
_STAMP = struct.Struct("!HHIQ")
STAMP_BYTES = _STAMP.size  # 16
ETHERNET_HEADER_FCS_BYTES = 14 + 4
PREAMBLE_GAP_BYTES = 8 + 12
MIN_FRAME_BYTES = 64
FRAME_TO_UDP_PAYLOAD = ETHERNET_HEADER_FCS_BYTES + IPV4_HEADER_BYTES + UDP_HEADER_BYTES  # 46


def udp_payload_bytes(frame_bytes: int) -> int:
    return frame_bytes - FRAME_TO_UDP_PAYLOAD


def frame_interval_s(frame_bytes: int, rate_bps: float) -> float:
    """Seconds between frames sent at `rate_bps` of the wire (preamble and gap included)."""
    return (frame_bytes + PREAMBLE_GAP_BYTES) * 8 / rate_bps


def stamp(index: int, seq: int, now_s: float) -> bytes:
    """A datagram's signature: the first STAMP_BYTES of its payload (zeros follow)."""
    return _STAMP.pack(MAGIC, index, seq & 0xFFFFFFFF, max(0, round(now_s * 1e9)))


@dataclass
class StreamSource:
    """Releases a stream's datagrams on its schedule: `packets` of them, one every
    `interval_s` from `start_s`, the UDP source port cycling over `sports`."""

    index: int
    frame_bytes: int
    interval_s: float
    start_s: float
    packets: int
    sports: tuple[int, ...]
    sent: int = 0
    # a datagram leaving later than this after its due time counts as late: a burst of the
    # stream's frames that long is what a hardware tester's pacing never sends
    late_limit_s: float = 10e-6
    late_s_max: float = 0.0  # the most a datagram left after its due time
    late_packets: int = 0  # datagrams that left more than late_limit_s late
    first_tx_s: float | None = None
    last_tx_s: float | None = None

    def __post_init__(self) -> None:
        if udp_payload_bytes(self.frame_bytes) < STAMP_BYTES:
            raise ValueError(f"a frame of {self.frame_bytes} bytes cannot hold the signature")
        self.payload_bytes = udp_payload_bytes(self.frame_bytes)

    @property
    def done(self) -> bool:
        return self.sent >= self.packets

    def next_due_s(self) -> float | None:
        """When the next datagram is due (None: all sent)."""
        if self.done:
            return None
        return self.start_s + self.sent * self.interval_s

    @property
    def end_s(self) -> float:
        """When the last datagram is due."""
        return self.start_s + max(0, self.packets - 1) * self.interval_s

    def poll(self, now_s: float, limit: int = 1 << 30) -> list[tuple[int, bytes]]:
        """Every datagram due by `now_s` (at most `limit`): (UDP source port, signature),
        stamped with `now_s`; the payload is the signature and `payload_bytes` in all."""
        out: list[tuple[int, bytes]] = []
        while len(out) < limit and not self.done:
            due = self.start_s + self.sent * self.interval_s
            if due > now_s + 1e-12:
                break
            late = now_s - due
            if late > self.late_s_max:
                self.late_s_max = late
            if late > self.late_limit_s:
                self.late_packets += 1
            seq = self.sent
            out.append((self.sports[seq % len(self.sports)], stamp(self.index, seq, now_s)))
            self.sent += 1
            if self.first_tx_s is None:
                self.first_tx_s = now_s
            self.last_tx_s = now_s
        return out


@dataclass
class StreamTally:
    """What arrived of one stream."""

    frames: int = 0
    bytes: int = 0  # Ethernet frame bytes (the tester's count), FCS included
    ce: int = 0
    out_of_order: int = 0  # arrived with a sequence number below one already seen
    next_seq: int = 0  # one past the highest sequence number seen
    latency_ns_min: int | None = None
    latency_ns_max: int = 0
    latency_ns_sum: int = 0
    first_rx_s: float | None = None
    last_rx_s: float | None = None


@dataclass
class StreamSink:
    """Counts the streams arriving at one receiver (sans-I/O: the caller passes the time and
    the ECN field it read)."""

    streams: frozenset[int]
    tallies: dict[int, StreamTally] = field(default_factory=dict)
    malformed: int = 0

    def on_datagram(
        self, now_s: float, payload: bytes | memoryview, ecn: int, length: int | None = None
    ) -> None:
        """A datagram whose UDP payload starts with `payload` and is `length` bytes long (by
        default, all of `payload`)."""
        if length is None:
            length = len(payload)
        if len(payload) < STAMP_BYTES or length < STAMP_BYTES:
            self.malformed += 1
            return
        magic, index, seq, sent_ns = _STAMP.unpack_from(payload, 0)
        if magic != MAGIC or index not in self.streams:
            self.malformed += 1
            return
        t = self.tallies.get(index)
        if t is None:
            t = self.tallies[index] = StreamTally()
        t.frames += 1
        t.bytes += length + FRAME_TO_UDP_PAYLOAD
        if ecn == 3:
            t.ce += 1
        if seq < t.next_seq:
            t.out_of_order += 1
        else:
            t.next_seq = seq + 1
        latency = max(0, round(now_s * 1e9) - sent_ns)
        t.latency_ns_sum += latency
        if t.latency_ns_min is None or latency < t.latency_ns_min:
            t.latency_ns_min = latency
        if latency > t.latency_ns_max:
            t.latency_ns_max = latency
        if t.first_rx_s is None:
            t.first_rx_s = now_s
        t.last_rx_s = now_s


def stream_result(name: str, source: StreamSource, tally: StreamTally | None) -> dict[str, object]:
    """A stream's row in summary.json "streams" (times in microseconds of the run's clock)."""
    t = tally or StreamTally()
    tx_span = _span(source.first_tx_s, source.last_tx_s)
    rx_span = _span(t.first_rx_s, t.last_rx_s)
    lost = max(0, source.sent - t.frames)
    return {
        "name": name,
        "frames_tx": source.sent,
        "frames_rx": t.frames,
        "bytes_tx": source.sent * source.frame_bytes,
        "bytes_rx": t.bytes,
        "frames_lost": lost,
        "loss_percent": 100.0 * lost / source.sent if source.sent else 0.0,
        "out_of_order": t.out_of_order,
        "ce_rx": t.ce,
        "latency_ns": {
            "min": t.latency_ns_min,
            "max": t.latency_ns_max if t.frames else None,
            "avg": t.latency_ns_sum / t.frames if t.frames else None,
        },
        # frames over the time from the first to the last one (each side's own)
        "tx_rate_bps": _rate(source.sent, source.frame_bytes, tx_span),
        "rx_rate_bps": _rate(t.frames, source.frame_bytes, rx_span),
        "first_tx_us": _us(source.first_tx_s),
        "last_tx_us": _us(source.last_tx_s),
        "first_rx_us": _us(t.first_rx_s),
        "last_rx_us": _us(t.last_rx_s),
        "late_tx_packets": source.late_packets,
        "late_tx_us_max": source.late_s_max * 1e6,
        "late_limit_us": source.late_limit_s * 1e6,
    }


def _span(first: float | None, last: float | None) -> float | None:
    return None if first is None or last is None or last <= first else last - first


def _rate(frames: int, frame_bytes: int, span_s: float | None) -> float | None:
    """Wire rate (preamble and gap included) of `frames` spread over `span_s`: n frames span
    n - 1 intervals."""
    if span_s is None or frames < 2:
        return None
    return (frames - 1) * (frame_bytes + PREAMBLE_GAP_BYTES) * 8 / span_s


def _us(t: float | None) -> float | None:
    return None if t is None else t * 1e6


@dataclass(frozen=True, slots=True)
class StreamDatagram:
    """A stream's datagram as the simulator carries it without real bytes: its signature and
    the UDP payload's length."""

    head: bytes
    payload_bytes: int

    @property
    def udp_payload_bytes(self) -> int:
        return self.payload_bytes


def packets_for(duration_s: float, interval_s: float) -> int:
    """Datagrams a stream sends in `duration_s` (the first at 0)."""
    return max(1, math.floor(duration_s / interval_s + 1e-9))
