"""Flow and collective records from a hand-written event stream, with hand-computed values."""

from __future__ import annotations

import pytest

from collectors.live import RunInfo
from collectors.recorder import RunRecorder
from collectors.records import (
    CollectiveMeta,
    FlowMeta,
    RecordBuilder,
    ideal_times,
    metas_from_plan,
)
from emulator.events import (
    CollectiveMemberFinished,
    CollectiveMemberStarted,
    FlowFinished,
    FlowProgress,
    FlowStarted,
)
from emulator.schedule.plan import CollectiveInstance, Flow

US = 1e-6


def ring_allreduce_2() -> tuple[list[FlowMeta], list[CollectiveMeta]]:
    """ALL_REDUCE of 1000 bytes over 2 ranks: 2 steps x 2 flows of 500 bytes; ideal 1 us."""
    coll = CollectiveMeta(7, "ALL_REDUCE", "pg0", 2, 3, 1000, ideal_time_s=1 * US)
    flows = [
        FlowMeta(
            fid,
            7,
            "ALL_REDUCE",
            3,
            fid // 2,
            src,
            1 - src,
            qp=src,
            udp_sport=49152 + fid,
            bytes=500,
        )
        for fid, src in [(0, 0), (1, 1), (2, 0), (3, 1)]
    ]
    return flows, [coll]


def feed(builder: RecordBuilder, events: list[object]) -> None:
    handlers = {
        FlowStarted: builder.flow_started,
        FlowProgress: builder.flow_progress,
        FlowFinished: builder.flow_finished,
        CollectiveMemberStarted: builder.member_started,
        CollectiveMemberFinished: builder.member_finished,
    }
    for event in events:
        handlers[type(event)](event)  # type: ignore[operator]


def test_flow_and_collective_records_from_events() -> None:
    flows, colls = ring_allreduce_2()
    builder = RecordBuilder(flows, colls)
    feed(
        builder,
        [
            FlowStarted(0, 0.0),
            FlowStarted(1, 0.0),
            FlowFinished(0, 1 * US, packets=1, ce_marks=1, cnps_sent=1, cnps_received=1),
            FlowFinished(1, 1.5 * US, packets=2, retransmitted_packets=1),
            FlowStarted(2, 1 * US),
            FlowStarted(3, 1.5 * US),
            FlowFinished(2, 2 * US, packets=1),
            FlowFinished(3, 4 * US, packets=1),
        ],
    )
    records = builder.flow_records()
    assert [r.fct_s for r in records] == pytest.approx([1 * US, 1.5 * US, 1 * US, 2.5 * US])
    assert records[1].retransmitted_packets == 1 and records[1].packets == 2
    assert (records[0].ce_marks, records[0].cnps_sent, records[0].cnps_received) == (1, 1, 1)
    assert (records[3].step, records[3].src_rank, records[3].dst_rank) == (1, 1, 0)
    assert records[3].udp_sport == 49155 and records[3].iteration == 3

    (coll,) = builder.collective_records()
    assert coll.complete and coll.flows == 4 and coll.flows_finished == 4
    assert coll.start_s == 0.0 and coll.end_s == pytest.approx(4 * US)
    assert coll.ready_s == 0.0  # no member events: the first flow's start
    assert coll.completion_time_s == pytest.approx(4 * US)
    # algbw = 1000 B / 4 us = 2.5e8 B/s; busbw = algbw x 2(2-1)/2 = 2.5e8 B/s.
    assert coll.algbw_bytes_per_s == pytest.approx(2.5e8)
    assert coll.busbw_bytes_per_s == pytest.approx(2.5e8)
    # Ideal: 1000 B / 1 us = 1e9 B/s; ratio 0.25.
    assert coll.ideal_busbw_bytes_per_s == pytest.approx(1e9)
    assert coll.busbw_ratio == pytest.approx(0.25)


def test_member_events_widen_the_collective_and_incomplete_has_no_busbw() -> None:
    flows, colls = ring_allreduce_2()
    builder = RecordBuilder(flows, colls)
    feed(
        builder,
        [
            CollectiveMemberStarted(7, 0, 0.0),
            FlowStarted(0, 0.5 * US),
            FlowFinished(0, 1 * US),
        ],
    )
    coll = builder.collective_record(7)
    assert not coll.complete and coll.flows_finished == 1
    assert coll.start_s == 0.0 and coll.end_s is None
    assert coll.busbw_bytes_per_s is None and coll.busbw_ratio is None
    unfinished = builder.flow_record(1)
    assert unfinished.start_s is None and unfinished.fct_s is None
    feed(
        builder,
        [
            FlowStarted(1, 0.5 * US),
            FlowStarted(2, 1 * US),
            FlowStarted(3, 1 * US),
            FlowFinished(1, 1 * US),
            FlowFinished(2, 2 * US),
            FlowFinished(3, 2 * US),
            CollectiveMemberFinished(7, 1, 5 * US),
        ],
    )
    coll = builder.collective_record(7)
    # Start is the first member (0), end the last member to finish (5 us). Only one of two
    # members reported starting, so the rendezvous is the first flow's start (0.5 us), and
    # busbw uses 5 - 0.5 = 4.5 us.
    assert coll.complete and coll.completion_time_s == pytest.approx(5 * US)
    assert coll.ready_s == pytest.approx(0.5 * US)
    assert coll.bandwidth_time_s == pytest.approx(4.5 * US)
    assert coll.busbw_bytes_per_s == pytest.approx(1000 / (4.5 * US))


def test_bandwidth_is_timed_from_when_every_member_entered() -> None:
    flows, colls = ring_allreduce_2()
    builder = RecordBuilder(flows, colls)
    events: list[object] = [
        CollectiveMemberStarted(7, 0, 0.0),
        CollectiveMemberStarted(7, 1, 1 * US),  # rank 1 arrives late: the rendezvous
    ]
    for fid in range(4):
        events += [FlowStarted(fid, 1 * US), FlowFinished(fid, 3 * US)]
    feed(builder, events)
    coll = builder.collective_record(7)
    assert coll.start_s == 0.0 and coll.ready_s == pytest.approx(1 * US)
    assert coll.completion_time_s == pytest.approx(3 * US)
    # algbw = 1000 B / (3 - 1) us = 5e8 B/s; busbw x 2(2-1)/2 = 5e8 B/s; ideal 1e9 -> ratio 0.5.
    assert coll.algbw_bytes_per_s == pytest.approx(5e8)
    assert coll.busbw_ratio == pytest.approx(0.5)


def test_flow_finished_reports_the_collective_it_completes_once() -> None:
    flows, colls = ring_allreduce_2()
    builder = RecordBuilder(flows, colls)
    results = [builder.flow_finished(FlowFinished(fid, 1.0)) for fid in (0, 1, 2, 3)]
    assert results == [None, None, None, 7]
    assert builder.flow_finished(FlowFinished(3, 2.0)) is None  # a duplicate does not re-complete


def test_unknown_ids_are_rejected_with_the_id() -> None:
    flows, colls = ring_allreduce_2()
    builder = RecordBuilder(flows, colls)
    with pytest.raises(ValueError, match="flow 99"):
        builder.flow_started(FlowStarted(99, 0.0))
    with pytest.raises(ValueError, match="collective 5"):
        RecordBuilder([FlowMeta(0, 5, "ALL_REDUCE", 0, 0, 0, 1, 0, 1, 1)], colls)


def test_recorder_credits_cumulative_counts_once_to_the_right_rank() -> None:
    flows, colls = ring_allreduce_2()
    recorder = RunRecorder(flows, colls, RunInfo("t", 1.0, "none", "clos"), 8e9)
    recorder.on_events(
        [
            FlowStarted(0, 0.0),
            FlowProgress(0, 0.5 * US, packets=3, ce_marks=2, cnps_sent=1, cnps_received=1),
            FlowProgress(0, 0.6 * US, packets=3, ce_marks=2, cnps_sent=1, cnps_received=1),
            FlowFinished(
                0,
                1 * US,
                packets=5,
                retransmitted_packets=1,
                ce_marks=4,
                cnps_sent=3,
                cnps_received=2,
            ),
        ]
    )
    live = recorder.live
    # Flow 0 goes 0 -> 1: packets/retransmissions/CNPs received at rank 0, CE/CNPs sent at rank 1.
    sender = live.congestion[(0, "ALL_REDUCE")]
    receiver = live.congestion[(1, "ALL_REDUCE")]
    assert sender == [5, 1, 0, 0, 2]
    assert receiver == [0, 0, 4, 3, 0]
    assert live.flows_completed["ALL_REDUCE"] == 1
    assert live.fct["ALL_REDUCE"].count == 1
    assert live.fct["ALL_REDUCE"].sum_s == pytest.approx(1 * US)
    assert live.target_time_s == pytest.approx(1 * US)


def test_recorder_publishes_a_completed_collective_per_iteration() -> None:
    flows, colls = ring_allreduce_2()
    recorder = RunRecorder(flows, colls, RunInfo("t", 1.0, "none", "clos"), 8e9)
    for fid in range(4):
        recorder.on_event(FlowStarted(fid, 0.0))
    for fid in range(4):
        recorder.on_event(FlowFinished(fid, 2 * US))
    stats = recorder.live.iterations[("ALL_REDUCE", 3)]
    assert stats.instances == 1
    assert stats.completion_time_sum_s == pytest.approx(2 * US)
    assert stats.busbw_sum_bytes_per_s == pytest.approx(1000 / (2 * US))
    assert recorder.live.ideal_busbw_bytes_per_s["ALL_REDUCE"] == pytest.approx(1e9)


def test_ideal_times_from_the_ideal_model_results() -> None:
    from emulator.schedule.job import InstanceResult

    result = InstanceResult(
        id=3,
        iteration=0,
        collective="ALL_REDUCE",
        group="0",
        group_size=2,
        size_bytes=8,
        algorithm="ring",
        flows=2,
        wire_bytes=8,
        first_issue_s=0.0,
        all_issued_s=1.0,
        start_s=1.0,
        end_s=3.5,
    )
    assert ideal_times([result]) == {3: 2.5}


def test_metas_from_plan_instances() -> None:
    flow = Flow(
        id=11, instance=2, iteration=1, step=0, src=0, dst=3, qp=4, udp_sport=50000, bytes=256
    )
    inst = CollectiveInstance(
        id=2,
        iteration=1,
        collective="ALL_TO_ALL",
        group="ep",
        members=(0, 1, 2, 3),
        size_bytes=1024,
        algorithm="parallel",
        nodes=((0, 5), (1, 5), (2, 5), (3, 5)),
        flows=(flow,),
    )
    flows, colls = metas_from_plan([inst], {2: 3e-6})
    assert colls == [CollectiveMeta(2, "ALL_TO_ALL", "ep", 4, 1, 1024, ideal_time_s=3e-6)]
    assert flows == [FlowMeta(11, 2, "ALL_TO_ALL", 1, 0, 0, 3, 4, 50000, 256)]


def test_send_recv_is_timed_from_the_send_as_the_ideal_model_times_it() -> None:
    """An eager send (ASTRA-sim's p2p): the flow leaves at the send's issue and the recv is issued
    only after the last byte arrived. Measured bandwidth time is send -> last byte, the origin
    of the ideal model (InstanceResult.time_s, sender's issue), never negative."""
    inst = CollectiveInstance(
        id=5,
        iteration=0,
        collective="SEND_RECV",
        group="p2p:3->1",
        members=(3, 1),
        size_bytes=4000,
        algorithm="p2p",
        nodes=((3, 10), (1, 20)),
        flows=(Flow(9, 5, 0, 0, 3, 1, 0, 49152, 4000),),
        root=3,
    )
    assert inst.timed_from_rank == 3
    flows, colls = metas_from_plan([inst], {5: 2 * US})
    assert colls[0].timed_from_rank == 3
    builder = RecordBuilder()
    builder.add(flows, colls)
    feed(
        builder,
        [
            CollectiveMemberStarted(5, 3, 1 * US),
            FlowStarted(9, 1 * US),
            FlowFinished(9, 3 * US, packets=1),
            CollectiveMemberStarted(5, 1, 4 * US),  # the recv, after the last byte
        ],
    )
    record = builder.collective_record(5)
    assert record.ready_s == pytest.approx(1 * US)
    assert record.bandwidth_time_s == pytest.approx(2 * US)
    assert record.busbw_ratio == pytest.approx(1.0)
    # A collective (rendezvous) still waits for its last member.
    assert (
        CollectiveInstance(
            5, 0, "ALL_REDUCE", "g", (3, 1), 1, "ring", ((3, 10), (1, 20)), ()
        ).timed_from_rank
        is None
    )


def test_busbw_ratio_is_taken_over_one_population() -> None:
    """busbw_ratio_mean: numerator and denominator over the complete instances that have an
    ideal; an unfinished instance (whose ideal is small) is left out of both and counted."""
    from collectors.records import CollectiveRecord
    from collectors.summary import collectives_summary
    from collectors.tables import RunTables

    def rec(cid: int, complete: bool, busbw: float | None, ideal: float) -> CollectiveRecord:
        return CollectiveRecord(
            cid, "ALL_REDUCE", "g", 2, cid, 1000, 2, 2 if complete else 1, complete,
            0.0, 0.0, None, None, None, None, busbw, 1.0, None, ideal, None,
        )  # fmt: skip

    tables = RunTables.from_rows(
        collectives=[rec(0, True, 10.0, 40.0), rec(1, True, 20.0, 40.0), rec(2, False, None, 10.0)]
    )
    stats = collectives_summary(tables)["ALL_REDUCE"]
    assert stats["busbw_ratio_mean"] == pytest.approx(15.0 / 40.0)  # not 15 / 30
    assert stats["busbw_ratio_instances"] == 2 and stats["busbw_ratio_left_out"] == 1
