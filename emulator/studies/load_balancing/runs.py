"""One run of the load-balancing study as read back: its units per collective type, its transport
counters, its links' balance, and whether the study judges it.

Counters come from summary.json as the run wrote it: the `reordering` section where the run has
one, else `queue_pair_totals` (the tester's sums over every queue pair). Link balance comes from
its `load_balance` section only; a run without one has its balance "not measured" (None), never
a number made up here.

Which runs are judged. As every study, runs the project flagged (partial, or a fidelity verdict
other than ok) are left out of every statistic and listed with their reasons
(emulator.studies.stats.flags). One exception, because it is what the study measures: the
fidelity verdict calls every retransmission in a lossless fabric a reason to doubt the run
(collectors.fidelity, retransmissions_in_lossless_fabric), and spraying under go-back-N resends
by design (every reordered packet is a gap to the responder). A run of a condition that may
reorder (Condition.reorders) whose only flag is that reason is judged, with the flag shown in
the runs table, study.json and every check that read it (waived). Any other reason (drops, the
engine falling behind, partial) still leaves it out; the ECMP baseline has no such exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emulator.studies.load_balancing.conditions import CONDITIONS
from emulator.studies.stats.flags import flags_of, run_flags
from emulator.studies.stats.units import CollectiveUnits

# What collectors.fidelity says of retransmissions in a lossless fabric (its _retransmissions).
RESEND_REASON = "packets were retransmitted in a fabric the scenario calls lossless"

# Counter -> its key in summary.json's `reordering`, and in `queue_pair_totals`.
COUNTERS: dict[str, tuple[str | None, str]] = {
    "data_packets_sent": (None, "data_packets_sent"),
    "data_packets_received": ("data_packets_received", "data_packets_received"),
    "reordered_packets": ("reordered_packets", "reordered_packets"),
    "retransmitted_packets": ("retransmitted_packets", "packets_retransmitted"),
    "naks_sent": ("naks_sent", "naks_sent"),
    "sacks_sent": ("sacks_sent", "sacks_sent"),
    "held_out_of_order": ("held_out_of_order", "held_out_of_order"),
}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if np.isfinite(value) else None


def transport_counters(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """Each counter of COUNTERS from `reordering`, else `queue_pair_totals` (None: neither)."""
    reordering = summary.get("reordering")
    reordering = reordering if isinstance(reordering, Mapping) else {}
    totals = summary.get("queue_pair_totals")
    totals = totals if isinstance(totals, Mapping) else {}
    out: dict[str, float | None] = {}
    for name, (in_reordering, in_totals) in COUNTERS.items():
        value = _number(reordering.get(in_reordering)) if in_reordering else None
        out[name] = value if value is not None else _number(totals.get(in_totals))
    return out


def counters_source(summary: Mapping[str, Any]) -> str | None:
    for key in ("reordering", "queue_pair_totals"):
        if isinstance(summary.get(key), Mapping):
            return key
    return None


def load_balance(summary: Mapping[str, Any]) -> dict[str, dict[str, float | None]] | None:
    """Link group -> its numbers (mmr, jfi, ...) from summary.json's `load_balance`; None when
    the run has none (not measured)."""
    section = summary.get("load_balance")
    if not isinstance(section, Mapping):
        return None
    return {
        str(group): {str(k): _number(v) for k, v in numbers.items()}
        for group, numbers in section.items()
        if isinstance(numbers, Mapping)
    }


@dataclass(frozen=True)
class LbRun:
    """One run (one repeat of one condition) as read back from its results folder."""

    condition: str
    folder: Path
    summary: Mapping[str, Any]  # summary.json as the run wrote it
    seed: int | None = None
    repeat: int = 0  # 0-based, within its condition
    units: Mapping[str, CollectiveUnits] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.condition} repeat {self.repeat + 1}"

    @property
    def project_flags(self) -> tuple[str, ...]:
        """Every flag the project gives the run (emulator.studies.stats.flags.run_flags)."""
        return run_flags(self.summary)

    @property
    def waived(self) -> tuple[str, ...]:
        """The project's flags the study judges the run despite (module docstring): the
        retransmission reason alone, in a condition that may reorder."""
        condition = CONDITIONS.get(self.condition)
        if condition is None or not condition.reorders or self.summary.get("partial"):
            return ()
        fidelity = self.summary.get("fidelity")
        if not isinstance(fidelity, Mapping) or fidelity.get("verdict") != "degraded":
            return ()
        reasons = [str(r) for r in fidelity.get("reasons") or ()]
        if reasons and all(RESEND_REASON in r for r in reasons):
            return flags_of(False, "degraded", reasons)
        return ()

    @property
    def flags(self) -> tuple[str, ...]:
        """The flags that leave the run out (empty: judged)."""
        return () if self.waived else self.project_flags

    @property
    def counters(self) -> dict[str, float | None]:
        return transport_counters(self.summary)

    @property
    def load_balance(self) -> dict[str, dict[str, float | None]] | None:
        return load_balance(self.summary)

    @property
    def job_time_s(self) -> float | None:
        return _number(self.summary.get("job_time_s"))

    def of(self, collective: str) -> CollectiveUnits:
        return self.units.get(collective) or CollectiveUnits.empty()

    def identity(self, include_flagged: bool = False) -> dict[str, Any]:
        fidelity = self.summary.get("fidelity")
        return {
            "condition": self.condition,
            "repeat": self.repeat + 1,
            "seed": self.seed,
            "folder": str(self.folder),
            "scenario": self.summary.get("scenario"),
            "backend": self.summary.get("backend"),
            "tdf": self.summary.get("tdf"),
            "partial": bool(self.summary.get("partial")),
            "fidelity": fidelity.get("verdict") if isinstance(fidelity, Mapping) else None,
            "flags": list(self.project_flags),
            "judged": include_flagged or not self.flags,
            "flags_waived": list(self.waived),
            "counters": self.counters,
            "counters_from": counters_source(self.summary),
            "load_balance": self.load_balance,
        }


def read_run(condition: str, folder: Path, seed: int | None, repeat: int) -> LbRun:
    """A finished results folder: its summary.json as written and its units per collective type
    (emulator.studies.stats.units, as the other studies choose them)."""
    from collectors.report import load_run
    from collectors.tables import column
    from emulator.studies.stats.units import collective_units, timing_resolution_s

    run = load_run(folder)
    resolution_s = timing_resolution_s(run.summary)
    types = sorted({str(t) for t in column(run.tables.collectives, "collective_type") if t})
    units = {t: collective_units(run.tables, t, resolution_s) for t in types}
    return LbRun(condition, run.folder, run.summary, seed, repeat, units)
