"""Ideal-time model: drive the whole JobSchedule over a max-min fair fluid network.

Every link shares its rate fairly among its active flows, with no congestion control, no
headers and no propagation delay: the congestion-free yardstick a real run is measured against.
Compute nodes take their delays; the feeder order and the flows' dependencies are the job's.
Event driven: the clock jumps to the next delay end or flow completion, and rates are
recomputed only when the set of active flows changes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from emulator.errors import EmulatorError
from emulator.schedule.egress import EgressShareNetwork
from emulator.schedule.fluid import FluidNetwork, PathFn
from emulator.schedule.job import InstanceResult, StartDelay
from emulator.schedule.plan import Flow

# The queue pairs a plan uses, kept up to this many (the engine opens them before the clock
# starts; a plan with more runs on a backend that does not open queue pairs: flow level, 16k
# ranks). 128 hosts in an All-to-All with 2 QPs per peer: 32,512.
QUEUE_PAIRS_KEPT = 1 << 16

# (src rank, dst rank, qp index, UDP source port): the queue pair a flow goes on
QueuePairKey = tuple[int, int, int, int]


class Driver(Protocol):
    """What the model drives: emulator.schedule.job.JobSchedule, a traffic schedule, both."""

    @property
    def finished(self) -> bool: ...
    @property
    def results(self) -> list[InstanceResult]: ...
    @property
    def nodes_completed(self) -> int: ...
    def poll(self, now: float) -> Sequence[StartDelay | Flow]: ...
    def delay_done(self, token: int, now: float) -> None: ...
    def flow_done(self, flow_id: int, now: float) -> None: ...
    def unstall(self) -> bool: ...
    def stall_error(self) -> EmulatorError: ...


@dataclass
class IdealResult:
    job_time_s: float
    instances: list[InstanceResult]
    flows_total: int
    bytes_total: int
    nodes_completed: int
    rate_recomputes: int
    flow_times: dict[int, tuple[float, float]] = field(default_factory=dict)
    # every queue pair the flows went on, in first-use order, with its flows' QP profile (empty
    # when there were more than QUEUE_PAIRS_KEPT)
    queue_pairs: dict[QueuePairKey, int] = field(default_factory=dict)


class Network(Protocol):
    """What the ideal run drives: FluidNetwork (max-min over every link) or
    emulator.schedule.egress.EgressShareNetwork (each NIC's egress shared, nothing else)."""

    recomputes: int

    def add(
        self,
        flow_id: int,
        src: int,
        dst: int,
        sport: int,
        nbytes: int,
        max_rate_bps: float | None = None,
    ) -> None: ...
    def next_completion(self) -> float: ...
    def advance(self, t: float) -> list[int]: ...


def yardstick(ideal: str, line_rate_bps: float) -> Network | None:
    """The network the ideal run drives for `run.ideal`: None for max-min over the fabric's
    links (simulate's default), or each NIC's egress shared at the ranks' line rate."""
    return EgressShareNetwork(line_rate_bps) if ideal == "egress_share" else None


def simulate(
    job: Driver,
    path: PathFn,
    keep_flow_times: bool = False,
    max_rate_bps: Callable[[int], float | None] | None = None,
    network: Network | None = None,
) -> IdealResult:
    """`max_rate_bps(profile)`: the cap of flows with that QP profile (None: line rate);
    `network`: the yardstick (default: max-min over the links `path` gives)."""
    net: Network = network if network is not None else FluidNetwork(path)
    delays: list[tuple[float, int]] = []
    starts: dict[int, float] = {}
    flow_times: dict[int, tuple[float, float]] = {}
    flows_total = bytes_total = 0
    queue_pairs: dict[QueuePairKey, int] | None = {}
    now = 0.0
    actions = job.poll(now)
    while True:
        for action in actions:
            if isinstance(action, StartDelay):
                heapq.heappush(delays, (now + action.delay_s, action.token))
            else:
                cap = max_rate_bps(action.profile) if max_rate_bps and action.profile else None
                net.add(action.id, action.src, action.dst, action.udp_sport, action.bytes, cap)
                flows_total += 1
                bytes_total += action.bytes
                if queue_pairs is not None:
                    key = (action.src, action.dst, action.qp, action.udp_sport)
                    if key not in queue_pairs:
                        queue_pairs[key] = action.profile
                        if len(queue_pairs) > QUEUE_PAIRS_KEPT:
                            queue_pairs = None
                if keep_flow_times:
                    starts[action.id] = now
        t_net = net.next_completion()
        t_delay = delays[0][0] if delays else math.inf
        t = min(t_net, t_delay)
        if t == math.inf:
            if job.finished:
                break
            if job.unstall():
                actions = job.poll(now)
                continue
            raise job.stall_error()
        now = t
        for flow_id in net.advance(now):
            if keep_flow_times:
                flow_times[flow_id] = (starts.pop(flow_id), now)
            job.flow_done(flow_id, now)
        while delays and delays[0][0] <= now:
            job.delay_done(heapq.heappop(delays)[1], now)
        actions = job.poll(now)
    return IdealResult(
        job_time_s=now,
        instances=job.results,
        flows_total=flows_total,
        bytes_total=bytes_total,
        nodes_completed=job.nodes_completed,
        rate_recomputes=net.recomputes,
        flow_times=flow_times,
        queue_pairs=queue_pairs or {},
    )
