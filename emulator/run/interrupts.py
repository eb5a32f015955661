"""Ctrl-C and SIGTERM during a run: remembered, raised at the run's checkpoints, and deferred
while a teardown must not be cut halfway."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType


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
            if not _forked_helper_died(signum, owner):
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


def _forked_helper_died(signum: int, owner: int) -> bool:
    """In a process forked from the run (pyroute2's netns child) that inherited a handler of
    ours: die of the signal as usual (returns only in the run's own process, with False)."""
    if os.getpid() == owner:
        return False
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return True


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is over (noted, not lost): a teardown interrupted
    halfway would leave namespaces behind. On exit a noted signal stops the run as usual
    (KeyboardInterrupt). Python runs signal handlers in the main thread whichever thread the
    signal hit, so this holds with the exporter's and the sampler's threads alive."""
    noted: list[int] = []
    owner = os.getpid()

    def note(signum: int, frame: FrameType | None) -> None:
        del frame
        if not _forked_helper_died(signum, owner):
            noted.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if noted:
        raise KeyboardInterrupt
