"""`emulate run`: a scenario end to end, above the seam (emulator.backends.base).

pipeline.py  run_scenario: the backend's checks, the plan, the backend's timescale (with the
             probes' short replays), the reference simulation, then run_planned
execute.py   run_planned: open the backend, replay through it, judge, write the results folder
replay.py    the planned workload's driver and what the run records of it
options.py   what a run is asked (RunOptions) and returns (RunResult)
tester.py    the tester's side of a finished run: per-QP counters, PFC frames, expectations
"""

from __future__ import annotations

from emulator.run.options import RunOptions, RunResult
from emulator.run.pipeline import run_scenario

__all__ = ["RunOptions", "RunResult", "run_scenario"]
