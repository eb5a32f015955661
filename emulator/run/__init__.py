"""`emulate run`: a scenario end to end (see emulator.run.pipeline)."""

from emulator.run.options import RunOptions, RunResult
from emulator.run.pipeline import run_scenario

__all__ = ["RunOptions", "RunResult", "run_scenario"]
