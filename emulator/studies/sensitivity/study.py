"""The bandwidth sensitivity study (issue 18; the Chakra paper's Fig. 7): one workload at several
link rates.

Chakra (Sridharan et al., 2023), Fig. 7: Mixtral-8x22B with every link cut from 400 to 100 Gb/s
spends 4.1x longer in All-to-All and 4.4x in All-Gather, near the 4x a bandwidth-bound collective
takes, and less than 4x in a small All-Reduce, whose time is mostly latency. Here the scenario
runs once per rate (`--link-gbps`, the first the reference) into runs/<rate>gbps/, its Clos with
host_link_gbps := rate and fabric_link_gbps scaled by the same ratio (the oversubscription
stays), everything else equal: the trace, its compute delays, the transport and the byte sizes
of buffers and ECN thresholds given in the scenario (unset thresholds follow each port's speed,
fabrics.spec.hpcc_thresholds_bytes, as a fabric built at that rate would have them).

Per collective type, over its complete instances: the total time (sum of instance durations)
and the mean instance duration, each rate's slowdown against the reference, the
bandwidth-bound expectation (reference rate / this rate), and the congestion-free plan's own
slowdown (the ideal_time_s the schedule's fluid model gives each instance: no latency, so a
type's plan slowdown is the rate ratio unless its overlap with others changes). An instance's
duration is bandwidth_time_s: all members entered -> last byte, as nccl-tests times a
collective and as the plan's ideal_time_s is measured; completion_time_s would add the wait for
the last member to arrive, which is the job's skew, not the collective's.

Bound or not: with a time t(rate) = a + b / rate (a: latency and anything the rate does not
change; b / rate: serialization), the slowdown at ratio k is s = (1 - f) + f k, where
f = b / rate_ref / t_ref is the share of the reference time that scales with 1/rate. So
f = (s - 1) / (k - 1) is measured, and Tolerance says what counts as bandwidth-bound.

A run the project flagged (partial, or a fidelity verdict other than ok) is listed with its
reasons and its rate is not measured (every slowdown against a flagged reference is not), unless
include_flagged (`--include-flagged`); every verdict then says which flagged runs it read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.errors import InputError
from emulator.studies.pool import LocalPool, RunPool, scenario_run
from emulator.studies.sensitivity import SENSITIVITY_JSON, SENSITIVITY_TEXT
from emulator.studies.sensitivity.analysis import (
    DEFAULT_TOLERANCE,
    DURATION,
    Point,
    RateRun,
    Row,
    Tolerance,
    analyse_runs,
    type_times,
)
from emulator.studies.sensitivity.text import render_text
from emulator.studies.stats.flags import (
    INCLUDED_FLAGGED,
    NO_FIDELITY,
    flagged_notes,
    flagged_text,
)

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario

PLOTS, RUNS = "plots", "runs"
PLOT = "sensitivity.png"

# --- the runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    backend: str | None  # None: the scenario's run.backend
    tdf: float | None  # None: the scenario's run.time_dilation
    progress: bool


# A runner takes the scenario at one rate, the results folder to write and the settings, and
# returns the folder it wrote: run_at_rate in production, a fake in tests.
Runner = Callable[["Scenario", Path, RunSettings], Path]


def parse_rates(text: str) -> tuple[float, ...]:
    """--link-gbps: positive numbers, comma separated, at least 2, no duplicates."""
    rates: list[float] = []
    for item in text.split(","):
        try:
            rate = float(item)
        except ValueError:
            raise InputError(f"--link-gbps {text}: {item.strip()!r} is not a number") from None
        if not (math.isfinite(rate) and rate > 0):
            raise InputError(f"--link-gbps {text}: {item.strip()} is not a positive rate in Gb/s")
        if rate in rates:
            raise InputError(f"--link-gbps {text}: {rate:g} is given twice")
        rates.append(rate)
    if len(rates) < 2:
        raise InputError(f"--link-gbps {text}: give at least 2 rates (the first is the reference)")
    return tuple(rates)


def at_rate(scenario: Scenario, host_link_gbps: float, where: Path | str) -> Scenario:
    """The scenario with its Clos's host links at host_link_gbps and its fabric links scaled by
    the same ratio (the oversubscription stays)."""
    from fabrics.spec import ClosSpec, kind_of

    fabric = scenario.fabric
    if not isinstance(fabric, ClosSpec):
        raise InputError(
            f"{where}: fabric.kind {kind_of(fabric)}: the sensitivity study sets the link "
            "rates of a clos fabric; a dut's ports run at the rates the device gives them"
        )
    scale = host_link_gbps / fabric.host_link_gbps
    scaled = dataclasses.replace(
        fabric,
        host_link_gbps=host_link_gbps,
        fabric_link_gbps=fabric.fabric_link_gbps * scale,
    )
    return dataclasses.replace(scenario, fabric=scaled)


def run_folder(out_dir: Path, host_link_gbps: float) -> Path:
    return out_dir / RUNS / f"{host_link_gbps:g}gbps"


def run_at_rate(scenario: Scenario, out_dir: Path, settings: RunSettings) -> Path:
    """One run with the run pipeline (`emulate run`); its scenario copy carries the rates (the
    pipeline writes the link rates a caller changed, emulator.run.pipeline.CALLER_KEYS)."""
    from emulator.run import RunOptions, run_scenario

    options = RunOptions(
        out_dir=out_dir, progress=settings.progress, tdf=settings.tdf, backend=settings.backend
    )
    return run_scenario(scenario, options).out_dir


def prepare_out_dir(out_dir: Path, rates: Sequence[float] = ()) -> None:
    """Refuse a folder that holds a sensitivity study (or the runs it would write), or is a
    file; nothing is created here (the caller creates it once everything is checked)."""
    if (out_dir / SENSITIVITY_JSON).exists():
        raise InputError(
            f"{out_dir}: already holds a sensitivity study ({SENSITIVITY_JSON}); choose another --out"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; choose another --out")
    for rate in rates:
        if run_folder(out_dir, rate).exists():
            raise InputError(f"{run_folder(out_dir, rate)}: exists already; choose another --out")


def load_rate_run(folder: Path) -> RateRun:
    """A finished results folder, its rates from its scenario copy (a Clos only)."""
    from collectors.report import load_run
    from collectors.results import SCENARIO_COPY
    from emulator.scenario import load_scenario
    from fabrics.spec import ClosSpec, kind_of

    run = load_run(folder)
    copy = folder / SCENARIO_COPY
    if not copy.is_file():
        raise InputError(f"{copy}: missing; the link rates of {folder} are unknown")
    fabric = load_scenario(copy).fabric
    if not isinstance(fabric, ClosSpec):
        raise InputError(
            f"{copy}: fabric.kind {kind_of(fabric)}: the sensitivity study compares clos "
            "fabrics at several link rates"
        )
    summary = run.summary
    fidelity = summary.get("fidelity") or {}
    # no fidelity section: nothing vouches for the run (emulator.studies.stats.flags.run_flags)
    reasons = (fidelity.get("reasons") or ()) if "verdict" in fidelity else (NO_FIDELITY,)
    return RateRun(
        fabric.host_link_gbps,
        fabric.fabric_link_gbps,
        folder,
        type_times(run.tables.collectives),
        summary.get("job_time_s"),
        summary.get("ideal_job_time_s"),
        str((summary.get("fidelity") or {}).get("verdict", "unknown")),
        bool(summary.get("partial")),
        summary.get("tdf"),
        summary.get("backend"),
        tuple(reasons),
    )


def check_distinct(runs: Sequence[RateRun]) -> None:
    seen: dict[float, Path] = {}
    for run in runs:
        if run.host_link_gbps in seen:
            raise InputError(
                f"--reuse: {seen[run.host_link_gbps]} and {run.folder} both ran at "
                f"{run.host_link_gbps:g} Gb/s; give one folder per rate"
            )
        seen[run.host_link_gbps] = run.folder


# --- the study --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SensitivityResult:
    out_dir: Path
    scenario: Path | None  # None: reused runs
    runs: tuple[RateRun, ...]
    rows: tuple[Row, ...]
    job: Row
    notes: tuple[str, ...]
    plots: tuple[Path, ...]
    text: str
    tolerance: Tolerance = DEFAULT_TOLERANCE
    report: Path | None = None  # report.html; None if it could not be written (a warning said)
    include_flagged: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "study": "sensitivity",
            "include_flagged": self.include_flagged,
            "scenario": None if self.scenario is None else str(self.scenario),
            "reference_gbps": self.runs[0].host_link_gbps,
            "duration": f"{DURATION}: all members entered -> last byte",
            "runs": [r.identity() for r in self.runs],
            "collectives": {row.name: row.to_json() for row in self.rows},
            "job": self.job.to_json(),
            "tolerance": {
                "share": "(slowdown - 1) / (expected - 1) of the mean instance duration (the "
                "job's time for the job), at the rate farthest from the reference",
                **dataclasses.asdict(self.tolerance),
            },
            "notes": list(self.notes),
            "plots": [str(p) for p in self.plots],
        }


def run_study(
    scenario_path: Path,
    rates_gbps: Sequence[float],
    out_dir: Path,
    settings: RunSettings,
    runner: Runner = run_at_rate,
    say: Callable[[str], None] = lambda line: None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    include_flagged: bool = False,
    pool: RunPool | None = None,
) -> SensitivityResult:
    """Check everything, then run the scenario at each rate (in order; or all at once over a
    cluster, `pool`) and analyse."""
    from collectors.results import DIR_MODE

    pool = pool if pool is not None else LocalPool(say)
    scenarios = check_study(scenario_path, rates_gbps, out_dir, settings, pool)
    created = not out_dir.exists()
    out_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    try:
        for n, (rate, scenario) in enumerate(zip(rates_gbps, scenarios, strict=True), start=1):
            pool.submit(
                f"sensitivity: running {scenario_path} at {rate:g} Gb/s ({n} of {len(rates_gbps)})",
                run_folder(out_dir, rate),
                scenario_run(pool, runner, scenario, settings),
            )
        runs = [load_rate_run(folder) for folder in pool.results()]
    except BaseException:
        # A first run refused at its start (a busy exporter port) leaves no empty study folder.
        if created and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    return write_study(runs, out_dir, scenario_path, tolerance, include_flagged)


def check_study(
    scenario_path: Path,
    rates_gbps: Sequence[float],
    out_dir: Path,
    settings: RunSettings,
    pool: RunPool | None = None,
) -> list[Scenario]:
    """The scenario at each rate, after every check a run would otherwise fail late on."""
    from emulator.scenario import load_scenario
    from emulator.studies.launch import check_backend

    if not scenario_path.is_file():
        raise InputError(f"{scenario_path}: no such scenario file")
    scenario = load_scenario(scenario_path)
    scenarios = [at_rate(scenario, rate, scenario_path) for rate in rates_gbps]
    check_backend(scenarios[0], scenario_path, settings.backend, settings.tdf, pool)
    prepare_out_dir(out_dir, rates_gbps)
    return scenarios


def reuse_study(
    folders: Sequence[Path],
    out_dir: Path,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    include_flagged: bool = False,
) -> SensitivityResult:
    """Analyse finished runs, the first the reference; their rates from their scenario copies."""
    if len(folders) < 2:
        raise InputError(f"--reuse: {len(folders)} folder given, at least 2 rates are needed")
    runs = [load_rate_run(Path(folder)) for folder in folders]
    from collectors.results import DIR_MODE

    check_distinct(runs)
    prepare_out_dir(out_dir)
    out_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return write_study(runs, out_dir, None, tolerance, include_flagged)


def write_study(
    runs: Sequence[RateRun],
    out_dir: Path,
    scenario: Path | None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    include_flagged: bool = False,
) -> SensitivityResult:
    """Analyse, then write plots/sensitivity.png, sensitivity.json, sensitivity.txt and last
    report.html (a page that cannot be written is a warning on stderr: the study's results stand
    without it, collectors.pages.kit.write_or_warn)."""
    from collectors.pages.kit import write_or_warn
    from collectors.results import DIR_MODE, make_private, write_private
    from emulator.studies.sensitivity.page import write_sensitivity_report
    from emulator.studies.sensitivity.plots import write_slowdown_plot

    rows, job = flagged_rows(runs, tolerance, include_flagged)
    others = runs[1:]
    (out_dir / PLOTS).mkdir(mode=DIR_MODE, exist_ok=True)
    plot = write_slowdown_plot(
        out_dir / PLOTS / PLOT,
        [row.name for row in (*rows, job)],
        [r.host_link_gbps for r in others],
        [[_plotted(p) for p in row.points[1:]] for row in (*rows, job)],
        [runs[0].host_link_gbps / r.host_link_gbps for r in others],
        [[p.plan_slowdown if p else None for p in row.points[1:]] for row in (*rows, job)],
        runs[0].host_link_gbps,
    )
    make_private(out_dir / PLOTS)
    notes = tuple(run_notes(runs, include_flagged))
    text = render_text(out_dir, scenario, runs, rows, job, notes, tolerance, plot)
    result = SensitivityResult(
        out_dir,
        scenario,
        tuple(runs),
        rows,
        job,
        notes,
        (plot,),
        text,
        tolerance,
        include_flagged=include_flagged,
    )
    write_private(
        out_dir / SENSITIVITY_JSON, (json.dumps(result.to_json(), indent=2) + "\n").encode()
    )
    write_private(out_dir / SENSITIVITY_TEXT, (text + "\n").encode())
    page = write_or_warn(write_sensitivity_report, out_dir)  # after the txt: the page folds it in
    return dataclasses.replace(result, report=page)


def _plotted(point: Point | None) -> float | None:
    """The total's slowdown, or the mean instance's where the instance counts differ."""
    if point is None:
        return None
    return point.slowdown if point.slowdown is not None else point.mean_slowdown


def flagged_rows(
    runs: Sequence[RateRun], tolerance: Tolerance, include_flagged: bool
) -> tuple[tuple[Row, ...], Row]:
    """analyse_runs with each flagged run not measured (its rate keeps its place), or with
    every run (include_flagged); each row's detail then says which flagged runs it left out or
    read."""
    flagged = [(r.name, r.flags) for r in runs if r.flags]
    judged = runs if include_flagged else [r.unmeasured() if r.flags else r for r in runs]
    rows, job = analyse_runs(judged, tolerance)
    if not flagged:
        return rows, job
    said = INCLUDED_FLAGGED if include_flagged else "flagged and left out"
    tail = f"; {said}: {flagged_text(flagged)}"
    qualified = [dataclasses.replace(row, detail=row.detail + tail) for row in (*rows, job)]
    return tuple(qualified[:-1]), qualified[-1]


def run_notes(runs: Sequence[RateRun], include_flagged: bool = False) -> list[str]:
    notes = flagged_notes([(r.name, r.flags) for r in runs if r.flags], include_flagged)
    if len({r.backend for r in runs}) > 1:
        notes.append(
            f"the runs used different backends ({', '.join(str(r.backend) for r in runs)})"
        )
    ratios = {round(r.fabric_link_gbps / r.host_link_gbps, 6) for r in runs}
    if len(ratios) > 1:
        notes.append("the runs' fabric/host link rate ratios differ: not only the rate changed")
    return notes
