"""The scenario reference (every key, type, default, unit, range, source), generated from the model.

`python -m emulator.scenario.reference > docs/scenario-reference.md` rewrites the committed copy; a
unit test fails when the copy and the model disagree, so the documentation cannot drift.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from emulator.config import param_info


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_text(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(tp))
    if origin is tuple:
        return f"list of {_type_text(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"map of {_type_text(typing.get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "{}"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return f"{value}"


def _range_text(field: dataclasses.Field[Any]) -> str:
    info = param_info(field)
    if info is None or (info.min is None and info.max is None):
        return ""
    low = "" if info.min is None else f"{'>' if info.min_exclusive else '≥'} {info.min:g}"
    high = "" if info.max is None else f"≤ {info.max:g}"
    return ", ".join(p for p in (low, high) if p)


def _summary(cls: type[Any]) -> str:
    """First line of a class docstring (dataclasses invent one from the signature: skip that)."""
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):
        return ""
    return doc.splitlines()[0]


def _rows(cls: type[Any], prefix: str) -> Iterator[str]:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if not field.init or field.metadata.get("internal"):
            continue
        key = f"{prefix}{field.name}"
        tp = hints[field.name]
        info = param_info(field)
        if info is not None and info.kinds is not None:
            kinds = ", ".join(f"`{k}`" for k in info.kinds)
            yield f"| `{key}` | section chosen by `kind` ({kinds}) | {_default_text(field)} | | | {info.doc} |"
            for kind, kind_cls in info.kinds.items():
                yield f"| `{key}.kind: {kind}` | | | | | {_summary(kind_cls)} |"
                yield from _rows(kind_cls, f"{key}.")
            continue
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            yield f"| `{key}` | section | | | | {_summary(tp)} |"
            yield from _rows(tp, f"{key}.")
            continue
        doc = info.doc if info is not None else ""
        if info is not None and info.source:
            doc += f" (default from: {info.source})"
        unit = info.unit if info is not None and info.unit else ""
        yield (
            f"| `{key}` | {_type_text(tp)} | {_default_text(field)} | {unit} | "
            f"{_range_text(field)} | {doc} |"
        )
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
        if dataclasses.is_dataclass(item) and isinstance(item, type):  # a list of sections
            yield from _rows(item, f"{key}[].")


def render() -> str:
    from emulator.scenario.model import Scenario

    lines = [
        "# Scenario reference",
        "",
        "Generated from the scenario model by `python -m emulator.scenario.reference`; do not edit.",
        "Every key is optional unless its default says `required`. Unknown keys are errors.",
        "",
        "| key | type | default | unit | range | meaning |",
        "|---|---|---|---|---|---|",
        *_rows(Scenario, ""),
        "",
    ]
    return "\n".join(line.replace("\n", " ") for line in lines)


if __name__ == "__main__":
    print(render(), end="")
