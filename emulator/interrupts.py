"""Ctrl-C and SIGTERM during a run: remembered, raised at the run's checkpoints, and deferred
while a teardown must not be cut halfway."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
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
    events) raise one that was not delivered; the lost one is not printed (an "Exception
    ignored" traceback would read like a crash when the run is about to stop as asked)."""

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

        previous_hook = sys.unraisablehook

        def unraisable(args: sys.UnraisableHookArgs) -> None:
            if args.exc_type is KeyboardInterrupt and self.pending:
                return  # ours, lost in a callback: the next checkpoint raises it
            previous_hook(args)

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        sys.unraisablehook = unraisable
        try:
            yield
        except KeyboardInterrupt:
            self.pending = False  # delivered
            raise
        finally:
            sys.unraisablehook = previous_hook
            for sig, old in previous.items():
                signal.signal(sig, old)
