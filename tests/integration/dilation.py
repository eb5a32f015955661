"""Time dilation of transport parameters (docs/architecture.md, "Time dilation").

A fabric slowed down by a time dilation factor (TDF) behaves like the target fabric when link
rates are divided by the TDF, every timer is multiplied by it, and sizes in bytes stay the same.
`dilate` applies that rule to a parameter dataclass by the unit each field declares: times
("s", "us") are multiplied, rates ("Mb/s", "bps") divided, everything else kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from emulator.config import param_info

TIME_UNITS = frozenset({"s", "us"})
RATE_UNITS = frozenset({"Mb/s", "bps", "b/s"})

T = TypeVar("T")


def dilate(params: T, tdf: float) -> T:
    """A copy of a frozen parameter dataclass for a fabric slowed down `tdf` times."""
    if tdf <= 0:
        raise ValueError(f"tdf: must be positive, got {tdf}")
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(params):  # type: ignore[arg-type]
        value = getattr(params, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[field.name] = dilate(value, tdf)
            continue
        info = param_info(field)
        if info is None or info.unit is None or isinstance(value, bool):
            continue
        if info.unit in TIME_UNITS:
            changes[field.name] = value * tdf
        elif info.unit in RATE_UNITS:
            changes[field.name] = value / tdf
    return dataclasses.replace(params, **changes)  # type: ignore[type-var]
