"""Scenario files: YAML mapped onto frozen dataclasses, with errors naming file, key and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario

__all__ = ["load_scenario"]


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file; raises ScenarioError naming the file, key path and line."""
    # The model composes every layer's section; import it only when a scenario is really read.
    from emulator.scenario.loader import compose_file, load_dataclass
    from emulator.scenario.model import Scenario

    source = Path(path)
    node = compose_file(source)
    scenario = load_dataclass(Scenario, node, source)
    return dataclasses.replace(scenario, source=source)
