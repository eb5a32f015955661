"""Plan a trace set end to end: stream it, match, decompose, and run the ideal-time model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.schedule.fabric import default_clos_spec, describe_fabric, path_for_fabric
from emulator.schedule.fluid import PathFn
from emulator.schedule.ideal import IdealResult, Network, simulate
from emulator.schedule.job import JobSchedule
from emulator.schedule.params import CollectivesParams, ComputeParams
from emulator.schedule.tracesource import open_trace_set


@dataclass
class PlanOutcome:
    result: IdealResult
    world_size: int
    fabric: str
    warnings: list[str] = field(default_factory=list)
    # several jobs on one fabric: per job its hosts, passes, start and ideal time
    jobs: list[dict[str, Any]] = field(default_factory=list)


def plan_trace(
    prefix: str | Path,
    comm_groups: str | Path | None = None,
    *,
    fabric: Any = None,
    path: PathFn | None = None,
    collectives: CollectivesParams | None = None,
    compute: ComputeParams | None = None,
    iterations: int = 1,
    sport_seed: int = 0,
    network: Network | None = None,
) -> PlanOutcome:
    """Plan with the given fabric spec or path function (default: non-blocking Clos, 100 Gb/s);
    `network`: the yardstick (emulator.schedule.ideal.simulate; default max-min on the paths)."""
    compute = compute or ComputeParams()
    source = open_trace_set(prefix, comm_groups, compute)
    n = source.world_size
    description = "custom path function"
    if path is None:
        fabric = fabric if fabric is not None else default_clos_spec(n)
        path = path_for_fabric(fabric, n)
        description = describe_fabric(fabric)
    job = JobSchedule(
        source.ranks,
        source.groups,
        collectives,
        compute,
        iterations,
        sport_seed=sport_seed,
        path=path,
    )
    result = simulate(job, path, network=network)
    warnings: list[str] = [*source.warnings]
    for feeder in job.feeders:
        warnings.extend(feeder.warnings)
    return PlanOutcome(result, n, description, _dedupe(warnings))


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))
