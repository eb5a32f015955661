"""The replay loop of the backends that run in simulated time (the packet simulator, the flow
level): advance by a sample interval, hand the events and the counter samples over, keep the
progress line, stop at sim.time_limit_s of simulated time or run.deadline_s of wall time, and
end an interrupt or a limit as the run's error (emulator.backends.base: never raised)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Protocol

from emulator.backends.base import BackendContext, ReplayJob
from emulator.events import RunEvent
from emulator.sim.replay import SimulationStopped


class SimulatedReplay(Protocol):
    """What the loop asks of a replay in simulated time."""

    @property
    def done(self) -> bool: ...
    @property
    def released(self) -> Sized: ...
    @property
    def finished(self) -> Sized: ...
    def start(self) -> None: ...
    def advance(self, until_s: float) -> None: ...


@dataclass(frozen=True)
class LoopResult:
    error: BaseException | None  # an interrupt or a limit reached
    wall_s: float
    cpu_s: float


def run_in_simulated_time(
    context: BackendContext,
    job: ReplayJob,
    replay: SimulatedReplay,
    pending: list[RunEvent],
    samples: Callable[[float], list[RunEvent]],
    *,
    what: str,
    throughput_bps: Callable[[float], float] = lambda t: 0.0,
) -> LoopResult:
    """Replay until done; `pending` is where the replay's events collect, `samples(t)` reads
    the counters at simulated time t, `what` names the run in a limit's message."""
    scenario = context.scenario
    interval_s = scenario.sim.sample_interval_us * 1e-6
    limit_s = scenario.sim.time_limit_s or max(1.0, 100 * context.planned.ideal.job_time_s)
    wall_limit_s = scenario.run.deadline_s
    error: BaseException | None = None
    started = time.perf_counter()
    cpu0 = time.process_time()
    last_progress = started
    job.on_samples(samples(0.0))
    try:
        replay.start()
        t = 0.0
        while not replay.done:
            context.interrupts.check()
            if t >= limit_s:
                raise SimulationStopped(
                    f"{what} had not finished the plan after {limit_s:g} s of simulated time "
                    f"(sim.time_limit_s): {len(replay.released)} flows released, "
                    f"{len(replay.finished)} finished"
                )
            if wall_limit_s is not None and time.perf_counter() - started > wall_limit_s:
                raise SimulationStopped(
                    f"{what} took longer than run.deadline_s ({wall_limit_s:g} s of wall time) "
                    f"at {t * 1e3:.3f} ms of simulated time"
                )
            t += interval_s
            replay.advance(t)
            if pending:
                job.on_events(pending[:])
                pending.clear()
            job.on_samples(samples(t))
            now = time.perf_counter()
            if now - last_progress > 0.5:
                last_progress = now
                job.progress.update(job.state(throughput_bps(t)))
    except (KeyboardInterrupt, SimulationStopped) as exc:
        context.interrupts.pending = False
        error = exc
    finally:
        if pending:
            job.on_events(pending[:])
        wall_s = time.perf_counter() - started
        job.progress.done(job.state(0.0))
    return LoopResult(error, wall_s, time.process_time() - cpu0)
