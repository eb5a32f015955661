"""The scenario's `streams:` section: stateless packet streams (a tester's plain flows).

Kept free of heavy imports: the scenario loader reads it. The sending and counting are the
transport's (emulator.transport.stream); each backend moves the datagrams.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.config import param
from emulator.errors import ScenarioError
from emulator.transport.packets import ROCEV2_UDP_PORT
from emulator.transport.stream import (
    ETHERNET_HEADER_FCS_BYTES,
    MIN_FRAME_BYTES,
    PREAMBLE_GAP_BYTES,
    StreamSource,
    frame_interval_s,
    packets_for,
)

# Frames still on their way this long (target time) after the streams could all have been
# delivered (streams_end_s) count as lost: the run holds that long before it stops counting.
DRAIN_S = 1e-3


@dataclass(frozen=True)
class StreamSpec:
    """IPv4/UDP datagrams from one rank to another at a fixed rate, with no acknowledgement,
    retransmission or congestion control (OTG's plain flows, as the sonic-mgmt PFC and ECN
    tests send them): counted at the receiver for loss, reordering, ECN CE marks and latency."""

    name: str = param(doc="the stream's name (summary.json streams)")
    src: int = param(doc="the sending rank", min=0)
    dst: int = param(doc="the receiving rank", min=0)
    frame_bytes: int = param(
        1024,
        doc="Ethernet frame size with its FCS, as a tester counts it (UDP payload: 46 less)",
        unit="B",
        min=MIN_FRAME_BYTES,
        max=9216,
    )
    dscp: int = param(0, doc="DSCP of every datagram", min=0, max=63)
    ecn: int = param(
        0, doc="ECN field of every datagram: 0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE", min=0, max=3
    )
    udp_sport: int = param(49152, doc="UDP source port of the first datagram", min=1, max=65535)
    udp_sport_step: int = param(
        1, doc="added to the source port from one datagram to the next (cycling)", min=0
    )
    udp_sport_count: int = param(
        1,
        doc="source ports the datagrams cycle over (OTG's increment count)",
        min=1,
        max=1024,
    )
    udp_dport: int = param(5000, doc="UDP destination port", min=1, max=65535)
    rate_percent: float | None = param(
        None,
        doc="rate in percent of the sender's line rate, preamble and gap included (or rate_pps)",
        unit="%",
        min=0.0,
        max=100.0,
        min_exclusive=True,
    )
    rate_pps: float | None = param(
        None,
        doc="frames per second of target time (or rate_percent)",
        unit="1/s",
        min=0.0,
        min_exclusive=True,
    )
    packets: int | None = param(None, doc="frames to send (or duration_us)", min=1)
    duration_us: float | None = param(
        None,
        doc="send for this long (target time; or packets)",
        unit="us",
        min=0.0,
        min_exclusive=True,
    )
    start_us: float = param(0.0, doc="first frame, after the run's start", unit="us", min=0.0)

    def __post_init__(self) -> None:
        if (self.rate_percent is None) == (self.rate_pps is None):
            raise ValueError("rate_percent: give exactly one of rate_percent and rate_pps")
        if (self.packets is None) == (self.duration_us is None):
            raise ValueError("packets: give exactly one of packets and duration_us")
        if self.src == self.dst:
            raise ValueError(f"dst: the stream sends from rank {self.src} to itself")
        if self.udp_dport == ROCEV2_UDP_PORT:
            raise ValueError(
                f"udp_dport: {ROCEV2_UDP_PORT} is RoCEv2's port, where the queue pairs receive"
            )
        top = self.udp_sport + self.udp_sport_step * (self.udp_sport_count - 1)
        if top > 65535:
            raise ValueError(f"udp_sport_count: the source ports run past 65535 (to {top})")

    @property
    def sports(self) -> tuple[int, ...]:
        return tuple(self.udp_sport + i * self.udp_sport_step for i in range(self.udp_sport_count))

    def interval_s(self, line_rate_bps: float) -> float:
        if self.rate_pps is not None:
            return 1.0 / self.rate_pps
        assert self.rate_percent is not None
        return frame_interval_s(self.frame_bytes, line_rate_bps * self.rate_percent / 100)

    def source(self, index: int, line_rate_bps: float) -> StreamSource:
        interval = self.interval_s(line_rate_bps)
        if self.packets is not None:
            packets = self.packets
        else:
            assert self.duration_us is not None
            packets = packets_for(self.duration_us * 1e-6, interval)
        return StreamSource(
            index, self.frame_bytes, interval, self.start_us * 1e-6, packets, self.sports
        )


def streams_end_s(streams: tuple[StreamSpec, ...], line_rate_bps: float) -> float:
    """When the run may stop counting the streams: the last frame due, or the time every frame
    sent to one receiver takes through its link at line rate from the first one's start (an
    incast queues: a lossless fabric delivers it all by then), whichever is later; then DRAIN_S."""
    if not streams:
        return 0.0
    ends = []
    into: dict[int, list[float]] = {}  # receiver -> [first start, wire bits]
    for i, spec in enumerate(streams):
        source = spec.source(i, line_rate_bps)
        ends.append(source.end_s)
        bits = source.packets * (spec.frame_bytes + PREAMBLE_GAP_BYTES) * 8
        entry = into.setdefault(spec.dst, [source.start_s, 0.0])
        entry[0] = min(entry[0], source.start_s)
        entry[1] += bits
    ends += [start + bits / line_rate_bps for start, bits in into.values()]
    return max(ends) + DRAIN_S


def check_streams(
    streams: tuple[StreamSpec, ...], ranks: int, mtu_bytes: int | None, where: object
) -> None:
    """Each stream's ranks on the fabric and its frames within the fabric's MTU (ScenarioError
    naming the key)."""
    for i, s in enumerate(streams):
        for key in ("src", "dst"):
            rank = getattr(s, key)
            if rank >= ranks:
                raise ScenarioError(
                    f"{where}: streams[{i}].{key}: rank {rank} is not on the fabric "
                    f"(ranks 0..{ranks - 1})"
                )
        if mtu_bytes is not None and s.frame_bytes - ETHERNET_HEADER_FCS_BYTES > mtu_bytes:
            raise ScenarioError(
                f"{where}: streams[{i}].frame_bytes: {s.frame_bytes} is more than the fabric's "
                f"MTU of {mtu_bytes} bytes carries ({mtu_bytes + ETHERNET_HEADER_FCS_BYTES} with "
                "the Ethernet header and FCS)"
            )
