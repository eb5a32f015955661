"""The `workload:` section: a Chakra trace set on disk, or one generated for the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.config import param
from emulator.workloads.params import GENERATORS_PARAMS


@dataclass(frozen=True)
class WorkloadSpec:
    """The work to replay: a Chakra trace set on disk, or one generated for the run."""

    trace: str | None = param(
        None,
        doc="Chakra trace prefix (dir/name for dir/name.<rank>.et) or file, relative to the "
        "scenario file; exclusive with `generate`",
    )
    comm_groups: str | None = param(
        None, doc="comm-group JSON ({pg id: [ranks]}); default: found next to the traces"
    )
    generate: Any = param(
        None,
        doc="synthesize a trace instead: {kind: moe_mix|allreduce|alltoall|allgather|"
        "reducescatter, ...options}",
        kinds=GENERATORS_PARAMS,
    )
    iterations: int = param(1, doc="times the trace is replayed back to back", min=1, max=100_000)

    def __post_init__(self) -> None:
        if self.trace is None and self.generate is None:
            raise ValueError("trace: a workload needs either `trace` or `generate`")
        if self.trace is not None and self.generate is not None:
            raise ValueError("generate: give either `trace` or `generate`, not both")
