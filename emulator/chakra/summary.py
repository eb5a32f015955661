"""What `emulate validate` reports about a trace set: node, collective and dependency figures.

The JSON form has exactly the keys of issue #2: prefix, ranks, nodes_by_type, collectives,
p2p_nodes, data_deps, ctrl_deps, data_dag, warnings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.attrs import comm_size, comm_type
from emulator.chakra.depindex import is_acyclic
from emulator.chakra.names import COLLECTIVE_NAMES, NODE_TYPE_NAMES, collective_name
from emulator.chakra.reader import RankTrace
from emulator.chakra.traceset import TraceSet
from emulator.errors import TraceError


@dataclass(frozen=True)
class CollectiveCount:
    """Collectives of one type and size over all ranks; None where the node does not say."""

    type: str | None
    bytes: int | None
    count: int


@dataclass(frozen=True)
class TraceSummary:
    prefix: str
    ranks: int
    nodes_per_rank: tuple[int, int]  # (min, max)
    nodes_by_type: dict[str, int]  # every NodeType name, zero included, in enum order
    collectives: tuple[CollectiveCount, ...]
    p2p_nodes: int
    data_deps: int
    ctrl_deps: int
    data_dag: bool
    data_ctrl_dag: bool
    metadata_version: str
    metadata_attrs: tuple[str, ...]
    comm_groups: int
    comm_groups_path: str | None
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "ranks": self.ranks,
            "nodes_by_type": dict(self.nodes_by_type),
            "collectives": [
                {"type": c.type, "bytes": c.bytes, "count": c.count} for c in self.collectives
            ],
            "p2p_nodes": self.p2p_nodes,
            "data_deps": self.data_deps,
            "ctrl_deps": self.ctrl_deps,
            "data_dag": self.data_dag,
            "warnings": list(self.warnings),
        }


def summarize(trace_set: TraceSet) -> TraceSummary:
    """Figures over all ranks of the set; raises TraceError naming the file for a bad attribute."""
    type_counts: Counter[int] = Counter()
    collectives: Counter[tuple[str | None, int | None]] = Counter()
    warnings = list(trace_set.warnings)
    sizes = [len(rank.nodes) for rank in trace_set.ranks]
    for rank in trace_set.ranks:
        values, counts = np.unique(rank.index.node_types, return_counts=True)
        type_counts.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
        collectives.update(_collectives(rank, warnings))
    first = trace_set.ranks[0].metadata if trace_set.ranks else pb.GlobalMetadata()
    return TraceSummary(
        prefix=trace_set.prefix,
        ranks=trace_set.world_size,
        nodes_per_rank=(min(sizes, default=0), max(sizes, default=0)),
        nodes_by_type={
            name: type_counts.get(number, 0) for number, name in NODE_TYPE_NAMES.items()
        },
        collectives=tuple(
            CollectiveCount(kind, size, count)
            for (kind, size), count in sorted(collectives.items(), key=_collective_order)
        ),
        p2p_nodes=type_counts.get(pb.COMM_SEND_NODE, 0) + type_counts.get(pb.COMM_RECV_NODE, 0),
        data_deps=sum(rank.index.data.count for rank in trace_set.ranks),
        ctrl_deps=sum(rank.index.ctrl.count for rank in trace_set.ranks),
        data_dag=all(is_acyclic([r.index.data]) for r in trace_set.ranks),
        data_ctrl_dag=all(is_acyclic([r.index.data, r.index.ctrl]) for r in trace_set.ranks),
        metadata_version=first.version,
        metadata_attrs=tuple(attr.name for attr in first.attr),
        comm_groups=len(trace_set.comm_groups),
        comm_groups_path=str(trace_set.comm_groups_path) if trace_set.comm_groups_path else None,
        warnings=tuple(warnings),
    )


def _collectives(rank: RankTrace, warnings: list[str]) -> Counter[tuple[str | None, int | None]]:
    found: Counter[tuple[str | None, int | None]] = Counter()
    unknown: set[int] = set()
    for position in np.flatnonzero(rank.index.node_types == pb.COMM_COLL_NODE).tolist():
        node = rank.nodes[position]
        try:
            number, size = comm_type(node), comm_size(node)
        except TraceError as exc:
            raise TraceError(f"{rank.path}: {exc}") from None
        if number is not None and number not in COLLECTIVE_NAMES:
            unknown.add(number)
        found[(collective_name(number) if number is not None else None, size)] += 1
    if unknown:
        warnings.append(f"{rank.path}: comm_type value(s) {sorted(unknown)} are not collectives")
    return found


def _collective_order(item: tuple[tuple[str | None, int | None], int]) -> tuple[Any, ...]:
    (kind, size), _count = item
    return (kind is None, kind or "", size is None, size or 0)


def format_summary(summary: TraceSummary) -> list[str]:
    """Human-readable lines for one set."""
    low, high = summary.nodes_per_rank
    per_rank = str(low) if low == high else f"{low}-{high}"
    lines = [
        f"{summary.prefix}: {summary.ranks} rank(s), {per_rank} node(s) per rank",
        f"  metadata: version={summary.metadata_version!r}"
        + (f", attrs: {', '.join(summary.metadata_attrs)}" if summary.metadata_attrs else ""),
    ]
    types = [f"{name} {count}" for name, count in summary.nodes_by_type.items() if count]
    lines.append(f"  nodes by type: {', '.join(types) or 'none'}")
    if summary.collectives:
        lines.append("  collectives (type, bytes, count over all ranks):")
        for c in summary.collectives:
            kind = c.type or "(no comm_type)"
            size = f"{c.bytes} B" if c.bytes is not None else "(no comm_size)"
            lines.append(f"    {kind} {size} x{c.count}")
    else:
        lines.append("  collectives: none")
    lines.append(f"  send/recv nodes: {summary.p2p_nodes}")
    lines.append(f"  data deps: {summary.data_deps} edge(s), acyclic: {_yes(summary.data_dag)}")
    lines.append(
        f"  ctrl deps: {summary.ctrl_deps} edge(s), data+ctrl acyclic: "
        f"{_yes(summary.data_ctrl_dag)}"
    )
    if summary.comm_groups_path:
        groups = f"{summary.comm_groups} from {summary.comm_groups_path}"
    elif summary.comm_groups:
        groups = f"{summary.comm_groups} from a process_group:init node"
    else:
        groups = "none (collectives without pg_name span all ranks)"
    lines.append(f"  comm groups: {groups}")
    if summary.warnings:
        lines.append(f"  warnings ({len(summary.warnings)}):")
        lines.extend(f"    - {warning}" for warning in summary.warnings)
    else:
        lines.append("  warnings: none")
    return lines


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"
