"""How configuration dataclasses declare their fields: default, unit, range and source in one place.

Every scenario parameter is one frozen-dataclass field declared with `param(...)`. The scenario
loader reads the metadata to check ranges and to name the key in errors, and the scenario
reference in the README is generated from the same metadata, so a default is written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    doc: str
    unit: str | None = None
    source: str | None = None
    min: float | None = None
    max: float | None = None
    # min/max exclusive instead of inclusive
    min_exclusive: bool = False
    # For a field holding one of several dataclasses: YAML `{kind: NAME, ...}` picks kinds[NAME].
    kinds: Mapping[str, type] | None = None


def param(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    unit: str | None = None,
    source: str | None = None,
    min: float | None = None,
    max: float | None = None,
    min_exclusive: bool = False,
    default_factory: Any = dataclasses.MISSING,
    kinds: Mapping[str, type] | None = None,
    internal: bool = False,
) -> Any:
    """A dataclass field with its documentation, unit, valid range and the source of its default.

    internal: set by the program, not a scenario key (the loader and the reference skip it)."""
    info = ParamInfo(doc, unit, source, min, max, min_exclusive, kinds)
    metadata: dict[str, Any] = {"param": info}
    if internal:
        metadata["internal"] = True
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def param_info(field: dataclasses.Field[Any]) -> ParamInfo | None:
    info = field.metadata.get("param")
    return info if isinstance(info, ParamInfo) else None


def check_range(info: ParamInfo, value: float) -> str | None:
    """Return why `value` is out of the declared range, or None when it is inside."""
    if info.min is not None:
        if info.min_exclusive and not value > info.min:
            return f"must be greater than {info.min:g}"
        if not info.min_exclusive and value < info.min:
            return f"must be at least {info.min:g}"
    if info.max is not None and value > info.max:
        return f"must be at most {info.max:g}"
    return None
