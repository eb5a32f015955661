"""Generators write Chakra ET sets that load, validate and reproduce the requested counts and sizes."""

from __future__ import annotations

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
