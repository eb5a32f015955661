"""The load-balancing study's text (study.txt and the terminal): the conditions, the runs, every
metric of every condition with its interval and against the baseline, the checks, the notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from emulator.studies.interference.text import judged_cell
from emulator.studies.load_balancing.analysis import METRICS, RUN, Analysis, Cell
from emulator.studies.load_balancing.checks import NOT_MEASURED
from emulator.studies.load_balancing.conditions import BASELINE, CONDITIONS
from emulator.studies.load_balancing.runs import LbRun
from emulator.studies.stats.bootstrap import BOOTSTRAP_METHOD, BootstrapSpec
from emulator.studies.stats.flags import flagged_notes
from emulator.studies.stats.formatting import fmt_interval, fmt_ratio
from emulator.studies.stats.verdict import Check

if TYPE_CHECKING:
    from emulator.studies.load_balancing.study import LbStudyResult


def _render(headers: Sequence[str], body: Sequence[Sequence[str]], left: int) -> str:
    from collectors.report import _render as render_table

    return render_table(headers, body, left) if body else "(none)"


def conditions_table(result: LbStudyResult) -> str:
    headers = ("condition", "load balancing", "reliability", "entropy", "runs", "judged")
    body = []
    for name in result.analysis.conditions:
        c = CONDITIONS[name]
        runs = [r for r in result.runs if r.condition == name]
        judged = [r for r in runs if result.include_flagged or not r.flags]
        body.append((name, c.mode, c.reliability, c.entropy, str(len(runs)), str(len(judged))))
    return _render(headers, body, 4)


def run_judged(run: LbRun, include_flagged: bool) -> str:
    """yes, no (flagged), yes (flagged), or yes (resends waived): runs.LbRun.waived."""
    if run.waived and not include_flagged:
        return "yes (resends waived)"
    return judged_cell(run.project_flags, include_flagged)


def runs_table(runs: Sequence[LbRun], include_flagged: bool) -> str:
    headers = ("condition", "repeat", "seed", "tdf", "fidelity", "partial", "judged", "folder")
    body = []
    for r in runs:
        fidelity = r.identity()["fidelity"]
        tdf = r.summary.get("tdf")
        body.append(
            (
                r.condition,
                str(r.repeat + 1),
                "-" if r.seed is None else str(r.seed),
                "-" if not isinstance(tdf, int | float) else f"{tdf:g}",
                str(fidelity or "-"),
                "yes" if r.summary.get("partial") else "no",
                run_judged(r, include_flagged),
                str(r.folder),
            )
        )
    return _render(headers, body, 1)


def _scaled(cell: Cell, spec: str) -> str:
    e = cell.estimate
    return fmt_interval(e.point, e.interval, spec)


def _versus(cell: Cell) -> str:
    c = cell.versus
    if c is None:
        return "-" if cell.condition != BASELINE else "(baseline)"
    if c.mixed.point is None or c.alone.point is None:
        return "-"
    return fmt_ratio(
        c.ratio, c.ratio_interval, c.ratio_undefined, c.difference, c.difference_interval
    )


def metrics_table(analysis: Analysis) -> str:
    """Every metric of every condition: value [interval], and condition / baseline [interval]
    (or, where the baseline's value may be 0, the difference)."""
    headers = ("metric", "of", "condition", "value [95% CI]", f"vs {BASELINE}")
    body = []
    for key, metric in METRICS.items():
        for what in analysis.of(key):
            first = True
            for name in analysis.conditions:
                cell = analysis.cell(name, key, what)
                if cell is None:
                    continue
                body.append(
                    (
                        metric.label if first else "",
                        ("" if what == RUN else what) if first else "",
                        name,
                        _scaled(cell, metric.fmt),
                        _versus(cell),
                    )
                )
                first = False
    return _render(headers, body, 3)


def checks_table(checks: Sequence[Check]) -> str:
    headers = ("check", "expected", "verdict")
    return _render(headers, [(c.name, c.expected, c.verdict) for c in checks], 3)


def reference_table(emulated: Sequence[Check], simulated: Sequence[Check]) -> str:
    by_name = {c.name: c for c in simulated}
    body = [
        (c.name, c.verdict, by_name[c.name].verdict if c.name in by_name else "-") for c in emulated
    ]
    return _render(("check", "emulated", "simulated"), body, 3)


def study_notes(
    runs: Sequence[LbRun],
    analysis: Analysis,
    checks: Sequence[Check],
    sport_policy: str | None,
    include_flagged: bool = False,
) -> list[str]:
    """What qualifies the numbers: flagged runs, waived ones, what was not measured."""
    del checks  # each check says what it read; the notes are about the runs
    notes = flagged_notes([(r.name, r.flags) for r in runs if r.flags], include_flagged)
    for r in runs:
        if r.waived and not include_flagged:
            notes.append(
                f"{r.name}: flagged by the project ({'; '.join(r.waived)}), and judged: the "
                "resends are what its condition does (a reordering transport), not a fault of "
                "the run"
            )
    if not analysis.groups:
        notes.append(
            f"link balance {NOT_MEASURED}: no run's summary.json has a load_balance section, so "
            "the MMR and JFI of the links are left out (not estimated here)"
        )
    sources = {r.identity()["counters_from"] for r in runs}
    if None in sources:
        notes.append(
            "some runs have neither a reordering section nor queue_pair_totals in their "
            "summary.json: their reordering and resend counts are left out"
        )
    elif "queue_pair_totals" in sources:
        notes.append(
            "reordering and resend counts from summary.json queue_pair_totals (the runs have no "
            "reordering section)"
        )
    if BASELINE not in analysis.conditions:
        notes.append(f"no {BASELINE} run: nothing is compared with the baseline")
    tdfs = {r.summary.get("tdf") for r in runs if include_flagged or not r.flags}
    if len(tdfs) > 1:
        notes.append("the runs used different time dilation factors: pass --tdf to fix one")
    if sport_policy is not None and sport_policy != "hash":
        notes.append(
            f"collectives.sport_policy is {sport_policy}: the ECMP baseline's queue pairs take "
            "ports chosen against collisions, so spraying is compared with balanced ECMP"
        )
    return notes


def render(result: LbStudyResult, bootstrap: BootstrapSpec) -> str:
    scenario = result.scenario or "reused runs"
    policy = result.sport_policy or "unknown"
    tiers = ", ".join(result.tiers) or "-"
    lines = [
        f"load-balancing study: {result.out_dir}",
        f"scenario {scenario}; balancing tiers: {tiers}; collectives.sport_policy {policy}; "
        f"baseline {BASELINE}",
        "",
        conditions_table(result),
        "",
        runs_table(result.runs, result.include_flagged),
        "",
        metrics_table(result.analysis),
        "",
        checks_table(result.checks),
        *(f"  {c.name}: {c.detail}" for c in result.checks),
        f"  intervals: {bootstrap.confidence:.0%}, {BOOTSTRAP_METHOD}, "
        f"B={bootstrap.resamples}, seed {bootstrap.seed}",
    ]
    if result.reference is not None:
        lines += [
            "",
            f"the same checks in the simulated references ({result.reference.out_dir}):",
            reference_table(result.checks, result.reference.checks),
        ]
    if result.notes:
        lines += ["", *(f"note: {n}" for n in result.notes)]
    lines += ["", f"plots: {result.out_dir / 'plots'}"]
    return "\n".join(lines)
