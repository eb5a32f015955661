"""Matching across ranks: groups, k-th collective per group, send/recv pairing, and errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from emulator.chakra import pb
from emulator.errors import PlanError
from emulator.schedule.fabric import star_path
from emulator.schedule.ideal import simulate
from emulator.schedule.job import JobSchedule, RankInput
from emulator.schedule.matching import GroupTable
from emulator.schedule.nodes import CommInfo, Describer, NodeInfo, NodeKind
from emulator.schedule.params import ComputeParams


def coll(index: int, node_id: int, collective: str, size: int, pg: str | None = None) -> NodeInfo:
    return NodeInfo(
        index,
        node_id,
        collective,
        NodeKind.COLLECTIVE,
        comm=CommInfo(collective, size, pg, None, None, None),
    )


def p2p(
    index: int,
    node_id: int,
    kind: str,
    peer: int | None,
    size: int | None = 64,
    tag: int | None = 0,
) -> NodeInfo:
    src, dst = (None, peer) if kind == NodeKind.SEND else (peer, None)
    return NodeInfo(
        index, node_id, kind, kind, comm=CommInfo(kind.upper(), size, None, src, dst, tag)
    )


def source(nodes: list[NodeInfo]) -> Callable[[int], Iterator[NodeInfo]]:
    return lambda iteration: iter(nodes)


def plan(per_rank: list[list[NodeInfo]], groups: dict[str, list[int]] | None = None) -> JobSchedule:
    ranks = [RankInput(source(nodes), f"t.{r}.et") for r, nodes in enumerate(per_rank)]
    job = JobSchedule(ranks, GroupTable(len(per_rank), groups or {}), keep_instances=True)
    simulate(job, star_path(100e9))
    return job


def test_kth_collective_of_each_group_matches_despite_unaligned_ids() -> None:
    groups = {"0.0": [0, 1], "1": [2, 3], "2": [0, 2], "3": [1, 3]}
    per_rank = [
        [
            coll(0, 10 * r + 1, "ALL_REDUCE", 100, "0" if r < 2 else "1"),
            coll(1, 10 * r + 2, "ALL_GATHER", 64, "2" if r in (0, 2) else "3"),
        ]
        for r in range(4)
    ]
    job = plan(per_rank, groups)
    got = sorted((i.collective, i.group, i.members, i.nodes) for i in job.instances)
    assert got == [
        ("ALL_GATHER", "2", (0, 2), ((0, 2), (2, 22))),
        ("ALL_GATHER", "3", (1, 3), ((1, 12), (3, 32))),
        ("ALL_REDUCE", "0", (0, 1), ((0, 1), (1, 11))),
        ("ALL_REDUCE", "1", (2, 3), ((2, 21), (3, 31))),
    ]


def test_mismatched_collectives_name_ranks_and_nodes() -> None:
    per_rank = [[coll(0, 5, "ALL_REDUCE", 100)], [coll(0, 77, "ALL_REDUCE", 200)]]
    with pytest.raises(
        PlanError,
        match=r"rank 0 node 5 ALL_REDUCE 100 B \(t.0.et\); rank 1 node 77 ALL_REDUCE 200 B \(t.1.et\)",
    ):
        plan(per_rank)


def test_unknown_group_and_non_member_are_errors() -> None:
    with pytest.raises(PlanError, match=r"t.0.et: node 1 .* process group '9'.*--comm-groups"):
        plan([[coll(0, 1, "ALL_REDUCE", 8, "9")], [coll(0, 1, "ALL_REDUCE", 8, "9")]])
    with pytest.raises(PlanError, match=r"does not contain rank 1"):
        plan([[coll(0, 1, "ALL_REDUCE", 8, "0")], [coll(0, 1, "ALL_REDUCE", 8, "0")]], {"0": [0]})


def test_missing_collective_on_one_member_is_reported() -> None:
    with pytest.raises(
        PlanError, match=r"issued by rank 0 node 3 but rank\(s\) \[1\] have no matching"
    ):
        plan([[coll(0, 3, "ALL_REDUCE", 8)], []])


def test_send_recv_pair_by_src_dst_tag_in_order() -> None:
    per_rank = [
        [p2p(0, 1, NodeKind.SEND, 1, 100, tag=7), p2p(1, 2, NodeKind.SEND, 1, 200, tag=8)],
        [p2p(0, 5, NodeKind.RECV, 0, 200, tag=8), p2p(1, 6, NodeKind.RECV, 0, 100, tag=7)],
    ]
    job = plan(per_rank)
    assert sorted((i.nodes, i.size_bytes) for i in job.instances) == [
        (((0, 1), (1, 6)), 100),
        (((0, 2), (1, 5)), 200),
    ]


def test_send_without_recv_and_lone_send_are_errors() -> None:
    with pytest.raises(PlanError, match=r"send node 1 on rank 0 to rank 1 .* has no matching recv"):
        plan([[p2p(0, 1, NodeKind.SEND, 1)], []])
    with pytest.raises(PlanError, match=r"send node 4 .* has no comm_dst.*lone send/recv"):
        plan([[p2p(0, 4, NodeKind.SEND, None)], []])


def test_process_groups_from_pytorch_metadata_node() -> None:
    describer = Describer(ComputeParams(), "x.0.et")
    meta = pb.Node(id=3, name="## process_group:init ##", type=pb.METADATA_NODE)
    meta.inputs.values = (
        '[[{"pg_name": "0", "ranks": [], "group_size": 4}, {"pg_name": "1.0", "ranks": [0, 2]}]]'
    )
    describer.describe(0, meta)
    assert describer.process_groups == {"0": None, "1": (0, 2)}
    table = GroupTable(4, {})
    table.add_process_groups(describer.process_groups, "x.0.et")
    assert table.members("1", 2, coll(0, 1, "ALL_REDUCE", 1), "x")[1] == (0, 2)
    assert table.members("0", 3, coll(0, 1, "ALL_REDUCE", 1), "x")[1] == (0, 1, 2, 3)


def test_cpu_side_comm_node_without_comm_type_is_skipped_with_a_warning() -> None:
    describer = Describer(ComputeParams(), "x.0.et")
    cpu = pb.Node(id=9, name="c10d::allreduce_", type=pb.COMM_COLL_NODE)
    info = describer.describe(0, cpu)
    assert info.kind == NodeKind.DELAY and info.delay_s == 0.0
    describer.finish()
    assert "skipped 1 COMM_COLL node(s) without comm_type" in describer.warnings[0]


def test_roofline_and_cpu_ops() -> None:
    node = pb.Node(id=1, name="gemm", type=pb.COMP_NODE)
    for name, kind, value in (
        ("num_ops", "int64_val", 312_000_000),
        ("tensor_size", "uint64_val", 10),
        ("is_cpu_op", "int32_val", 0),
    ):
        attr = node.attr.add()
        attr.name = name
        setattr(attr, kind, value)
    info = Describer(ComputeParams(flops_per_s=312e12), "x").describe(0, node)
    assert info.delay_s == pytest.approx(1e-6) and info.stream == "gpu"
    cpu = pb.Node(id=2, name="aten::add", type=pb.COMP_NODE, duration_micros=5)
    attr = cpu.attr.add()
    attr.name = "is_cpu_op"
    attr.bool_val = True
    assert Describer(ComputeParams(), "x").describe(0, cpu).delay_s == pytest.approx(5e-6)
    assert Describer(ComputeParams(include_cpu_ops=False), "x").describe(0, cpu).delay_s == 0.0


def test_cross_rank_deadlock_is_explained() -> None:
    def chained(first: str, second: str) -> list[NodeInfo]:
        a = coll(0, 1, "ALL_REDUCE", 8, first)
        b = coll(1, 2, "ALL_REDUCE", 8, second)
        b.data_deps = (1,)
        return [a, b]

    groups = {"a": [0, 1], "b": [0, 1]}
    with pytest.raises(
        PlanError, match=r"deadlock.*ALL_REDUCE #\d of group [ab] .* waits for rank 1 node 2"
    ):
        plan([chained("a", "b"), chained("b", "a")], groups)


def test_small_windows_are_extended_when_ranks_wait_on_unread_nodes() -> None:
    # Rank 0 issues group a first, rank 1 group b first: with a one-node window neither has
    # read the other's partner node until the stalled job reads further ahead.
    groups = {"a": [0, 1], "b": [0, 1]}
    per_rank = [
        [coll(0, 1, "ALL_REDUCE", 1000, "a"), coll(1, 2, "ALL_REDUCE", 1000, "b")],
        [coll(0, 1, "ALL_REDUCE", 1000, "b"), coll(1, 2, "ALL_REDUCE", 1000, "a")],
    ]
    times = []
    for window in (1, 4096):
        ranks = [RankInput(source(nodes), f"t.{r}.et") for r, nodes in enumerate(per_rank)]
        job = JobSchedule(ranks, GroupTable(2, groups), compute=ComputeParams(window_nodes=window))
        result = simulate(job, star_path(100e9))
        assert sorted(i.group for i in result.instances) == ["a", "b"]
        times.append(result.job_time_s)
    assert times[0] == pytest.approx(times[1])
