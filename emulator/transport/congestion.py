"""Congestion-control registry: per-QP rate controllers behind one small interface.

Modelled on aioquic's quic/congestion/ (controllers with on_* hooks, looked up by name), so a
scenario names its controller and later work adds one without touching the queue pairs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from emulator.transport.dcqcn import NO_BYTE_BUDGET, ReactionPoint

if TYPE_CHECKING:
    from emulator.transport.params import TransportParams


class CongestionControl:
    """A QP's sending-rate controller. Hooks return True when the rate changed."""

    name: ClassVar[str] = ""

    def __init__(self, params: TransportParams, *, line_rate_bps: float) -> None:
        self.line_rate_bps = float(line_rate_bps)

    @property
    def rate_bps(self) -> float:
        return self.line_rate_bps

    @property
    def target_rate_bps(self) -> float:
        return self.line_rate_bps

    @property
    def reason(self) -> str:
        return ""

    def on_packet_sent(self, *, now: float, size_bytes: int) -> bool:
        return False

    def on_cnp(self, *, now: float) -> bool:
        return False

    def on_timer(self, *, now: float) -> bool:
        return False

    def next_deadline_s(self) -> float | None:
        return None

    def quiet(self) -> tuple[float, float, int] | None:
        """(deadline, slack, byte budget): a packet sent at `now` with now + slack < deadline,
        while the bytes sent so (their sizes as on_packet_sent gets them) stay below the budget,
        changes nothing here but what count_quiet_bytes adds (emulator.transport.grant).
        None: this controller cannot say."""
        if type(self).on_packet_sent is CongestionControl.on_packet_sent:
            return math.inf, 0.0, NO_BYTE_BUDGET
        return None

    def count_quiet_bytes(self, size_bytes: int) -> None:
        """Bytes sent inside quiet()'s bounds, all at once."""


class LineRateControl(CongestionControl):
    """No congestion control: always line rate, CNPs ignored."""

    name = "none"


class DcqcnControl(CongestionControl):
    """DCQCN reaction point (see emulator.transport.dcqcn)."""

    name = "dcqcn"

    def __init__(self, params: TransportParams, *, line_rate_bps: float) -> None:
        super().__init__(params, line_rate_bps=line_rate_bps)
        self.reaction_point = ReactionPoint(params.dcqcn, line_rate_bps=line_rate_bps)

    @property
    def rate_bps(self) -> float:
        return self.reaction_point.current_rate_bps

    @property
    def target_rate_bps(self) -> float:
        return self.reaction_point.target_rate_bps

    @property
    def reason(self) -> str:
        return self.reaction_point.last_reason

    def on_packet_sent(self, *, now: float, size_bytes: int) -> bool:
        rp = self.reaction_point
        return rp.active and rp.on_bytes_sent(now=now, size_bytes=size_bytes)

    def on_cnp(self, *, now: float) -> bool:
        return self.reaction_point.on_cnp(now=now)

    def on_timer(self, *, now: float) -> bool:
        return self.reaction_point.on_timer(now=now)

    def next_deadline_s(self) -> float | None:
        return self.reaction_point.next_deadline_s()

    def quiet(self) -> tuple[float, float, int] | None:
        return self.reaction_point.quiet()

    def count_quiet_bytes(self, size_bytes: int) -> None:
        self.reaction_point.count_quiet_bytes(size_bytes)


CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    cls.name: cls for cls in (DcqcnControl, LineRateControl)
}


def create_congestion_control(
    params: TransportParams, *, line_rate_bps: float
) -> CongestionControl:
    """The controller the parameters name (TransportParams already checked the name)."""
    return CONGESTION_CONTROLS[params.congestion_control](params, line_rate_bps=line_rate_bps)
