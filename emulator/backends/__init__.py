"""Backends: what a planned workload runs on, behind one seam (emulator.backends.base).

| name      | what it is                                                              | folder   |
|-----------|-------------------------------------------------------------------------|----------|
| `netns`   | the emulated Clos in network namespaces on this machine, the engine     | netns/   |
| `dut`     | ranks on interfaces cabled to a switch under test, the engine           | dut/     |
| `sim`     | a packet-level simulation of the Clos, the same transport code          | sim/     |
| `cluster` | the emulated Clos (or DUT ports) over the servers of a Ray cluster      | cluster/ |
| `mininet` | ranks on the hosts of a Mininet network a user's script started, engine | mininet/ |
| `flow`    | the Clos as fluid queues and DCQCN rates (flow level), simulated time    | flow/    |

engine/ holds what the three engine-backed ones share; link_events.py what netns and sim share.
A new backend is a folder with a Backend subclass and one line in BACKENDS; the run
(emulator.run), the studies and the collectors do not change. Read base.py first: it says what a
backend must do.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.backends.base import (
    Backend,
    BackendContext,
    BackendOptions,
    ReplayJob,
    Session,
    SessionReport,
    TimescaleRequest,
)
from emulator.backends.cluster.backend import ClusterBackend
from emulator.backends.dut.backend import DutEngineBackend
from emulator.backends.flow.backend import FlowBackend
from emulator.backends.mininet.backend import MininetEngineBackend
from emulator.backends.netns.backend import NetnsEngineBackend
from emulator.backends.sim.backend import SimBackend
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec, DutSpec, MininetSpec

BACKENDS: dict[str, Callable[[], Backend]] = {
    NetnsEngineBackend.name: NetnsEngineBackend,
    DutEngineBackend.name: DutEngineBackend,
    SimBackend.name: SimBackend,
    ClusterBackend.name: ClusterBackend,
    MininetEngineBackend.name: MininetEngineBackend,
    FlowBackend.name: FlowBackend,
}
# the fabric kind each backend runs
_FABRIC_OF: dict[str, type | tuple[type, ...]] = {
    "netns": ClosSpec,
    "dut": DutSpec,
    "sim": ClosSpec,
    "cluster": (ClosSpec, DutSpec),
    "mininet": MininetSpec,
    "flow": ClosSpec,
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
        if isinstance(fabric, MininetSpec):
            return "mininet"
        raise EnvironmentProblem(f"fabric: no backend runs a {type(fabric).__name__}")
    if name not in BACKENDS:
        raise ScenarioError(f"run.backend: {name!r} is not one of {', '.join(sorted(BACKENDS))}")
    if not isinstance(fabric, _FABRIC_OF[name]):
        wanted = _FABRIC_OF[name]
        kinds = {ClosSpec: "clos", DutSpec: "dut", MininetSpec: "mininet"}
        kind = kinds[wanted] if isinstance(wanted, type) else "clos or dut"
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
    "BackendOptions",
    "ReplayJob",
    "Session",
    "SessionReport",
    "TimescaleRequest",
    "backend_for",
    "backend_name",
]
