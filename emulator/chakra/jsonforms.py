"""The two JSON forms of a Chakra trace found in the wild, turned into the same pb.Node objects.

* Feeder JSON (`{"workload_graph": [{"Id", "Name", "NodeType", "data_deps", "runtime",
  "is_cpu_op", ...}, ...]}`): the format chakra's C++ feeder reads (mlcommons/chakra
  src/feeder/JSONNode.cpp: Id, Name, NodeType, is_cpu_op, runtime, data_deps and, on comm nodes,
  tensor_size, comm_type, comm_priority, comm_size, comm_src, comm_dst, comm_tag). Some files also
  carry `ctrlDeps`.
* Jsonizer output (`chakra_jsonizer`): protobuf-JSON of the GlobalMetadata and then of each Node,
  concatenated without separators, so the file is a stream of JSON objects, not one document.
"""

from __future__ import annotations

import json
from typing import Any, cast

from google.protobuf import json_format

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.names import one_line
from emulator.errors import TraceError

# Feeder key -> (attribute name, AttributeProto value kind), kinds as chakra's converters use.
_FEEDER_ATTRS: dict[str, tuple[str, str]] = {
    "tensor_size": ("tensor_size", "uint64_val"),
    "comm_type": ("comm_type", "int64_val"),
    "comm_priority": ("comm_priority", "int32_val"),
    "comm_size": ("comm_size", "int64_val"),
    "comm_src": ("comm_src", "int32_val"),
    "comm_dst": ("comm_dst", "int32_val"),
    "comm_tag": ("comm_tag", "int32_val"),
}
_INT_RANGES: dict[str, tuple[int, int]] = {
    "uint64_val": (0, 2**64 - 1),
    "int64_val": (-(2**63), 2**63 - 1),
    "int32_val": (-(2**31), 2**31 - 1),
}


def parse_json_text(text: str, source: str) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """Either JSON form -> (metadata, nodes). Raises TraceError naming the file and entry."""
    decoder = json.JSONDecoder()
    objects: list[Any] = []
    pos = _skip_space(text, 0)
    if pos == len(text):
        raise TraceError(f"{source}: empty file")
    while pos < len(text):
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from None
        objects.append(obj)
        pos = _skip_space(text, pos)
    first = objects[0]
    if len(objects) == 1 and isinstance(first, dict) and "workload_graph" in first:
        return pb.GlobalMetadata(), _feeder_nodes(first["workload_graph"], source)
    return _jsonizer(objects, source)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _jsonizer(objects: list[Any], source: str) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    metadata = pb.GlobalMetadata()
    _parse_dict(objects[0], metadata, source, "object 0 (GlobalMetadata)")
    nodes = []
    for index, obj in enumerate(objects[1:], start=1):
        node = pb.Node()
        _parse_dict(obj, node, source, f"object {index} (Node)")
        nodes.append(node)
    return metadata, nodes


def _parse_dict(obj: Any, message: Any, source: str, what: str) -> None:
    if not isinstance(obj, dict):
        raise TraceError(f"{source}: {what}: expected a JSON object, got {type(obj).__name__}")
    try:
        json_format.ParseDict(obj, message)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise TraceError(f"{source}: {what}: {one_line(exc)}") from None


def _feeder_nodes(graph: Any, source: str) -> list[pb.Node]:
    if not isinstance(graph, list):
        raise TraceError(f"{source}: 'workload_graph' must be a list of nodes")
    return [_feeder_node(entry, index, source) for index, entry in enumerate(graph)]


def _feeder_node(entry: Any, index: int, source: str) -> pb.Node:
    where = f"{source}: workload_graph[{index}]"
    if not isinstance(entry, dict):
        raise TraceError(f"{where}: expected an object")
    if "Id" not in entry:
        raise TraceError(f"{where}: missing 'Id'")
    node_id = _integer(entry["Id"], f"{where}: 'Id'", 0, 2**64 - 1)
    where = f"{source}: node {node_id}"
    node = pb.Node(id=node_id)
    name = entry.get("Name", "")
    if not isinstance(name, str):
        raise TraceError(f"{where}: 'Name' must be a string")
    node.name = name
    node_type = _integer(entry.get("NodeType", 0), f"{where}: 'NodeType'", -(2**31), 2**31 - 1)
    # Open proto3 enum: an unknown number is stored as is and rejected later with the node id.
    node.type = cast("pb.NodeType", node_type)
    node.duration_micros = _integer(entry.get("runtime", 0), f"{where}: 'runtime'", 0, 2**64 - 1)
    node.data_deps.extend(_id_list(entry.get("data_deps", []), f"{where}: 'data_deps'"))
    ctrl = entry.get("ctrlDeps", entry.get("ctrl_deps", []))
    node.ctrl_deps.extend(_id_list(ctrl, f"{where}: 'ctrlDeps'"))
    if "is_cpu_op" in entry:
        value = entry["is_cpu_op"]
        if not isinstance(value, bool | int):
            raise TraceError(f"{where}: 'is_cpu_op' must be a bool or an integer")
        node.attr.add(name="is_cpu_op", bool_val=bool(value))
    for key, (attr_name, kind) in _FEEDER_ATTRS.items():
        if key in entry:
            low, high = _INT_RANGES[kind]
            value = _integer(entry[key], f"{where}: {key!r}", low, high)
            node.attr.add(name=attr_name, **{kind: value})
    return node


def _integer(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise TraceError(f"{what} must be an integer, got {value!r}")
        value = int(value)
    if not low <= value <= high:
        raise TraceError(f"{what} = {value} is out of range [{low}, {high}]")
    return value


def _id_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise TraceError(f"{what} must be a list of node ids")
    return [_integer(item, what, 0, 2**64 - 1) for item in value]
