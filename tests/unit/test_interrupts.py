"""A signal that lands in a garbage-collector callback is not lost and not printed."""

from __future__ import annotations

import os
import signal
import sys
import weakref
from collections.abc import Iterator

import pytest

from emulator.interrupts import Interrupts


class _Thing:
    pass


def _signal_inside_a_weakref_callback() -> None:
    thing = _Thing()

    def callback(ref: object) -> None:
        del ref
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between these bytecodes
            pass

    keep = weakref.ref(thing, callback)
    del thing  # the callback runs here; its KeyboardInterrupt is "unraisable"
    del keep


@pytest.fixture
def unraisable_seen() -> Iterator[list[type[BaseException] | None]]:
    """What reaches the hook installed before the run's (Python's default prints it)."""
    seen: list[type[BaseException] | None] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda args: seen.append(args.exc_type)
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


def test_a_signal_lost_in_a_callback_is_raised_at_the_next_checkpoint(unraisable_seen):
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt), interrupts.handled():
        _signal_inside_a_weakref_callback()
        assert interrupts.pending
        interrupts.check()
    assert not interrupts.pending
    assert unraisable_seen == []  # not printed as "Exception ignored ... Traceback"


def test_other_unraisable_errors_still_reach_the_previous_hook(unraisable_seen):
    interrupts = Interrupts()
    with interrupts.handled():
        thing = _Thing()

        def callback(ref: object) -> None:
            raise ValueError("not ours")

        keep = weakref.ref(thing, callback)
        del thing
        del keep
    assert unraisable_seen == [ValueError]
