"""The driver interface: how anything that replays a schedule (the engine, the simulator, the
ideal model) asks it which flow may start when and tells it what completed.

emulator.schedule.job.JobSchedule (and the traffic patterns' schedules) fit as is. `poll(now)`
returns what starts now (flows whose dependencies already completed, and compute delays); the
replayer reports back with `delay_done` and `flow_done`. Times are target-timescale seconds since
the start: the driver never sees a time dilation factor or a wall clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from emulator.errors import EmulatorError

if TYPE_CHECKING:  # annotations only: mypy narrows both branches (typing.TypeIs from 3.13)
    from typing_extensions import TypeIs


class FlowLike(Protocol):
    """The fields of emulator.schedule.plan.Flow a replayer reads."""

    @property
    def id(self) -> int: ...
    @property
    def src(self) -> int: ...
    @property
    def dst(self) -> int: ...
    @property
    def qp(self) -> int: ...
    @property
    def udp_sport(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def deps(self) -> tuple[int, ...]: ...
    @property
    def profile(self) -> int: ...
    @property
    def instance(self) -> int: ...


@runtime_checkable
class DelayLike(Protocol):
    """A compute (or memory) node to wait out, then report with delay_done(token, now)."""

    @property
    def token(self) -> int: ...
    @property
    def delay_s(self) -> float: ...


def is_delay(action: FlowLike | DelayLike) -> TypeIs[DelayLike]:
    """A delay rather than a flow, structurally, as isinstance(action, DelayLike) says, but one
    attribute lookup: isinstance against a runtime-checkable protocol inspects its members on
    every call (5% of a 1,024-rank flow-level run, where every action goes through it)."""
    return hasattr(action, "delay_s")


class FlowDriver(Protocol):
    @property
    def finished(self) -> bool: ...
    def poll(self, now: float) -> Sequence[FlowLike | DelayLike]: ...
    def delay_done(self, token: int, now: float) -> None: ...
    def flow_done(self, flow_id: int, now: float) -> None: ...
    def unstall(self) -> bool: ...
    def stall_error(self) -> EmulatorError: ...
