"""The tester's side of a finished run: per-QP counters with their patterns, PFC frames per
rank, and the evidence the scenario's `expect:` entries are judged on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from collectors.expectations import Evidence, Expectation, Verdict, judge, sender_rates_bps
from collectors.queue_pairs import QpRow, rank_totals, totals
from collectors.tables import RunTables, rows
from emulator.traffic.schedule import TRAFFIC_ID_BASE, TrafficSchedule


def uplink_bytes(tables: RunTables, live: Any) -> dict[str, dict[str, int]] | None:
    """Bytes each leaf sent up each of its uplinks during the run (leaf egress counters)."""
    topology = getattr(live, "topology", None)
    if topology is None:
        return None
    roles = {n.name: n.role for n in topology.nodes}
    out: dict[str, dict[str, int]] = {}
    for link in topology.links.values():
        if roles.get(link.src) == "leaf" and roles.get(link.dst) in ("spine", "super_spine"):
            out.setdefault(link.src, {})[link.src_ifname] = 0
    for switch, port, delta in rows(tables.ports, ("switch", "port", "delta_bytes")):
        leaf = out.get(switch)
        if leaf is not None and port in leaf:
            leaf[port] += delta
    return out


def evidence(
    tables: RunTables,
    queue_pairs: Sequence[QpRow],
    qp_pattern: Mapping[tuple[int, int, int, int], str],
    live: Any,
    pfc_sent: Mapping[int, int],
    pfc_received: Mapping[int, int | None],
) -> Evidence:
    pattern_of = {
        cid: group
        for cid, group in rows(tables.collectives, ("collective_id", "process_group"))
        if cid >= TRAFFIC_ID_BASE
    }
    return Evidence(
        queue_pairs=queue_pairs,
        qp_pattern=qp_pattern,
        sender_rates_bps=sender_rates_bps(tables.flows.to_pylist(), pattern_of),
        uplink_bytes=uplink_bytes(tables, live),
        pfc_sent=pfc_sent,
        pfc_received=pfc_received,
        pfc_capable=bool(pfc_received) and all(v is not None for v in pfc_received.values()),
        patterns=frozenset(qp_pattern.values()),
    )


@dataclasses.dataclass
class TesterResults:
    """What the tester measured: per-QP rows (with their traffic pattern) and PFC per rank."""

    queue_pairs: list[QpRow]
    qp_pattern: dict[tuple[int, int, int, int], str]
    pfc_sent: dict[int, int]
    pfc_received: dict[int, int | None]

    @classmethod
    def gather(
        cls,
        rows_: Sequence[QpRow],
        traffic: TrafficSchedule | None,
        pfc_sent: Mapping[int, int],
        pfc_received: Mapping[int, int | None],
        job_of_rank: Mapping[int, str] | None = None,
    ) -> TesterResults:
        """job_of_rank: the job each rank runs (a trace's QPs take their sender's job)."""
        qp_pattern = traffic.qp_patterns() if traffic is not None else {}
        jobs = job_of_rank or {}
        named = []
        for q in rows_:
            pattern = qp_pattern.get((q.src_rank, q.dst_rank, q.qp, q.udp_sport), "")
            job = "" if pattern else jobs.get(q.src_rank, "")
            named.append(dataclasses.replace(q, pattern=pattern, job=job))
        return cls(named, qp_pattern, dict(pfc_sent), dict(pfc_received))

    def summary(self) -> dict[str, Any]:
        """summary.json's tester sections: counter totals, and per rank (PFC frames included:
        sent by our generators, received as its NIC counted them; null where it counts none)."""
        ranks: dict[str, dict[str, Any]] = dict(rank_totals(self.queue_pairs))
        for rank in sorted({*map(int, ranks), *self.pfc_sent}):
            row = ranks.setdefault(str(rank), {})
            row["pfc_frames_sent"] = self.pfc_sent.get(rank, 0)
            row["pfc_frames_received"] = self.pfc_received.get(rank)
        ordered = dict(sorted(ranks.items(), key=lambda kv: int(kv[0])))
        return {"queue_pair_totals": totals(self.queue_pairs), "ranks": ordered}

    def judge(
        self, expectations: Sequence[Expectation], tables: RunTables, live: Any
    ) -> list[Verdict]:
        found = evidence(
            tables, self.queue_pairs, self.qp_pattern, live, self.pfc_sent, self.pfc_received
        )
        return judge(expectations, found)
