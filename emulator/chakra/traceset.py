"""A trace set: one rank file per rank (`<prefix>.<rank>.et`, ranks 0..N-1) plus its process groups.

`load_trace_set` accepts a prefix (`dir/name` -> `dir/name.0.et`, `dir/name.1.et`, ...; `.et.gz`
and `.json` rank files too) or a single file, which is then a one-rank set numbered 0.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.commgroups import (
    CommGroups,
    check_members,
    find_comm_groups,
    groups_from_pg_init,
)
from emulator.chakra.reader import RANK_IN_NAME, RankTrace, read_rank
from emulator.errors import TraceError

# Rank-file suffixes a prefix can expand to.
RANK_SUFFIXES = ("et", "et.gz", "json", "json.gz")


@dataclass(frozen=True)
class TraceSet:
    """All ranks of one workload, in rank order (ranks[i].rank == i)."""

    prefix: str
    ranks: tuple[RankTrace, ...]
    comm_groups: dict[str, tuple[int, ...]]
    comm_groups_path: Path | None
    warnings: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def load_trace_set(path: str | Path, comm_groups: str | Path | None = None) -> TraceSet:
    """Read every rank of a set and find its process groups. Raises TraceError naming the file."""
    path = Path(path)
    explicit = Path(comm_groups) if comm_groups is not None else None
    if path.is_dir():
        raise TraceError(
            f"{path}: is a directory; give a trace file or a prefix "
            "(dir/name for dir/name.0.et, dir/name.1.et, ...)"
        )
    if path.exists():
        files = [path]
        lookup_prefix = path.with_name(RANK_IN_NAME.sub("", path.name))
    else:
        files = rank_files(path)
        lookup_prefix = path
    ranks = tuple(read_rank(file, rank=rank) for rank, file in enumerate(files))
    warnings = [f"{trace.path}: {warning}" for trace in ranks for warning in trace.warnings]

    groups, groups_path = find_comm_groups(lookup_prefix, explicit)
    if groups_path is None:
        groups = _groups_from_metadata_nodes(ranks)
    problems = check_members(groups, len(ranks), str(groups_path or path))
    if problems and explicit is not None:
        raise TraceError(problems[0])
    warnings.extend(problems)
    return TraceSet(str(path), ranks, groups, groups_path, tuple(warnings))


def rank_files(prefix: Path) -> list[Path]:
    """`<prefix>.0.<suffix>` ... `<prefix>.<N-1>.<suffix>`; TraceError if none or one is missing."""
    folder = prefix.parent
    if not folder.is_dir():
        raise TraceError(f"{prefix}: no such file or trace prefix ({folder} is not a folder)")
    pattern = re.compile(
        re.escape(prefix.name) + r"\.(\d+)\.(" + "|".join(map(re.escape, RANK_SUFFIXES)) + r")$"
    )
    found: dict[int, Path] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            match = pattern.match(entry.name)
            if match is None:
                continue
            rank = int(match.group(1))
            if rank in found:
                raise TraceError(
                    f"{prefix}: rank {rank} has two files, {found[rank].name} and {entry.name}"
                )
            found[rank] = folder / entry.name
    if not found:
        raise TraceError(
            f"{prefix}: no such file, and no rank files {prefix.name}.0.et, "
            f"{prefix.name}.1.et, ... in {folder}"
        )
    for rank in range(len(found)):
        if rank not in found:
            example = next(iter(found.values())).name
            suffix = example[len(prefix.name) :].split(".", 2)[2]
            present = ", ".join(str(r) for r in sorted(found))
            raise TraceError(
                f"{prefix}.{rank}.{suffix}: missing rank file "
                f"(ranks must be contiguous from 0; found ranks {present})"
            )
    return [found[rank] for rank in range(len(found))]


def _groups_from_metadata_nodes(ranks: tuple[RankTrace, ...]) -> CommGroups:
    for trace in ranks:
        positions = np.flatnonzero(trace.index.node_types == pb.METADATA_NODE)
        groups = groups_from_pg_init(trace.nodes[int(p)] for p in positions)
        if groups:
            return groups
    return {}
