"""The coordinator's heap is frozen for the replay (gc.freeze: what it built before the start is
out of the collector's way) and thawed after, and the run's metadata says what its own
collections cost."""

from __future__ import annotations

import gc

import pytest

from emulator.engine.coordinator import Coordinator
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import PairInfo

pytestmark = pytest.mark.system


def test_the_replay_runs_on_a_frozen_heap_thawed_after(veth_pair: PairInfo) -> None:
    p = veth_pair
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=1e9),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=1e9),
    ]
    flows = [EngineFlow(id=1, src=0, dst=1, qp=0, udp_sport=50100, bytes=256 * 1024)]
    at_start: list[int] = []
    assert gc.get_freeze_count() == 0
    coordinator = Coordinator(
        ranks,
        flows,
        engine=EngineParams(workers=2, tdf=100.0),
        on_start=lambda start: at_start.append(gc.get_freeze_count()),
    )
    outcome = coordinator.run()
    assert set(outcome.finished) == {1}
    assert at_start and at_start[0] > 1000, "the heap was not frozen at the start"
    assert gc.get_freeze_count() == 0, "the heap stayed frozen after the run"
    pauses = outcome.metadata["coordinator_gc_pauses"]
    assert len(pauses["collections"]) == 3 and pauses["max_s"] <= pauses["total_s"]
