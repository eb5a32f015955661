"""Names of the Chakra enums (NodeType, CollectiveCommType) as the schema spells them.

Derived from the generated descriptors, so they cannot drift from et_def.proto.
"""

from __future__ import annotations

from emulator.chakra import et_def_pb2 as pb

NODE_TYPE_NAMES: dict[int, str] = {
    value.number: value.name for value in pb.DESCRIPTOR.enum_types_by_name["NodeType"].values
}
COLLECTIVE_NAMES: dict[int, str] = {
    value.number: value.name
    for value in pb.DESCRIPTOR.enum_types_by_name["CollectiveCommType"].values
}

# Point-to-point node types (send/recv count as p2p in `emulate validate`).
P2P_NODE_TYPES: frozenset[int] = frozenset({pb.COMM_SEND_NODE, pb.COMM_RECV_NODE})
COMM_NODE_TYPES: frozenset[int] = P2P_NODE_TYPES | {pb.COMM_COLL_NODE}


def node_type_name(value: int) -> str:
    """The NodeType name, or `NodeType(<n>)` for a number the schema does not define."""
    return NODE_TYPE_NAMES.get(value, f"NodeType({value})")


def collective_name(value: int) -> str:
    """The CollectiveCommType name, or `CollectiveCommType(<n>)` for an undefined number."""
    return COLLECTIVE_NAMES.get(value, f"CollectiveCommType({value})")


def one_line(error: object) -> str:
    """A library's error message as one line (the CLI prints every error on one line)."""
    return " ".join(str(error).split())
