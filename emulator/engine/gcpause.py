"""Garbage-collector pauses, measured through gc.callbacks: a worker's, reported with its stats
(a collection stops the worker and delays its next tick; measured in moe_mix at TDF 1600: about
50 collections per worker, the longest 4.5 ms, 16 ms in all, so the collector is not what makes
ticks late there; the run records it so that a run where it is can tell), and the coordinator's
during a run (summary.json engine.coordinator_gc_pauses).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class GcPauses:
    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_s = 0.0
        self.max_s = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.count[info.get("generation", 0)] += 1
        self.total_s += pause
        if pause > self.max_s:
            self.max_s = pause

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def to_json(self) -> dict[str, Any]:
        return {"collections": list(self.count), "total_s": self.total_s, "max_s": self.max_s}


@contextmanager
def frozen_heap(*, collect_first: bool) -> Iterator[tuple[bool, GcPauses]]:
    """The block runs with what the process holds now frozen out of the collector's way
    (gc.freeze), thawed after, and the block's own collections measured: (whether this froze
    it, the pauses). `collect_first`: a full collection first (its garbage is not kept frozen,
    at the cost of that collection). A heap someone else froze is left as it is: not frozen
    again, not thawed."""
    freeze = gc.get_freeze_count() == 0
    if freeze:
        if collect_first:
            gc.collect()
        gc.freeze()
    pauses = GcPauses()
    try:
        yield freeze, pauses
    finally:
        pauses.close()
        if freeze:
            gc.unfreeze()
