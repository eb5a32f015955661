"""Coordinator bookkeeping without processes: worker reports (tuples) become collectors events,
FlowFinished waits for both the sender's and the receiver's report, completions are relayed to
the workers whose flows depend on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.engine.coordinator import Coordinator, _WorkerHandle
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.events import FlowFinished, FlowStarted, NicSample, RateSample, RunEvent


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, msg: tuple[Any, ...]) -> None:
        self.sent.append(msg)


def _coordinator(
    on_events: Callable[[list[RunEvent]], None] | None = None,
) -> tuple[Coordinator, list[_Pipe]]:
    ranks = [RankEndpoint(r, f"10.0.0.{r + 1}") for r in range(2)]
    flows = [
        EngineFlow(1, 0, 1, 0, 50000, 4096),
        EngineFlow(2, 1, 0, 0, 50001, 4096, deps=(1,)),  # rank 1's worker waits for flow 1
    ]
    c = Coordinator(ranks, flows, engine=EngineParams(workers=2, tdf=1000.0), on_events=on_events)
    pipes = [_Pipe(), _Pipe()]
    handles: list[Any] = [(i, None, pipes[i], (i,)) for i in range(2)]
    c.workers = [_WorkerHandle(*h) for h in handles]
    return c, pipes


def test_flow_finished_needs_sender_and_receiver_reports_and_relays_completion() -> None:
    c, pipes = _coordinator()
    conn = c.connections[(0, 1, 0, 50000)]
    c._take([("started", 1, 0.1), ("done", 1, 0.4, 3, 1, 2, conn, 0, 0.003, 2e-6)])
    assert c.started[1] == FlowStarted(1, 0.1)
    assert 1 not in c.finished  # the receiver's part is not in yet
    assert pipes[1].sent == [("deps_done", [1])] and pipes[0].sent == []
    c._take([("rx", conn, 0, 0.39, 4096, 5, 4, 0.001, 7), ("rate", 1, 9, 0.2, 5e9)])
    # the engine's delay in the flow: both workers' lag (wall) in target time, and the pacing
    # credit lost while it was due (target); the receiver's reordered packets
    assert c.finished[1] == FlowFinished(
        1, 0.4, 3, 1, 5, 4, 2, (0.003 + 0.001) / 1000.0 + 2e-6, reordered_packets=7
    )
    assert c.received_bytes[1] == 4096
    assert RateSample(0.2, 1, 9, 5e9) in c.events
    # the NICs' samples are the sampler's, from the interfaces' counters: none from the engine
    assert not any(isinstance(ev, NicSample) for ev in c.events)


def test_reports_join_by_connection_and_message_order() -> None:
    c, _ = _coordinator()
    sender, receiver = c.workers
    sender.stats = receiver.stats = {}
    conn = c.connections[(1, 0, 0, 50001)]
    # the receiver's record of message 0 arrives before the sender's completion
    c._take([("rx", conn, 0, 1.0, 4096, 0, 0, 0.0, 0)])
    c._take([("done", 2, 1.1, 1, 0, 0, conn, 0, 0.0, 0.0)])
    assert c.finished[2].time_s == 1.1 and c.finished[2].ce_marks == 0


def test_events_a_consumer_takes_as_they_come_are_not_kept_too() -> None:
    """A run's recorder takes every batch as it comes: the coordinator keeps none of them (a
    long run's would pile up unread); with no consumer the outcome holds them all."""
    got: list[RunEvent] = []
    c, _ = _coordinator(on_events=got.extend)
    c._take([("started", 1, 0.1), ("rate", 1, 9, 0.2, 5e9)])
    assert got == [FlowStarted(1, 0.1), RateSample(0.2, 1, 9, 5e9)]
    assert c.events == []
    alone, _ = _coordinator()
    alone._take([("started", 1, 0.1), ("rate", 1, 9, 0.2, 5e9)])
    assert alone.events == got
