"""Events the transport core reports: what happened, when, to which QP. Collectors consume them.

Times are the `now` (seconds) the caller passed in; QP numbers are the local QP's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MessagePosted:
    """A message was posted to a send queue (sender side)."""

    qpn: int
    message_id: int
    size_bytes: int
    now_s: float


@dataclass(frozen=True, slots=True)
class FlowCompleted:
    """The last byte of a message was acknowledged (sender side)."""

    qpn: int
    message_id: int
    size_bytes: int
    posted_s: float
    completed_s: float

    @property
    def fct_s(self) -> float:
        return self.completed_s - self.posted_s


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """The last packet of a message was accepted in order (receiver side). `ce_packets`: the
    QP's CE-marked data packets so far, as the message completed (a caller that handles events
    after a whole read would otherwise count the next message's marks into this one)."""

    qpn: int
    message_index: int
    size_bytes: int
    now_s: float
    ce_packets: int = 0


@dataclass(frozen=True, slots=True)
class CnpSent:
    qpn: int
    now_s: float


@dataclass(frozen=True, slots=True)
class CnpReceived:
    qpn: int
    now_s: float


@dataclass(frozen=True, slots=True)
class RateChanged:
    qpn: int
    now_s: float
    current_rate_bps: float
    target_rate_bps: float
    reason: str


@dataclass(frozen=True, slots=True)
class Retransmitted:
    """Go-back-N from `from_psn`: `packets` packets are sent again."""

    qpn: int
    now_s: float
    from_psn: int
    packets: int
    reason: str  # "nak", "timeout" or "sack" (selective: the holes a SACK showed lost)


@dataclass(frozen=True, slots=True)
class PacketDropped:
    """A received packet the transport discarded, with why (see DROP_REASONS)."""

    now_s: float
    reason: str
    qpn: int | None = None


DROP_REASONS = (
    "malformed",
    "unknown_qpn",
    "cnp_unknown_qp",
    "foreign_source",
    "duplicate",
    "out_of_sequence",
    "psn_out_of_window",
    "ack_out_of_window",
)

TransportEvent = (
    MessagePosted
    | FlowCompleted
    | MessageReceived
    | CnpSent
    | CnpReceived
    | RateChanged
    | Retransmitted
    | PacketDropped
)
