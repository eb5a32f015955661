"""Parameters of the workload generators (`workload: {generate: {kind: ..., ...}}`, `emulate generate`).

GENERATORS_PARAMS maps each kind to its frozen dataclass; the scenario loader picks by `kind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from emulator.config import param

MIB = 1024 * 1024


@dataclass(frozen=True)
class MoeMixParams:
    """An MoE training step: All-to-All dispatch/combine in expert-parallel groups, All-Reduce of
    data-parallel gradients overlapping the next step (the Chakra paper's mixed workload, 5.3)."""

    kind: ClassVar[str] = "moe_mix"

    ranks: int = param(8, doc="ranks (world size)", min=2, max=32768)
    expert_parallel_size: int = param(
        4,
        doc="ranks per expert-parallel group (see expert_placement); data-parallel groups are "
        "the ranks at the same position of every expert-parallel group",
        min=2,
    )
    expert_placement: Literal["contiguous", "strided", "split"] = param(
        "contiguous",
        doc="which ranks form an expert-parallel group (E ranks, G groups): contiguous (ranks "
        "0..E-1, E..2E-1, ...; on a Clos with E hosts per leaf each group stays under one leaf "
        "and the data-parallel groups cross the spines), strided (ranks g, g+G, g+2G, ...; the "
        "expert-parallel groups span the leaves and each data-parallel group is G consecutive "
        "ranks) or split (group g takes the g-th E/G consecutive ranks of every block of E, so "
        "with E hosts per leaf each group has E/G hosts under each of G leaves; rank p of group "
        "g pairs with rank p + E/G of group g + 1 (mod E), so every data-parallel group also "
        "spans the leaves and both collectives cross the spines)",
    )
    dispatch_bytes: int = param(
        4 * MIB, doc="All-to-All (dispatch) send buffer per rank", unit="bytes", min=0
    )
    combine_bytes: int | None = param(
        None,
        doc="All-to-All (combine) send buffer per rank; default: dispatch_bytes",
        unit="bytes",
        min=0,
    )
    allreduce_bytes: int = param(
        64 * MIB, doc="data-parallel gradient All-Reduce buffer per rank", unit="bytes", min=0
    )
    attention_compute_us: float = param(
        100.0, doc="compute before the dispatch (attention, gating)", unit="us", min=0.0
    )
    expert_compute_us: float = param(
        200.0, doc="expert compute between dispatch and combine", unit="us", min=0.0
    )
    post_compute_us: float = param(
        100.0, doc="compute after the combine (rest of the layer, backward)", unit="us", min=0.0
    )
    iterations: int = param(4, doc="training steps written into the trace", min=1, max=100_000)
    overlap: bool = param(
        True,
        doc="the gradient All-Reduce of step i runs while step i+1 computes, dispatches and "
        "combines; step i+1's post compute waits for it (false: step i+1 waits for it)",
    )

    include_alltoall: bool = param(
        True,
        doc="write the All-to-All dispatch and combine; false keeps every compute, group and "
        "size but drops them (the All-Reduce-alone baseline of the interference study)",
    )
    include_allreduce: bool = param(
        True,
        doc="write the gradient All-Reduce; false keeps every compute, group and size but drops "
        "it (the All-to-All-alone baseline of the interference study)",
    )

    def __post_init__(self) -> None:
        if not (self.include_alltoall or self.include_allreduce):
            raise ValueError(
                "include_allreduce: include_alltoall and include_allreduce are both false; "
                "the trace would carry no communication"
            )
        if self.ranks % self.expert_parallel_size:
            raise ValueError(
                f"expert_parallel_size: {self.expert_parallel_size} does not divide ranks "
                f"{self.ranks}"
            )
        groups = self.ranks // self.expert_parallel_size
        if self.expert_placement == "split" and self.expert_parallel_size % groups:
            raise ValueError(
                f"expert_placement: split needs the {groups} expert-parallel groups to divide "
                f"expert_parallel_size {self.expert_parallel_size} (an equal share of each block)"
            )

    @property
    def combine_size_bytes(self) -> int:
        return self.dispatch_bytes if self.combine_bytes is None else self.combine_bytes


@dataclass(frozen=True)
class SingleCollectiveParams:
    """One collective over all ranks per iteration (microbenchmarks, isolated baselines)."""

    kind: ClassVar[str] = ""
    collective: ClassVar[str] = ""

    ranks: int = param(8, doc="ranks (world size)", min=2, max=32768)
    size_bytes: int = param(
        MIB,
        doc="comm_size: the per-rank buffer as ASTRA-sim reads it (AllGather: gathered output, "
        "ReduceScatter: input, AllToAll: send buffer)",
        unit="bytes",
        min=0,
    )
    iterations: int = param(1, doc="collectives written, one after the other", min=1, max=100_000)
    compute_us: float = param(0.0, doc="compute before each collective", unit="us", min=0.0)


@dataclass(frozen=True)
class AllreduceParams(SingleCollectiveParams):
    """One All-Reduce per iteration."""

    kind: ClassVar[str] = "allreduce"
    collective: ClassVar[str] = "ALL_REDUCE"


@dataclass(frozen=True)
class AlltoallParams(SingleCollectiveParams):
    """One All-to-All per iteration."""

    kind: ClassVar[str] = "alltoall"
    collective: ClassVar[str] = "ALL_TO_ALL"


@dataclass(frozen=True)
class AllgatherParams(SingleCollectiveParams):
    """One All-Gather per iteration."""

    kind: ClassVar[str] = "allgather"
    collective: ClassVar[str] = "ALL_GATHER"


@dataclass(frozen=True)
class ReducescatterParams(SingleCollectiveParams):
    """One Reduce-Scatter per iteration."""

    kind: ClassVar[str] = "reducescatter"
    collective: ClassVar[str] = "REDUCE_SCATTER"


GENERATORS_PARAMS: dict[str, type] = {
    "moe_mix": MoeMixParams,
    "allreduce": AllreduceParams,
    "alltoall": AlltoallParams,
    "allgather": AllgatherParams,
    "reducescatter": ReducescatterParams,
}


def kind_of(params: object) -> str:
    """The generator kind of a parameter object."""
    for kind, cls in GENERATORS_PARAMS.items():
        if type(params) is cls:
            return kind
    raise ValueError(f"{type(params).__name__} is not a generator parameter class")
