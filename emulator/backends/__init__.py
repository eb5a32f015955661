"""Backends: what a planned workload runs on, behind one seam (emulator.backends.base).

| name    | what it is                                                          | module          |
|---------|---------------------------------------------------------------------|-----------------|
| `netns` | the emulated Clos in network namespaces on this machine, the engine | backends.engine |
| `dut`   | ranks on interfaces cabled to a switch under test, the engine       | backends.engine |
| `sim`   | a packet-level simulation of the Clos, the same transport code      | backends.sim    |
| `cluster` | the emulated Clos split over the servers of a Ray cluster, the engine | backends.cluster |

A new backend is a Backend subclass registered here; the run (emulator.run.execute), the study
and the collectors do not change. Read emulator/backends/base.py first: it says what a backend must do.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.backends.base import (
    Backend,
    BackendContext,
    ReplayJob,
    Session,
    SessionReport,
)
from emulator.backends.cluster import ClusterBackend
from emulator.backends.engine import DutEngineBackend, NetnsEngineBackend
from emulator.backends.sim import SimBackend
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec, DutSpec

BACKENDS: dict[str, Callable[[], Backend]] = {
    NetnsEngineBackend.name: NetnsEngineBackend,
    DutEngineBackend.name: DutEngineBackend,
    SimBackend.name: SimBackend,
    ClusterBackend.name: ClusterBackend,
}
# the fabric kind each backend runs
_FABRIC_OF: dict[str, type | tuple[type, ...]] = {
    "netns": ClosSpec,
    "dut": DutSpec,
    "sim": ClosSpec,
    "cluster": (ClosSpec, DutSpec),
}


def backend_name(scenario: Scenario, override: str | None = None) -> str:
    """The backend that runs the scenario: `override` (the command line), else run.backend,
    else the fabric's own (a Clos is emulated, a DUT is driven; with run.cluster, over the
    cluster); a backend that cannot run the fabric is refused in one line."""
    fabric = scenario.fabric
    name = override or scenario.run.backend
    if name == "auto" and scenario.run.cluster.servers:
        name = "cluster"
    if name == "auto":
        if isinstance(fabric, ClosSpec):
            return "netns"
        if isinstance(fabric, DutSpec):
            return "dut"
        raise EnvironmentProblem(f"fabric: no backend runs a {type(fabric).__name__}")
    if name not in BACKENDS:
        raise ScenarioError(f"run.backend: {name!r} is not one of {', '.join(sorted(BACKENDS))}")
    if not isinstance(fabric, _FABRIC_OF[name]):
        kind = "clos" if _FABRIC_OF[name] is ClosSpec else "dut"
        raise ScenarioError(
            f"run.backend: {name} runs a {kind} fabric, and this scenario's fabric is "
            f"{type(fabric).__name__}"
        )
    return name


def backend_for(scenario: Scenario, override: str | None = None) -> Backend:
    return BACKENDS[backend_name(scenario, override)]()


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendContext",
    "ReplayJob",
    "Session",
    "SessionReport",
    "backend_for",
    "backend_name",
]
