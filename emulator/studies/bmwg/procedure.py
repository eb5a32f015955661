"""A BMWG procedure: what it varies, the trials it runs, what it measures of each run, and what
its results table shows. Procedures are registered by name (emulator.studies.bmwg.registry)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.errors import InputError
from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.kpis import RunData, cv


class Procedure:
    """Subclasses set the class attributes and implement trials and measure."""

    name = ""
    section = ""  # in draft-calabria-bmwg-ai-fabric-training-bench-02
    title = ""
    objective = ""
    params: tuple[Param, ...] = ()
    repeats = 3  # this tool's default
    draft_repeats: int | None = None  # what the draft asks, where it says
    primary = ""  # the KPI whose CV the repeatability statement gives
    kpis: tuple[tuple[str, str], ...] = ()  # (KPI, unit) in table order
    on_dut = True  # the procedure runs toward a switch under test
    waive_resends = False  # judge runs flagged only for resends in a lossless fabric

    def check(self, base: Base, params: Mapping[str, Any]) -> None:
        if base.dut and not self.on_dut:
            raise InputError(
                f"bmwg {self.name}: not toward a switch under test: {self.dut_reason()}"
            )

    def dut_reason(self) -> str:
        return "it changes the fabric's own configuration"

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        """The trials still to run given those done (adaptive procedures search); empty when
        the procedure is complete."""
        raise NotImplementedError

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        raise NotImplementedError

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        """One row per trial: its parameters, each KPI's mean over the judged repeats, and the
        repeats' count and the primary KPI's CV."""
        by_trial: dict[str, list[TrialRun]] = {}
        for r in done:
            by_trial.setdefault(r.trial.name, []).append(r)
        out = []
        for runs in by_trial.values():
            judged = [r for r in runs if r.judged]
            row: dict[str, Any] = {"trial": runs[0].trial.name, **runs[0].trial.params}
            for kpi, _ in self.kpis:
                row[kpi] = mean_of([r.kpis.get(kpi) for r in judged])
            row["repeats"] = len(runs)
            row["judged"] = len(judged)
            row["primary_cv"] = cv([r.kpis.get(self.primary) for r in judged])
            out.append(row)
        return out

    def anomalies(
        self, base: Base, params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        """What the results show that a reader must not miss (a trial that did not settle)."""
        del base, params, rows
        return []

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        """Where this run of the procedure departs from the draft's parameters."""
        out = []
        if self.draft_repeats is not None and repeats < self.draft_repeats:
            out.append(
                f"{repeats} repeats per trial where the draft asks at least {self.draft_repeats}"
            )
        return out


def mean_of(values: Sequence[Any]) -> Any:
    """The mean of numbers (of booleans: the share of True); None without values."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    nums = [float(v) for v in xs if isinstance(v, int | float)]
    return sum(nums) / len(nums) if nums else None


def capped(values: Sequence[int], limit: int, what: str, out: list[str]) -> list[int]:
    """`values` up to `limit`, saying which were left out."""
    kept = [v for v in values if v <= limit]
    left = [v for v in values if v > limit]
    if left:
        out.append(f"{what} {left} left out: the fabric has room for {limit} at most")
    return kept
