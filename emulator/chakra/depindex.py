"""Dependency index of one rank: data and ctrl edges resolved to node positions, as numpy arrays.

Node ids are arbitrary uint64 values (not aligned across ranks, not dense, sometimes written out
of order), so every consumer needs id -> position first. This module does it once, vectorised:
dependencies are CSR arrays (node i's deps are entries ptr[i]:ptr[i+1]) with the id as written and
the position it resolves to (-1 when no node in the file has that id: a dangling dependency).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from emulator.chakra import et_def_pb2 as pb

_DATA_DEPS = operator.attrgetter("data_deps")
_CTRL_DEPS = operator.attrgetter("ctrl_deps")


@dataclass(frozen=True, eq=False)
class DepEdges:
    """One kind of dependency (data or ctrl) of a rank's nodes, indexed by node position."""

    ptr: NDArray[np.int64]  # len(nodes) + 1 offsets
    ids: NDArray[np.uint64]  # the dependency's node id, as written
    pos: NDArray[np.int64]  # its position in the file, -1 when dangling

    @property
    def count(self) -> int:
        """Edges as written, dangling and self references included."""
        return len(self.ids)

    @cached_property
    def owner(self) -> NDArray[np.int64]:
        """Position of the node that lists each entry."""
        counts = np.diff(self.ptr)
        return np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    @cached_property
    def dangling(self) -> NDArray[np.bool_]:
        return self.pos < 0

    @cached_property
    def self_loop(self) -> NDArray[np.bool_]:
        return self.pos == self.owner

    @cached_property
    def indegree(self) -> NDArray[np.int64]:
        """Resolved dependencies per node (what a ready queue counts down)."""
        n = len(self.ptr) - 1
        return np.bincount(self.owner[self.pos >= 0], minlength=n).astype(np.int64)

    @cached_property
    def children(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(child_ptr, child_pos): node i's dependents are child_pos[child_ptr[i]:child_ptr[i+1]]"""
        n = len(self.ptr) - 1
        resolved = self.pos >= 0
        parents = self.pos[resolved]
        owners = self.owner[resolved]
        order = np.argsort(parents, kind="stable")
        child_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(parents, minlength=n), out=child_ptr[1:])
        return child_ptr, owners[order]

    def deps_of(self, position: int) -> NDArray[np.uint64]:
        return self.ids[self.ptr[position] : self.ptr[position + 1]]


@dataclass(frozen=True, eq=False)
class DepIndex:
    """Node ids, types and both dependency kinds of one rank, by file position."""

    node_ids: NDArray[np.uint64]
    node_types: NDArray[np.int64]
    data: DepEdges
    ctrl: DepEdges
    # Node positions sorted by id (stable), for id -> position lookups.
    id_order: NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.node_ids)

    @cached_property
    def duplicate_ids(self) -> NDArray[np.uint64]:
        """Ids that more than one node carries (lookups resolve to the first in file order)."""
        sorted_ids = self.node_ids[self.id_order]
        repeated = sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]]
        return np.unique(repeated)

    def position(self, node_id: int) -> int | None:
        """File position of the (first) node with this id, or None."""
        found = _resolve(np.array([node_id], dtype=np.uint64), self.node_ids, self.id_order)
        value = int(found[0])
        return value if value >= 0 else None


def build_index(nodes: Sequence[pb.Node]) -> DepIndex:
    """Resolve every data and ctrl dependency of `nodes` to a position; O(E log N), vectorised."""
    count = len(nodes)
    node_ids = np.fromiter(map(operator.attrgetter("id"), nodes), np.uint64, count)
    node_types = np.fromiter(map(operator.attrgetter("type"), nodes), np.int64, count)
    id_order = np.argsort(node_ids, kind="stable").astype(np.int64)
    return DepIndex(
        node_ids=node_ids,
        node_types=node_types,
        data=_edges(list(map(_DATA_DEPS, nodes)), node_ids, id_order),
        ctrl=_edges(list(map(_CTRL_DEPS, nodes)), node_ids, id_order),
        id_order=id_order,
    )


def _edges(
    containers: list[Sequence[int]], node_ids: NDArray[np.uint64], id_order: NDArray[np.int64]
) -> DepEdges:
    ptr = np.zeros(len(containers) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, containers), np.int64, len(containers)), out=ptr[1:])
    ids = np.fromiter(chain.from_iterable(containers), np.uint64, int(ptr[-1]))
    return DepEdges(ptr=ptr, ids=ids, pos=_resolve(ids, node_ids, id_order))


def _resolve(
    ids: NDArray[np.uint64], node_ids: NDArray[np.uint64], id_order: NDArray[np.int64]
) -> NDArray[np.int64]:
    if len(node_ids) == 0 or len(ids) == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    sorted_ids = node_ids[id_order]
    slot = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    found = sorted_ids[slot] == ids
    return np.where(found, id_order[slot], -1).astype(np.int64)


def is_acyclic(edge_sets: Sequence[DepEdges]) -> bool:
    """True when the union of the given dependency kinds has no cycle (dangling edges ignored).

    File order is almost a topological order in real traces, so only edges pointing forward can
    close a cycle, and every cycle lies between the first node with a forward-pointing dependency
    and the last node such a dependency points to. Kahn's algorithm runs on that window only.
    """
    parents_list, owners_list = [], []
    for edges in edge_sets:
        resolved = edges.pos >= 0
        parents_list.append(edges.pos[resolved])
        owners_list.append(edges.owner[resolved])
    parents = np.concatenate(parents_list) if parents_list else np.zeros(0, np.int64)
    owners = np.concatenate(owners_list) if owners_list else np.zeros(0, np.int64)
    if np.any(parents == owners):
        return False
    forward = parents > owners
    if not np.any(forward):
        return True
    low = int(owners[forward].min())
    high = int(parents[forward].max())
    inside = (parents >= low) & (parents <= high) & (owners >= low) & (owners <= high)
    return _kahn(parents[inside] - low, owners[inside] - low, high - low + 1)


def _kahn(parents: NDArray[np.int64], owners: NDArray[np.int64], size: int) -> bool:
    indegree = np.bincount(owners, minlength=size).tolist()
    order = np.argsort(parents, kind="stable")
    child_ptr = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(parents, minlength=size), out=child_ptr[1:])
    ptr = child_ptr.tolist()
    children = owners[order].tolist()
    ready = [i for i in range(size) if indegree[i] == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for child in children[ptr[node] : ptr[node + 1]]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return done == size
