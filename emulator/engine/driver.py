"""A dynamic source of flows for the coordinator: emulator.schedule.job.JobSchedule fits as is.

A static plan (EngineFlow with deps and start delays) is resolved inside the workers. A driver
instead decides at run time: `poll(now)` returns what starts now (flows whose dependencies the
driver already saw complete, and compute delays), and the coordinator reports back with
`delay_done` and `flow_done`. Times are target-timescale seconds since the start, so the driver
never sees the time dilation factor. The coordinator runs the delays (wall time = delay x TDF).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from emulator.engine.plan import FlowLike
from emulator.errors import EmulatorError


@runtime_checkable
class DelayLike(Protocol):
    """A compute (or memory) node to wait out, then report with delay_done(token, now)."""

    @property
    def token(self) -> int: ...
    @property
    def delay_s(self) -> float: ...


class FlowDriver(Protocol):
    @property
    def finished(self) -> bool: ...
    def poll(self, now: float) -> Sequence[FlowLike | DelayLike]: ...
    def delay_done(self, token: int, now: float) -> None: ...
    def flow_done(self, flow_id: int, now: float) -> None: ...
    def unstall(self) -> bool: ...
    def stall_error(self) -> EmulatorError: ...
