"""Choosing the time dilation factor.

With `run.time_dilation: auto` the factor makes the emulated peak load (every rank's NIC at its
target line rate at once, the most a collective can ask of the machine) fit in `load_headroom`
of the capacity calibrated on this machine: TDF = peak / (headroom x capacity), rounded up to two
significant digits so results folders show a readable factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from emulator.run.calibrate import Calibration


@dataclass(frozen=True)
class TdfChoice:
    tdf: float
    how: str  # "scenario", "command line", "auto", "dut"
    peak_load_bps: float
    headroom: float | None = None
    calibration: Calibration | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tdf": self.tdf,
            "how": self.how,
            "peak_load_bps": self.peak_load_bps,
            "headroom": self.headroom,
            "calibration": self.calibration.to_json() if self.calibration else None,
        }


def round_up_2sig(value: float) -> float:
    """The smallest number with two significant digits that is >= value (1 at least)."""
    if value <= 1:
        return 1.0
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return float(math.ceil(value / scale - 1e-9) * scale)


def auto_tdf(peak_load_bps: float, capacity_bps: float, headroom: float) -> float:
    if capacity_bps <= 0:
        raise ValueError("capacity_bps must be positive")
    return round_up_2sig(peak_load_bps / (headroom * capacity_bps))
