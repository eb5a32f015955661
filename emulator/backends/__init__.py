"""Backends: what a planned workload runs on, behind one seam (emulator.backends.base).

| name    | what it is                                                          | module          |
|---------|---------------------------------------------------------------------|-----------------|
| `netns` | the emulated Clos in network namespaces on this machine, the engine | backends.engine |
| `dut`   | ranks on interfaces cabled to a switch under test, the engine       | backends.engine |

A new backend (the packet-level simulator, the engine over several servers on Ray) is a Backend
subclass registered here; the run (emulator.run.execute), the study and the collectors do not
change. Read emulator/backends/base.py first: it says what a backend must do.
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
from emulator.backends.engine import DutEngineBackend, NetnsEngineBackend
from emulator.errors import EnvironmentProblem
from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec, DutSpec

BACKENDS: dict[str, Callable[[], Backend]] = {
    NetnsEngineBackend.name: NetnsEngineBackend,
    DutEngineBackend.name: DutEngineBackend,
}


def backend_for(scenario: Scenario) -> Backend:
    """The backend the scenario's fabric asks for: a Clos is emulated, a DUT is driven."""
    fabric = scenario.fabric
    if isinstance(fabric, ClosSpec):
        return BACKENDS["netns"]()
    if isinstance(fabric, DutSpec):
        return BACKENDS["dut"]()
    raise EnvironmentProblem(f"fabric: no backend runs a {type(fabric).__name__}")


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendContext",
    "ReplayJob",
    "Session",
    "SessionReport",
    "backend_for",
]
