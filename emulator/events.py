"""What the engine and the samplers report to the collectors: frozen event dataclasses.

Every time is in the TARGET timescale: seconds since the run's start, already divided by the time
dilation factor, so a collector never needs to know the TDF to compute a duration or a rate. Byte
counts are unchanged by time dilation. Counters in samples are cumulative readings (the collector
takes differences); per-flow counts in FlowProgress/FlowFinished are cumulative since the flow
started, so a progress event repeated or lost never double-counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

Direction = Literal["tx", "rx"]


@dataclass(frozen=True, slots=True)
class FlowStarted:
    """The flow's first byte was handed to its queue pair (all its dependencies were met)."""

    flow_id: int
    time_s: float


@dataclass(frozen=True, slots=True)
class FlowProgress:
    """A live snapshot of an unfinished flow, cumulative since it started (optional; lets the live
    counters move during long flows instead of jumping when they finish)."""

    flow_id: int
    time_s: float
    packets: int = 0
    retransmitted_packets: int = 0
    ce_marks: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0


@dataclass(frozen=True, slots=True)
class FlowFinished:
    """The receiver has every byte of the flow and the sender saw it acknowledged.

    packets: data packets sent (first transmissions and retransmissions); ce_marks: CE-marked data
    packets the receiver got; cnps_sent: CNPs the receiver (notification point) sent for this flow's
    QP; cnps_received: CNPs the sender (reaction point) got. engine_delay_s: time the engine itself put into
    the flow's FCT (target seconds): how long its last byte and its last ACK waited in their
    sockets before the receiving and the sending worker read them (or how far behind their
    schedules the workers were then, if longer), plus the pacing credit its
    queue pair or its NIC lost while it had a packet due (late ticks); None where no engine ran
    (a simulation). reordered_packets: its data packets that arrived after one with a higher
    PSN (RFC 4737; emulator.transport.receiver), counted at the receiver between the previous
    message's completion on its QP and this one's; None where not measured.
    """

    flow_id: int
    time_s: float
    packets: int = 0
    retransmitted_packets: int = 0
    ce_marks: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    engine_delay_s: float | None = None
    reordered_packets: int | None = None


@dataclass(frozen=True, slots=True)
class CollectiveMemberStarted:
    """A rank reached a collective in its trace (optional: without it a collective starts with
    its first flow)."""

    collective_id: int
    rank: int
    time_s: float


@dataclass(frozen=True, slots=True)
class CollectiveMemberFinished:
    """A rank completed its part of a collective (optional: without it a collective ends with its
    last flow)."""

    collective_id: int
    rank: int
    time_s: float


@dataclass(frozen=True, slots=True)
class RateSample:
    """The DCQCN current rate of one queue pair, in target bits per second."""

    time_s: float
    rank: int
    qp: int
    rate_bps: float


@dataclass(frozen=True, slots=True)
class NicSample:
    """A cumulative byte-counter reading of one rank's interface in one direction."""

    time_s: float
    rank: int
    direction: Direction
    bytes: int


@dataclass(frozen=True, slots=True)
class PortSample:
    """Cumulative counters and the instantaneous queue of one switch egress port.

    line_rate_bps (target timescale) is the port's rate for the utilization; None uses the
    recorder's default line rate.
    """

    time_s: float
    switch: str
    port: str
    tx_bytes: int
    tx_packets: int
    ecn_marks: int
    drops: int
    queue_bytes: int
    line_rate_bps: float | None = None
    # PFC-equivalent: cumulative target seconds the queue was at or above the port's XOFF
    # threshold (a PFC fabric would have paused the upstream then) and the crossings; None when
    # the fabric cannot tell
    pause_s: float | None = None
    pause_events: int | None = None


@dataclass(frozen=True, eq=False)
class NicSamples:
    """Every NIC counter of a run read at one instant, as columns (NicSample for each entry of
    `nics`, the same tuple object at every sample of a run): cumulative `bytes` (int64)."""

    time_s: float
    nics: tuple[tuple[int, Direction], ...]  # (rank, direction)
    bytes: np.ndarray


@dataclass(frozen=True, eq=False)
class PortSamples:
    """Every port of a fabric read at one instant, as columns: what one PortSample per port
    says, for a simulated-time backend that reads thousands of ports every sample interval (a
    1,024-rank Clos has 8,192 egress ports: one event, not 8,192).

    `ports` is each entry's (switch, port), the same tuple object at every sample of a run (the
    collectors keep each port's previous reading by it); the arrays are aligned with it:
    cumulative tx_bytes, tx_packets, ecn_marks, drops and pause_events (int64), queue_bytes
    (int64, instantaneous), line_rate_bps and pause_s (float64); pause_s and pause_events are
    None when the fabric cannot tell.
    """

    time_s: float
    ports: tuple[tuple[str, str], ...]
    tx_bytes: np.ndarray
    tx_packets: np.ndarray
    ecn_marks: np.ndarray
    drops: np.ndarray
    queue_bytes: np.ndarray
    line_rate_bps: np.ndarray
    pause_s: np.ndarray | None = None
    pause_events: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Share of the machine's CPU time that was busy (not idle or waiting for I/O) over the
    interval ending at time_s, across all cores: 0..1."""

    time_s: float
    busy_ratio: float
    server: str = ""  # a run over a cluster: which server ("driver": the coordinator's)


@dataclass(frozen=True, slots=True)
class PortAttribution:
    """Whose traffic one switch egress port holds and sends, per collective instance, from a
    backend that tags every packet (the simulator), over the sample window of `interval_s`
    ending at time_s: (instance, queue bytes now, and bytes sent, ECN marks, drops and the
    queue's byte-seconds (its queued bytes integrated over the window) in the window);
    `marked_flows`: the flow of each packet marked in it (a flow once per mark);
    `paused_s`: how long PFC paused the port's data queue in the window. A port with nothing
    queued and nothing counted sends no sample for the window."""

    time_s: float
    interval_s: float
    switch: str
    port: str
    by_instance: tuple[tuple[int, int, int, int, int, float], ...]
    marked_flows: tuple[int, ...] = ()
    paused_s: float = 0.0  # the port's time paused by PFC in the window


@dataclass(frozen=True, slots=True)
class ClassCounts:
    """One attribution class's cumulative counters at one switch port (PortClassSample)."""

    attribution_class: int  # 0..63 (0: untagged)
    name: str  # what the class is (a collective type; UNTAGGED, OTHER)
    bytes: int
    packets: int
    ecn_marks: int
    drops: int  # the marker's phantom-queue overflows
    queue_byte_s: float  # bytes x target seconds its packets held the queue (see below)
    pause_s: float | None = None  # target seconds at or above XOFF charged to it
    pause_events: int | None = None  # rises to XOFF its packets made


@dataclass(frozen=True, slots=True)
class PortClassSample:
    """What a backend that counts by attribution class measured at one switch egress port (the
    emulated fabric: its eBPF marker reads the class the engine writes into each data packet's
    BTH reserved bits, emulator/planning/attribution.py), cumulative since the port's marker was
    attached, per class with anything counted. The classes sum to the port's counters. The
    queue byte-time is each packet's time in the phantom FIFO times its bytes, charged when it
    arrives (fabrics/ecn/phantom_marker.c): exact for the marker's queue, shifted in time by at
    most the queueing delay. Class-level only: which instance is not on the wire."""

    time_s: float
    switch: str
    port: str
    by_class: tuple[ClassCounts, ...]


RunEvent = (
    FlowStarted
    | FlowProgress
    | FlowFinished
    | CollectiveMemberStarted
    | CollectiveMemberFinished
    | RateSample
    | NicSample
    | NicSamples
    | PortSample
    | PortSamples
    | PortAttribution
    | PortClassSample
    | CpuSample
)
