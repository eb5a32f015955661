"""The evidence a scenario's `expect:` entries are judged on, gathered from a finished run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collectors.expectations import Evidence, Expectation, sender_rates_bps
from collectors.queue_pairs import QpRow
from collectors.tables import RunTables, rows
from emulator.traffic.schedule import TRAFFIC_ID_BASE


class PfcReadings:
    """Received-PFC counters of the ranks an expectation names, read before and after the run
    (the difference is the run's); None for an interface that counts none."""

    def __init__(self, expectations: Sequence[Expectation], live: Any) -> None:
        from fabrics.dut import LiveDut

        ranks = sorted(
            {r for e in expectations if e.check == "pfc_frames_received" for r in e.ranks}
        )
        self.live = live
        self.dut = isinstance(live, LiveDut)
        self.ranks = ranks
        self.before = self._read()

    def _read(self) -> dict[int, int | None]:
        from fabrics.pfc_counters import rx_pfc_frames

        if not self.dut:  # veth ports of the emulated fabric count no PFC
            return dict.fromkeys(self.ranks)
        interfaces = self.live.spec.interfaces
        return {
            r: rx_pfc_frames(interfaces[r], self.live.rank_netns(r))
            if r < len(interfaces)
            else None
            for r in self.ranks
        }

    def received(self) -> dict[int, int | None]:
        after = self._read()
        out: dict[int, int | None] = {}
        for r in self.ranks:
            a, b = after.get(r), self.before.get(r)
            out[r] = None if a is None or b is None else max(0, a - b)
        return out


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
    pfc: PfcReadings,
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
        pfc_received=(received := pfc.received()),
        pfc_capable=pfc.dut and all(received.get(r) is not None for r in range(live.ranks)),
        patterns=frozenset(qp_pattern.values()),
    )
