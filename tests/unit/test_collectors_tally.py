"""The engine-side glue: per-flow tallies become cumulative progress and final events; wall
time becomes target time."""

from __future__ import annotations

import pytest

from collectors.tally import FlowTally, TargetClock
from emulator.events import FlowFinished, FlowProgress


def test_tally_snapshots_are_cumulative_and_finish_forgets() -> None:
    tally = FlowTally()
    tally.packets_sent(4, 10)
    tally.ce_marked(4, 2)
    tally.cnp_sent(4)
    assert tally.progress(4, 0.5) == FlowProgress(4, 0.5, 10, 0, 2, 1, 0)
    tally.retransmitted(4, 3)
    tally.cnp_received(4)
    tally.cnp_sent(4)
    assert tally.active() == [4]
    assert tally.finished(4, 1.0) == FlowFinished(4, 1.0, 13, 3, 2, 2, 1)
    assert tally.active() == []
    assert tally.finished(9, 2.0) == FlowFinished(9, 2.0)  # a flow with nothing to report


def test_target_clock_divides_by_tdf() -> None:
    clock = TargetClock(start_wall_s=100.0, tdf=20.0)
    assert clock.target_s(100.0) == 0.0
    assert clock.target_s(102.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="tdf"):
        TargetClock(0.0, 0.5)
