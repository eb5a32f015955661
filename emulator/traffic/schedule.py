"""Synthetic traffic as a sans-I/O driver: the messages of the scenario's `traffic:` patterns.

Same interface as emulator.schedule.job.JobSchedule (poll / delay_done / flow_done, results,
on_instance and on_member_issued), so the ideal-time model, the engine and the recorder take it
as they take a trace. Every message is a flow and its own SEND_RECV instance (process group: the
pattern's name; iteration: the message's number on its QP), timed from its posting like an
eager send. Each (pattern, QP index) gets a QP profile: its DSCP, its rate cap (below 100%:
rate_percent of the sender's line rate split over the pair's QPs; at 100% the QPs share the NIC
as they come), its congestion control and its path MTU.

Ids (flows, instances, delay tokens) start at `id_base`, so the schedule can run next to a
JobSchedule whose ids count from 0 (see CombinedDriver).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emulator.errors import PlanError
from emulator.schedule.job import Action, InstanceResult, JobSchedule, StartDelay
from emulator.schedule.plan import CollectiveInstance, Flow
from emulator.traffic.spec import TrafficPattern
from emulator.transport.qp_profile import QpProfile

TRAFFIC_ID_BASE = 1 << 40  # above any id a trace's schedule hands out
MAX_QPS_PER_PAIR = 256
# A message's instance names its QP by a negative node id, -1 - (pattern index x 256 + QP
# index): trace node ids are never negative, so a trace instance never shares its key.


@dataclass(eq=False)
class _Qp:
    """One QP of one (src, dst) pair: what it still has to send."""

    pattern: TrafficPattern
    node: int  # the instance's node id (negative, see MAX_QPS_PER_PAIR)
    src: int
    dst: int
    qp: int
    sport: int
    profile: int
    bytes_left: int | None  # bytes mode
    end_s: float | None  # duration mode: no message is posted at or after this
    in_flight: int = 0
    posted: int = 0

    def more(self, now: float) -> bool:
        if self.bytes_left is not None:
            return self.bytes_left > 0
        assert self.end_s is not None
        return now < self.end_s


def pattern_profiles(pattern: TrafficPattern, line_rate_bps: float) -> list[QpProfile]:
    """The QP profile of each QP index of a pattern."""
    cap = None
    if pattern.rate_percent < 100.0:
        cap = line_rate_bps * pattern.rate_percent / 100.0 / pattern.qps
    cc = "none" if pattern.rate_mode == "constant" else pattern.congestion_control
    return [
        QpProfile(
            dscp=pattern.dscp_of(q),
            max_rate_bps=cap,
            congestion_control=cc,
            path_mtu_bytes=pattern.path_mtu_bytes,
            verb=pattern.verb,
        )
        for q in range(pattern.qps)
    ]


class TrafficSchedule:
    def __init__(
        self,
        patterns: Sequence[TrafficPattern],
        *,
        line_rate_bps: float,
        sport_range: tuple[int, int] = (0xC000, 0xFFFF),
        sport_seed: int = 0,
        on_instance: Callable[[CollectiveInstance], None] | None = None,
        on_member_issued: Callable[[int, int, float], None] | None = None,
        keep_instances: bool = False,
        id_base: int = TRAFFIC_ID_BASE,
        profile_base: int = 1,
        hold_until_s: float = 0.0,
    ) -> None:
        """`profile_base`: the index this schedule's first QP profile has in the run's table
        (0 is the transport's own); `profiles` lists them in order. `hold_until_s`: the
        schedule is not finished before then (a delay with no QP: the scenario's streams run
        beside it)."""
        self.on_instance = on_instance
        self.on_member_issued = on_member_issued
        self.keep_instances = keep_instances
        self.results: list[InstanceResult] = []
        self.instances: list[CollectiveInstance] = []
        self.nodes_completed = 0
        self.profiles: list[QpProfile] = []
        self.profile_base = profile_base
        self._next_id = id_base
        self._delays: dict[int, list[_Qp]] = {}  # token -> the QPs that start then
        self._by_start: dict[float, int] = {}  # start time -> its token
        self._live: dict[int, tuple[_Qp, CollectiveInstance, float]] = {}  # flow id -> ..., posted
        self._actions: list[Action] = []
        low, high = sport_range
        salt = f"{sport_seed}:" if sport_seed else ""
        self._all: list[_Qp] = []
        immediate: list[_Qp] = []
        for p_index, pattern in enumerate(patterns):
            first_profile = profile_base + len(self.profiles)
            self.profiles += pattern_profiles(pattern, line_rate_bps)
            for pair_index, (src, dst) in enumerate(pattern.flow_pairs()):
                start_s = (pattern.start_us + pair_index * pattern.stagger_us) * 1e-6
                total = pattern.bytes_per_pair
                for q in range(pattern.qps):
                    share = None
                    if total is not None:
                        share = total // pattern.qps + (1 if q < total % pattern.qps else 0)
                    # consecutive ports from a hashed base: a pair's QPs never share a 5-tuple
                    # (salted by the seed as emulator.schedule.sports salts its hash)
                    digest = zlib.crc32(f"traffic:{salt}{pattern.name}:{src}:{dst}".encode()) + q
                    end_s = None
                    if pattern.duration_us is not None:
                        end_s = start_s + pattern.duration_us * 1e-6
                    qp = _Qp(
                        pattern,
                        -1 - (p_index * MAX_QPS_PER_PAIR + q),
                        src,
                        dst,
                        q,
                        pattern.qp_udp_sport[q]
                        if pattern.qp_udp_sport
                        else low + digest % (high - low + 1),
                        first_profile + q,
                        share,
                        end_s,
                    )
                    self._all.append(qp)
                    if start_s > 0:
                        self._delays[self._token_for(start_s)].append(qp)
                    else:
                        immediate.append(qp)
        self._pending = immediate  # started at the first poll
        if hold_until_s > 0:
            self._token_for(hold_until_s)

    def _token_for(self, start_s: float) -> int:
        """QPs that start at the same instant share one delay."""
        token = self._by_start.get(start_s)
        if token is None:
            token = self._by_start[start_s] = self._take_id()
            self._delays[token] = []
            self._actions.append(StartDelay(token, -1, 0, -1, start_s))
        return token

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def qp_patterns(self) -> dict[tuple[int, int, int, int], str]:
        """Each QP's connection key (src, dst, QP index, UDP source port) -> its pattern."""
        return {(q.src, q.dst, q.qp, q.sport): q.pattern.name for q in self._all}

    def max_rate_bps(self, profile: int) -> float | None:
        """The rate cap of one of this schedule's profiles (for the ideal model)."""
        index = profile - self.profile_base
        if 0 <= index < len(self.profiles):
            return self.profiles[index].max_rate_bps
        return None

    # -- driver interface ----------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return not self._live and not self._delays and not self._pending

    def poll(self, now: float) -> list[Action]:
        pending, self._pending = self._pending, []
        for qp in pending:
            self._fill(qp, now)
        actions, self._actions = self._actions, []
        return actions

    def delay_done(self, token: int, now: float) -> None:
        for qp in self._delays.pop(token):
            self._fill(qp, now)

    def flow_done(self, flow_id: int, now: float) -> None:
        qp, instance, posted_s = self._live.pop(flow_id)
        qp.in_flight -= 1
        self.nodes_completed += 1
        self.results.append(
            InstanceResult.of(
                instance, first_issue_s=posted_s, all_issued_s=posted_s, start_s=posted_s, end_s=now
            )
        )
        self._fill(qp, now)

    def unstall(self) -> bool:
        return False  # nothing here waits on anything but time and completions

    def stall_error(self) -> PlanError:
        return PlanError(f"traffic patterns stalled with {len(self._live)} messages in flight")

    # -- posting -------------------------------------------------------------------------------
    def _fill(self, qp: _Qp, now: float) -> None:
        """Post messages on `qp` until its window is full or it has nothing left to send."""
        pattern = qp.pattern
        while qp.in_flight < pattern.messages_in_flight and qp.more(now):
            size = pattern.message_bytes
            if qp.bytes_left is not None:
                size = min(size, qp.bytes_left)
                qp.bytes_left -= size
            self._post(qp, size, now)

    def _post(self, qp: _Qp, size: int, now: float) -> None:
        flow_id = self._take_id()
        instance_id = self._take_id()
        flow = Flow(
            id=flow_id,
            instance=instance_id,
            iteration=qp.posted,
            step=0,
            src=qp.src,
            dst=qp.dst,
            qp=qp.qp,
            udp_sport=qp.sport,
            bytes=size,
            profile=qp.profile,
        )
        instance = CollectiveInstance(
            id=instance_id,
            iteration=qp.posted,
            collective="SEND_RECV",
            group=qp.pattern.name,
            members=(qp.src, qp.dst),
            size_bytes=size,
            algorithm=f"{qp.pattern.kind}/{qp.pattern.rate_mode}",
            nodes=((qp.src, qp.node), (qp.dst, qp.node)),
            flows=(flow,),
        )
        qp.posted += 1
        qp.in_flight += 1
        if self.keep_instances:
            self.instances.append(instance)
        if self.on_instance is not None:
            self.on_instance(instance)
        if self.on_member_issued is not None:
            self.on_member_issued(instance_id, qp.src, now)
            self.on_member_issued(instance_id, qp.dst, now)
        self._live[flow_id] = (qp, instance, now)
        self._actions.append(flow)


class CombinedDriver:
    """A trace's JobSchedule and a TrafficSchedule as one driver (traffic ids from its base)."""

    def __init__(self, job: JobSchedule, traffic: TrafficSchedule, base: int = TRAFFIC_ID_BASE):
        self.job = job
        self.traffic = traffic
        self.base = base

    @property
    def finished(self) -> bool:
        return self.job.finished and self.traffic.finished

    @property
    def results(self) -> list[InstanceResult]:
        return [*self.job.results, *self.traffic.results]

    @property
    def nodes_completed(self) -> int:
        return self.job.nodes_completed + self.traffic.nodes_completed

    def poll(self, now: float) -> list[Action]:
        return [*self.job.poll(now), *self.traffic.poll(now)]

    def delay_done(self, token: int, now: float) -> None:
        (self.traffic if token >= self.base else self.job).delay_done(token, now)

    def flow_done(self, flow_id: int, now: float) -> None:
        (self.traffic if flow_id >= self.base else self.job).flow_done(flow_id, now)

    def unstall(self) -> bool:
        return self.job.unstall()

    def stall_error(self) -> PlanError:
        return self.job.stall_error()
