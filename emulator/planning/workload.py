"""The scenario's work (a trace set on disk, traffic patterns, or both), the driver of a run and
its ideal-time plan.

A generated workload is written to a private temporary folder that lives as long as the run. The
schedule is built twice from the same trace set: once for the ideal-time model (planning, before
the fabric exists) and once to drive the engine. Their collective instances are paired by what
identifies an instance independently of matching order: its replay pass and its trace nodes
(a traffic message: its number on its QP and its QP).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emulator.errors import ScenarioError
from emulator.planning.iterations import IterationNumbering
from emulator.scenario.jobs import JobPlacement, place_jobs
from emulator.scenario.model import Scenario
from emulator.scenario.workload_spec import WorkloadSpec
from emulator.schedule.fabric import path_for_fabric
from emulator.schedule.fluid import PathFn
from emulator.schedule.ideal import IdealResult, simulate, yardstick
from emulator.schedule.job import JobSchedule, RankJob
from emulator.schedule.multijob import JobsSource, PlacedJob, jobs_source
from emulator.schedule.plan import CollectiveInstance, NodeRef
from emulator.schedule.tracesource import TraceSource, open_trace_set, rank_files
from emulator.traffic.schedule import TRAFFIC_ID_BASE, CombinedDriver, TrafficSchedule
from emulator.traffic.spec import TrafficPattern
from emulator.traffic.streams import check_streams, streams_end_s
from emulator.transport.qp_profile import DEFAULT_PROFILE, QpProfile
from fabrics.ownership import owned_folder

InstanceKey = tuple[int, tuple[NodeRef, ...]]
# the work's trace sets: one prefix, one per job (`workloads:`), or None (traffic patterns only)
Traces = str | tuple[str, ...] | None


def instance_key(instance: CollectiveInstance) -> InstanceKey:
    return (instance.iteration, instance.nodes)


@dataclass
class PlannedWorkload:
    """The trace set and/or traffic patterns, their ideal-time plan, and a factory for the
    driver of a run."""

    prefix: Traces
    world_size: int
    ideal: IdealResult
    ideal_time_s: dict[InstanceKey, float]
    collectives_by_type: Counter[str]
    numbering: Numbering
    line_rate_bps: float
    warnings: list[str] = field(default_factory=list)
    profiles: tuple[QpProfile, ...] = (DEFAULT_PROFILE,)
    # a traffic QP's (its instances' nodes) last message in the ideal run: time, bytes
    last_message_ideal: dict[tuple[NodeRef, ...], tuple[float, int]] = field(default_factory=dict)
    # every job's hosts, passes and start (one job: the scenario's workload on hosts 0..n-1)
    placements: tuple[JobPlacement, ...] = ()

    @property
    def collectives(self) -> int:
        return sum(self.collectives_by_type.values())

    def ideal_time(self, instance: CollectiveInstance) -> float | None:
        """The instance's ideal time. A traffic message the ideal run did not post (a
        duration-bound QP posts as many as fit) gets its QP's last ideal time, scaled by size."""
        exact = self.ideal_time_s.get(instance_key(instance))
        if exact is not None or instance.id < TRAFFIC_ID_BASE:
            return exact
        last = self.last_message_ideal.get(instance.nodes)
        if last is None:
            return None
        time_s, size = last
        return time_s * instance.size_bytes / size if size else time_s

    def schedule(
        self,
        scenario: Scenario,
        on_instance: Callable[[CollectiveInstance], None],
        on_member_issued: Callable[[int, int, float], None] | None = None,
    ) -> Driver:
        """A fresh driver over the same work (the ideal model consumed the first one)."""
        return _driver(
            scenario,
            self.prefix,
            self.placements,
            self.line_rate_bps,
            on_instance,
            on_member_issued,
            False,
        )[0]


class Numbering:
    """Iterations of a trace's instances (IterationNumbering, one per job: each job counts its
    own steps) and of traffic messages (their number on their QP)."""

    def __init__(self, trace: Mapping[str, IterationNumbering], messages_per_qp: int) -> None:
        self.trace = dict(trace)
        self.messages_per_qp = messages_per_qp

    @property
    def total(self) -> int:
        steps = max((t.total for t in self.trace.values()), default=0)
        return max(steps, self.messages_per_qp, 1)

    def restart(self) -> None:
        for numbering in self.trace.values():
            numbering.restart()

    def number(self, inst: CollectiveInstance) -> int:
        trace = self.trace.get(inst.job)
        if inst.id >= TRAFFIC_ID_BASE or trace is None:
            return inst.iteration
        return trace.number(inst)


Driver = JobSchedule | TrafficSchedule | CombinedDriver


def traffic_of(driver: Driver) -> TrafficSchedule | None:
    """The traffic patterns' schedule inside a run's driver, if it has one."""
    if isinstance(driver, CombinedDriver):
        return driver.traffic
    return driver if isinstance(driver, TrafficSchedule) else None


def _driver(
    scenario: Scenario,
    prefix: Traces,
    placements: Sequence[JobPlacement],
    line_rate_bps: float,
    on_instance: Callable[[CollectiveInstance], None] | None,
    on_member_issued: Callable[[int, int, float], None] | None,
    keep_instances: bool,
) -> tuple[Driver, TraceSource | JobsSource | None, JobSchedule | None, TrafficSchedule | None]:
    job = source = traffic = None
    if prefix is not None:
        source = _trace_source(scenario, prefix, placements)
        job = JobSchedule(
            source.ranks,
            source.groups,
            scenario.collectives,
            scenario.compute,
            scenario.workload.iterations if scenario.workload else 1,
            keep_instances=keep_instances,
            on_instance=on_instance,
            on_member_issued=on_member_issued,
            sport_seed=scenario.run.seed,
            path=_lazy_path(scenario.fabric, source.world_size),
            rank_jobs=_rank_jobs(scenario, source),
        )
    if scenario.traffic or scenario.streams:
        c = scenario.collectives
        traffic = TrafficSchedule(
            scenario.traffic,
            line_rate_bps=line_rate_bps,
            # the run lasts until the streams' last frames have arrived (they have no flows)
            hold_until_s=streams_end_s(scenario.streams, line_rate_bps),
            sport_range=(c.udp_sport_min, c.udp_sport_max),
            sport_seed=scenario.run.seed,
            on_instance=on_instance,
            on_member_issued=on_member_issued,
            keep_instances=keep_instances,
        )
    if job is not None and traffic is not None:
        return CombinedDriver(job, traffic), source, job, traffic
    driver = job if job is not None else traffic
    assert driver is not None
    return driver, source, job, traffic


def _trace_source(
    scenario: Scenario, prefix: str | tuple[str, ...], placements: Sequence[JobPlacement]
) -> TraceSource | JobsSource:
    if isinstance(prefix, str):
        return open_trace_set(prefix, _comm_groups(scenario, scenario.workload), scenario.compute)
    if not placements:  # planning: place the jobs first (plan_workload)
        raise ValueError("several jobs need their placements")
    sources = [
        open_trace_set(p, _comm_groups(scenario, job), scenario.compute)
        for p, job in zip(prefix, scenario.jobs, strict=True)
    ]
    placed = [
        PlacedJob(pl.name, src, pl.hosts, pl.iterations, pl.start_s)
        for pl, src in zip(placements, sources, strict=True)
    ]
    return jobs_source(placed, 1 + max(h for pl in placements for h in pl.hosts))


def _rank_jobs(scenario: Scenario, source: TraceSource | JobsSource) -> tuple[RankJob, ...]:
    if isinstance(source, JobsSource):
        return source.rank_jobs
    iterations = scenario.workload.iterations if scenario.workload else 1
    return (RankJob(scenario.name, iterations),) * source.world_size


def job_rank_counts(scenario: Scenario, prefix: Traces) -> list[int]:
    """Each job's rank count (its trace set's files), to place it."""
    if prefix is None:
        return []
    prefixes = (prefix,) if isinstance(prefix, str) else prefix
    return [len(rank_files(p)[0]) for p in prefixes]


def place(scenario: Scenario, prefix: Traces, fabric_ranks: int) -> tuple[JobPlacement, ...]:
    """Every job's hosts (ScenarioError naming `workloads[i].hosts` when one does not fit)."""
    counts = job_rank_counts(scenario, prefix)
    if not scenario.several_jobs:
        jobs = scenario.jobs
        if not jobs:
            return ()
        return (JobPlacement(jobs[0].name, tuple(range(counts[0])), jobs[0].iterations, 0.0),)
    try:
        return tuple(place_jobs(scenario.workloads, counts, fabric_ranks))
    except ValueError as exc:
        raise ScenarioError(f"{scenario.source or 'scenario'}: {exc}") from None


def _lazy_path(fabric: object, ranks: int) -> PathFn:
    """The fabric's paths, built when a source-port policy first asks (balanced does; building
    a large Clos costs, and a fabric without enough hosts is refused with its own message
    later)."""
    built: list[PathFn] = []

    def path(src: int, dst: int, sport: int) -> Sequence[tuple[Hashable, float]]:
        if not built:
            built.append(path_for_fabric(fabric, ranks))
        return built[0](src, dst, sport)

    return path


def _comm_groups(scenario: Scenario, workload: WorkloadSpec | None) -> Path | None:
    groups = workload.comm_groups if workload else None
    return scenario.resolve(groups) if groups else None


@contextlib.contextmanager
def trace_prefix(scenario: Scenario) -> Iterator[Traces]:
    """The trace set's prefix: the scenario's trace, a generated set in a temporary folder, one
    of those per job (`workloads:`), or None when the scenario has traffic patterns only."""
    if scenario.several_jobs:
        with contextlib.ExitStack() as stack:
            prefixes = []
            for i, job in enumerate(scenario.jobs):
                prefix = stack.enter_context(_job_prefix(scenario, job, f"{i}-{job.name}"))
                assert prefix is not None  # a job always has a trace or a generator
                prefixes.append(prefix)
            yield tuple(prefixes)
        return
    with _job_prefix(scenario, scenario.workload, "") as prefix:
        yield prefix


@contextlib.contextmanager
def _job_prefix(
    scenario: Scenario, workload: WorkloadSpec | None, label: str
) -> Iterator[str | None]:
    if workload is None:
        yield None
        return
    if workload.trace is not None:
        yield str(scenario.resolve(workload.trace))
        return
    from emulator.workloads.params import kind_of
    from emulator.workloads.registry import write_workload

    with owned_folder("emulate-run-") as folder:  # `emulate clean` removes it after a kill
        prefix = f"{folder}/{label + '-' if label else ''}{kind_of(workload.generate)}"
        write_workload(workload.generate, prefix)
        yield prefix


def generated_steps(workload: WorkloadSpec | None) -> int | None:
    """Training steps per pass of a generated trace (its writer knows them), else None."""
    generate = workload.generate if workload is not None else None
    steps = getattr(generate, "iterations", None) if generate is not None else None
    return steps if isinstance(steps, int) else None


def _check_pairs_cross_the_dut(scenario: Scenario, index: int, pattern: TrafficPattern) -> None:
    """Ranks sharing a DUT port reach each other inside the port's namespace, never through
    the switch: a pattern asking for that traffic is refused, not run without the DUT."""
    from fabrics.spec import DutSpec

    fabric = scenario.fabric
    if not isinstance(fabric, DutSpec) or fabric.ranks_per_interface == 1:
        return
    for src, dst in pattern.flow_pairs():
        if fabric.port_of(src) == fabric.port_of(dst):
            raise ScenarioError(
                f"{scenario.source or 'scenario'}: traffic[{index}] ({pattern.name}): ranks "
                f"{src} and {dst} share interface {fabric.rank_interface(src)}, so their "
                "traffic would not cross the DUT; pair ranks on different ports"
            )


def plan_workload(
    scenario: Scenario, prefix: Traces, fabric_ranks: int, line_rate_bps: float = 100e9
) -> PlannedWorkload:
    """Plan the work on the scenario's fabric; refuse ranks the fabric does not have."""
    where = scenario.source or "scenario"
    if not scenario.several_jobs:
        n = job_rank_counts(scenario, prefix)[0] if prefix is not None else 0
        if n > fabric_ranks:
            raise ScenarioError(
                f"{where}: fabric: the trace set has {n} ranks but the fabric has "
                f"{fabric_ranks} hosts"
            )
    placements = place(scenario, prefix, fabric_ranks)
    driver, source, job, traffic = _driver(
        scenario, prefix, placements, line_rate_bps, None, None, True
    )
    n = source.world_size if source is not None else 0
    for i, pattern in enumerate(scenario.traffic):
        if pattern.max_rank >= fabric_ranks:
            raise ScenarioError(
                f"{where}: traffic[{i}] ({pattern.name}): rank {pattern.max_rank} is not on the "
                f"fabric (ranks 0..{fabric_ranks - 1})"
            )
        mtu = pattern.path_mtu_bytes
        if mtu is not None and mtu > scenario.transport.path_mtu_bytes:
            raise ScenarioError(
                f"{where}: traffic[{i}].path_mtu_bytes: {mtu} is above transport.path_mtu_bytes "
                f"({scenario.transport.path_mtu_bytes}), the largest packet the receivers take"
            )
        n = max(n, pattern.max_rank + 1)
        _check_pairs_cross_the_dut(scenario, i, pattern)
    if scenario.streams:
        check_streams(
            scenario.streams, fabric_ranks, getattr(scenario.fabric, "mtu_bytes", None), where
        )
        n = max(n, *(max(s.src, s.dst) + 1 for s in scenario.streams))
    ideal = simulate(
        driver,
        path_for_fabric(scenario.fabric, n),
        max_rate_bps=traffic.max_rate_bps if traffic is not None else None,
        network=yardstick(scenario.run.ideal, line_rate_bps),
    )
    instances = [*(job.instances if job else ()), *(traffic.instances if traffic else ())]
    by_id = {inst.id: inst for inst in instances}
    times = {instance_key(by_id[r.id]): r.time_s for r in ideal.instances}
    warnings = [*source.warnings] if source is not None else []
    for feeder in job.feeders if job is not None else ():
        warnings.extend(feeder.warnings)
    trace_numbering = {}
    if job is not None:
        for spec in scenario.jobs:
            mine = [inst for inst in job.instances if inst.job == spec.name]
            trace_numbering[spec.name] = IterationNumbering(mine, generated_steps(spec))
    messages = 1 + max((i.iteration for i in (traffic.instances if traffic else ())), default=0)
    last: dict[tuple[NodeRef, ...], tuple[float, int]] = {}
    for r in ideal.instances:
        if r.id >= TRAFFIC_ID_BASE:
            last[by_id[r.id].nodes] = (r.time_s, r.size_bytes)
    return PlannedWorkload(
        prefix,
        n,
        ideal,
        times,
        Counter(inst.collective for inst in instances),
        Numbering(trace_numbering, messages),
        line_rate_bps,
        list(dict.fromkeys(warnings)),
        (DEFAULT_PROFILE, *(traffic.profiles if traffic else ())),
        last,
        placements,
    )
