"""The event loop of the in-memory fabric: a heap of (time, sequence, callback)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class Simulator:
    """Runs callbacks in time order; equal times run in the order they were scheduled."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.events_run = 0

    def at(self, when_s: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when_s, self._seq, fn, args))

    def run(self, *, until_s: float, max_events: int = 50_000_000) -> None:
        """Run every event up to `until_s` (bounded by `max_events` so a bug cannot spin forever)."""
        heap = self._heap
        pop = heapq.heappop
        budget = max_events
        while heap and heap[0][0] <= until_s:
            when, _, fn, args = pop(heap)
            self.now = when
            fn(*args)
            budget -= 1
            if budget <= 0:
                raise RuntimeError(f"simulation exceeded {max_events} events at t={when:.6f}s")
        self.events_run += max_events - budget
        self.now = until_s

    @property
    def pending(self) -> int:
        return len(self._heap)

    def bind_events(self, events: list[Any], handler: Callable[[], None]) -> None:
        """The transport's event list and the callback that handles it (the C fabric raises
        events into it too, native.py); here every event is appended in Python."""
        del events, handler
