"""Choosing the time dilation factor.

With `run.time_dilation: auto` the factor is the lowest at which this machine's calibrated load
curve (emulator.timescale.curve) says the fidelity verdict's engine checks hold for the scenario's
peak load (every rank's NIC at its target line rate at once, the most a collective can ask):
on some measured point whose offered load is at least peak / TDF, the engine delivered on pace
(>= 95% of the offer), no worker was saturated, and its tick lateness divided by the TDF stays
within DCQCN's timers (p99 within the reaction timer, max within the increase period;
emulator.timescale.verdict). The lowest such TDF over the points, rounded up to two significant digits
so results folders show a readable factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from emulator.errors import EnvironmentProblem
from emulator.timescale.curve import DELIVERED_OK_RATIO, Calibration, LoadPoint
from emulator.timescale.verdict import timing_limits_s
from emulator.transport.params import DcqcnParams

AUTO_PER_SERVER = "auto per server"  # a cluster's servers each calibrate; the run takes the highest


@dataclass(frozen=True)
class TdfChoice:
    tdf: float
    how: str  # "scenario", "command line", "auto", "dut"
    peak_load_bps: float
    calibration: Calibration | None = None
    bound_by: str | None = None  # with auto: which limit set the factor
    # "auto per server" (a run over a cluster): each server's TDF, what bound it, its curve
    per_server: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "tdf": self.tdf,
            "how": self.how,
            "peak_load_bps": self.peak_load_bps,
            "bound_by": self.bound_by,
            "calibration": self.calibration.to_json() if self.calibration else None,
        }
        if self.per_server is not None:
            out["per_server"] = self.per_server
        return out


def round_up_2sig(value: float) -> float:
    """The smallest number with two significant digits that is >= value (1 at least)."""
    if value <= 1:
        return 1.0
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return float(math.ceil(value / scale - 1e-9) * scale)


def point_tdf(point: LoadPoint, peak_load_bps: float, dcqcn: DcqcnParams) -> tuple[float, str]:
    """The lowest TDF at which `point` covers the peak load and its lateness is on time."""
    p99_limit_s, max_limit_s = timing_limits_s(dcqcn)
    bounds = {
        f"load: {peak_load_bps / 1e9:.4g} Gb/s peak over {point.offered_bps / 1e9:.3g} Gb/s "
        "delivered on pace": peak_load_bps / point.offered_bps,
        f"tick lateness p99 {point.tick_late_p99_s * 1e3:.2g} ms over DCQCN's "
        f"{p99_limit_s * 1e6:g} us reaction timer": point.tick_late_p99_s / p99_limit_s,
        f"tick lateness max {point.tick_late_max_s * 1e3:.3g} ms over DCQCN's "
        f"{max_limit_s * 1e6:g} us increase period": point.tick_late_max_s / max_limit_s,
    }
    why = max(bounds, key=lambda k: bounds[k])
    return max(1.0, bounds[why]), why


def auto_tdf(
    peak_load_bps: float, calibration: Calibration, dcqcn: DcqcnParams, busy_limit: float
) -> tuple[float, str]:
    """(TDF, what bound it) from the calibrated load curve."""
    usable = [
        p
        for p in calibration.points
        if p.delivered_ratio >= DELIVERED_OK_RATIO and p.worker_busy_max < busy_limit
    ]
    if not usable:
        raise EnvironmentProblem(
            "time_dilation auto: the calibration found no load this machine delivers on pace "
            f"(points: {[round(p.delivered_ratio, 2) for p in calibration.points]}); set "
            "run.time_dilation to a number, or --recalibrate on a quieter machine"
        )
    tdf, why = min((point_tdf(p, peak_load_bps, dcqcn) for p in usable), key=lambda t: t[0])
    return round_up_2sig(tdf), why
