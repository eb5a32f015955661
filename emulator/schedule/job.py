"""The whole job as a sans-I/O state machine: feeders, matching, algorithms and stream rules.

A driver (the ideal fluid model here, the engine later) calls poll(now) to get actions (delays
to start, flows to start), and reports delay_done/flow_done with the time they happened. The
schedule never reads a clock. Rules: compute nodes run one at a time per rank and stream (GPU,
CPU) as ASTRA-sim's HardwareResource does; communication overlaps everything; a collective's flow
starts when its dependencies have arrived and its sender and receiver have issued the node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from emulator.errors import InputError, PlanError
from emulator.schedule.collectives import FlowExpander, transfers_for
from emulator.schedule.feeder import RankFeeder
from emulator.schedule.fluid import PathFn
from emulator.schedule.matching import GroupTable, MatchedOp, Matcher
from emulator.schedule.nodes import NodeInfo, NodeKind, Stream
from emulator.schedule.params import CollectivesParams, ComputeParams
from emulator.schedule.plan import CollectiveInstance, Flow, NodeRef, Transfer
from emulator.schedule.sports import SPORT_POLICIES


class StartDelay(NamedTuple):
    """Run a compute/memory node for delay_s, then call delay_done(token, now).

    A NamedTuple (immutable) rather than a frozen dataclass: one is made per compute node and
    tuple construction is several times cheaper.
    """

    token: int
    rank: int
    iteration: int
    node_id: int
    delay_s: float


Action = StartDelay | Flow


@dataclass(frozen=True, slots=True)
class InstanceResult:
    """Timing of one finished collective instance (times in seconds of the driver's clock)."""

    id: int
    iteration: int
    collective: str
    group: str
    group_size: int
    size_bytes: int
    algorithm: str
    flows: int
    wire_bytes: int
    first_issue_s: float
    all_issued_s: float
    start_s: float
    end_s: float
    job: str = ""

    @classmethod
    def of(
        cls,
        instance: CollectiveInstance,
        *,
        first_issue_s: float,
        all_issued_s: float,
        start_s: float,
        end_s: float,
    ) -> InstanceResult:
        """The result of a finished instance, with the times its driver saw."""
        return cls(
            id=instance.id,
            iteration=instance.iteration,
            collective=instance.collective,
            group=instance.group,
            group_size=len(instance.members),
            size_bytes=instance.size_bytes,
            algorithm=instance.algorithm,
            flows=len(instance.flows),
            wire_bytes=instance.wire_bytes,
            first_issue_s=first_issue_s,
            all_issued_s=all_issued_s,
            start_s=start_s,
            end_s=end_s,
            job=instance.job,
        )

    @property
    def time_s(self) -> float:
        """From start_s to the last byte: a collective starts when every member has issued it
        (nccl-tests times collectives that all ranks entered), a send/recv when the send is
        issued (sends are eager: CollectiveInstance.timed_from_rank). The measured records
        (collectors.records, bandwidth_time_s) use the same origin."""
        return max(0.0, self.end_s - self.start_s)


@dataclass(frozen=True)
class RankInput:
    """One rank's trace: open_pass(iteration) yields its nodes in record order."""

    open_pass: Callable[[int], Iterator[NodeInfo]]
    where: str


class _Live:
    """A matched instance whose flows are not all done."""

    __slots__ = (
        "dependents",
        "first_flow",
        "flows_left",
        "instance",
        "issue_times",
        "node_waiters",
        "rank_remaining",
        "waiting",
    )

    def __init__(self, instance: CollectiveInstance) -> None:
        self.instance = instance
        flows = instance.flows
        self.first_flow = flows[0].id if flows else 0
        self.flows_left = len(flows)
        self.waiting = [len(f.deps) + len(f.node_deps) for f in flows]
        self.dependents: dict[int, list[int]] = {}
        self.node_waiters: dict[NodeRef, list[int]] = {}
        self.rank_remaining = dict.fromkeys(instance.members, 0)
        self.issue_times: dict[int, float] = {}
        for index, flow in enumerate(flows):
            for dep in flow.deps:
                self.dependents.setdefault(dep, []).append(index)
            for ref in flow.node_deps:
                self.node_waiters.setdefault(ref, []).append(index)
            self.rank_remaining[flow.src] += 1
            if flow.dst != flow.src:
                self.rank_remaining[flow.dst] += 1


@dataclass(frozen=True)
class RankJob:
    """What a rank runs when several jobs share the fabric: its job's name, replay passes and
    start offset (target seconds after the replay starts)."""

    job: str
    iterations: int = 1
    start_s: float = 0.0


class JobSchedule:
    def __init__(
        self,
        ranks: Sequence[RankInput],
        groups: GroupTable,
        collectives: CollectivesParams | None = None,
        compute: ComputeParams | None = None,
        iterations: int = 1,
        keep_instances: bool = False,
        on_instance: Callable[[CollectiveInstance], None] | None = None,
        on_member_issued: Callable[[int, int, float], None] | None = None,
        sport_seed: int = 0,
        path: PathFn | None = None,
        rank_jobs: Sequence[RankJob] | None = None,
    ) -> None:
        """sport_seed: the source-port draw (emulator.schedule.sports; the scenario's run.seed);
        path: the fabric's paths, for a source-port policy that places flows (balanced).
        on_instance is told of every collective instance when it is matched, before any of
        its flows is released (a recorder registers the flows it will see events for);
        on_member_issued(instance id, rank, now) when a member rank reaches it in its trace (the
        rendezvous is the last member's: nccl-tests times a collective from there).
        rank_jobs: per rank its job, passes and start (several jobs on one fabric); default:
        every rank `iterations` passes from time 0, job ""."""
        self.on_instance = on_instance
        self.on_member_issued = on_member_issued
        self.collectives = collectives or CollectivesParams()
        self.compute = compute or ComputeParams()
        self.iterations = iterations
        self.keep_instances = keep_instances
        self.wheres = [r.where for r in ranks]
        for rank in self.compute.stragglers:
            if int(rank) >= len(ranks):
                raise InputError(
                    f"compute.stragglers: rank {rank} is not in the trace set ({len(ranks)} ranks)"
                )
        sports = SPORT_POLICIES[self.collectives.sport_policy](
            self.collectives.udp_sport_min, self.collectives.udp_sport_max, sport_seed, path
        )
        self.expander = FlowExpander(self.collectives, sports)
        self.matcher = Matcher(groups, self._on_match, lambda rank: self.wheres[rank])
        if rank_jobs is not None and len(rank_jobs) != len(ranks):
            raise ValueError(f"rank_jobs: {len(rank_jobs)} entries for {len(ranks)} ranks")
        self.rank_jobs = tuple(rank_jobs or [RankJob("", iterations)] * len(ranks))
        self.feeders = [
            RankFeeder(
                rank,
                source.open_pass,
                iterations=self.rank_jobs[rank].iterations,
                window_nodes=self.compute.window_nodes,
                ready_policy=self.compute.ready_policy,
                where=source.where,
                on_read=self._reader(rank),
            )
            for rank, source in enumerate(ranks)
        ]
        self.results: list[InstanceResult] = []
        self.instances: list[CollectiveInstance] = []
        self.nodes_completed = 0
        self.now = 0.0
        self._next_instance = 0
        self._live: dict[int, _Live] = {}
        self._flow_owner: dict[int, _Live] = {}
        self._comm_nodes: dict[tuple[int, int, int], _Live] = {}  # (iteration, rank, node id)
        self._issued_early: set[tuple[int, int, int]] = set()
        self._delays: dict[int, tuple[int, int, str]] = {}  # token -> rank, node id, stream
        self._next_token = 0
        self._busy: set[tuple[int, str]] = set()
        self._stream_queue: dict[tuple[int, str], deque[NodeInfo]] = {}
        self._dirty: set[int] = set(range(len(ranks)))
        self._actions: list[Action] = []
        # a job that starts later holds its ranks until a timer (rank -1: no rank's compute)
        self._holds: dict[int, int] = {}  # token -> rank
        for held, placed in enumerate(self.rank_jobs):
            if placed.start_s > 0:
                token = self._next_token
                self._next_token += 1
                self._holds[token] = held
                self._actions.append(StartDelay(token, -1, 0, -1, placed.start_s))
        self._held = set(self._holds.values())

    # -- driver interface ----------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return not self._live and all(f.finished for f in self.feeders)

    def poll(self, now: float) -> list[Action]:
        """Issue every node that became ready; returns the delays and flows to start now."""
        self.now = now
        while self._dirty:
            rank = min(self._dirty)
            self._dirty.discard(rank)
            if rank in self._held:
                continue
            feeder = self.feeders[rank]
            for node in feeder.take_ready():
                self._issue(rank, feeder.iteration, node)
        actions, self._actions = self._actions, []
        return actions

    def delay_done(self, token: int, now: float) -> None:
        self.now = now
        if token in self._holds:  # a later job's start
            rank = self._holds.pop(token)
            self._held.discard(rank)
            self._dirty.add(rank)
            return
        rank, node_id, stream = self._delays.pop(token)
        self._complete_node(rank, node_id)
        if stream != Stream.NONE:
            key = (rank, stream)
            queue = self._stream_queue.get(key)
            if queue:
                self._start_delay(rank, queue.popleft(), stream)
            else:
                self._busy.discard(key)

    def flow_done(self, flow_id: int, now: float) -> None:
        self.now = now
        live = self._flow_owner.pop(flow_id)
        index = flow_id - live.first_flow
        flow = live.instance.flows[index]
        live.flows_left -= 1
        for child in live.dependents.get(flow_id, ()):
            self._release(live, child)
        for rank in {flow.src, flow.dst}:
            live.rank_remaining[rank] -= 1
            if live.rank_remaining[rank] == 0 and rank in live.issue_times:
                self._complete_comm_node(live, rank)
        self._maybe_finish(live)

    def unstall(self) -> bool:
        """The driver has nothing running: read further ahead; False when that cannot help."""
        progressed = False
        for rank, feeder in enumerate(self.feeders):
            if feeder.extend():
                self._dirty.add(rank)
                progressed = True
        return progressed

    def stall_error(self) -> PlanError:
        """Explain why the job cannot progress (cycle, unmatched communication, ...)."""
        for feeder in self.feeders:
            cycle = feeder.find_cycle()
            if cycle:
                names = ", ".join(str(i) for i in sorted(cycle)[:12])
                return PlanError(f"{feeder.where}: dependency cycle among nodes {names}")
        reasons = self.matcher.unmatched()
        if reasons:
            return PlanError("communication cannot be matched: " + "; ".join(reasons))
        waiting = []
        for live in list(self._live.values())[:4]:
            instance = live.instance
            missing = [
                f"rank {rank} node {node_id}"
                for rank, node_id in instance.nodes
                if rank not in live.issue_times
            ]
            if missing:
                waiting.append(
                    f"{instance.collective} #{instance.id} of group {instance.group or '<world>'} "
                    f"(iteration {instance.iteration}) waits for {', '.join(missing[:4])}, whose "
                    "dependencies never complete"
                )
        if waiting:
            return PlanError("the ranks wait for each other (deadlock): " + "; ".join(waiting))
        stuck = [
            f"{f.where}: node(s) {[n.id for n in f.unfinished()]}"
            for f in self.feeders
            if not f.finished
        ]
        return PlanError("the schedule cannot progress: " + "; ".join(stuck[:4]))

    # -- issuing -------------------------------------------------------------------------------
    def _reader(self, rank: int) -> Callable[[int, NodeInfo], None]:
        def on_read(iteration: int, node: NodeInfo) -> None:
            if node.kind != NodeKind.DELAY:
                self.matcher.register(rank, iteration, node)

        return on_read

    def _issue(self, rank: int, iteration: int, node: NodeInfo) -> None:
        if node.kind == NodeKind.DELAY:
            stream = node.stream
            if node.delay_s <= 0.0:
                self._complete_node(rank, node.id)
            elif stream == Stream.NONE or not self.compute.serialize_compute:
                self._start_delay(rank, node, Stream.NONE)
            elif (rank, stream) in self._busy:
                self._stream_queue.setdefault((rank, stream), deque()).append(node)
            else:
                self._busy.add((rank, stream))
                self._start_delay(rank, node, stream)
            return
        key = (iteration, rank, node.id)
        live = self._comm_nodes.get(key)
        if live is None:
            self._issued_early.add(key)
        else:
            self._comm_issued(live, rank, node.id)

    def _start_delay(self, rank: int, node: NodeInfo, stream: str) -> None:
        token = self._next_token
        self._next_token += 1
        self._delays[token] = (rank, node.id, stream)
        delay_s = node.delay_s * self.compute.compute_factor(rank)  # 1.0 unless a straggler
        self._actions.append(
            StartDelay(token, rank, self.feeders[rank].iteration, node.id, delay_s)
        )

    def _complete_node(self, rank: int, node_id: int) -> None:
        self.feeders[rank].complete(node_id)
        self.nodes_completed += 1
        self._dirty.add(rank)

    # -- collectives ---------------------------------------------------------------------------
    def _on_match(self, op: MatchedOp) -> None:
        if op.collective == "SEND_RECV":
            transfers = [Transfer(0, 0, 1, op.size_bytes)]
            algorithm = "p2p"
        else:
            algorithm = self.collectives.algorithm_for(op.collective)
            transfers = transfers_for(
                op.collective,
                algorithm,
                len(op.members),
                op.size_bytes,
                op.root,
                self.collectives,
            )
        instance_id = self._next_instance
        self._next_instance += 1
        flows = self.expander.expand(
            transfers, op.members, instance_id, op.iteration, op.nodes, op.rendezvous
        )
        instance = CollectiveInstance(
            id=instance_id,
            iteration=op.iteration,
            collective=op.collective,
            group=op.group,
            members=op.members,
            size_bytes=op.size_bytes,
            algorithm=algorithm,
            nodes=op.nodes,
            flows=tuple(flows),
            root=op.members[op.root] if op.collective != "SEND_RECV" else op.members[0],
            job=self.rank_jobs[op.members[0]].job,
        )
        if self.keep_instances:
            self.instances.append(instance)
        if self.on_instance is not None:
            self.on_instance(instance)
        live = _Live(instance)
        self._live[instance_id] = live
        for flow in flows:
            self._flow_owner[flow.id] = live
        for rank, node_id in op.nodes:
            key = (op.iteration, rank, node_id)
            self._comm_nodes[key] = live
        for rank, node_id in op.nodes:
            key = (op.iteration, rank, node_id)
            if key in self._issued_early:
                self._issued_early.discard(key)
                self._comm_issued(live, rank, node_id)

    def _comm_issued(self, live: _Live, rank: int, node_id: int) -> None:
        live.issue_times[rank] = self.now
        if self.on_member_issued is not None:
            self.on_member_issued(live.instance.id, rank, self.now)
        for index in live.node_waiters.pop((rank, node_id), ()):
            self._release(live, index)
        if live.rank_remaining[rank] == 0:
            self._complete_comm_node(live, rank)
        self._maybe_finish(live)

    def _release(self, live: _Live, index: int) -> None:
        live.waiting[index] -= 1
        if live.waiting[index] == 0:
            self._actions.append(live.instance.flows[index])

    def _complete_comm_node(self, live: _Live, rank: int) -> None:
        instance = live.instance
        node_id = instance.nodes[instance.members.index(rank)][1]
        del self._comm_nodes[(instance.iteration, rank, node_id)]
        self._complete_node(rank, node_id)

    def _maybe_finish(self, live: _Live) -> None:
        instance = live.instance
        if live.flows_left or len(live.issue_times) < len(instance.members):
            return
        if instance.id not in self._live:
            return
        del self._live[instance.id]
        times = live.issue_times.values()
        first = instance.timed_from_rank
        start_s = max(times) if first is None else live.issue_times[first]
        self.results.append(
            InstanceResult.of(
                instance,
                first_issue_s=min(times),
                all_issued_s=max(times),
                start_s=start_s,
                end_s=self.now,
            )
        )
