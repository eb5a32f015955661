"""Typed access to a node's attributes (AttributeProto), tolerant of how real tools write them.

Real traces store the same attribute in different value kinds: `comm_size` as int64 or uint64,
`is_cpu_op` as bool or int32 (STG), `pg_name` as '0' or '0.0' (astra-sim-artifacts T2D). These
accessors hide that, so the schedule never looks at the oneof directly.
"""

from __future__ import annotations

import math
from typing import Any

from emulator.chakra import et_def_pb2 as pb
from emulator.errors import TraceError

# Every scalar integer kind of AttributeProto.value (et_def.proto fields 7..25, odd numbers).
INT_KINDS: frozenset[str] = frozenset(
    {
        "int32_val",
        "int64_val",
        "uint32_val",
        "uint64_val",
        "sint32_val",
        "sint64_val",
        "fixed32_val",
        "fixed64_val",
        "sfixed32_val",
        "sfixed64_val",
    }
)


def find_attr(node: pb.Node, name: str) -> pb.AttributeProto | None:
    """The first attribute called `name`, or None."""
    for attr in node.attr:
        if attr.name == name:
            return attr
    return None


def attr_value(node: pb.Node, name: str) -> Any | None:
    """Python value of the first attribute named `name`; None if absent or its oneof is unset.

    List kinds come back as a Python list.
    """
    attr = find_attr(node, name)
    if attr is None:
        return None
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(attr, kind)
    if kind.endswith("_list"):
        return list(value.values)
    return value


def attr_int(node: pb.Node, name: str) -> int | None:
    """An integer attribute written in any integer kind (bool counts as 0/1).

    Floats with an integral value and decimal strings are accepted too, since some converters
    write sizes as doubles; anything else raises TraceError naming the node.
    """
    attr = find_attr(node, name)
    if attr is None:
        return None
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(attr, kind)
    if kind in INT_KINDS or kind == "bool_val":
        return int(value)
    if kind in ("double_val", "float_val") and math.isfinite(value) and value == int(value):
        return int(value)
    if kind == "string_val":
        parsed = _int_from_text(value)
        if parsed is not None:
            return parsed
    raise TraceError(f"node {node.id}: attribute {name!r} is {kind}={value!r}, expected an integer")


def _int_from_text(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    if math.isfinite(number) and number == int(number):
        return int(number)
    return None


def comm_type(node: pb.Node) -> int | None:
    """CollectiveCommType number, None when the node has no `comm_type`."""
    return attr_int(node, "comm_type")


def comm_size(node: pb.Node) -> int | None:
    """Bytes of the communication (per rank), None when absent."""
    return attr_int(node, "comm_size")


def comm_src(node: pb.Node) -> int | None:
    return attr_int(node, "comm_src")


def comm_dst(node: pb.Node) -> int | None:
    return attr_int(node, "comm_dst")


def comm_tag(node: pb.Node) -> int | None:
    return attr_int(node, "comm_tag")


def is_cpu_op(node: pb.Node) -> bool:
    """`is_cpu_op` written as bool_val or an integer kind; absent means False."""
    value = attr_int(node, "is_cpu_op")
    return bool(value)


def pg_name(node: pb.Node) -> str | None:
    """Process-group id normalised to a plain integer string where it is one ('0.0' -> '0').

    None (no attribute, or an empty string) means the whole world.
    """
    attr = find_attr(node, "pg_name")
    if attr is None:
        return None
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(attr, kind)
    if kind == "string_val":
        return normalise_pg_id(value) or None
    if kind in INT_KINDS:
        return str(int(value))
    if kind in ("double_val", "float_val") and math.isfinite(value) and value == int(value):
        return str(int(value))
    raise TraceError(f"node {node.id}: attribute 'pg_name' is {kind}={value!r}, expected a string")


def normalise_pg_id(text: str) -> str:
    """'0.0' -> '0', ' 3 ' -> '3'; other names are kept as written (stripped)."""
    text = text.strip()
    number = _int_from_text(text)
    return str(number) if number is not None else text
