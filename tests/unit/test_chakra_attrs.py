"""Attribute accessors accept every integer kind and the spellings real traces use."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.chakra import (
    attr_value,
    comm_size,
    comm_src,
    comm_tag,
    comm_type,
    is_cpu_op,
    pb,
    pg_name,
)
from emulator.chakra.attrs import INT_KINDS
from emulator.errors import TraceError


def _node(**attrs: tuple[str, Any]) -> pb.Node:
    node = pb.Node(id=42, type=pb.COMM_COLL_NODE)
    for name, (kind, value) in attrs.items():
        values: dict[str, Any] = {kind: value}
        node.attr.add(name=name, **values)
    return node


@pytest.mark.parametrize("kind", sorted(INT_KINDS))
def test_comm_size_in_every_integer_kind(kind: str) -> None:
    assert comm_size(_node(comm_size=(kind, 1024))) == 1024


def test_integer_values_beyond_32_bits_and_negative() -> None:
    assert comm_size(_node(comm_size=("uint64_val", 2**63 + 5))) == 2**63 + 5
    assert comm_src(_node(comm_src=("sint32_val", -1))) == -1


def test_integral_float_and_text_are_accepted() -> None:
    assert comm_size(_node(comm_size=("double_val", 4096.0))) == 4096
    assert comm_type(_node(comm_type=("string_val", "6"))) == 6


@pytest.mark.parametrize(
    ("kind", "value"),
    [("double_val", 1.5), ("string_val", "ring"), ("bytes_val", b"\x01")],
)
def test_non_integer_values_raise_naming_the_node(kind: str, value: object) -> None:
    with pytest.raises(TraceError, match="node 42: attribute 'comm_tag'"):
        comm_tag(_node(comm_tag=(kind, value)))


def test_absent_and_unset_attributes_are_none() -> None:
    node = _node()
    node.attr.add(name="comm_type")  # oneof left unset
    assert comm_type(node) is None
    assert comm_size(node) is None
    assert attr_value(node, "comm_type") is None
    assert attr_value(node, "nothing") is None


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [("bool_val", True, True), ("bool_val", False, False), ("int32_val", 1, True)],
)
def test_is_cpu_op_as_bool_or_int(kind: str, value: object, expected: bool) -> None:
    assert is_cpu_op(_node(is_cpu_op=(kind, value))) is expected


def test_is_cpu_op_absent_is_false() -> None:
    assert is_cpu_op(_node()) is False


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("string_val", "0.0", "0"),
        ("string_val", "3", "3"),
        ("string_val", "", None),
        ("string_val", "tp_group", "tp_group"),
        ("int64_val", 7, "7"),
        ("double_val", 2.0, "2"),
    ],
)
def test_pg_name_normalised(kind: str, value: object, expected: str | None) -> None:
    assert pg_name(_node(pg_name=(kind, value))) == expected


def test_list_values_and_first_attribute_wins() -> None:
    node = _node(involved_dim=("bool_list", pb.BoolList(values=[True, False])))
    node.attr.add(name="involved_dim", bool_val=True)
    assert attr_value(node, "involved_dim") == [True, False]
