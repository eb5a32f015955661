"""A Chakra trace set on disk as streaming rank inputs for the JobSchedule.

Each pass over a rank re-reads its file with emulator.chakra.iter_records and describes nodes
one at a time, so planning holds the feeder windows, not the trace. Process groups come from the
comm-group file (explicit or found next to the traces) and from `## process_group:init ##` nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from emulator.chakra import iter_records
from emulator.chakra.commgroups import find_comm_groups
from emulator.chakra.reader import RANK_IN_NAME
from emulator.chakra.traceset import rank_files as chakra_rank_files
from emulator.errors import TraceError
from emulator.schedule.job import RankInput
from emulator.schedule.matching import GroupTable
from emulator.schedule.nodes import Describer, NodeInfo
from emulator.schedule.params import ComputeParams


def rank_files(prefix: str | Path) -> tuple[list[Path], Path]:
    """The rank files of a set (prefix or single file, as load_trace_set reads them) and the
    prefix next to which the comm-group file is looked for."""
    path = Path(prefix)
    if path.is_dir():
        raise TraceError(
            f"{path}: is a directory; give a trace file or a prefix "
            "(dir/name for dir/name.0.et, dir/name.1.et, ...)"
        )
    if path.exists():
        return [path], path.with_name(RANK_IN_NAME.sub("", path.name))
    return chakra_rank_files(path), path


@dataclass
class TraceSource:
    """What a JobSchedule needs from a trace set."""

    prefix: str
    files: list[Path]
    groups: GroupTable
    comm_groups_path: Path | None
    ranks: list[RankInput] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return len(self.files)


def open_trace_set(
    prefix: str | Path, comm_groups: str | Path | None = None, compute: ComputeParams | None = None
) -> TraceSource:
    compute = compute or ComputeParams()
    files, lookup_prefix = rank_files(prefix)
    explicit = Path(comm_groups) if comm_groups is not None else None
    groups, groups_path = find_comm_groups(lookup_prefix, explicit)
    table = GroupTable(len(files), groups, str(groups_path) if groups_path else "comm groups")
    source = TraceSource(str(prefix), files, table, groups_path)
    for path in files:
        source.ranks.append(RankInput(_pass_opener(path, compute, source), str(path)))
    return source


def _pass_opener(
    path: Path, compute: ComputeParams, source: TraceSource
) -> Callable[[int], Iterator[NodeInfo]]:
    where = str(path)

    def open_pass(iteration: int) -> Iterator[NodeInfo]:
        describer = Describer(compute, where)
        seen_groups = 0
        for index, node in enumerate(iter_records(path)):
            info = describer.describe(index, node)
            if len(describer.process_groups) != seen_groups:
                seen_groups = len(describer.process_groups)
                source.groups.add_process_groups(describer.process_groups, where)
            yield info
        describer.finish()
        if iteration == 0:
            source.warnings.extend(describer.warnings)

    return open_pass
