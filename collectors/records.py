"""Flow and collective-instance records, built from the plan's metadata and the event stream.

The plan says what each flow is (FlowMeta: collective, iteration, step, ranks, QP, bytes); the
engine says when it started and finished and what congestion it met (emulator.events).

A collective instance's times:
- start_s: its first member starts (CollectiveMemberStarted), or its first flow starts when
  members are not reported; completion_time_s = end_s - start_s.
- ready_s: every member has started (the rendezvous; flows cannot start before it), known when
  all group_size members reported starting, else the first flow's start. A send/recv is an eager
  send (CollectiveMeta.timed_from_rank, from the plan's CollectiveInstance.timed_from_rank): its
  ready_s is the sender's start, never the recv's, which may come after the last byte.
- end_s: its last member finishes, or its last flow finishes.
algbw/busbw use bandwidth_time_s = end_s - ready_s, as nccl-tests times a collective all ranks
have entered and as the schedule's ideal-time model times its instances
(emulator.schedule.job.InstanceResult.time_s), so ratio = measured busbw / ideal busbw compares
like with like (1.0 = congestion-free). Formulas: emulator.schedule.busbw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from emulator.events import (
    CollectiveMemberFinished,
    CollectiveMemberStarted,
    FlowFinished,
    FlowProgress,
    FlowStarted,
)
from emulator.schedule.busbw import algbw_bytes_per_s, busbw_bytes_per_s

if TYPE_CHECKING:
    from emulator.schedule.plan import CollectiveInstance


@dataclass(frozen=True, slots=True)
class FlowMeta:
    """What the plan says about one flow (filled from emulator.schedule.plan.Flow)."""

    flow_id: int
    collective_id: int
    collective_type: str
    iteration: int
    step: int
    src_rank: int
    dst_rank: int
    qp: int
    udp_sport: int
    bytes: int
    job: str = ""  # the scenario's job (several on one fabric); "" for a traffic pattern


@dataclass(frozen=True, slots=True)
class CollectiveMeta:
    """What the plan says about one collective instance.

    bytes is nccl-tests' S (Chakra's comm_size); ideal_time_s is the instance's time in the plan's
    congestion-free model (InstanceResult.time_s: all members entered -> last byte), or None.
    """

    collective_id: int
    collective_type: str
    process_group: str
    group_size: int
    iteration: int
    bytes: int
    ideal_time_s: float | None = None
    timed_from_rank: int | None = None  # the member whose start starts busbw's time; None: all
    job: str = ""


@dataclass(frozen=True, slots=True)
class FlowRecord:
    flow_id: int
    collective_id: int
    collective_type: str
    iteration: int
    step: int
    src_rank: int
    dst_rank: int
    qp: int
    udp_sport: int
    bytes: int
    start_s: float | None
    end_s: float | None
    fct_s: float | None
    packets: int
    retransmitted_packets: int
    ce_marks: int
    cnps_sent: int
    cnps_received: int
    job: str = ""  # the scenario's job (several jobs on one fabric); "" for a traffic pattern
    # the engine's own delay in the flow, target seconds (emulator.events.FlowFinished)
    engine_delay_s: float | None = None
    # data packets that arrived after one with a higher PSN (RFC 4737), at its receiver
    reordered_packets: int | None = None


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    collective_id: int
    collective_type: str
    process_group: str
    group_size: int
    iteration: int
    bytes: int
    flows: int
    flows_finished: int
    complete: bool
    start_s: float | None
    ready_s: float | None
    end_s: float | None
    completion_time_s: float | None
    bandwidth_time_s: float | None
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    ideal_time_s: float | None
    ideal_algbw_bytes_per_s: float | None
    ideal_busbw_bytes_per_s: float | None
    busbw_ratio: float | None
    job: str = ""


@dataclass(slots=True)
class _FlowState:
    start_s: float | None = None
    end_s: float | None = None
    counts: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    engine_delay_s: float | None = None
    reordered_packets: int | None = None


@dataclass(slots=True)
class _CollectiveState:
    flow_ids: list[int] = field(default_factory=list)
    remaining: int = 0
    member_starts: dict[int, float] = field(default_factory=dict)
    member_end_s: float | None = None


def _min(a: float | None, b: float) -> float:
    return b if a is None or b < a else a


def _max(a: float | None, b: float) -> float:
    return b if a is None or b > a else a


class RecordBuilder:
    """Accumulates the event stream of one run into flow and collective records."""

    def __init__(
        self, flows: Iterable[FlowMeta] = (), collectives: Iterable[CollectiveMeta] = ()
    ) -> None:
        self.collectives: dict[int, CollectiveMeta] = {}
        self.flows: dict[int, FlowMeta] = {}
        self._flow_state: dict[int, _FlowState] = {}
        self._coll_state: dict[int, _CollectiveState] = {}
        self.add(flows, collectives)

    def add(self, flows: Iterable[FlowMeta], collectives: Iterable[CollectiveMeta]) -> None:
        """Register more of the plan: a run driven by the schedule learns its collectives as
        they are matched, before their flows start."""
        for coll_meta in collectives:
            if coll_meta.collective_id in self.collectives:
                raise ValueError(f"collective {coll_meta.collective_id} is already in the plan")
            self.collectives[coll_meta.collective_id] = coll_meta
            self._coll_state[coll_meta.collective_id] = _CollectiveState()
        for meta in flows:
            if meta.collective_id not in self.collectives:
                raise ValueError(
                    f"flow {meta.flow_id}: collective {meta.collective_id} is not in the plan"
                )
            if meta.flow_id in self.flows:
                raise ValueError(f"flow {meta.flow_id} is already in the plan")
            self.flows[meta.flow_id] = meta
            self._flow_state[meta.flow_id] = _FlowState()
            coll = self._coll_state[meta.collective_id]
            coll.flow_ids.append(meta.flow_id)
            coll.remaining += 1

    def _state(self, flow_id: int) -> _FlowState:
        try:
            return self._flow_state[flow_id]
        except KeyError:
            raise ValueError(f"event for flow {flow_id}, which is not in the plan") from None

    def _coll(self, collective_id: int) -> _CollectiveState:
        try:
            return self._coll_state[collective_id]
        except KeyError:
            raise ValueError(
                f"event for collective {collective_id}, which is not in the plan"
            ) from None

    def flow_started(self, event: FlowStarted) -> None:
        self._state(event.flow_id).start_s = event.time_s

    def flow_progress(self, event: FlowProgress) -> None:
        state = self._state(event.flow_id)
        if state.end_s is None:
            state.counts = _counts(event)

    def flow_finished(self, event: FlowFinished) -> int | None:
        """Record the flow's end; return its collective's id if this was its last flow."""
        state = self._state(event.flow_id)
        first_time = state.end_s is None
        state.end_s = event.time_s
        state.counts = _counts(event)
        state.engine_delay_s = event.engine_delay_s
        state.reordered_packets = event.reordered_packets
        if not first_time:
            return None
        collective_id = self.flows[event.flow_id].collective_id
        coll = self._coll_state[collective_id]
        coll.remaining -= 1
        return collective_id if coll.remaining == 0 else None

    def member_started(self, event: CollectiveMemberStarted) -> None:
        state = self._coll(event.collective_id)
        state.member_starts[event.rank] = _min(state.member_starts.get(event.rank), event.time_s)

    def member_finished(self, event: CollectiveMemberFinished) -> None:
        state = self._coll(event.collective_id)
        state.member_end_s = _max(state.member_end_s, event.time_s)

    def flow_record(self, flow_id: int) -> FlowRecord:
        meta = self.flows[flow_id]
        state = self._flow_state[flow_id]
        fct = None
        if state.start_s is not None and state.end_s is not None:
            fct = state.end_s - state.start_s
        packets, retransmitted, ce_marks, cnps_sent, cnps_received = state.counts
        return FlowRecord(
            flow_id=meta.flow_id,
            collective_id=meta.collective_id,
            collective_type=meta.collective_type,
            iteration=meta.iteration,
            step=meta.step,
            src_rank=meta.src_rank,
            dst_rank=meta.dst_rank,
            qp=meta.qp,
            udp_sport=meta.udp_sport,
            bytes=meta.bytes,
            start_s=state.start_s,
            end_s=state.end_s,
            fct_s=fct,
            packets=packets,
            retransmitted_packets=retransmitted,
            ce_marks=ce_marks,
            cnps_sent=cnps_sent,
            cnps_received=cnps_received,
            job=meta.job,
            engine_delay_s=state.engine_delay_s,
            reordered_packets=state.reordered_packets,
        )

    def flow_records(self) -> list[FlowRecord]:
        return [self.flow_record(fid) for fid in sorted(self.flows)]

    def collective_record(self, collective_id: int) -> CollectiveRecord:
        meta = self.collectives[collective_id]
        state = self._coll_state[collective_id]
        flows = [self._flow_state[fid] for fid in state.flow_ids]
        start = min(state.member_starts.values(), default=None)
        end = state.member_end_s
        first_flow: float | None = None
        finished = 0
        for flow in flows:
            if flow.start_s is not None:
                first_flow = _min(first_flow, flow.start_s)
            if flow.end_s is not None:
                finished += 1
                end = _max(end, flow.end_s)
        if first_flow is not None:
            start = _min(start, first_flow)
        ready = first_flow
        starts = state.member_starts
        if meta.timed_from_rank is not None:
            # An eager send: from the sender's start, as the ideal model times it.
            if meta.timed_from_rank in starts:
                ready = starts[meta.timed_from_rank]
        elif len(starts) >= meta.group_size:
            ready = max(starts.values())  # the rendezvous
        if ready is None:
            ready = start
        # Complete when every flow arrived; a collective without flows (one rank, a local op)
        # is complete when its members reported finishing.
        complete = finished == len(flows) and (bool(flows) or state.member_end_s is not None)
        time_s = bw_time_s = None
        if complete and start is not None and end is not None and ready is not None:
            time_s = end - start
            bw_time_s = end - ready
        algbw = busbw = None
        if bw_time_s is not None:
            algbw = algbw_bytes_per_s(meta.bytes, bw_time_s)
            busbw = busbw_bytes_per_s(meta.collective_type, meta.group_size, meta.bytes, bw_time_s)
        ideal_algbw = ideal_busbw = None
        if meta.ideal_time_s is not None:
            ideal_algbw = algbw_bytes_per_s(meta.bytes, meta.ideal_time_s)
            ideal_busbw = busbw_bytes_per_s(
                meta.collective_type, meta.group_size, meta.bytes, meta.ideal_time_s
            )
        ratio = None
        if busbw is not None and ideal_busbw:
            ratio = busbw / ideal_busbw
        return CollectiveRecord(
            collective_id=meta.collective_id,
            collective_type=meta.collective_type,
            process_group=meta.process_group,
            group_size=meta.group_size,
            iteration=meta.iteration,
            bytes=meta.bytes,
            flows=len(flows),
            flows_finished=finished,
            complete=complete,
            start_s=start,
            ready_s=ready,
            end_s=end if complete else None,
            completion_time_s=time_s,
            bandwidth_time_s=bw_time_s,
            algbw_bytes_per_s=algbw,
            busbw_bytes_per_s=busbw,
            ideal_time_s=meta.ideal_time_s,
            ideal_algbw_bytes_per_s=ideal_algbw,
            ideal_busbw_bytes_per_s=ideal_busbw,
            busbw_ratio=ratio,
            job=meta.job,
        )

    def collective_records(self) -> list[CollectiveRecord]:
        return [self.collective_record(cid) for cid in sorted(self.collectives)]

    def is_collective_complete(self, collective_id: int) -> bool:
        return self._coll_state[collective_id].remaining == 0


def _counts(event: FlowProgress | FlowFinished) -> tuple[int, int, int, int, int]:
    return (
        event.packets,
        event.retransmitted_packets,
        event.ce_marks,
        event.cnps_sent,
        event.cnps_received,
    )


def instance_metas(
    inst: CollectiveInstance, iteration: int, ideal_time_s: float | None
) -> tuple[list[FlowMeta], CollectiveMeta]:
    """The records' view of one planned collective instance and its flows, all numbered
    `iteration` (the run's own numbering, or the plan's)."""
    coll = CollectiveMeta(
        collective_id=inst.id,
        collective_type=inst.collective,
        process_group=inst.group,
        group_size=inst.group_size,
        iteration=iteration,
        bytes=inst.size_bytes,
        ideal_time_s=ideal_time_s,
        timed_from_rank=inst.timed_from_rank,
        job=inst.job,
    )
    flows = [
        FlowMeta(
            flow_id=f.id,
            collective_id=inst.id,
            collective_type=inst.collective,
            iteration=iteration,
            step=f.step,
            src_rank=f.src,
            dst_rank=f.dst,
            qp=f.qp,
            udp_sport=f.udp_sport,
            bytes=f.bytes,
            job=inst.job,
        )
        for f in inst.flows
    ]
    return flows, coll


def metas_from_plan(
    instances: Iterable[object], ideal_time_s: Mapping[int, float] | None = None
) -> tuple[list[FlowMeta], list[CollectiveMeta]]:
    """FlowMeta and CollectiveMeta from emulator.schedule.plan.CollectiveInstance objects.

    ideal_time_s maps an instance id to its time in the ideal-time model (ideal_times()).
    """
    from emulator.schedule.plan import CollectiveInstance

    flows: list[FlowMeta] = []
    collectives: list[CollectiveMeta] = []
    ideal = ideal_time_s or {}
    for inst in instances:
        if not isinstance(inst, CollectiveInstance):
            raise TypeError(f"expected a CollectiveInstance, got {type(inst).__name__}")
        inst_flows, coll = instance_metas(inst, inst.iteration, ideal.get(inst.id))
        flows.extend(inst_flows)
        collectives.append(coll)
    return flows, collectives


class TimedInstance(Protocol):
    """What the ideal-time model reports per instance (emulator.schedule.job.InstanceResult)."""

    @property
    def id(self) -> int: ...

    @property
    def time_s(self) -> float: ...


def ideal_times(instances: Iterable[TimedInstance]) -> dict[int, float]:
    """Instance id -> ideal time, from emulator.schedule.ideal.IdealResult.instances."""
    return {inst.id: inst.time_s for inst in instances}
