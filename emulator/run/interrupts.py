"""Ctrl-C and SIGTERM during a run: remembered, raised at the run's checkpoints, and deferred
while a teardown must not be cut halfway."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

from emulator.signals import forked_helper_died, signals_deferred

__all__ = ["Interrupts", "signals_deferred"]


class Interrupts:
    """Ctrl-C and SIGTERM stop the run: partial results written, everything released.

    Python raises a signal's KeyboardInterrupt wherever the main thread is; when that is a
    callback the garbage collector runs (an import's module-lock cleanup), the exception is
    printed as "ignored" and lost, and the run would go on to the end. So the signal is also
    remembered, and the run's checkpoints (fabric up, replay start, every batch of engine
    events) raise one that was not delivered."""

    def __init__(self) -> None:
        self.pending = False

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def handled(self) -> Iterator[None]:
        owner = os.getpid()

        def handler(signum: int, frame: FrameType | None) -> None:
            del frame
            if not forked_helper_died(signum, owner):
                self.pending = True
                raise KeyboardInterrupt

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        except KeyboardInterrupt:
            self.pending = False  # delivered
            raise
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
