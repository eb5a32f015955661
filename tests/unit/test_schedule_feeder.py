"""Feeder: Kahn order over forward references, bad dependencies, ready policies, bounded window."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulator.errors import PlanError
from emulator.schedule.feeder import RankFeeder
from emulator.schedule.nodes import NodeInfo, NodeKind


def node(
    index: int,
    node_id: int,
    data: tuple[int, ...] = (),
    ctrl: tuple[int, ...] = (),
    start_us: int = 0,
) -> NodeInfo:
    return NodeInfo(index, node_id, f"n{node_id}", NodeKind.DELAY, 0.0, "", data, ctrl, start_us)


def feeder_of(nodes: list[NodeInfo], **kwargs: object) -> RankFeeder:
    return RankFeeder(0, lambda iteration: iter(nodes), where="r0.et", **kwargs)  # type: ignore[arg-type]


def run_order(feeder: RankFeeder, limit: int = 100_000) -> list[int]:
    order: list[int] = []
    for _ in range(limit):
        ready = feeder.take_ready()
        if not ready:
            break
        for n in ready:
            order.append(n.id)
            feeder.complete(n.id)
    return order


def test_forward_references_and_trace_order() -> None:
    # 5 waits for 9, which comes later in the file; 7 is free.
    f = feeder_of([node(0, 5, (9,)), node(1, 7), node(2, 9)])
    assert [n.id for n in f.take_ready()] == [7, 9]
    f.complete(9)
    assert [n.id for n in f.take_ready()] == [5]
    f.complete(5)
    f.complete(7)
    assert f.finished


def test_dangling_and_self_ctrl_deps_are_dropped_with_warnings() -> None:
    f = feeder_of([node(0, 1, ctrl=(1,)), node(1, 2, ctrl=(404,))])
    assert run_order(f) == [1, 2]
    assert any("1 ctrl dependenc(ies) of a node on itself" in w for w in f.warnings)
    assert any("1 ctrl dependenc(ies) on node ids not in the file" in w for w in f.warnings)


def test_dangling_data_dep_is_an_error_naming_the_node() -> None:
    f = feeder_of([node(0, 1), node(1, 2, (404,))])
    with pytest.raises(PlanError, match=r"r0.et: node 2 .* data dependency on node 404"):
        run_order(f)


def test_data_cycle_is_an_error_naming_the_nodes() -> None:
    f = feeder_of([node(0, 1), node(1, 2, (3,)), node(2, 3, (2,))])
    with pytest.raises(
        PlanError, match=r"r0.et: dependency cycle of data dependencies among nodes 2, 3$"
    ):
        run_order(f)


def test_ctrl_edge_closing_a_cycle_is_dropped() -> None:
    # PyTorch style: op 10 lists its kernel 11 as ctrl dep while 11 data-depends on 10.
    f = feeder_of([node(0, 10, ctrl=(11,)), node(1, 11, (10,))])
    assert run_order(f) == [10, 11]
    assert any("1 ctrl dependenc(ies) that closed a cycle" in w for w in f.warnings)


def test_duplicate_id_is_an_error() -> None:
    with pytest.raises(PlanError, match="node id 4 appears twice"):
        run_order(feeder_of([node(0, 4), node(1, 4)]))


def test_start_time_policy() -> None:
    nodes = [node(0, 1, start_us=30), node(1, 2, start_us=10), node(2, 3, start_us=20)]
    assert [n.id for n in feeder_of(nodes).take_ready()] == [1, 2, 3]
    ordered = feeder_of(nodes, ready_policy="start_time").take_ready()
    assert [n.id for n in ordered] == [2, 3, 1]


def test_iterations_restart_after_the_previous_is_done() -> None:
    seen: list[tuple[int, int]] = []
    f = RankFeeder(
        0,
        lambda it: iter([node(0, 1), node(1, 2, (1,))]),
        iterations=3,
        on_read=lambda it, n: seen.append((it, n.id)),
    )
    assert run_order(f) == [1, 2, 1, 2, 1, 2]
    assert seen == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert f.finished


def test_window_stays_bounded_on_a_long_chain() -> None:
    count = 20_000

    def chain(iteration: int) -> Iterator[NodeInfo]:
        for i in range(count):
            yield node(i, i, (i - 1,) if i else ())

    f = RankFeeder(0, chain, window_nodes=64)
    assert len(run_order(f)) == count
    assert f.peak_window <= 64
    assert f.read_total == count
