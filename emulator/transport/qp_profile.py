"""How a queue pair sends where it differs from the transport section (a traffic pattern's QPs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QpProfile:
    """How a queue pair sends where it differs from the transport section (a traffic pattern's
    QPs): its data DSCP, a cap on its rate (target time), its congestion control, its path MTU,
    its verb (SEND or RDMA WRITE: the data packets' opcodes).
    A flow names its profile by index; profile 0 is always the transport's own."""

    dscp: int | None = None
    max_rate_bps: float | None = None
    congestion_control: str | None = None
    path_mtu_bytes: int | None = None
    verb: str = "send"


DEFAULT_PROFILE = QpProfile()
