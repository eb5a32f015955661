"""Python side of emulator.native._fill (fill.c): the planner's progressive filling in C.

emulator/schedule/fluid.py uses it when it is built and otherwise runs the same levels in numpy;
tests/unit/test_native_fill.py holds the two to the same rates, bit for bit.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from emulator.native import load


class NativeFill:
    def __init__(self, module: ModuleType) -> None:
        self._lib: Any = module.lib
        self._ffi: Any = module.ffi

    @classmethod
    def load(cls) -> NativeFill | None:
        module, _why = load("fill")
        return cls(module) if module is not None else None

    def fill(
        self,
        inc_class: np.ndarray,
        inc_link: np.ndarray,
        weight: np.ndarray,
        capacity: np.ndarray,
        fixed: np.ndarray,
        rate: np.ndarray,
        *,
        tie: float,
        min_share: float,
    ) -> int:
        """Set `rate` of every class not `fixed` (uint8, updated) to its max-min share: the
        incidence (class crosses link, with the class's member count as weight) over links of
        `capacity` bytes/s; links within `tie` (relative) of the smallest share tie with it, and
        no rate is below `min_share`. Returns the number of bottleneck levels."""
        ffi = self._ffi
        inc_class = np.ascontiguousarray(inc_class, dtype=np.int64)
        inc_link = np.ascontiguousarray(inc_link, dtype=np.int64)
        weight = np.ascontiguousarray(weight, dtype=np.float64)
        capacity = np.ascontiguousarray(capacity, dtype=np.float64)
        if fixed.dtype != np.uint8 or not fixed.flags.c_contiguous:
            raise ValueError("fixed must be a contiguous uint8 array")
        if rate.dtype != np.float64 or not rate.flags.c_contiguous or len(rate) < len(fixed):
            raise ValueError("rate must be a contiguous float64 array as long as fixed")
        levels = int(
            self._lib.fill_rates(
                len(inc_class),
                ffi.from_buffer("int64_t[]", inc_class),
                ffi.from_buffer("int64_t[]", inc_link),
                ffi.from_buffer("double[]", weight),
                len(capacity),
                ffi.from_buffer("double[]", capacity),
                len(fixed),
                ffi.from_buffer("uint8_t[]", fixed),
                ffi.from_buffer("double[]", rate),
                tie,
                min_share,
            )
        )
        if levels == -2:
            raise ValueError("emulator.native._fill: the incidence is not sorted by class")
        if levels < 0:
            raise MemoryError("emulator.native._fill: out of memory")
        return levels
