"""Generator registry: kind -> function building (per-rank metadata and nodes, comm groups).

Parameter classes are in emulator.workloads.params.GENERATORS_PARAMS (kept light: the scenario
loader imports it); this module imports the protobuf code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.workloads import moe_mix, single
from emulator.workloads.params import kind_of

Builder = Callable[[Any], tuple[list[tuple[Any, list[Any]]], dict[str, list[int]]]]

GENERATORS: dict[str, Builder] = {
    "moe_mix": moe_mix.build,
    "allreduce": single.build,
    "alltoall": single.build,
    "allgather": single.build,
    "reducescatter": single.build,
}


def write_workload(params: Any, prefix: str | Path) -> list[Path]:
    """Generate the trace set for `params` (an instance of a GENERATORS_PARAMS class) at prefix."""
    from emulator.chakra import write_trace_set

    ranks, comm_groups = GENERATORS[kind_of(params)](params)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    return write_trace_set(prefix, ranks, comm_groups)
