"""The tester's per-QP counters: each queue pair's two halves (sender and receiver) in one row.

A switch tester reports, per QP, what left and what arrived: data packets and bytes, loss
(packets sent, retransmissions included, that never reached the receiver), sequence errors,
ACKs and NAKs each way, ECN-CE marks received, CNPs each way and retransmissions. The engine's
workers keep the counters in the transport's queue pairs and hand them over once, at the end
(see emulator.engine.counters.Counters.queue_pairs); this module only joins and sums them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from emulator.latency import LatencyHistogram
from emulator.transport.qp_counters import RECV_QP_COLUMNS, SEND_QP_COLUMNS

ConnectionKey = tuple[int, int, int, int]  # (src rank, dst rank, QP index, UDP source port)


@dataclass(frozen=True, slots=True)
class QpRow:
    src_rank: int
    dst_rank: int
    qp: int  # the QP's index among the pair's QPs
    udp_sport: int
    qpn: int
    dscp: int
    data_packets_sent: int
    data_bytes_acked: int
    packets_retransmitted: int
    acks_received: int
    naks_received: int
    cnps_received: int
    data_packets_received: int
    data_bytes_received: int
    sequence_errors: int  # packets past a gap (each run of them draws one NAK)
    duplicates: int
    acks_sent: int
    naks_sent: int
    ce_received: int
    cnps_sent: int
    lost_packets: int  # sent (retransmissions too) but never received
    # selective repeat and reordering (emulator.transport.receiver: RFC 4737's definition)
    sacks_received: int = 0
    sacks_sent: int = 0
    held_out_of_order: int = 0  # data packets the receiver kept ahead of a gap (selective)
    reordered_packets: int = 0  # arrived after one with a higher PSN
    reorder_extent_sum: int = 0  # how far below the highest PSN seen, summed over them
    reorder_extent_max: int = 0
    pattern: str = ""  # the traffic pattern the QP belongs to ("" for a trace's QPs)
    job: str = ""  # the scenario's job whose rank sends on it ("" for a traffic pattern's QPs)
    # one-way latency of its data packets, target timescale (None: none measured)
    latency_packets: int = 0
    latency_avg_us: float | None = None
    latency_p50_us: float | None = None
    latency_p99_us: float | None = None
    latency_max_us: float | None = None


COUNTER_COLUMNS = tuple(
    f.name
    for f in fields(QpRow)
    if f.name not in ("src_rank", "dst_rank", "qp", "udp_sport", "pattern", "job")
    and not f.name.startswith("latency_")
)
# the largest over queue pairs, not a sum
MAXED = ("reorder_extent_max",)
SUMMED = tuple(c for c in COUNTER_COLUMNS if c not in ("qpn", "dscp", *MAXED))


def qp_rows(
    connections: Mapping[ConnectionKey, int],
    send_qps: Mapping[int, Sequence[int]],
    recv_qps: Mapping[int, Sequence[int]],
    latency: Mapping[int, LatencyHistogram] | None = None,
) -> list[QpRow]:
    """One row per connection (QP number = connection id + 1) that has either half; a half
    that never opened (no packet arrived) counts zeros. `latency`: per QP number."""
    rows = []
    for key, conn_id in sorted(connections.items(), key=lambda kv: kv[1]):
        qpn = conn_id + 1
        sent = send_qps.get(qpn)
        got = recv_qps.get(qpn)
        if sent is None and got is None:
            continue
        s: dict[str, Any] = dict(
            zip(SEND_QP_COLUMNS, sent or [0] * len(SEND_QP_COLUMNS), strict=True)
        )
        r: dict[str, Any] = dict(
            zip(RECV_QP_COLUMNS, got or [0] * len(RECV_QP_COLUMNS), strict=True)
        )
        src, dst, qp, sport = key
        measured = (latency or {}).get(qpn)
        lat = measured.summary_us() if measured is not None else None
        rows.append(
            QpRow(
                src_rank=src,
                dst_rank=dst,
                qp=qp,
                udp_sport=sport,
                qpn=qpn,
                **s,
                **r,
                lost_packets=max(0, s["data_packets_sent"] - r["data_packets_received"]),
                latency_packets=lat.packets if lat else 0,
                latency_avg_us=lat.avg_us if lat else None,
                latency_p50_us=lat.p50_us if lat else None,
                latency_p99_us=lat.p99_us if lat else None,
                latency_max_us=lat.max_us if lat else None,
            )
        )
    return rows


def rank_totals(rows: Iterable[QpRow]) -> dict[str, dict[str, int]]:
    """Per rank: the counters of its QPs, each on the side it happens (what a rank sent as a
    sender, what it received as a receiver, and the replies each way)."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        values = asdict(row)
        for rank, side in ((row.src_rank, SEND_QP_COLUMNS), (row.dst_rank, RECV_QP_COLUMNS)):
            totals = out.setdefault(str(rank), dict.fromkeys(SUMMED, 0))
            for name in side:
                if name in totals:
                    totals[name] += values[name]
        out[str(row.src_rank)]["lost_packets"] += row.lost_packets
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def totals(rows: Iterable[QpRow]) -> dict[str, Any]:
    """The run's totals of every counter, and how many QPs carried data."""
    out: dict[str, Any] = dict.fromkeys(SUMMED + MAXED, 0)
    n = 0
    for row in rows:
        n += 1
        for name in SUMMED:
            out[name] += getattr(row, name)
        for name in MAXED:
            out[name] = max(out[name], getattr(row, name))
    out["queue_pairs"] = n
    return out
