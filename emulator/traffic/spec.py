"""The scenario's `traffic:` section: synthetic patterns a switch tester runs (no trace needed).

Kept free of heavy imports: the scenario loader reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from emulator.config import param

PATTERN_KINDS = ("pairs", "incast", "all_to_all")


@dataclass(frozen=True)
class TrafficPattern:
    """Messages between ranks on their own queue pairs: `pairs` (1:1), `incast` (N:1) or
    `all_to_all` (every ordered pair of `ranks`). Each pair has `qps` queue pairs; a QP sends
    `message_bytes` messages one after another (`messages_in_flight` posted at a time) until
    the pair has sent `bytes_per_pair` or `duration_us` has passed."""

    name: str = param(doc="the pattern's name: its process group in the results")
    kind: Literal["pairs", "incast", "all_to_all"] = param(
        doc="pairs: the listed (src, dst) pairs; incast: every sender to one receiver; "
        "all_to_all: every ordered pair of ranks"
    )
    pairs: tuple[tuple[int, ...], ...] = param((), doc="kind pairs: [[src, dst], ...]", min=0)
    senders: tuple[int, ...] = param((), doc="kind incast: the ranks sending", min=0)
    receiver: int | None = param(None, doc="kind incast: the rank they all send to", min=0)
    ranks: tuple[int, ...] = param((), doc="kind all_to_all: the ranks", min=0)
    qps: int = param(
        1, doc="queue pairs per (src, dst) pair, each its own UDP source port", min=1, max=256
    )
    qp_dscp: tuple[int, ...] = param(
        (),
        doc="DSCP of the data of QP 0, 1, ... of each pair (QPs past the list use the last; "
        "default: transport.dscp / transport.qp_dscp)",
        min=0,
        max=63,
    )
    qp_udp_sport: tuple[int, ...] = param(
        (),
        doc="UDP source port of QP 0, 1, ... of each pair (one per QP; a tester's fixed ports, "
        "as OTG's udp_source_port); default: consecutive ports from a hash of the pair",
        min=1,
        max=65535,
    )
    verb: Literal["send", "write"] = param(
        "send", doc="RDMA verb of the messages: SEND or RDMA WRITE (IBTA vol. 1 9.4)"
    )
    message_bytes: int = param(
        1 << 20, doc="bytes per message (a message is one flow in the results)", unit="B", min=1
    )
    path_mtu_bytes: int | None = param(
        None,
        doc="RoCE payload per packet of these QPs (256..4096, at most transport.path_mtu_bytes); "
        "default: transport.path_mtu_bytes",
        unit="B",
    )
    bytes_per_pair: int | None = param(
        None, doc="bytes each (src, dst) pair sends in all; or give duration_us", unit="B", min=1
    )
    duration_us: float | None = param(
        None,
        doc="each pair posts messages until this long after its start (target time); or give "
        "bytes_per_pair",
        unit="us",
        min=0.0,
        min_exclusive=True,
    )
    rate_percent: float = param(
        100.0,
        doc="offered rate of each pair, in percent of the sender's line rate (split evenly over "
        "its QPs); a stateful pair's congestion control never goes above it",
        unit="%",
        min=0.0,
        max=100.0,
        min_exclusive=True,
    )
    rate_mode: Literal["constant", "stateful"] = param(
        "stateful",
        doc="constant: sent at rate_percent whatever the network says (CNPs ignored); stateful: "
        "RC with the congestion control below",
    )
    congestion_control: Literal["dcqcn", "none"] | None = param(
        None, doc="stateful pairs: dcqcn or none (default: transport.congestion_control)"
    )
    messages_in_flight: int = param(
        1,
        doc="messages posted on a QP at a time (1: each message's FCT is its own transfer)",
        min=1,
        max=1024,
    )
    start_us: float = param(
        0.0, doc="when the first pair starts, after the run's start", unit="us", min=0.0
    )
    stagger_us: float = param(
        0.0,
        doc="each further pair (in listed order) starts this much after the previous one",
        unit="us",
        min=0.0,
    )

    def __post_init__(self) -> None:
        if (self.bytes_per_pair is None) == (self.duration_us is None):
            raise ValueError("bytes_per_pair: give exactly one of bytes_per_pair and duration_us")
        if self.qp_udp_sport and len(self.qp_udp_sport) != self.qps:
            raise ValueError(
                f"qp_udp_sport: gives {len(self.qp_udp_sport)} ports for {self.qps} QPs per pair"
            )
        if self.rate_mode == "constant" and self.congestion_control not in (None, "none"):
            raise ValueError(
                "congestion_control: a constant-rate pattern ignores CNPs; use rate_mode stateful"
            )
        if self.path_mtu_bytes is not None and self.path_mtu_bytes not in (
            256,
            512,
            1024,
            2048,
            4096,
        ):
            raise ValueError("path_mtu_bytes: must be one of 256, 512, 1024, 2048, 4096")
        takes = {"pairs": ("pairs",), "incast": ("senders", "receiver"), "all_to_all": ("ranks",)}
        given = {
            "pairs": bool(self.pairs),
            "senders": bool(self.senders),
            "receiver": self.receiver is not None,
            "ranks": bool(self.ranks),
        }
        for key, present in given.items():
            if present and key not in takes[self.kind]:
                allowed = " and ".join(takes[self.kind])
                raise ValueError(f"{key}: not a key of a {self.kind} pattern (it takes {allowed})")
        for i, pair in enumerate(self.pairs):
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(
                    f"pairs: pair {i} is {list(pair)}, expected [src, dst] of two different ranks"
                )
        if self.kind == "incast":
            if self.receiver is None or not self.senders:
                raise ValueError("senders: an incast pattern needs senders and a receiver")
            if self.receiver in self.senders:
                raise ValueError(f"senders: the receiver {self.receiver} cannot send to itself")
        if self.kind == "all_to_all" and len(set(self.ranks)) < 2:
            raise ValueError("ranks: an all_to_all pattern needs at least two different ranks")
        if self.kind == "pairs" and not self.pairs:
            raise ValueError("pairs: a pairs pattern needs at least one [src, dst]")
        flows = self.flow_pairs()
        if len(set(flows)) != len(flows):
            raise ValueError("pairs: a (src, dst) pair appears twice in the pattern")

    def flow_pairs(self) -> list[tuple[int, int]]:
        """The (src, dst) pairs in start order."""
        if self.kind == "pairs":
            return [(p[0], p[1]) for p in self.pairs]
        if self.kind == "incast":
            assert self.receiver is not None
            return [(s, self.receiver) for s in self.senders]
        return [(s, d) for s in self.ranks for d in self.ranks if s != d]

    def dscp_of(self, qp: int) -> int | None:
        if not self.qp_dscp:
            return None
        return self.qp_dscp[min(qp, len(self.qp_dscp) - 1)]

    @property
    def max_rank(self) -> int:
        return max(max(p) for p in self.flow_pairs())
