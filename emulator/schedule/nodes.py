"""What the schedule keeps of a Chakra node: kind, delay, dependencies, communication fields.

A small slotted record per node instead of the protobuf message, so a rank's feeder holds only
its window of unresolved nodes. Reading the attributes once here also pins down how the trace's
quirks are read (integer kinds, is_cpu_op as int, float-formatted pg names: emulator.chakra).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from emulator import chakra
from emulator.chakra.attrs import normalise_pg_id
from emulator.errors import TraceError
from emulator.schedule.params import ComputeParams

# Chakra NodeType numbers (mlcommons/chakra schema/protobuf/et_def.proto).
METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7

PROCESS_GROUP_INIT = "## process_group:init ##"


class NodeKind:
    """Kinds the schedule distinguishes (plain strings: cheap to store and to print)."""

    DELAY = "delay"  # compute/memory/metadata: takes delay_s on a stream, no network
    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"


class Stream:
    GPU = "gpu"
    CPU = "cpu"
    NONE = ""  # zero-time nodes and memory nodes are not serialized


@dataclass(frozen=True, slots=True)
class CommInfo:
    collective: str  # CollectiveCommType name, or "SEND"/"RECV"
    size_bytes: int | None
    pg_name: str | None
    src: int | None
    dst: int | None
    tag: int | None


class NodeInfo:
    """One node of one rank, in record order `index`; mutable state belongs to the feeder."""

    __slots__ = (
        "comm",
        "ctrl_deps",
        "data_deps",
        "delay_s",
        "id",
        "index",
        "kind",
        "name",
        "start_time_us",
        "stream",
    )

    def __init__(
        self,
        index: int,
        node_id: int,
        name: str,
        kind: str,
        delay_s: float = 0.0,
        stream: str = Stream.NONE,
        data_deps: tuple[int, ...] = (),
        ctrl_deps: tuple[int, ...] = (),
        start_time_us: int = 0,
        comm: CommInfo | None = None,
    ) -> None:
        self.index = index
        self.id = node_id
        self.name = name
        self.kind = kind
        self.delay_s = delay_s
        self.stream = stream
        self.data_deps = data_deps
        self.ctrl_deps = ctrl_deps
        self.start_time_us = start_time_us
        self.comm = comm

    def __repr__(self) -> str:
        return f"NodeInfo({self.id}, {self.name!r}, {self.kind})"


_COMPUTE_ATTRS = frozenset({"is_cpu_op", "num_ops", "tensor_size"})


def _compute_attrs(node: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for attr in node.attr:
        if attr.name in _COMPUTE_ATTRS and attr.name not in found:
            which = attr.WhichOneof("value")
            if which is not None:
                found[attr.name] = getattr(attr, which)
    return found


class Describer:
    """Turns protobuf nodes of one rank into NodeInfo, collecting warnings and process groups."""

    def __init__(self, params: ComputeParams, where: str) -> None:
        self.params = params
        self.where = where
        self.warnings: list[str] = []
        self.skipped_cpu_comm = 0
        self.process_groups: dict[str, tuple[int, ...] | None] = {}

    def describe(self, index: int, node: Any) -> NodeInfo:
        node_type = node.type
        data_deps = tuple(node.data_deps)
        ctrl_deps = tuple(node.ctrl_deps)
        base = (index, node.id, node.name)
        if node_type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
            return self._comm(base, node, node_type, data_deps, ctrl_deps)
        delay_s, stream = 0.0, Stream.NONE
        if node_type == COMP_NODE:
            delay_s, stream = self._compute_delay(node)
        elif node_type in (MEM_LOAD_NODE, MEM_STORE_NODE):
            size = _compute_attrs(node).get("tensor_size") or 0
            delay_s = max(node.duration_micros * 1e-6, size / self.params.memory_node_bytes_per_s)
        elif node_type == METADATA_NODE and node.name == PROCESS_GROUP_INIT:
            self._read_process_groups(node)
        return NodeInfo(
            *base, NodeKind.DELAY, delay_s, stream, data_deps, ctrl_deps, node.start_time_micros
        )

    def _compute_delay(self, node: Any) -> tuple[float, str]:
        attrs = _compute_attrs(node)
        cpu = bool(attrs.get("is_cpu_op", False))
        if cpu and not self.params.include_cpu_ops:
            return 0.0, Stream.NONE
        delay_s = node.duration_micros * 1e-6
        if delay_s <= 0.0:
            # Roofline: the slower of compute and memory traffic.
            delay_s = max(
                (attrs.get("num_ops") or 0) / self.params.flops_per_s,
                (attrs.get("tensor_size") or 0) / self.params.mem_bytes_per_s,
            )
        return delay_s, Stream.CPU if cpu else Stream.GPU

    def _comm(
        self,
        base: tuple[int, int, str],
        node: Any,
        node_type: int,
        data_deps: tuple[int, ...],
        ctrl_deps: tuple[int, ...],
    ) -> NodeInfo:
        start = node.start_time_micros
        if node_type == COMM_COLL_NODE:
            number = chakra.comm_type(node)
            if number is None:
                # CPU-side c10d launch records (e.g. c10d::allreduce_) of PyTorch traces are
                # COMM_COLL without comm_type; the GPU kernel node carries the collective.
                self.skipped_cpu_comm += 1
                return NodeInfo(
                    *base, NodeKind.DELAY, 0.0, Stream.NONE, data_deps, ctrl_deps, start
                )
            name = chakra.COLLECTIVE_NAMES.get(number)
            if name is None:
                raise_unknown(self.where, node.id, number)
            kind = NodeKind.COLLECTIVE
        else:
            name = "SEND" if node_type == COMM_SEND_NODE else "RECV"
            kind = NodeKind.SEND if node_type == COMM_SEND_NODE else NodeKind.RECV
        comm = CommInfo(
            collective=str(name),
            size_bytes=chakra.comm_size(node),
            pg_name=chakra.pg_name(node),
            src=chakra.comm_src(node),
            dst=chakra.comm_dst(node),
            tag=chakra.comm_tag(node),
        )
        return NodeInfo(*base, kind, 0.0, Stream.NONE, data_deps, ctrl_deps, start, comm)

    def _read_process_groups(self, node: Any) -> None:
        """PyTorch's `## process_group:init ##` node: JSON list of {pg_name, ranks, ...} as input."""
        text = node.inputs.values if node.HasField("inputs") else ""
        for entry in _json_dicts(text):
            name = entry.get("pg_name")
            ranks = entry.get("ranks")
            if name is None or not isinstance(ranks, list):
                continue
            key = normalise_pg_id(str(name))
            # An empty rank list is how PyTorch records the default (world) group.
            self.process_groups[key] = tuple(int(r) for r in ranks) if ranks else None

    def finish(self) -> None:
        if self.skipped_cpu_comm:
            self.warnings.append(
                f"{self.where}: skipped {self.skipped_cpu_comm} COMM_COLL node(s) without "
                "comm_type (CPU-side c10d launch records; the GPU kernel nodes carry the "
                "collectives)"
            )


def _json_dicts(text: str) -> Iterator[dict[str, Any]]:
    try:
        value: Any = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            yield item
        elif isinstance(item, list):
            todo.extend(reversed(item))
        elif isinstance(item, str):
            try:
                todo.append(json.loads(item))
            except json.JSONDecodeError:
                continue


def raise_unknown(where: str, node_id: int, number: int) -> NoReturn:
    raise TraceError(f"{where}: node {node_id}: unknown comm_type {number}")
