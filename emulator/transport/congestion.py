"""Congestion-control registry: per-QP rate controllers behind one small interface.

Modelled on aioquic's quic/congestion/ (controllers with on_* hooks, looked up by name), so a
scenario names its controller and later work adds one without touching the queue pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from emulator.transport.dcqcn import ReactionPoint

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


CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    cls.name: cls for cls in (DcqcnControl, LineRateControl)
}


def create_congestion_control(
    params: TransportParams, *, line_rate_bps: float
) -> CongestionControl:
    """The controller the parameters name (TransportParams already checked the name)."""
    return CONGESTION_CONTROLS[params.congestion_control](params, line_rate_bps=line_rate_bps)
