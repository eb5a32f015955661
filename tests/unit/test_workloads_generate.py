"""Generators write Chakra ET sets that load, validate and reproduce the requested counts and sizes."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from emulator import chakra
from emulator.cli import main
from emulator.schedule.planner import plan_trace
from emulator.workloads.params import (
    GENERATORS_PARAMS,
    AllgatherParams,
    AllreduceParams,
    AlltoallParams,
    MoeMixParams,
    ReducescatterParams,
)
from emulator.workloads.registry import write_workload


def collectives_of(trace: chakra.RankTrace) -> list[tuple[str, int, str | None]]:
    return [
        (
            chakra.COLLECTIVE_NAMES[chakra.comm_type(n) or 0],
            chakra.comm_size(n) or 0,
            chakra.pg_name(n),
        )
        for n in trace.nodes
        if n.type == chakra.pb.COMM_COLL_NODE
    ]


def test_moe_mix_strided_placement_spreads_expert_groups(tmp_path: Path) -> None:
    params = MoeMixParams(ranks=8, expert_parallel_size=4, expert_placement="strided")
    write_workload(params, tmp_path / "moe")
    trace_set = chakra.load_trace_set(tmp_path / "moe")
    # expert-parallel groups take every other rank; data-parallel pairs are neighbours
    assert trace_set.comm_groups == {
        "1": (0, 2, 4, 6),
        "2": (1, 3, 5, 7),
        "3": (0, 1),
        "4": (2, 3),
        "5": (4, 5),
        "6": (6, 7),
    }


def test_moe_mix_split_placement_puts_both_collectives_across_blocks(tmp_path: Path) -> None:
    params = MoeMixParams(ranks=16, expert_parallel_size=8, expert_placement="split")
    write_workload(params, tmp_path / "moe")
    trace_set = chakra.load_trace_set(tmp_path / "moe")
    # each expert-parallel group: 4 ranks of each block of 8 (one leaf of 8 hosts each)
    assert trace_set.comm_groups["1"] == (0, 1, 2, 3, 8, 9, 10, 11)
    assert trace_set.comm_groups["2"] == (4, 5, 6, 7, 12, 13, 14, 15)
    pairs = [trace_set.comm_groups[str(k)] for k in range(3, 11)]
    assert pairs == [(0, 12), (1, 13), (2, 14), (3, 15), (4, 8), (5, 9), (6, 10), (7, 11)]
    assert all(a // 8 != b // 8 for a, b in pairs)  # every data-parallel pair crosses blocks


def test_moe_mix_split_needs_an_equal_share_of_each_block() -> None:
    with pytest.raises(ValueError, match="expert_placement: split needs the 3 expert-parallel"):
        MoeMixParams(ranks=12, expert_parallel_size=4, expert_placement="split")


def test_moe_mix_counts_sizes_and_groups(tmp_path: Path) -> None:
    params = MoeMixParams(
        ranks=8,
        expert_parallel_size=4,
        dispatch_bytes=1000,
        combine_bytes=2000,
        allreduce_bytes=30000,
        iterations=3,
    )
    write_workload(params, tmp_path / "moe")
    assert main(["validate", str(tmp_path / "moe")]) == 0
    trace_set = chakra.load_trace_set(tmp_path / "moe")
    assert trace_set.world_size == 8 and not trace_set.warnings
    assert trace_set.comm_groups == {
        "1": (0, 1, 2, 3),
        "2": (4, 5, 6, 7),
        "3": (0, 4),
        "4": (1, 5),
        "5": (2, 6),
        "6": (3, 7),
    }
    for trace in trace_set.ranks:
        assert len(trace.nodes) == 3 * 6
        counts = Counter(collectives_of(trace))
        ep = "1" if trace.rank < 4 else "2"
        dp = str(3 + trace.rank % 4)
        assert counts == {
            ("ALL_TO_ALL", 1000, ep): 3,
            ("ALL_TO_ALL", 2000, ep): 3,
            ("ALL_REDUCE", 30000, dp): 3,
        }
        assert not trace.warnings


def test_moe_mix_plans_and_overlap_shortens_the_job(tmp_path: Path) -> None:
    def job_time(overlap: bool) -> float:
        params = MoeMixParams(
            ranks=8, dispatch_bytes=1 << 20, allreduce_bytes=16 << 20, iterations=3, overlap=overlap
        )
        prefix = tmp_path / f"moe_{overlap}"
        write_workload(params, prefix)
        outcome = plan_trace(prefix)
        kinds = Counter(i.collective for i in outcome.result.instances)
        # per iteration: dispatch + combine in 2 EP groups, one All-Reduce in 4 DP groups
        assert kinds == {"ALL_TO_ALL": 3 * 2 * 2, "ALL_REDUCE": 3 * 4}
        return outcome.result.job_time_s

    assert job_time(True) < job_time(False)


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        (AllreduceParams, "ALL_REDUCE"),
        (AlltoallParams, "ALL_TO_ALL"),
        (AllgatherParams, "ALL_GATHER"),
        (ReducescatterParams, "REDUCE_SCATTER"),
    ],
)
def test_single_collective_microbenchmarks(tmp_path: Path, cls: type, name: str) -> None:
    params = cls(ranks=4, size_bytes=12345, iterations=3, compute_us=10.0)
    write_workload(params, tmp_path / "mb")
    trace_set = chakra.load_trace_set(tmp_path / "mb")
    assert trace_set.world_size == 4
    for trace in trace_set.ranks:
        assert collectives_of(trace) == [(name, 12345, "0")] * 3
    outcome = plan_trace(tmp_path / "mb")
    assert [(i.collective, i.size_bytes, i.group_size) for i in outcome.result.instances] == [
        (name, 12345, 4)
    ] * 3


def test_registry_and_validation() -> None:
    assert set(GENERATORS_PARAMS) == {
        "moe_mix",
        "allreduce",
        "alltoall",
        "allgather",
        "reducescatter",
    }
    with pytest.raises(ValueError, match="expert_parallel_size: 3 does not divide ranks 8"):
        MoeMixParams(ranks=8, expert_parallel_size=3)


def _coll_and_compute(
    trace: chakra.RankTrace,
) -> tuple[list[tuple[str, int, str | None]], list[tuple[str, int]]]:
    computes = [(n.name, n.duration_micros) for n in trace.nodes if n.type == chakra.pb.COMP_NODE]
    return collectives_of(trace), computes


@pytest.mark.parametrize(
    ("switch", "kept", "dropped"),
    [
        ("include_alltoall", "ALL_REDUCE", "ALL_TO_ALL"),
        ("include_allreduce", "ALL_TO_ALL", "ALL_REDUCE"),
    ],
)
def test_moe_mix_alone_is_the_mix_minus_one_collective_type(
    tmp_path: Path, switch: str, kept: str, dropped: str
) -> None:
    mix = MoeMixParams(
        ranks=8,
        expert_parallel_size=4,
        dispatch_bytes=1000,
        combine_bytes=2000,
        allreduce_bytes=30000,
        iterations=3,
        attention_compute_us=7.0,
        expert_compute_us=11.0,
        post_compute_us=13.0,
    )
    alone = dataclasses.replace(mix, **{switch: False})  # type: ignore[arg-type]
    write_workload(mix, tmp_path / "mix")
    write_workload(alone, tmp_path / "alone")
    assert main(["validate", str(tmp_path / "alone")]) == 0
    mix_set = chakra.load_trace_set(tmp_path / "mix")
    alone_set = chakra.load_trace_set(tmp_path / "alone")
    assert alone_set.world_size == mix_set.world_size == 8
    assert alone_set.comm_groups == mix_set.comm_groups
    for mix_trace, alone_trace in zip(mix_set.ranks, alone_set.ranks, strict=True):
        mix_colls, mix_computes = _coll_and_compute(mix_trace)
        alone_colls, alone_computes = _coll_and_compute(alone_trace)
        # Same collectives of the kept type, in the same order, sizes and groups; none of the other.
        assert alone_colls == [c for c in mix_colls if c[0] == kept]
        assert len(alone_colls) == (3 if kept == "ALL_REDUCE" else 6)
        assert all(c[0] != dropped for c in alone_colls)
        # Every compute kept, with its duration.
        assert alone_computes == mix_computes and len(alone_computes) == 9
        assert not alone_trace.warnings


def test_moe_mix_alone_keeps_the_step_order_through_dropped_nodes(tmp_path: Path) -> None:
    params = MoeMixParams(ranks=4, expert_parallel_size=2, iterations=2, include_alltoall=False)
    write_workload(params, tmp_path / "ar")
    (trace, *_) = chakra.load_trace_set(tmp_path / "ar").ranks
    by_name = {n.name: n for n in trace.nodes}
    ids = {n.id: n.name for n in trace.nodes}

    def deps(name: str) -> set[str]:
        return {ids[d] for d in by_name[name].data_deps}

    assert deps("attention_0") == set()
    assert deps("expert_0") == {"attention_0"}  # the dispatch it waited for is gone
    assert deps("post_0") == {"expert_0"}
    assert deps("allreduce_grad_0") == {"post_0"}
    assert deps("attention_1") == {"post_0"}  # overlap: the next step does not wait for it
    assert deps("post_1") == {"expert_1", "allreduce_grad_0"}


def test_moe_mix_alone_plans_only_its_collective(tmp_path: Path) -> None:
    common = {"ranks": 8, "dispatch_bytes": 1 << 20, "allreduce_bytes": 16 << 20, "iterations": 3}
    counts = {}
    for name, switch in (("ar", "include_alltoall"), ("a2a", "include_allreduce")):
        write_workload(MoeMixParams(**common, **{switch: False}), tmp_path / name)  # type: ignore[arg-type]
        outcome = plan_trace(tmp_path / name)
        counts[name] = Counter(i.collective for i in outcome.result.instances)
    assert counts == {"ar": {"ALL_REDUCE": 3 * 4}, "a2a": {"ALL_TO_ALL": 3 * 2 * 2}}


def test_moe_mix_needs_one_collective_type() -> None:
    with pytest.raises(ValueError, match="include_allreduce: include_alltoall and"):
        MoeMixParams(include_alltoall=False, include_allreduce=False)


def test_run_seed_is_a_draw_of_the_source_ports_of_the_planned_flows(tmp_path: Path) -> None:
    """The scenario's run.seed reaches the flows `emulate run` and `emulate plan` plan: the same
    flows, other source ports (other ECMP paths); one seed always gives the same ports."""
    from emulator.schedule.fabric import default_clos_spec, path_for_fabric
    from emulator.schedule.ideal import simulate
    from emulator.schedule.job import JobSchedule
    from emulator.schedule.tracesource import open_trace_set

    prefix = tmp_path / "moe"
    write_workload(MoeMixParams(ranks=8, dispatch_bytes=1 << 16, allreduce_bytes=1 << 18), prefix)

    def ports(seed: int) -> dict[tuple[int, int, int, int], int]:
        source = open_trace_set(prefix)
        job = JobSchedule(source.ranks, source.groups, keep_instances=True, sport_seed=seed)
        simulate(job, path_for_fabric(default_clos_spec(8), 8))
        flows = [f for inst in job.instances for f in inst.flows]
        assert flows
        return {(f.instance, f.src, f.dst, f.qp): f.udp_sport for f in flows}

    zero, again, three = ports(0), ports(0), ports(3)
    assert zero == again
    assert zero.keys() == three.keys()
    moved = sum(zero[k] != three[k] for k in zero)
    assert moved >= 0.9 * len(zero)
