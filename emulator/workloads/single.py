"""Single-collective microbenchmarks: per iteration, optional compute then one collective over all ranks."""

from __future__ import annotations

from emulator.chakra import COLLECTIVE_NAMES, pb
from emulator.workloads.nodes import NodeWriter, metadata
from emulator.workloads.params import SingleCollectiveParams

WORLD_GROUP = "0"


def build(
    params: SingleCollectiveParams,
) -> tuple[list[tuple[pb.GlobalMetadata, list[pb.Node]]], dict[str, list[int]]]:
    comm_type = {name: number for number, name in COLLECTIVE_NAMES.items()}[params.collective]
    ranks = []
    for _rank in range(params.ranks):
        w = NodeWriter()
        previous = 0
        for i in range(params.iterations):
            deps = [previous]
            if params.compute_us > 0:
                deps = [w.compute(f"compute_{i}", params.compute_us, deps)]
            previous = w.collective(
                f"{params.kind}_{i}", comm_type, params.size_bytes, WORLD_GROUP, deps
            )
        ranks.append((metadata(params.kind), w.nodes))
    return ranks, {WORLD_GROUP: list(range(params.ranks))}
