"""A worker's periodic flushes (emulator/engine/reports.py FlushClock): the events every
event_batch_s of wall time, the counters' report only every stats_period_s, each from when the
last one went (a late tick does not bring a burst of catch-up flushes)."""

from __future__ import annotations

import itertools

from emulator.engine.reports import FlushClock


def _run(clock: FlushClock, walls: list[float]) -> list[tuple[float, bool]]:
    """(wall, with the report) of each flush the clock calls for at those instants."""
    out = []
    for wall in walls:
        flush, stats = clock.due(wall)
        if flush:
            out.append((wall, stats))
        else:
            assert not stats  # a report only goes with a flush
    return out


def test_events_every_batch_and_the_report_every_stats_period() -> None:
    clock = FlushClock(event_batch_s=0.02, stats_period_s=0.1)
    clock.start(10.0)
    ticks = [10.0 + 0.001 * i for i in range(1, 501)]  # 1 ms ticks for half a second
    flushes = _run(clock, ticks)
    walls = [w for w, _ in flushes]
    reports = [w for w, stats in flushes if stats]
    assert len(flushes) == 25  # one a batch: 0.5 s / 20 ms
    assert all(round(b - a, 6) == 0.02 for a, b in itertools.pairwise(walls))
    assert len(reports) == 5  # one every 100 ms, the first with the first batch
    assert reports[0] == walls[0] and round(walls[0] - 10.0, 6) == 0.02
    assert all(round(b - a, 6) == 0.1 for a, b in itertools.pairwise(reports))


def test_a_late_tick_flushes_once_and_counts_from_then() -> None:
    clock = FlushClock(event_batch_s=0.02, stats_period_s=0.1)
    clock.start(0.0)
    assert clock.due(0.5) == (True, True)  # 24 batches late: one flush, with the report
    assert clock.due(0.51) == (False, False)
    assert clock.due(0.52) == (True, False)
    assert clock.due(0.6) == (True, True)


def test_equal_periods_report_with_every_flush() -> None:
    clock = FlushClock(event_batch_s=0.02, stats_period_s=0.02)
    clock.start(0.0)
    flushes = _run(clock, [0.001 * i for i in range(1, 201)])
    assert flushes and all(stats for _, stats in flushes)
