"""Attribution tables and summary (collectors/attribution.py) from hand-made samples, with the
shares worked out by hand."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from collectors.attribution import (
    NOT_MEASURED,
    AttributionRow,
    AttributionTable,
    MarkRow,
    attribution_summary,
    class_of_type,
    congested_ports,
    reconcile_marks,
)
from collectors.records import FlowRecord
from collectors.tables import RunTables, to_table
from emulator.events import ClassCounts, PortAttribution, PortClassSample

TYPES = {1: "ALL_REDUCE", 2: "ALL_TO_ALL"}
FLOW_INSTANCE = {10: 1, 20: 2, 21: 2}


def _table() -> AttributionTable:
    table = AttributionTable()
    samples = [
        # window (0, 1]: AR holds 3000 B at its end, 2500 B.s over it, sent 1000; A2A holds
        # 1000 B, 500 B.s, sent 500 and had flow 20 marked once
        PortAttribution(
            1.0,
            1.0,
            "l0",
            "l0-h0",
            ((1, 3000, 1000, 0, 0, 2500.0), (2, 1000, 500, 1, 0, 500.0)),
            (20,),
        ),
        # window (1, 2]: AR holds 1000 B, 1500 B.s, sent 4000 and had flow 10 marked twice;
        # A2A empty at the end but 500 B.s in the window (a queue that drained), sent 1000
        PortAttribution(
            2.0,
            1.0,
            "l0",
            "l0-h0",
            ((1, 1000, 4000, 2, 0, 1500.0), (2, 0, 1000, 0, 0, 500.0)),
            (10, 10),
        ),
        # another port, quiet in (0, 1] (no sample), in (1, 2]: only A2A, one drop
        PortAttribution(2.0, 1.0, "s0", "s0-l0", ((2, 500, 100, 0, 1, 250.0),), ()),
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
    # queue byte-seconds (the integral, not the window-end snapshot) at l0-h0: AR 2500 +
    # 1500 = 4000, A2A 500 + 500 = 1000; at s0-l0: A2A 250: l0-h0 ranks first
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
    # the slowest 1% of two A2A flows is one: flow 20, marked at l0-h0 in (0, 1], when the
    # queue's byte-time was 2500 AR and 500 A2A
    (slow,) = s["slowest_all_to_all"]
    assert slow["flow_id"] == 20
    assert slow["marked_at"] == {
        "l0:l0-h0": {
            "marks": 1,
            "queue_share": pytest.approx({"ALL_REDUCE": 5 / 6, "ALL_TO_ALL": 1 / 6}),
        }
    }
    assert [r.queue_byte_s for r in t.rows] == [2500.0, 500.0, 1500.0, 500.0, 250.0]


def test_a_backend_that_cannot_tag_says_so_and_writes_no_table() -> None:
    assert attribution_summary(
        to_table([], AttributionRow), to_table([], MarkRow), to_table([], FlowRecord), False
    ) == {"measured": False, "why": NOT_MEASURED}
    assert "attribution" not in RunTables.from_rows().by_name()
    assert "marks" in RunTables.from_rows(attribution_measured=True).by_name()


def _counts(cls: int, name: str, *values: Any) -> ClassCounts:
    return ClassCounts(cls, name, *values)


def _emulated() -> AttributionTable:
    """Cumulative per-class readings of two ports, as the emulated fabric's sampler sends them."""
    table = AttributionTable()
    samples = [
        # baselines (t=0): l0-s0 had 2 ARP-ish untagged packets already, l0-h0 nothing
        PortClassSample(0.0, "l0", "l0-s0", (_counts(0, "UNTAGGED", 120, 2, 0, 0, 0.0, 0.0, 0),)),
        PortClassSample(0.0, "l0", "l0-h0", ()),
        # t=1: at l0-s0 AR sent 8000 B in 8 packets, 3 marked, holding 0.003 byte-s (a mean of
        # 3000 B over the 1 s window), above XOFF 0.2 s; A2A 2000 B, 1 mark, 0.001 byte-s
        PortClassSample(
            1.0,
            "l0",
            "l0-s0",
            (
                _counts(0, "UNTAGGED", 120, 2, 0, 0, 0.0, 0.0, 0),
                _counts(1, "ALL_REDUCE", 8000, 8, 3, 0, 3000.0, 0.2, 1),
                _counts(2, "ALL_TO_ALL", 2000, 2, 1, 0, 1000.0, 0.0, 0),
            ),
        ),
        PortClassSample(
            1.0, "l0", "l0-h0", (_counts(2, "ALL_TO_ALL", 500, 1, 0, 1, 10.0, 0.0, 0),)
        ),
        # t=3 (a 2 s window): AR 4000 B more, 1 mark; A2A nothing new
        PortClassSample(
            3.0,
            "l0",
            "l0-s0",
            (
                _counts(0, "UNTAGGED", 120, 2, 0, 0, 0.0, 0.0, 0),
                _counts(1, "ALL_REDUCE", 12000, 12, 4, 0, 5000.0, 0.2, 1),
                _counts(2, "ALL_TO_ALL", 2000, 2, 1, 0, 1000.0, 0.0, 0),
            ),
        ),
    ]
    for s in samples:
        table.add_classes(s)
    return table


def test_emulated_class_readings_become_window_rows_from_their_differences() -> None:
    table = _emulated()
    assert table.measured and not table.marks
    got = [
        (
            *(r.time_s, r.interval_s, r.port, r.collective_id, r.collective_type, r.queue_bytes),
            *(r.tx_bytes, r.packets, r.ecn_marks, r.drops, r.queue_byte_s, r.pause_s, r.source),
        )
        for r in table.rows
    ]
    assert got == [
        (1.0, 1.0, "l0-s0", -1, "ALL_REDUCE", 3000, 8000, 8, 3, 0, 3000.0, 0.2, "emulated"),
        (1.0, 1.0, "l0-s0", -1, "ALL_TO_ALL", 1000, 2000, 2, 1, 0, 1000.0, 0.0, "emulated"),
        (1.0, 1.0, "l0-h0", -1, "ALL_TO_ALL", 10, 500, 1, 0, 1, 10.0, 0.0, "emulated"),
        # the 2 s window: the queue's mean is its byte-time over the window
        (3.0, 2.0, "l0-s0", -1, "ALL_REDUCE", 1000, 4000, 4, 1, 0, 2000.0, 0.0, "emulated"),
    ]
    assert [r.attribution_class for r in table.rows] == [1, 2, 2, 1]


def test_a_reset_counter_counts_from_zero() -> None:
    table = AttributionTable()
    for t, sent in ((0.0, 5000), (1.0, 9000), (2.0, 700)):  # the marker re-attached before t=2
        table.add_classes(
            PortClassSample(t, "s0", "s0-l0", (_counts(1, "AR", sent, sent // 100, 0, 0, 0.0),))
        )
    assert [r.tx_bytes for r in table.rows] == [4000, 700]


def _emulated_flows() -> list[FlowRecord]:
    def flow(fid: int, kind: str, ce: int, cnps: int) -> FlowRecord:
        return FlowRecord(
            fid, fid, kind, 0, 0, 0, 1, 0, 49152, 1000, 0.0, 1.0, 1.0, 10, 0, ce, cnps, cnps
        )

    return [flow(1, "ALL_REDUCE", 3, 2), flow(2, "ALL_REDUCE", 1, 1), flow(3, "ALL_TO_ALL", 1, 1)]


def test_emulated_summary_names_the_interferer_by_type_and_reconciles_the_marks() -> None:
    t = _emulated()
    tables = RunTables.from_rows(
        flows=_emulated_flows(), attribution=t.rows, marks=t.marks, attribution_measured=True
    )
    s = attribution_summary(tables.attribution, tables.marks, tables.flows, True)
    assert s["source"].startswith("emulated: eBPF per-class counters")
    assert "instance" in s["granularity"] and "slowest_all_to_all" not in s
    first = s["ports"][0]
    # measured byte-time: AR 3000 + 2000, A2A 1000 byte-s at l0-s0
    assert (first["switch"], first["port"]) == ("l0", "l0-s0")
    assert first["queue_byte_s"] == pytest.approx(6000.0)
    assert first["queue_share"] == pytest.approx({"ALL_REDUCE": 5 / 6, "ALL_TO_ALL": 1 / 6})
    assert first["top_interferer"] == "ALL_REDUCE"
    assert first["ecn_marks"] == {"ALL_REDUCE": 4, "ALL_TO_ALL": 1}
    assert first["above_xoff_s"] == {"ALL_REDUCE": pytest.approx(0.2)}
    assert s["ports"][1]["drops"] == {"ALL_TO_ALL": 1}
    # switches marked AR 4 times, A2A once; the receivers counted 4 and 1 CE-marked packets
    r = s["marks_reconciled"]
    assert r["by_type"] == {
        "ALL_REDUCE": {"switch_marks": 4, "receiver_ce": 4, "marked_again_or_lost": 0},
        "ALL_TO_ALL": {"switch_marks": 1, "receiver_ce": 1, "marked_again_or_lost": 0},
    }
    assert r["holds"] and r["switch_marks"] == 5 == r["receiver_ce"]
    assert s["cnps_by_marked_collective"] == {"ALL_REDUCE": 3, "ALL_TO_ALL": 1}


def test_reconciliation_flags_receivers_counting_more_than_the_switches_marked() -> None:
    rows = [
        AttributionRow(1.0, 1.0, "l0", "p", -1, "ALL_REDUCE", 0, 100, 5, 0, source="emulated"),
        AttributionRow(1.0, 1.0, "s0", "p", -1, "ALL_REDUCE", 0, 100, 2, 0, source="emulated"),
        AttributionRow(1.0, 1.0, "l0", "p", -1, "ALL_TO_ALL", 0, 100, 1, 0, source="emulated"),
        AttributionRow(1.0, 1.0, "l0", "p", -1, "UNTAGGED", 0, 100, 2, 0, source="emulated"),
    ]
    flows = _emulated_flows()  # receivers: AR 4 (switches 7: 3 marked twice), A2A 1, ...
    flows[2] = dataclasses.replace(flows[2], ce_marks=3)  # ... but A2A 3 for 1 switch mark
    r = reconcile_marks(to_table(rows, AttributionRow), to_table(flows, FlowRecord))
    assert r["by_type"]["ALL_REDUCE"] == {
        "switch_marks": 7,
        "receiver_ce": 4,
        "marked_again_or_lost": 3,
    }
    # marks on untagged packets (ACKs, CNPs) have no receiver count
    assert r["by_type"]["UNTAGGED"]["receiver_ce"] == 0
    assert not r["holds"]
    assert r["discrepancies"] == [
        "ALL_TO_ALL: its receivers counted 3 CE-marked packets, the switches marked 1"
    ]


def test_types_beyond_the_classes_are_reconciled_under_other() -> None:
    assert class_of_type("BROADCAST", {"ALL_REDUCE", "OTHER"}) == "OTHER"
    assert class_of_type("ALL_REDUCE", {"ALL_REDUCE", "OTHER"}) == "ALL_REDUCE"
    # no OTHER class: a type is its own (the simulator's rows, or a run with room for all)
    assert class_of_type("BROADCAST", {"ALL_REDUCE"}) == "BROADCAST"


def test_the_simulator_rows_say_exact_and_reconcile_too() -> None:
    t = _table()
    tables = RunTables.from_rows(
        flows=_flows(), attribution=t.rows, marks=t.marks, attribution_measured=True
    )
    s = attribution_summary(tables.attribution, tables.marks, tables.flows, True)
    assert s["source"].startswith("simulated: exact")
    assert "granularity" not in s and s["slowest_all_to_all"]
    assert s["marks_reconciled"]["switch_marks"] == 3 and s["marks_reconciled"]["holds"]


def test_job_classes_split_into_job_and_type_and_ports_name_the_top_job() -> None:
    table = AttributionTable()
    counts = (
        _counts(1, "dense/ALL_REDUCE", 0, 0, 0, 0, 0.0),
        _counts(2, "moe/ALL_TO_ALL", 0, 0, 0, 0, 0.0),
    )
    table.add_classes(PortClassSample(0.0, "s0", "s0-l0", counts))
    later = (
        _counts(1, "dense/ALL_REDUCE", 3000, 30, 2, 0, 0.003),
        _counts(2, "moe/ALL_TO_ALL", 1000, 10, 1, 0, 0.001),
    )
    table.add_classes(PortClassSample(1e-3, "s0", "s0-l0", later))
    assert [(r.job, r.collective_type) for r in table.rows] == [
        ("dense", "ALL_REDUCE"),
        ("moe", "ALL_TO_ALL"),
    ]
    tables = RunTables.from_rows(attribution=table.rows, attribution_measured=True)
    summary = attribution_summary(tables.attribution, tables.marks, tables.flows, True)
    (port,) = summary["ports"]
    assert port["queue_share_by_job"] == pytest.approx({"dense": 0.75, "moe": 0.25})
    assert port["top_interfering_job"] == "dense" and port["top_interferer"] == "ALL_REDUCE"
    # one job (or none named): no per-job shares
    one = [dataclasses.replace(r, job="dense") for r in table.rows]
    tables = RunTables.from_rows(attribution=one, attribution_measured=True)
    (port,) = attribution_summary(tables.attribution, tables.marks, tables.flows, True)["ports"]
    assert "queue_share_by_job" not in port


def test_a_pfc_pause_is_charged_to_the_instances_by_their_share_of_the_queues_byte_time() -> None:
    table = AttributionTable()
    # the port was paused 2 ms of the 10 ms window, AR holding 30 B.s of its queue and A2A
    # 10 B.s (at the window's end 1000 B and 3000 B: the byte-time decides, not the snapshot)
    held = ((1, 1000, 0, 0, 0, 30.0), (2, 3000, 0, 0, 0, 10.0))
    table.add(
        PortAttribution(0.01, 0.01, "l0", "l0-s0", held, (), 0.002),
        TYPES.__getitem__,
        FLOW_INSTANCE.__getitem__,
    )
    # not paused: no pause share
    table.add(
        PortAttribution(0.02, 0.01, "l0", "l0-s0", held),
        TYPES.__getitem__,
        FLOW_INSTANCE.__getitem__,
    )
    assert [r.pause_s for r in table.rows] == [
        pytest.approx(0.0015),
        pytest.approx(0.0005),
        None,
        None,
    ]
    tables = RunTables.from_rows(attribution=table.rows, attribution_measured=True)
    (port,) = attribution_summary(tables.attribution, tables.marks, tables.flows, True)["ports"]
    assert port["paused_s"] == pytest.approx({"ALL_REDUCE": 0.0015, "ALL_TO_ALL": 0.0005})
    assert "above_xoff_s" not in port  # the emulated fabric's measure, not this one
