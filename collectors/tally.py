"""Glue for the engine: per-flow congestion counts accumulated from transport events, and the
wall-clock to target-time conversion, so what reaches the recorder is FlowProgress/FlowFinished
in the target timescale.

The engine maps each transport event (emulator.transport.events: CnpSent on the receiver's QP,
CnpReceived and Retransmitted on the sender's, CE marks seen by the notification point) to the
flow active on that QP and calls the matching method here; it knows that mapping, the
collectors do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.events import FlowFinished, FlowProgress

# Index of each count in a tally, in FlowFinished's field order.
PACKETS, RETRANSMITTED, CE_MARKS, CNPS_SENT, CNPS_RECEIVED = range(5)


@dataclass(frozen=True)
class TargetClock:
    """Target time = (wall-clock time - run start) / TDF (DESIGN.md "Time dilation")."""

    start_wall_s: float
    tdf: float

    def __post_init__(self) -> None:
        if self.tdf < 1.0:
            raise ValueError(f"tdf: must be at least 1, got {self.tdf}")

    def target_s(self, wall_s: float) -> float:
        return (wall_s - self.start_wall_s) / self.tdf


class FlowTally:
    """Counts per unfinished flow; finished() hands out the totals and forgets the flow."""

    def __init__(self) -> None:
        self._counts: dict[int, list[int]] = {}

    def _of(self, flow_id: int) -> list[int]:
        counts = self._counts.get(flow_id)
        if counts is None:
            counts = self._counts[flow_id] = [0, 0, 0, 0, 0]
        return counts

    def add(self, flow_id: int, index: int, n: int = 1) -> None:
        self._of(flow_id)[index] += n

    def packets_sent(self, flow_id: int, n: int = 1) -> None:
        self.add(flow_id, PACKETS, n)

    def retransmitted(self, flow_id: int, n: int) -> None:
        """Go-back-N resent n packets (they also count as packets sent)."""
        self.add(flow_id, RETRANSMITTED, n)
        self.add(flow_id, PACKETS, n)

    def ce_marked(self, flow_id: int, n: int = 1) -> None:
        self.add(flow_id, CE_MARKS, n)

    def cnp_sent(self, flow_id: int) -> None:
        self.add(flow_id, CNPS_SENT)

    def cnp_received(self, flow_id: int) -> None:
        self.add(flow_id, CNPS_RECEIVED)

    def progress(self, flow_id: int, time_s: float) -> FlowProgress:
        return FlowProgress(flow_id, time_s, *self._of(flow_id))

    def finished(self, flow_id: int, time_s: float) -> FlowFinished:
        counts = self._counts.pop(flow_id, [0, 0, 0, 0, 0])
        return FlowFinished(flow_id, time_s, *counts)

    def active(self) -> list[int]:
        return sorted(self._counts)
