"""Map a YAML document onto frozen dataclasses, checking keys, types and ranges.

Works on YAML *nodes* (yaml.compose), not on the constructed Python objects, so every error can
name the file, the key path and the line. The accepted field types are the ones listed in
`emulator.config`: scalars, Literal, optional, homogeneous tuples, str-keyed dicts, nested
dataclasses, and fields whose dataclass is picked by a `kind:` key from a registry.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from emulator.config import ParamInfo, check_range, param_info
from emulator.errors import ScenarioError

_SCALAR_CONSTRUCTOR = yaml.SafeLoader(b"")


class _Invalid(Exception):
    """A value does not fit its field; carries the node so the caller can name the line."""

    def __init__(
        self, node: yaml.Node, key_path: str, message: str, *, typed: bool = False
    ) -> None:
        super().__init__(message)
        self.node = node
        self.key_path = key_path
        self.message = message
        # The value had the right type but a bad value (range, NaN): the most useful error in a union.
        self.typed = typed


def compose_file(path: Path) -> yaml.Node | None:
    """Parse a YAML file into its node tree, turning every I/O and syntax problem into ScenarioError."""
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ScenarioError(f"{path}: is a directory, expected a scenario YAML file") from None
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        raise ScenarioError(f"{path}{where}: invalid YAML: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, e.g. a control byte
        line = text.count("\n", 0, exc.position) + 1
        raise ScenarioError(
            f"{path}:{line}: invalid YAML: character {exc.character!r} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScenarioError(f"{path}: invalid YAML: {first}") from None


def load_dataclass(cls: type[Any], node: yaml.Node | None, source: Path) -> Any:
    """Build `cls` from a YAML node."""
    if node is None:
        raise ScenarioError(f"{source}: empty file, expected a scenario mapping")
    try:
        return _convert_dataclass(cls, node, "")
    except _Invalid as exc:
        line = exc.node.start_mark.line + 1
        where = f" {exc.key_path}:" if exc.key_path else ""
        # one line whatever the file holds (a value quoted in the message may span lines)
        message = exc.message.replace("\r", "\\r").replace("\n", "\\n")
        raise ScenarioError(f"{source}:{line}:{where} {message}") from None


def _join(key_path: str, key: str) -> str:
    # a key that is not plain printable text is shown quoted, so the message stays one line
    shown = key if key and key.isprintable() and key.strip() == key else repr(key)
    return f"{key_path}.{shown}" if key_path else shown


def _scalar(node: yaml.Node, key_path: str = "") -> Any:
    """The value of a scalar node; a tag the safe loader cannot build (!!python/..., a bad
    !!binary or !!timestamp) is refused like any other invalid value."""
    try:
        return _SCALAR_CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        problem = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
        raise _Invalid(node, key_path, f"cannot read this value ({problem})") from None


def _mapping_items(node: yaml.Node, key_path: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise _Invalid(node, key_path, f"expected a mapping, got {_describe(node)}")
    seen: dict[str, yaml.Node] = {}
    items: list[tuple[str, yaml.Node, yaml.Node]] = []
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _Invalid(key_node, key_path, "mapping keys must be plain strings")
        key = str(_scalar(key_node, key_path))
        if key in seen:
            raise _Invalid(key_node, _join(key_path, key), "duplicate key")
        seen[key] = key_node
        items.append((key, key_node, value_node))
    return items


def _convert_dataclass(cls: type[Any], node: yaml.Node, key_path: str) -> Any:
    fields = {
        f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")
    }
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, key_node, value_node in _mapping_items(node, key_path):
        field = fields.get(key)
        if field is None:
            allowed = ", ".join(sorted(fields)) or "none"
            raise _Invalid(key_node, _join(key_path, key), f"unknown key (allowed: {allowed})")
        values[key] = _convert(hints[key], value_node, _join(key_path, key), param_info(field))
    for name, field in fields.items():
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if required and name not in values:
            raise _Invalid(
                node, _join(key_path, name), "missing (this key is required)", typed=True
            )
    try:
        return cls(**values)
    except ValueError as exc:
        # __post_init__ cross-field checks say "<field>: why"; point at that field when we can.
        message = str(exc)
        field_name = message.split(":", 1)[0].strip()
        for key, key_node, _ in _mapping_items(node, key_path):
            if key == field_name:
                raise _Invalid(
                    key_node, _join(key_path, key), message.split(":", 1)[1].strip(), typed=True
                ) from None
        if field_name in fields:
            # The field the check names was not written: point at the section that lacks it.
            why = message.split(":", 1)[1].strip()
            raise _Invalid(node, _join(key_path, field_name), why, typed=True) from None
        raise _Invalid(node, key_path, message, typed=True) from None


def _convert_kind(kinds: Mapping[str, type], node: yaml.Node, key_path: str) -> Any:
    items = _mapping_items(node, key_path)
    kind_entry = [(k, kn, vn) for k, kn, vn in items if k == "kind"]
    names = ", ".join(sorted(kinds))
    if not kind_entry:
        raise _Invalid(node, key_path, f"missing 'kind' (one of: {names})")
    _, _, kind_node = kind_entry[0]
    kind = _scalar(kind_node, key_path) if isinstance(kind_node, yaml.ScalarNode) else None
    if not isinstance(kind, str) or kind not in kinds:
        raise _Invalid(
            kind_node, _join(key_path, "kind"), f"unknown kind {kind!r} (one of: {names})"
        )
    rest = yaml.MappingNode(
        tag="tag:yaml.org,2002:map",
        value=[(kn, vn) for k, kn, vn in items if k != "kind"],
        start_mark=node.start_mark,
        end_mark=node.end_mark,
    )
    return _convert_dataclass(kinds[kind], rest, key_path)


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = _scalar(node)
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, node: yaml.Node, key_path: str, info: ParamInfo | None) -> Any:
    if info is not None and info.kinds is not None:
        if (
            isinstance(node, yaml.ScalarNode)
            and _scalar(node, key_path) is None
            and _allows_none(tp)
        ):
            return None
        return _convert_kind(info.kinds, node, key_path)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        errors = []
        for option in options:
            try:
                return _convert(option, node, key_path, info)
            except _Invalid as exc:
                errors.append(exc)
        # An error deeper down, or a range error on the right type, says more than "expected X or Y".
        telling = [e for e in errors if e.node is not node or e.typed]
        if telling:
            raise telling[0]
        expected = " or ".join(_type_name(o) for o in options)
        raise _Invalid(node, key_path, f"expected {expected}, got {_describe(node)}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(tp, node, key_path)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(node, yaml.SequenceNode):
            raise _Invalid(node, key_path, f"expected a list, got {_describe(node)}")
        item_tp = args[0]
        return tuple(
            _convert(item_tp, item, f"{key_path}[{i}]", info) for i, item in enumerate(node.value)
        )
    if origin is dict:
        _, value_tp = typing.get_args(tp)
        return {
            key: _convert(value_tp, value_node, _join(key_path, key), None)
            for key, _, value_node in _mapping_items(node, key_path)
        }
    if not isinstance(node, yaml.ScalarNode):
        raise _Invalid(node, key_path, f"expected {_type_name(tp)}, got {_describe(node)}")
    value = _scalar(node, key_path)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            names = ", ".join(repr(c) for c in choices)
            raise _Invalid(node, key_path, f"expected one of {names}, got {value!r}")
        return value
    if tp is type(None):
        if value is not None:
            raise _Invalid(node, key_path, f"expected null, got {_describe(node)}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise _Invalid(node, key_path, f"expected true or false, got {_describe(node)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(node, key_path, f"expected an integer, got {_describe(node)}")
        _check(info, value, node, key_path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(node, key_path, f"expected a number, got {_describe(node)}")
        if value != value or value in (float("inf"), float("-inf")):
            raise _Invalid(node, key_path, f"expected a finite number, got {value!r}", typed=True)
        _check(info, float(value), node, key_path)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _Invalid(node, key_path, f"expected a string, got {_describe(node)}")
        return value
    raise TypeError(f"scenario field {key_path} has an unsupported type {tp!r}")


def _allows_none(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(
        None
    ) in typing.get_args(tp)


def _check(info: ParamInfo | None, value: float, node: yaml.Node, key_path: str) -> None:
    if info is None:
        return
    problem = check_range(info, value)
    if problem is not None:
        unit = f" {info.unit}" if info.unit else ""
        raise _Invalid(node, key_path, f"{value:g}{unit} {problem}", typed=True)
