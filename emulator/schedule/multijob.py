"""Several jobs' trace sets as one source over the fabric's hosts (`workloads:`).

Each job keeps its own trace files, process groups and rank numbering; this module moves them
onto the hosts the job was placed on: host h runs rank r of the job placed there, reads that
rank's file, and sees its send/recv peers as hosts. A job's process group `pg` becomes the group
`<job>/pg` (its world: `<job>`) with the job's hosts as members, so two jobs that both use group
"0" never match each other's collectives. A host no job uses reads an empty trace. The schedule
above sees one trace set; every instance knows its job through RankJob.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from emulator.errors import PlanError
from emulator.schedule.job import RankInput, RankJob
from emulator.schedule.matching import WORLD, GroupTable
from emulator.schedule.nodes import NodeInfo, NodeKind
from emulator.schedule.tracesource import TraceSource


@dataclass(frozen=True)
class PlacedJob:
    """One job's trace set and where it runs."""

    name: str
    source: TraceSource
    hosts: tuple[int, ...]  # rank i runs on hosts[i]
    iterations: int = 1
    start_s: float = 0.0


class JobGroups(GroupTable):
    """The process groups of every job, named `<job>/<pg>`, with hosts as members."""

    def __init__(self, world_size: int, jobs: Sequence[PlacedJob]) -> None:
        super().__init__(world_size, {}, "jobs")
        self._job_of_host: dict[int, tuple[PlacedJob, int]] = {}
        for job in jobs:
            for rank, host in enumerate(job.hosts):
                self._job_of_host[host] = (job, rank)

    def members(
        self, pg_name: str | None, rank: int, node: NodeInfo, where: str
    ) -> tuple[str, tuple[int, ...]]:
        job, local = self._job_of_host[rank]
        group, members = job.source.groups.members(pg_name, local, node, where)
        name = job.name if group == WORLD else f"{job.name}/{group}"
        return name, tuple(job.hosts[m] for m in members)


@dataclass
class JobsSource:
    """What a JobSchedule needs from a trace set, for several jobs on `world_size` hosts."""

    jobs: tuple[PlacedJob, ...]
    world_size: int
    ranks: list[RankInput]
    groups: JobGroups
    rank_jobs: tuple[RankJob, ...]

    @property
    def warnings(self) -> list[str]:
        return [f"job {job.name}: {w}" for job in self.jobs for w in job.source.warnings]


def jobs_source(jobs: Sequence[PlacedJob], world_size: int) -> JobsSource:
    """One source over hosts 0..world_size-1 (hosts placed by emulator.scenario.jobs)."""
    ranks = [RankInput(_idle, f"host {h} (no job)") for h in range(world_size)]
    rank_jobs = [RankJob("", 1, 0.0)] * world_size
    for job in jobs:
        if len(job.hosts) != job.source.world_size:
            raise ValueError(
                f"job {job.name}: {job.source.world_size} ranks on {len(job.hosts)} hosts"
            )
        for rank, host in enumerate(job.hosts):
            rank_input = job.source.ranks[rank]
            where = f"{rank_input.where} (job {job.name}, rank {rank} on host {host})"
            ranks[host] = RankInput(_on_hosts(rank_input, job, where), where)
            rank_jobs[host] = RankJob(job.name, job.iterations, job.start_s)
    return JobsSource(tuple(jobs), world_size, ranks, JobGroups(world_size, jobs), tuple(rank_jobs))


def _idle(iteration: int) -> Iterator[NodeInfo]:
    return iter(())


def _on_hosts(
    rank_input: RankInput, job: PlacedJob, where: str
) -> Callable[[int], Iterator[NodeInfo]]:
    """The rank's passes with its send/recv peers moved from the job's ranks to their hosts."""
    world = len(job.hosts)

    def open_pass(iteration: int) -> Iterator[NodeInfo]:
        for node in rank_input.open_pass(iteration):
            comm = node.comm
            if comm is not None and node.kind in (NodeKind.SEND, NodeKind.RECV):
                moved = {}
                for name in ("src", "dst"):
                    peer = getattr(comm, name)
                    if peer is None:
                        continue
                    if not 0 <= peer < world:
                        raise PlanError(
                            f"{where}: {node.kind} node {node.id} has comm_{name}={peer} but "
                            f"job {job.name} has {world} rank(s)"
                        )
                    moved[name] = job.hosts[peer]
                if moved:  # a copy: the job's own source may hand out the same node again
                    node = NodeInfo(
                        node.index,
                        node.id,
                        node.name,
                        node.kind,
                        node.delay_s,
                        node.stream,
                        node.data_deps,
                        node.ctrl_deps,
                        node.start_time_us,
                        dataclasses.replace(comm, **moved),
                    )
            yield node

    return open_pass
