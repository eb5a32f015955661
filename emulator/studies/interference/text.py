"""The interference study's text: the runs and checks tables, and the notes that qualify them.

Plain-text tables for study.txt and the terminal (every run's identity and whether it was judged,
each check's estimates with intervals and verdict), and the notes on what may distort the numbers
or was left out (runs the project flagged: partial, or a fidelity verdict other than ok; an alone
run carrying the other collective, mixed TDFs, a plan below line rate), which study.json keeps as
well.
"""

from __future__ import annotations

from collections.abc import Sequence

from emulator.studies.interference.checks import ALL_REDUCE, ALL_TO_ALL, StudyRun
from emulator.studies.stats.flags import flagged_notes
from emulator.studies.stats.formatting import fmt_interval, fmt_ratio
from emulator.studies.stats.verdict import Check


def study_notes(
    runs: Sequence[StudyRun], checks: Sequence[Check], include_flagged: bool = False
) -> list[str]:
    notes = flagged_notes([(r.name, r.flags) for r in runs if r.flags], include_flagged)
    judged = [r for r in runs if include_flagged or not r.flags]
    # An "alone" run carrying the other collective is not a baseline (wrong folder or scenario).
    others = {"allreduce_only": ALL_TO_ALL, "alltoall_only": ALL_REDUCE}
    for run in runs:
        other = others.get(run.role)
        if other is not None and run.stats(other).get("instances"):
            notes.append(
                f"{run.name}: the run also carries {other} ({run.stats(other)['instances']} "
                "instances), so it is not that collective alone; check the folder or scenario"
            )
    tdfs = {run.summary.get("tdf") for run in judged}
    if len(tdfs) > 1:
        notes.append(
            "the runs used different time dilation factors "
            f"({', '.join('-' if t is None else f'{t:g}' for t in sorted(tdfs, key=str))}): "
            "pass --tdf to fix one"
        )
    line_check = next(c for c in checks if c.name == "allreduce_alone_line_rate")
    ideal_over_line = line_check.numbers.get("ideal_over_line_rate")
    if ideal_over_line is not None and ideal_over_line < line_check.threshold:
        notes.append(
            f"the congestion-free plan itself gives the All-Reduce only {ideal_over_line:.0%} of "
            "the host line rate (links shared in the plan's paths, e.g. ECMP collisions), so even "
            "a perfect replay is not at line rate"
        )
    return notes


def _table(headers: Sequence[str], body: Sequence[Sequence[str]], left: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i in left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, body)])


def checks_table(checks: Sequence[Check]) -> str:
    """Each check's point estimates with their intervals ('0.16 [0.12, 0.21]') and verdict."""
    headers = ("check", "expected", "alone", "mixed", "mixed/alone", "verdict")
    body = [
        (
            c.name,
            c.expected,
            fmt_interval(c.alone, c.alone_ci),
            fmt_interval(c.mixed, c.mixed_ci),
            fmt_ratio(c.ratio, c.ratio_ci, c.ratio_undefined, c.difference, c.difference_ci)
            if c.mixed is not None
            else "-",
            c.verdict,
        )
        for c in checks
    ]
    return _table(headers, body, {0, 1, 5})


def judged_cell(flags: Sequence[str], include_flagged: bool) -> str:
    """Whether a run's numbers are in the statistics: yes, no (flagged), yes (flagged)."""
    if not flags:
        return "yes"
    return "yes (flagged)" if include_flagged else "no (flagged)"


def runs_table(runs: Sequence[StudyRun], include_flagged: bool = False) -> str:
    """Every run's identity: role, repeat, seed, TDF, fidelity verdict, partial, whether it is
    judged, folder."""
    headers = ("role", "repeat", "seed", "tdf", "fidelity", "partial", "judged", "folder")
    body = [
        (
            r.role,
            str(r.repeat + 1),
            "-" if r.seed is None else str(r.seed),
            "-" if r.summary.get("tdf") is None else f"{r.summary['tdf']:g}",
            str((r.summary.get("fidelity") or {}).get("verdict", "-")),
            "yes" if r.summary.get("partial") else "no",
            judged_cell(r.flags, include_flagged),
            str(r.folder),
        )
        for r in runs
    ]
    return _table(headers, body, {0, 4, 5, 6, 7})


def _judged(check: Check | None) -> str:
    """The estimate a check's verdict is on: mixed/alone, or the alone level for a check with no
    mixed side (the All-Reduce against its plan)."""
    if check is None:
        return "-"
    if check.mixed is not None:
        return fmt_ratio(
            check.ratio,
            check.ratio_ci,
            check.ratio_undefined,
            check.difference,
            check.difference_ci,
        )
    return fmt_interval(check.alone, check.alone_ci)


def reference_table(emulated: Sequence[Check], simulated: Sequence[Check]) -> str:
    """Each check on the emulated fabric beside the same check in its simulated references."""
    headers = ("check", "emulated mixed/alone", "verdict", "simulated mixed/alone", "verdict")
    by_name = {c.name: c for c in simulated}
    body = [
        (
            c.name,
            _judged(c),
            c.verdict,
            _judged(by_name.get(c.name)),
            (by_name[c.name].verdict if c.name in by_name else "-"),
        )
        for c in emulated
    ]
    return _table(headers, body, {0, 2, 4})
