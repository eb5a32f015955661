"""The fidelity verdict: could this machine keep up with the emulated fabric during the run?

Each check (a registry, CHECKS) looks at the recorded tables and returns a reason when the
results should not be trusted as the target fabric's behaviour: the machine's CPU saturated
(timers and pacing slip), packets dropped or were retransmitted in a fabric the scenario calls
lossless, or a NIC carried more than its emulated line rate (the shaping or the pacing does not
match the emulated rate). The engine may add reasons of its own (e.g. pacing falling behind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from collectors.summary import Fidelity, port_counter_growth
from collectors.tables import RunTables, column
from emulator.config import param


@dataclass(frozen=True)
class FidelityLimits:
    """Thresholds of the fidelity checks."""

    cpu_busy_ratio: float = param(
        0.95, doc="a CPU sample at or above this busy share counts as saturated", min=0.0, max=1.0
    )
    cpu_saturated_share: float = param(
        0.1,
        doc="the run is degraded when more than this share of CPU samples are saturated",
        min=0.0,
        max=1.0,
    )
    nic_overrun_ratio: float = param(
        1.05,
        doc="a NIC sample above this share of the emulated line rate means the rates disagree "
        "(sampling jitter stays within a few percent)",
        min=1.0,
    )
    lossless: bool = param(
        True, doc="the fabric is meant to be lossless (no drops, no retransmissions)"
    )


def _cpu(tables: RunTables, limits: FidelityLimits) -> str | None:
    busy = column(tables.cpu, "busy_ratio")
    if not busy:
        return None
    saturated = sum(1 for b in busy if b >= limits.cpu_busy_ratio) / len(busy)
    if saturated > limits.cpu_saturated_share:
        return (
            f"machine CPU at or above {limits.cpu_busy_ratio:.0%} busy in {saturated:.0%} of "
            f"{len(busy)} samples: timers and pacing may have slipped; raise the TDF"
        )
    return None


def _drops(tables: RunTables, limits: FidelityLimits) -> str | None:
    if not limits.lossless:
        return None
    drops = port_counter_growth(tables, "drops")
    if drops:
        return f"switch ports dropped {drops} packets in a fabric the scenario calls lossless"
    return None


def _retransmissions(tables: RunTables, limits: FidelityLimits) -> str | None:
    if not limits.lossless:
        return None
    retx = sum(column(tables.flows, "retransmitted_packets"))
    if retx:
        return f"{retx} packets were retransmitted in a fabric the scenario calls lossless"
    return None


def _nic_overrun(tables: RunTables, limits: FidelityLimits) -> str | None:
    peak = max(column(tables.nic, "utilization"), default=0.0)
    if peak > limits.nic_overrun_ratio:
        return (
            f"a NIC carried {peak:.0%} of its emulated line rate: the fabric's shaping or the "
            "pacing does not match the emulated rate"
        )
    return None


# Check name -> check; each returns a reason or None.
CHECKS: dict[str, Callable[[RunTables, FidelityLimits], str | None]] = {
    "cpu_saturated": _cpu,
    "drops_in_lossless_fabric": _drops,
    "retransmissions_in_lossless_fabric": _retransmissions,
    "nic_over_line_rate": _nic_overrun,
}


def assess_fidelity(
    tables: RunTables,
    limits: FidelityLimits = FidelityLimits(),
    extra_reasons: Iterable[str] = (),
) -> Fidelity:
    """ "ok" when no check finds a reason, else "degraded" with every reason."""
    reasons = [r for check in CHECKS.values() if (r := check(tables, limits)) is not None]
    reasons.extend(extra_reasons)
    return Fidelity("degraded" if reasons else "ok", tuple(reasons))
