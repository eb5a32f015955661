"""EngineBackend: what every backend the engine replays shares (netns, dut, mininet, cluster).

The engine's failure is the failure a run of theirs ends on (the pipeline writes partial
results for it), and the engine's transmit turns are a caveat where packets are spread
(emulator.backends.engine.caveats).
"""

from __future__ import annotations

from emulator.backends.base import Backend
from emulator.backends.engine.caveats import transmit_turn_caveats
from emulator.engine.coordinator import EngineFailure
from emulator.scenario.model import Scenario


class EngineBackend(Backend):
    """A backend whose traffic the engine sends: real packets through real sockets."""

    failures = (EngineFailure,)

    def warnings(self, scenario: Scenario) -> list[str]:
        return transmit_turn_caveats(scenario)
