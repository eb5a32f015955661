"""A worker's active queue pairs per NIC (emulator/engine/active.py), what a read pumps, and the
tick that runs between reads when it is due (Worker._after_reads)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from emulator.engine.active import ActiveQueuePairs
from emulator.engine.nicpacer import NicPacer
from emulator.engine.worker import Worker


def _conn(nic: NicPacer, idle: bool = False) -> Any:
    return SimpleNamespace(rank=SimpleNamespace(nic=nic), qp=SimpleNamespace(idle=idle))


def test_queue_pairs_are_kept_per_nic_in_qp_order_and_the_idle_leave_once_completed() -> None:
    a, b = NicPacer(1e9), NicPacer(1e9)
    active = ActiveQueuePairs()
    for qpn, nic in ((9, a), (3, b), (5, a), (1, a)):
        active[qpn] = _conn(nic)
    assert [(g.nic, g.qpns) for g in active.nics()] == [(a, [1, 5, 9]), (b, [3])]
    active.get(5).qp.idle = True  # type: ignore[union-attr]
    active.sweep_idle()
    assert 5 in active  # idle, but no message of it completed: not looked at
    active.completed(5)
    active.sweep_idle()
    assert 5 not in active and [g.qpns for g in active.nics()] == [[1, 9], [3]]


def test_a_read_pumps_its_own_nic_and_those_a_message_was_posted_to_since() -> None:
    """The ACKs and CNPs a rank reads are for its own queue pairs; a completion it read may
    have released a flow on another rank of the worker. No other NIC has anything new."""
    a, b, c = NicPacer(1e9), NicPacer(1e9), NicPacer(1e9)
    active = ActiveQueuePairs()
    active[1], active[2], active[3] = _conn(a), _conn(b), _conn(c)
    active.served_all()  # a tick served them all
    assert [g.nic for g in active.nics_after_read(a)] == [a]
    active[2] = active.get(2)  # type: ignore[assignment]  # a message posted to an active QP
    assert {id(g.nic) for g in active.nics_after_read(a)} == {id(a), id(b)}
    assert [g.nic for g in active.nics_after_read(c)] == [c]  # the post was seen once
    active[4] = _conn(c)
    assert [g.nic for g in active.nics_after_read(c)] == [c]  # not twice


def _worker_after_reads(next_tick_wall: float, in_tick: bool = False) -> Any:
    """What Worker._after_reads uses of a worker, recording what it did."""
    did: list[str] = []
    handle = SimpleNamespace(cancel=lambda: did.append("cancel"))
    return SimpleNamespace(
        _handle_events=lambda: did.append("events"),
        active=True,
        _pump=lambda now, late, nic: did.append(f"pump {nic}"),
        clock=SimpleNamespace(now=lambda: 1.0),
        reports=SimpleNamespace(flush_now=False),
        ticks=SimpleNamespace(started=True, next_tick_wall=next_tick_wall),
        _in_tick=in_tick,
        _tick_handle=handle,
        _tick=lambda: did.append("tick"),
        did=did,
    )


def test_a_due_tick_runs_between_reads_not_after_every_readable_socket() -> None:
    """With every rank readable the loop ran all their reads before its timers: the tick came
    16-20 ms late at p99 on the main job. After a read, a due tick runs at once (its timer
    cancelled); one not yet due, or one already running, does not."""
    rank = SimpleNamespace(nic="nic0")
    due = _worker_after_reads(time.perf_counter() - 0.01)
    Worker._after_reads(due, 1.0, rank)  # type: ignore[arg-type]
    assert due.did == ["events", "pump nic0", "cancel", "tick"]
    early = _worker_after_reads(time.perf_counter() + 60.0)
    Worker._after_reads(early, 1.0, rank)  # type: ignore[arg-type]
    assert early.did == ["events", "pump nic0"]
    inside = _worker_after_reads(time.perf_counter() - 0.01, in_tick=True)
    Worker._after_reads(inside, 1.0, rank)  # type: ignore[arg-type]
    assert inside.did == ["events", "pump nic0"]
    # reads of AF_XDP ports (no rank) pump every NIC and leave the tick to its own call
    ports = _worker_after_reads(time.perf_counter() - 0.01)
    Worker._after_reads(ports, 1.0, None)  # type: ignore[arg-type]
    assert ports.did == ["events", "pump None"]
