"""How a study's numbers print: a point estimate with its interval, a ratio or where it is
undefined the difference, and JSON without infinities (an unbounded number is null).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from emulator.studies.stats.bootstrap import Interval


def json_finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded number is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value


def fmt_interval(value: float | None, interval: Interval | None, spec: str = ".3g") -> str:
    """'0.16 [0.12, 0.21]': a point estimate and its interval ('-' for none)."""

    def one(x: float | None) -> str:
        return "-" if x is None or np.isnan(x) else format(x, spec)

    if value is None or interval is None:
        return one(value)
    return f"{one(value)} [{one(interval[0])}, {one(interval[1])}]"


RATIO_UNDEFINED = "ratio undefined"


def fmt_ratio(
    ratio: float | None,
    interval: Interval | None,
    undefined: str | None,
    difference: float | None,
    difference_interval: Interval | None,
    spec: str = ".3g",
) -> str:
    """A ratio with its interval, or where it is undefined the difference with its interval:
    'ratio undefined; difference +0.1 [0.08, 0.12]'."""
    if undefined is None:
        return fmt_interval(ratio, interval, spec)
    text = fmt_interval(difference, difference_interval, spec)
    sign = "+" if difference is not None and difference >= 0 else ""
    return f"{RATIO_UNDEFINED}; difference {sign}{text}"
