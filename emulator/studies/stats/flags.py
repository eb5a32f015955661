"""The runs the project itself flagged, and what a study says of them.

A study leaves out of every statistic the runs the project itself flagged, unless asked to
include them (--include-flagged): a partial run measured part of its workload, and a fidelity
verdict other than "ok" (degraded, or unknown: a check had no data) says the numbers may be
this machine's limits rather than the fabric's. Every summary.json the run pipeline writes has
a fidelity section, a simulated run's too (emulator.run.execute assesses every backend; the
simulator leaves out the machine's checks as not applicable, emulator.backends.sim, so its
verdict is ok unless a check that does apply to it failed or had no data): "ok" means the same
there. A summary.json without the section was not written by a run of this emulator, or by one
older than the verdict, and nothing in it vouches for the run: it is flagged too.

Which runs a study judges (judged_runs), what a verdict says when it was judged on flagged runs
or every run of a side was left out (with_flagged), and the notes listing them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.studies.stats.verdict import Verdict

NO_FIDELITY = "no fidelity verdict in its summary.json: nothing says the run kept up"


def flags_of(partial: bool, verdict: str | None, reasons: Sequence[str] = ()) -> tuple[str, ...]:
    """Why a run is flagged (empty: it is not): partial, and a fidelity verdict other than ok
    (None: no fidelity section) with its reasons."""
    flags = []
    if partial:
        flags.append("partial: the run did not finish (interrupted or failed)")
    if verdict is None:
        flags.append(NO_FIDELITY)
    elif verdict != "ok":
        flags.append(f"fidelity {verdict}: {'; '.join(reasons) or 'no reason given'}")
    return tuple(flags)


def run_flags(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """flags_of a run's summary.json as written (not one recomputed with a default verdict)."""
    fidelity = summary.get("fidelity")
    if not isinstance(fidelity, Mapping) or fidelity.get("verdict") is None:
        return flags_of(bool(summary.get("partial")), None)
    reasons = [str(r) for r in fidelity.get("reasons") or ()]
    return flags_of(bool(summary.get("partial")), str(fidelity["verdict"]), reasons)


def judged_runs(runs: Sequence[Any], include_flagged: bool) -> list[Any]:
    """The runs a study's statistics are of: those not flagged (each has .flags), or all."""
    return list(runs) if include_flagged else [r for r in runs if not r.flags]


def with_flagged(
    verdict: Verdict, detail: str, sides: Sequence[tuple[str, Sequence[Any], Sequence[Any]]]
) -> tuple[Verdict, str, tuple[str, ...]]:
    """A verdict and its detail given which runs were judged: sides are (label, every run of
    the side, the runs judged), each run with .name and .flags. Not measurable when every run of
    a side is flagged and left out (the detail says which, and why); else the detail says which
    flagged runs the verdict was judged on (--include-flagged), and those are returned too."""
    for label, every, kept in sides:
        if every and not kept:
            why = flagged_text([(r.name, r.flags) for r in every])
            return (
                "not measurable",
                f"every {label} run is flagged and left out: {why}; --include-flagged judges them",
                (),
            )
    used = list({id(r): r for _, _, kept in sides for r in kept if r.flags}.values())
    if not used:
        return verdict, detail, ()
    named = [(r.name, r.flags) for r in used]
    flagged = tuple(flagged_text([one]) for one in named)
    return verdict, f"{detail}; {INCLUDED_FLAGGED}: {flagged_text(named)}", flagged


def flagged_text(names_and_flags: Sequence[tuple[str, Sequence[str]]]) -> str:
    """'mixed repeat 2 (fidelity degraded: ...); ...': flagged runs with their reasons."""
    return "; ".join(f"{name} ({'; '.join(flags)})" for name, flags in names_and_flags)


INCLUDED_FLAGGED = "includes runs flagged by the project (--include-flagged)"


def flagged_notes(
    names_and_flags: Sequence[tuple[str, Sequence[str]]], included: bool
) -> list[str]:
    """A note per flagged run, with its reasons: left out of every statistic, or (included)
    judged although its numbers may be of a part of the run or of this machine's limits."""
    if included:
        what = (
            "flagged, and judged (--include-flagged): its numbers may be of a part of the run or "
            "of this machine's limits rather than the fabric's"
        )
    else:
        what = "flagged, and left out of every statistic (--include-flagged judges it)"
    return [f"{name}: {what}: {'; '.join(flags)}" for name, flags in names_and_flags]
