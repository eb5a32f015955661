"""Building Chakra protobuf nodes for the generators (attribute kinds as ASTRA-sim's tools write them)."""

from __future__ import annotations

from collections.abc import Sequence

from emulator.chakra import pb
from emulator.schedule.nodes import COMM_COLL_NODE, COMP_NODE


def _attr(node: pb.Node, name: str, **value: object) -> None:
    attr = node.attr.add()
    attr.name = name
    for kind, v in value.items():
        setattr(attr, kind, v)


class NodeWriter:
    """Hands out consecutive node ids for one rank."""

    def __init__(self) -> None:
        self.nodes: list[pb.Node] = []

    def _new(self, name: str, node_type: int, deps: Sequence[int]) -> pb.Node:
        node = pb.Node(id=len(self.nodes) + 1, name=name, type=node_type)  # type: ignore[arg-type]
        node.data_deps.extend(d for d in deps if d)
        self.nodes.append(node)
        return node

    def compute(self, name: str, duration_us: float, deps: Sequence[int] = ()) -> int:
        node = self._new(name, COMP_NODE, deps)
        node.duration_micros = round(duration_us)
        _attr(node, "is_cpu_op", bool_val=False)
        return node.id

    def collective(
        self, name: str, comm_type: int, size_bytes: int, pg_name: str, deps: Sequence[int] = ()
    ) -> int:
        node = self._new(name, COMM_COLL_NODE, deps)
        _attr(node, "is_cpu_op", bool_val=False)
        _attr(node, "comm_type", int64_val=comm_type)
        _attr(node, "comm_size", int64_val=size_bytes)
        _attr(node, "pg_name", string_val=pg_name)
        return node.id


def metadata(kind: str) -> pb.GlobalMetadata:
    meta = pb.GlobalMetadata(version="0.0.4")
    attr = meta.attr.add()
    attr.name = "generator"
    attr.string_val = f"chakra-roce-emulator {kind}"
    return meta
