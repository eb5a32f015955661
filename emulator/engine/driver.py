"""A dynamic source of flows for the coordinator (the interface lives with the schedule:
emulator.schedule.driver). The coordinator runs the delays (wall time = delay x TDF)."""

from __future__ import annotations

from emulator.schedule.driver import DelayLike, FlowDriver, FlowLike, is_delay

__all__ = ["DelayLike", "FlowDriver", "FlowLike", "is_delay"]
