"""Attribution tables and summary (collectors/attribution.py) from hand-made samples, with the
shares worked out by hand."""

from __future__ import annotations

import pytest

from collectors.attribution import (
    NOT_MEASURED,
    AttributionRow,
    AttributionTable,
    MarkRow,
    attribution_summary,
    congested_ports,
)
from collectors.records import FlowRecord
from collectors.tables import RunTables, to_table
from emulator.events import PortAttribution

TYPES = {1: "ALL_REDUCE", 2: "ALL_TO_ALL"}
FLOW_INSTANCE = {10: 1, 20: 2, 21: 2}


def _table() -> AttributionTable:
    table = AttributionTable()
    samples = [
        # window (0, 1]: AR holds 3000 B and sent 1000, A2A holds 1000 B, sent 500 and had
        # flow 20 marked once
        PortAttribution(
            1.0, 1.0, "l0", "l0-h0", ((1, 3000, 1000, 0, 0), (2, 1000, 500, 1, 0)), (20,)
        ),
        # window (1, 2]: AR holds 1000 B, sent 4000 and had flow 10 marked twice; A2A empty,
        # sent 1000
        PortAttribution(
            2.0, 1.0, "l0", "l0-h0", ((1, 1000, 4000, 2, 0), (2, 0, 1000, 0, 0)), (10, 10)
        ),
        # another port, quiet in (0, 1] (no sample), in (1, 2]: only A2A, one drop
        PortAttribution(2.0, 1.0, "s0", "s0-l0", ((2, 500, 100, 0, 1),), ()),
    ]
    for s in samples:
        table.add(s, TYPES.__getitem__, FLOW_INSTANCE.__getitem__)
    return table


def test_samples_become_window_rows() -> None:
    table = _table()
    got = [
        (r.time_s, r.port, r.collective_type, r.queue_bytes, r.tx_bytes, r.ecn_marks, r.drops)
        for r in table.rows
    ]
    assert got == [
        (1.0, "l0-h0", "ALL_REDUCE", 3000, 1000, 0, 0),
        (1.0, "l0-h0", "ALL_TO_ALL", 1000, 500, 1, 0),
        (2.0, "l0-h0", "ALL_REDUCE", 1000, 4000, 2, 0),
        (2.0, "l0-h0", "ALL_TO_ALL", 0, 1000, 0, 0),
        (2.0, "s0-l0", "ALL_TO_ALL", 500, 100, 0, 1),
    ]
    # a port's window is the sample interval, not the time since its previous sample: s0-l0
    # held nothing at t=1, so its 500 B count for (1, 2] only
    assert [r.interval_s for r in table.rows] == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert [(m.time_s, m.flow_id, m.collective_type) for m in table.marks] == [
        (1.0, 20, "ALL_TO_ALL"),
        (2.0, 10, "ALL_REDUCE"),
        (2.0, 10, "ALL_REDUCE"),
    ]


def _flows() -> list[FlowRecord]:
    def flow(fid: int, kind: str, fct: float, cnps: int) -> FlowRecord:
        return FlowRecord(
            flow_id=fid,
            collective_id=FLOW_INSTANCE[fid],
            collective_type=kind,
            iteration=0,
            step=0,
            src_rank=0,
            dst_rank=1,
            qp=0,
            udp_sport=49152,
            bytes=1000,
            start_s=0.0,
            end_s=fct,
            fct_s=fct,
            packets=1,
            retransmitted_packets=0,
            ce_marks=0,
            cnps_sent=cnps,
            cnps_received=cnps,
        )

    return [
        flow(10, "ALL_REDUCE", 3.0, 2),
        flow(20, "ALL_TO_ALL", 2.5, 1),
        flow(21, "ALL_TO_ALL", 0.5, 0),
    ]


def test_summary_shares_top_interferer_and_the_slowest_flows() -> None:
    t = _table()
    tables = RunTables.from_rows(
        flows=_flows(), attribution=t.rows, marks=t.marks, attribution_measured=True
    )
    s = attribution_summary(tables.attribution, tables.marks, tables.flows, True)
    # queue byte-seconds at l0-h0: AR 3000x1 + 1000x1 = 4000, A2A 1000x1 + 0 = 1000;
    # at s0-l0: A2A 500 x 1 s = 500: l0-h0 ranks first
    assert congested_ports(tables.attribution) == [("l0", "l0-h0"), ("s0", "s0-l0")]
    first = s["ports"][0]
    assert first["queue_share"] == pytest.approx({"ALL_REDUCE": 0.8, "ALL_TO_ALL": 0.2})
    assert first["top_interferer"] == "ALL_REDUCE"
    assert first["tx_share"] == pytest.approx(
        {"ALL_REDUCE": 5000 / 6500, "ALL_TO_ALL": 1500 / 6500}
    )
    assert first["ecn_marks"] == {"ALL_REDUCE": 2, "ALL_TO_ALL": 1}
    assert s["ports"][1]["drops"] == {"ALL_TO_ALL": 1}
    assert s["cnps_by_marked_collective"] == {"ALL_REDUCE": 2, "ALL_TO_ALL": 1}
    # the slowest 1% of two A2A flows is one: flow 20, marked at l0-h0 at t=1, when the
    # queue held 3000 B of AR and 1000 B of A2A
    (slow,) = s["slowest_all_to_all"]
    assert slow["flow_id"] == 20
    assert slow["marked_at"] == {
        "l0:l0-h0": {"marks": 1, "queue_share": {"ALL_REDUCE": 0.75, "ALL_TO_ALL": 0.25}}
    }


def test_a_backend_that_cannot_tag_says_so_and_writes_no_table() -> None:
    assert attribution_summary(
        to_table([], AttributionRow), to_table([], MarkRow), to_table([], FlowRecord), False
    ) == {"measured": False, "why": NOT_MEASURED}
    assert "attribution" not in RunTables.from_rows().by_name()
    assert "marks" in RunTables.from_rows(attribution_measured=True).by_name()
