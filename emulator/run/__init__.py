"""`emulate run`: a scenario end to end (see emulator.run.pipeline).

run_scenario is imported on first use (PEP 562), so that importing one of this package's modules
(a backend imports emulator.run.interrupts) does not import the whole pipeline with it.
"""

from __future__ import annotations

from typing import Any

from emulator.run.options import RunOptions, RunResult

__all__ = ["RunOptions", "RunResult", "run_scenario"]


def __getattr__(name: str) -> Any:
    if name == "run_scenario":
        from emulator.run.pipeline import run_scenario

        return run_scenario
    raise AttributeError(f"module 'emulator.run' has no attribute {name!r}")
