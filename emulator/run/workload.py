"""The scenario's workload as a trace set on disk, a live JobSchedule and its ideal-time plan.

A generated workload is written to a private temporary folder that lives as long as the run. The
schedule is built twice from the same trace set: once for the ideal-time model (planning, before
the fabric exists) and once to drive the engine. Their collective instances are paired by what
identifies an instance independently of matching order: its replay pass and its trace nodes.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from emulator.errors import ScenarioError
from emulator.run.iterations import IterationNumbering
from emulator.scenario.model import Scenario
from emulator.schedule.fabric import path_for_fabric
from emulator.schedule.ideal import IdealResult, simulate
from emulator.schedule.job import JobSchedule
from emulator.schedule.plan import CollectiveInstance, NodeRef
from emulator.schedule.tracesource import TraceSource, open_trace_set

InstanceKey = tuple[int, tuple[NodeRef, ...]]


def instance_key(instance: CollectiveInstance) -> InstanceKey:
    return (instance.iteration, instance.nodes)


@dataclass
class PlannedWorkload:
    """The trace set, its ideal-time plan, and a factory for the schedule that drives a run."""

    prefix: str
    source: TraceSource
    ideal: IdealResult
    ideal_time_s: dict[InstanceKey, float]
    collectives_by_type: Counter[str]
    numbering: IterationNumbering
    warnings: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.source.world_size

    @property
    def collectives(self) -> int:
        return sum(self.collectives_by_type.values())

    def schedule(
        self,
        scenario: Scenario,
        on_instance: Callable[[CollectiveInstance], None],
        on_member_issued: Callable[[int, int, float], None] | None = None,
    ) -> JobSchedule:
        """A fresh schedule over the same trace set (the ideal model consumed the first one)."""
        source = open_trace_set(self.prefix, _comm_groups(scenario), scenario.compute)
        return JobSchedule(
            source.ranks,
            source.groups,
            scenario.collectives,
            scenario.compute,
            scenario.workload.iterations,
            on_instance=on_instance,
            on_member_issued=on_member_issued,
        )


def _comm_groups(scenario: Scenario) -> Path | None:
    groups = scenario.workload.comm_groups
    return scenario.resolve(groups) if groups else None


@contextlib.contextmanager
def trace_prefix(scenario: Scenario) -> Iterator[str]:
    """The trace set's prefix: the scenario's trace, or a generated set in a temporary folder."""
    workload = scenario.workload
    if workload.trace is not None:
        yield str(scenario.resolve(workload.trace))
        return
    from emulator.workloads.params import kind_of
    from emulator.workloads.registry import write_workload

    with tempfile.TemporaryDirectory(prefix="emulate-run-") as folder:
        prefix = f"{folder}/{kind_of(workload.generate)}"
        write_workload(workload.generate, prefix)
        yield prefix


def generated_steps(scenario: Scenario) -> int | None:
    """Training steps per pass of a generated trace (its writer knows them), else None."""
    generate = scenario.workload.generate
    steps = getattr(generate, "iterations", None) if generate is not None else None
    return steps if isinstance(steps, int) else None


def plan_workload(scenario: Scenario, prefix: str, fabric_ranks: int) -> PlannedWorkload:
    """Plan the trace set on the scenario's fabric; refuse a set larger than the fabric."""
    source = open_trace_set(prefix, _comm_groups(scenario), scenario.compute)
    n = source.world_size
    if n > fabric_ranks:
        raise ScenarioError(
            f"{scenario.source or 'scenario'}: fabric: the trace set has {n} ranks but the "
            f"fabric has {fabric_ranks} hosts"
        )
    job = JobSchedule(
        source.ranks,
        source.groups,
        scenario.collectives,
        scenario.compute,
        scenario.workload.iterations,
        keep_instances=True,
    )
    ideal = simulate(job, path_for_fabric(scenario.fabric, n))
    by_id = {inst.id: inst for inst in job.instances}
    times = {instance_key(by_id[r.id]): r.time_s for r in ideal.instances}
    warnings = [*source.warnings]
    for feeder in job.feeders:
        warnings.extend(feeder.warnings)
    return PlannedWorkload(
        prefix,
        source,
        ideal,
        times,
        Counter(inst.collective for inst in job.instances),
        IterationNumbering(job.instances, generated_steps(scenario)),
        list(dict.fromkeys(warnings)),
    )
