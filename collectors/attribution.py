"""Who throttled whom: each switch port's queue, traffic, ECN marks and drops by collective.

A backend that can tell whose packet is whose sends PortAttribution samples (the simulator:
exact, every frame carries its flow and collective instance): per port and sample window, each
instance's bytes in the queue at the window's end and its bytes sent, marks and drops in the
window, and every marked packet's flow. A queue's byte-time is what it held at the end of each
window times the window (sample and hold at the sample interval). Two tables come of it:

- attribution.parquet: per port, sample window and collective instance, the queue bytes it held
  at the window's end and the bytes, marks and drops of the window (rows only where it had any);
- marks.parquet: every ECN mark, with the port, time, flow and collective it hit.

The summary's `attribution` section reads them: per congested port (the most queue byte-time),
each collective type's share of the queue, the marks and the drops, and the top interferer; the
CNPs each type's packets drew (the flows' CNPs, sent for marked packets of that flow); and for
the All-to-All flows in the slowest 1%, where their packets were marked and which collective
types held those queues in the windows of the marks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from emulator.events import PortAttribution

TOP_PORTS = 4  # ports the summary and the plot describe, most queue byte-time first
SLOW_SHARE = 0.01  # the slowest 1% of All-to-All flows (at least one)
NOT_MEASURED = (
    "not measured on this backend: only the simulator tags every packet with its collective "
    "(--backend sim, or --reference sim beside an emulated run)"
)


@dataclass(frozen=True, slots=True)
class AttributionRow:
    time_s: float  # the window's end
    interval_s: float
    switch: str
    port: str
    collective_id: int
    collective_type: str
    queue_bytes: int  # held at the window's end
    tx_bytes: int  # sent in the window
    ecn_marks: int
    drops: int


@dataclass(frozen=True, slots=True)
class MarkRow:
    time_s: float  # the end of the sample window it fell in
    switch: str
    port: str
    flow_id: int
    collective_id: int
    collective_type: str


class AttributionTable:
    """Turns PortAttribution samples into window rows."""

    def __init__(self) -> None:
        self.rows: list[AttributionRow] = []
        self.marks: list[MarkRow] = []
        self.measured = False

    def add(
        self,
        event: PortAttribution,
        type_of: Callable[[int], str],
        instance_of: Callable[[int], int],
    ) -> None:
        self.measured = True
        for instance, queued, tx, marks, drops in event.by_instance:
            self.rows.append(
                AttributionRow(
                    event.time_s,
                    event.interval_s,
                    event.switch,
                    event.port,
                    instance,
                    type_of(instance),
                    queued,
                    tx,
                    marks,
                    drops,
                )
            )
        for flow_id in event.marked_flows:
            instance = instance_of(flow_id)
            self.marks.append(
                MarkRow(
                    event.time_s, event.switch, event.port, flow_id, instance, type_of(instance)
                )
            )


def _rows(table: pa.Table, names: Iterable[str]) -> list[tuple[Any, ...]]:
    cols = [table.column(n).to_pylist() for n in names]
    return list(zip(*cols, strict=True))


def port_shares(attribution: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """Per port: queue byte-seconds, bytes, marks and drops by collective type."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    names = ("switch", "port", "collective_type", "queue_bytes", "interval_s", "tx_bytes")
    more = ("ecn_marks", "drops")
    for sw, port, kind, queued, interval, tx, marks, drops in _rows(attribution, names + more):
        p = out.setdefault(
            (sw, port),
            {k: defaultdict(float) for k in ("queue_byte_s", "tx_bytes", "ecn_marks", "drops")},
        )
        p["queue_byte_s"][kind] += queued * interval
        p["tx_bytes"][kind] += tx
        p["ecn_marks"][kind] += marks
        p["drops"][kind] += drops
    return out


def _share(counts: dict[str, float]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items())} if total else {}


def congested_ports(attribution: pa.Table, top: int = TOP_PORTS) -> list[tuple[str, str]]:
    shares = port_shares(attribution)
    ranked = sorted(shares, key=lambda k: -sum(shares[k]["queue_byte_s"].values()))
    return [k for k in ranked if sum(shares[k]["queue_byte_s"].values()) > 0][:top]


def attribution_summary(
    attribution: pa.Table, marks: pa.Table, flows: pa.Table, measured: bool
) -> dict[str, Any]:
    """The summary's `attribution` section (see the module's docstring)."""
    if not measured:
        return {"measured": False, "why": NOT_MEASURED}
    shares = port_shares(attribution)
    ports = []
    for key in congested_ports(attribution, top=len(shares)):
        p = shares[key]
        queue = _share(p["queue_byte_s"])
        ports.append(
            {
                "switch": key[0],
                "port": key[1],
                "queue_byte_s": sum(p["queue_byte_s"].values()),
                "queue_share": queue,
                "tx_share": _share(p["tx_bytes"]),
                "ecn_marks": {k: int(v) for k, v in sorted(p["ecn_marks"].items()) if v},
                "drops": {k: int(v) for k, v in sorted(p["drops"].items()) if v},
                "top_interferer": max(queue, key=lambda k: queue[k]) if queue else None,
            }
        )
    cnps: dict[str, int] = defaultdict(int)
    for kind, sent in _rows(flows, ("collective_type", "cnps_sent")):
        cnps[kind] += int(sent or 0)
    return {
        "measured": True,
        "ports": ports[:TOP_PORTS],
        "ports_with_queue": len(ports),
        "cnps_by_marked_collective": dict(sorted(cnps.items())),
        "slowest_all_to_all": slow_flow_marks(attribution, marks, flows),
    }


def slow_flow_marks(
    attribution: pa.Table, marks: pa.Table, flows: pa.Table, kind: str = "ALL_TO_ALL"
) -> list[dict[str, Any]]:
    """For the slowest 1% of `kind` flows: the ports where their packets were marked, and the
    share of those ports' queues each collective type held in the windows of the marks."""
    done = [
        (fct, fid)
        for fid, k, fct in _rows(flows, ("flow_id", "collective_type", "fct_s"))
        if k == kind and fct is not None
    ]
    if not done:
        return []
    done.sort(reverse=True)
    slow = done[: max(1, round(len(done) * SLOW_SHARE))]
    held: dict[tuple[float, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t, sw, port, ckind, queued in _rows(
        attribution, ("time_s", "switch", "port", "collective_type", "queue_bytes")
    ):
        held[(t, sw, port)][ckind] += queued
    by_flow: dict[int, list[tuple[float, str, str]]] = defaultdict(list)
    for t, sw, port, fid in _rows(marks, ("time_s", "switch", "port", "flow_id")):
        by_flow[fid].append((t, sw, port))
    out = []
    for fct, fid in slow:
        at: dict[str, dict[str, Any]] = {}
        for t, sw, port in by_flow.get(fid, []):
            entry = at.setdefault(f"{sw}:{port}", {"marks": 0, "queue": defaultdict(int)})
            entry["marks"] += 1
            for ckind, queued in held.get((t, sw, port), {}).items():
                entry["queue"][ckind] += queued
        out.append(
            {
                "flow_id": fid,
                "fct_s": fct,
                "marked_at": {
                    name: {"marks": e["marks"], "queue_share": _share(e["queue"])}
                    for name, e in sorted(at.items(), key=lambda kv: -kv[1]["marks"])
                },
            }
        )
    return out


__all__ = [
    "NOT_MEASURED",
    "AttributionRow",
    "AttributionTable",
    "MarkRow",
    "attribution_summary",
    "congested_ports",
    "port_shares",
    "slow_flow_marks",
]
