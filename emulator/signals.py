"""Signals deferred while a block must not be cut halfway (a teardown, starting worker
processes): Ctrl-C and SIGTERM are noted and raised as KeyboardInterrupt when the block is over.
Below the engine and the run, which both use it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType


def forked_helper_died(signum: int, owner: int) -> bool:
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
    signal hit, so this holds with the exporter's and the sampler's threads alive; in another
    thread (an engine run from a test's thread) no signal can cut the block, and it runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    owner = os.getpid()

    def note(signum: int, frame: FrameType | None) -> None:
        del frame
        if not forked_helper_died(signum, owner):
            noted.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if noted:
        raise KeyboardInterrupt
