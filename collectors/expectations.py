"""A switch test's expected results, judged after the run: PASS, FAIL or NOT APPLICABLE each.

A scenario lists what a lab expects of the device under test (the public SONiC RoCEv2 test plan's
pass criteria): no loss, no NAK, ECN-CE seen or not seen, CNPs matching the CE marks, senders'
rates within a bound of each other, traffic spread over the uplinks within a bound, PFC frames
sent and received. Each check is a small function behind a registry, given the run's counters.
A check whose evidence this run cannot produce (PFC counters on an interface that has none, leaf
counters without a Clos) is NOT APPLICABLE with the reason: never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.balance import jain_fairness_index, max_to_mean_ratio
from collectors.queue_pairs import QpRow
from emulator.config import param

Status = Literal["PASS", "FAIL", "NOT APPLICABLE"]
SENDING_LEAF_SHARE = 0.1  # uplink_spread judges leaves sending at least this share of the busiest


@dataclass(frozen=True)
class Expectation:
    """One expected result. `holds: false` expects the opposite (e.g. CE not seen)."""

    check: Literal[
        "no_loss",
        "no_nak",
        "ce_seen",
        "cnps_match_ce",
        "fairness",
        "uplink_spread",
        "link_balance",
        "reordering",
        "pfc_frames_sent",
        "pfc_frames_received",
    ] = param(
        doc="no_loss: no packet lost or retransmitted; no_nak: no NAK either way; ce_seen: "
        "ECN-CE marks arrived; cnps_match_ce: every QP that got CE sent CNPs, none without, "
        "and its sender got them all; fairness: the senders' rates within `within_percent` "
        "of the fastest; uplink_spread: every leaf's uplinks carried within `within_percent` "
        "of its busiest uplink (Clos); link_balance: every sending leaf's uplink loads have a "
        "max-to-mean ratio (MMR) at most `max_mmr` (the BMWG AI-fabric draft's spray and "
        "flowlet criterion; Jain's index reported beside it); reordering: data packets that "
        "arrived after a later one (RFC 4737) at most `within_percent` of those received; "
        "pfc_frames_sent: the run's PFC generators sent frames; "
        "pfc_frames_received: `ranks` received PFC frames (NIC counters: needs a real DUT)"
    )
    holds: bool = param(True, doc="false: the check is expected to fail (e.g. CE not seen)")
    pattern: str | None = param(
        None, doc="judge only this traffic pattern's QPs (default: every QP of the run)"
    )
    within_percent: float | None = param(
        None,
        doc="fairness, uplink_spread, reordering: the bound",
        unit="%",
        min=0.0,
        max=100.0,
    )
    max_mmr: float | None = param(
        None,
        doc="link_balance: the highest max-to-mean ratio of a leaf's uplink loads that passes",
        source="draft-calabria-bmwg-ai-fabric-training-bench: link utilization balance (MMR)",
        min=1.0,
    )
    ranks: tuple[int, ...] = param((), doc="pfc_frames_received: the ranks", min=0)
    needs_pfc: bool = param(
        False,
        doc="the result depends on the switch honouring PFC (e.g. no loss under incast without "
        "DCQCN): not applicable unless every rank's NIC counts PFC frames (a real switch and NIC)",
    )

    def __post_init__(self) -> None:
        if self.check in ("fairness", "uplink_spread", "reordering") and (
            self.within_percent is None
        ):
            raise ValueError(f"within_percent: {self.check} needs a bound")
        if self.check == "link_balance" and self.max_mmr is None:
            raise ValueError("max_mmr: link_balance needs a bound")
        if self.check == "pfc_frames_received" and not self.ranks:
            raise ValueError("ranks: pfc_frames_received needs the ranks that should get frames")

    @property
    def title(self) -> str:
        words = [self.check if self.holds else f"not {self.check}"]
        if self.pattern:
            words.append(f"[{self.pattern}]")
        if self.within_percent is not None:
            words.append(f"within {self.within_percent:g}%")
        if self.max_mmr is not None:
            words.append(f"MMR at most {self.max_mmr:g}")
        if self.ranks:
            words.append(f"ranks {', '.join(map(str, self.ranks))}")
        return " ".join(words)


@dataclass
class Evidence:
    """What the run measured, for the checks."""

    queue_pairs: Sequence[QpRow]
    qp_pattern: Mapping[tuple[int, int, int, int], str]  # connection key -> traffic pattern
    sender_rates_bps: Mapping[str, Mapping[int, float]]  # pattern ("" all) -> rank -> rate
    uplink_bytes: Mapping[str, Mapping[str, int]] | None  # leaf -> uplink port -> bytes
    pfc_sent: Mapping[int, int]  # rank -> frames our generators sent
    pfc_received: Mapping[int, int | None]  # rank -> frames its NIC counted (None: no counter)
    pfc_capable: bool = False  # every rank's NIC counts PFC frames: the DUT can be held to PFC
    patterns: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Verdict:
    title: str
    status: Status
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"expectation": self.title, "status": self.status, "detail": self.detail}


Measured = tuple[bool, str] | str  # (condition held, what was seen), or why not applicable


def _qps(e: Expectation, ev: Evidence) -> list[QpRow]:
    if e.pattern is None:
        return list(ev.queue_pairs)
    return [
        q
        for q in ev.queue_pairs
        if ev.qp_pattern.get((q.src_rank, q.dst_rank, q.qp, q.udp_sport)) == e.pattern
    ]


def _sum(rows: Sequence[QpRow], name: str) -> int:
    return sum(getattr(r, name) for r in rows)


def _no_loss(e: Expectation, ev: Evidence) -> Measured:
    rows = _qps(e, ev)
    lost, resent = _sum(rows, "lost_packets"), _sum(rows, "packets_retransmitted")
    sent = _sum(rows, "data_packets_sent")
    return lost == 0 and resent == 0, f"{lost} lost, {resent} retransmitted of {sent} sent"


def _no_nak(e: Expectation, ev: Evidence) -> Measured:
    rows = _qps(e, ev)
    sent, got = _sum(rows, "naks_sent"), _sum(rows, "naks_received")
    return sent == 0 and got == 0, f"{sent} NAKs sent, {got} received"


def _ce_seen(e: Expectation, ev: Evidence) -> Measured:
    rows = _qps(e, ev)
    ce = _sum(rows, "ce_received")
    return ce > 0, f"{ce} CE-marked packets of {_sum(rows, 'data_packets_received')} received"


def _cnps_match_ce(e: Expectation, ev: Evidence) -> Measured:
    rows = _qps(e, ev)
    bad = [
        q
        for q in rows
        if (q.ce_received > 0) != (q.cnps_sent > 0)
        or q.cnps_sent > q.ce_received
        or q.cnps_received != q.cnps_sent
    ]
    seen = (
        f"CE {_sum(rows, 'ce_received')}, CNPs sent {_sum(rows, 'cnps_sent')}, "
        f"received {_sum(rows, 'cnps_received')}"
    )
    if bad:
        q = bad[0]
        seen += (
            f"; {len(bad)} QPs do not match, e.g. rank {q.src_rank} -> {q.dst_rank} QP {q.qp}: "
            f"CE {q.ce_received}, CNPs sent {q.cnps_sent}, received {q.cnps_received}"
        )
    return not bad, seen


def _fairness(e: Expectation, ev: Evidence) -> Measured:
    rates = ev.sender_rates_bps.get(e.pattern or "", {})
    if len(rates) < 2:
        return "fewer than two senders completed messages"
    low, high = min(rates.values()), max(rates.values())
    assert e.within_percent is not None
    ok = low >= high * (1 - e.within_percent / 100.0)
    listing = ", ".join(f"rank {r} {v / 1e9:.2f}" for r, v in sorted(rates.items()))
    return ok, f"slowest {low / high:.0%} of fastest (Gb/s: {listing})"


def _sending_leaves(ev: Evidence) -> dict[str, Mapping[str, int]] | str:
    """The leaves whose uplinks carried traffic (leaves whose hosts only received send little
    more than ACKs up: not judged), or why there are none."""
    if ev.uplink_bytes is None:
        return "no leaf uplink counters (the fabric is not a Clos)"
    totals = {leaf: sum(ports.values()) for leaf, ports in ev.uplink_bytes.items()}
    busiest = max(totals.values(), default=0)
    judged = {
        leaf: ports
        for leaf, ports in ev.uplink_bytes.items()
        if len(ports) >= 2 and busiest and totals[leaf] >= SENDING_LEAF_SHARE * busiest
    }
    return judged or "no leaf sent traffic over two or more uplinks"


def _uplink_spread(e: Expectation, ev: Evidence) -> Measured:
    judged = _sending_leaves(ev)
    if isinstance(judged, str):
        return judged
    assert e.within_percent is not None
    shares = {leaf: min(p.values()) / max(p.values()) for leaf, p in sorted(judged.items())}
    ok = min(shares.values()) >= 1 - e.within_percent / 100.0
    parts = []
    for leaf, share in shares.items():
        mib = ", ".join(f"{b / 2**20:.1f}" for _, b in sorted(judged[leaf].items()))
        parts.append(f"{leaf} {share:.0%} (MiB per uplink: {mib})")
    return ok, f"least-used uplink vs busiest: {'; '.join(parts)}"


def _link_balance(e: Expectation, ev: Evidence) -> Measured:
    judged = _sending_leaves(ev)
    if isinstance(judged, str):
        return judged
    assert e.max_mmr is not None
    parts, ok = [], True
    for leaf, ports in sorted(judged.items()):
        loads = [float(b) for _, b in sorted(ports.items())]
        mmr, jfi = max_to_mean_ratio(loads), jain_fairness_index(loads)
        ok = ok and mmr is not None and mmr <= e.max_mmr
        parts.append(f"{leaf} MMR {mmr:.3f}, JFI {jfi:.3f}" if mmr and jfi else f"{leaf} idle")
    return ok, f"uplink loads: {'; '.join(parts)}"


def _reordering(e: Expectation, ev: Evidence) -> Measured:
    rows = _qps(e, ev)
    got = _sum(rows, "data_packets_received")
    if not got:
        return "no data packet was received"
    assert e.within_percent is not None
    late = _sum(rows, "reordered_packets")
    worst = max((q.reorder_extent_max for q in rows), default=0)
    mean = _sum(rows, "reorder_extent_sum") / late if late else 0.0
    held = _sum(rows, "held_out_of_order")
    return late <= got * e.within_percent / 100.0, (
        f"{late} of {got} data packets arrived after a later one ({late / got:.2%}; extent mean "
        f"{mean:.1f}, max {worst} packets); {held} held out of order"
    )


def _pfc_frames_sent(e: Expectation, ev: Evidence) -> Measured:
    if not ev.pfc_sent:
        return "the scenario has no run.pfc_frames generator"
    listing = ", ".join(f"rank {r}: {n}" for r, n in sorted(ev.pfc_sent.items()))
    return all(n > 0 for n in ev.pfc_sent.values()), f"frames sent {listing}"


def _pfc_frames_received(e: Expectation, ev: Evidence) -> Measured:
    missing = [r for r in e.ranks if ev.pfc_received.get(r) is None]
    if missing:
        return (
            f"rank {missing[0]}'s interface reports no PFC counters (a software DUT or a NIC "
            "without them): PFC needs a real switch and NIC"
        )
    counts = {r: ev.pfc_received[r] or 0 for r in e.ranks}
    listing = ", ".join(f"rank {r}: {n}" for r, n in counts.items())
    return all(n > 0 for n in counts.values()), f"PFC frames received {listing}"


CHECKS: dict[str, Callable[[Expectation, Evidence], Measured]] = {
    "no_loss": _no_loss,
    "no_nak": _no_nak,
    "ce_seen": _ce_seen,
    "cnps_match_ce": _cnps_match_ce,
    "fairness": _fairness,
    "uplink_spread": _uplink_spread,
    "link_balance": _link_balance,
    "reordering": _reordering,
    "pfc_frames_sent": _pfc_frames_sent,
    "pfc_frames_received": _pfc_frames_received,
}


def judge(expectations: Sequence[Expectation], evidence: Evidence) -> list[Verdict]:
    out = []
    for e in expectations:
        if e.pattern is not None and e.pattern not in evidence.patterns:
            out.append(Verdict(e.title, "FAIL", f"no traffic pattern named {e.pattern!r}"))
            continue
        if e.needs_pfc and not evidence.pfc_capable:
            out.append(
                Verdict(
                    e.title,
                    "NOT APPLICABLE",
                    "needs PFC, and the ranks' interfaces count no PFC frames (the emulated "
                    "fabric or a software DUT does not pause)",
                )
            )
            continue
        measured = CHECKS[e.check](e, evidence)
        if isinstance(measured, str):
            out.append(Verdict(e.title, "NOT APPLICABLE", measured))
            continue
        held, seen = measured
        out.append(Verdict(e.title, "PASS" if held == e.holds else "FAIL", seen))
    return out


def sender_rates_bps(
    flows: Sequence[Mapping[str, Any]], pattern_of: Mapping[int, str]
) -> dict[str, dict[int, float]]:
    """Per pattern ("" for all flows) and sending rank: payload bits it sent over the time from
    its first message's start to its last message's end (finished flows only)."""
    spans: dict[tuple[str, int], list[float]] = {}
    for f in flows:
        if f["start_s"] is None or f["end_s"] is None:
            continue
        for scope in ("", pattern_of.get(f["collective_id"])):
            if scope is None:
                continue
            span = spans.setdefault((scope, f["src_rank"]), [float("inf"), 0.0, 0.0])
            span[0] = min(span[0], f["start_s"])
            span[1] = max(span[1], f["end_s"])
            span[2] += f["bytes"]
    out: dict[str, dict[int, float]] = {}
    for (scope, rank), (start, end, nbytes) in spans.items():
        if end > start:
            out.setdefault(scope, {})[rank] = nbytes * 8 / (end - start)
    return out


def report(verdicts: Sequence[Verdict]) -> str:
    from collectors.report import expectation_lines

    return "\n".join(expectation_lines([v.to_json() for v in verdicts]))
