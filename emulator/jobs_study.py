"""The jobs study (issue 18): each job of a several-jobs scenario alone, then all together.

A scenario with `workloads:` (several jobs sharing one fabric) runs as it is ("all") and once per
job with only that job ("<job>"), each job on the hosts it has among the others (its placement is
computed once, emulator.run.workload.place, and pinned), with its own start offset and passes,
everything else equal. Repeat k (`--repeats`) runs every condition with run.seed + k, interleaved
(all, then each job, then the next repeat), as the interference study does.

Per job and per collective type of the job, over the job's units only (its collectives and flows:
the job column of the tables): busbw mean, busbw CV over complete instances, FCT p50 and p99 over
finished flows, alone and together, each with the two-level bootstrap interval of
emulator.study_stats, and together / alone with its interval; per job its time (first flow start
to last flow end, one unit per repeat). What the others do to a job is that ratio, judged by the
interference study's rule (emulator.study_stats.judge): an effect is "shown" when the interval
of the ratio lies beyond 1 (slower, lower busbw, longer tail) and the change is material
(MATERIAL_CHANGE, MATERIAL_CV), "not shown" otherwise, "not measurable" with fewer than 2 units
or fewer than StudyThresholds.repeats_min repeats a side (one run's interval leaves out
run-to-run variation). A ratio over an alone busbw CV at its floor is undefined: the difference
together - alone is given and judged instead. Runs the project flagged (partial, a fidelity
verdict other than ok) are left out of every statistic unless JobsSettings.include_flagged.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.errors import InputError
from emulator.study_stats import (
    BOOTSTRAP_METHOD,
    DEFAULT_BOOTSTRAP,
    DEFAULT_THRESHOLDS,
    NO_FIDELITY,
    BootstrapSpec,
    Comparison,
    PooledSample,
    Statistic,
    Worse,
    busbw_cv_floor,
    compare,
    cv,
    flagged_notes,
    flags_of,
    fmt_interval,
    fmt_ratio,
    json_finite,
    judge,
    judged_runs,
    mean,
    percentile,
    timing_resolution_s,
    with_flagged,
)

if TYPE_CHECKING:
    from collectors.tables import RunTables
    from emulator.scenario.model import Scenario

JOBS_JSON, JOBS_TEXT, RUNS = "jobs.json", "jobs.txt", "runs"
ALL = "all"  # the condition with every job


# Metric -> (what it is, unit scale for text, format, the statistic, the units it takes, the
# direction that is worse).
METRICS: dict[str, tuple[str, float, str, Statistic, str, Worse]] = {
    "busbw_mean": ("busbw mean GB/s", 1e-9, ".2f", mean, "busbw", "lower"),
    "busbw_cv": ("busbw CV", 1.0, ".3f", cv, "busbw", "higher"),
    "fct_p50": ("FCT p50 us", 1e6, ".1f", percentile(50), "fct", "higher"),
    "fct_p99": ("FCT p99 us", 1e6, ".1f", percentile(99), "fct", "higher"),
}
UNITS = {"busbw": "complete instances", "fct": "finished flows"}
# What counts as a material effect, besides an interval beyond 1: a change of at least 5% (a
# simulation's intervals are narrow enough to call a 0.2% change "beyond 1"), and for the CV a
# together CV of at least 0.02 (from 0.0001 to 0.001 is a large ratio of a steady collective).
MATERIAL_CHANGE = 0.05
MATERIAL_CV = 0.02


@dataclass(frozen=True)
class JobsSettings:
    backend: str | None  # None: the scenario's run.backend
    tdf: float | None  # None: the scenario's run.time_dilation
    progress: bool
    repeats: int = 3
    include_flagged: bool = False  # judge the runs the project flagged too (--include-flagged)


# A runner takes a scenario, the results folder to write and the settings, and returns the
# folder it wrote: run_with_pipeline in production, a fake in tests.
Runner = Callable[["Scenario", Path, JobsSettings], Path]


def run_with_pipeline(scenario: Scenario, out_dir: Path, settings: JobsSettings) -> Path:
    from emulator.run import RunOptions, run_scenario

    options = RunOptions(
        out_dir=out_dir, progress=settings.progress, tdf=settings.tdf, backend=settings.backend
    )
    return run_scenario(scenario, options).out_dir


def placements(scenario: Scenario) -> dict[str, tuple[int, ...]]:
    """Every job's hosts among all the jobs (as `emulate run` places them)."""
    from emulator.backends.engine import fabric_ranks
    from emulator.run.workload import place, trace_prefix

    with trace_prefix(scenario) as prefix:
        return {p.name: p.hosts for p in place(scenario, prefix, fabric_ranks(scenario.fabric))}


def conditions(scenario: Scenario) -> dict[str, Scenario]:
    """ "all" (the scenario) and each job alone on its hosts."""
    hosts = placements(scenario)
    out = {ALL: scenario}
    for name, placed in hosts.items():
        out[name] = dataclasses.replace(
            scenario.with_jobs({name: placed}), name=f"{scenario.name}-{name}-alone"
        )
    return out


def _seeded(scenario: Scenario, seed: int) -> Scenario:
    return dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, seed=seed))


def run_folder(out_dir: Path, condition: str, seed: int) -> Path:
    return out_dir / RUNS / f"{condition}-seed{seed}"


def check_study(scenario_path: Path, out_dir: Path, settings: JobsSettings) -> Scenario:
    """Everything a run would otherwise fail on late: the file, its jobs, the backend."""
    from emulator.scenario import load_scenario
    from emulator.study import check_backend

    if settings.repeats < 1:
        raise InputError(f"--repeats {settings.repeats}: must be at least 1")
    if not scenario_path.is_file():
        raise InputError(f"{scenario_path}: no such scenario file")
    scenario = load_scenario(scenario_path)
    if len(scenario.workloads) < 2:
        raise InputError(
            f"{scenario_path}: workloads: the jobs study needs a scenario with 2 or more jobs "
            "(`workloads:`)"
        )
    if ALL in {job.name for job in scenario.jobs}:
        raise InputError(
            f"{scenario_path}: workloads: a job named {ALL!r} would share its runs' folders with "
            "the study's all-jobs condition; rename it"
        )
    check_backend(scenario, scenario_path, settings.backend, settings.tdf)
    if (out_dir / JOBS_JSON).exists():
        raise InputError(
            f"{out_dir}: already holds a jobs study ({JOBS_JSON}); choose another --out"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; choose another --out")
    return scenario


@dataclass(frozen=True)
class JobsRun:
    condition: str
    seed: int
    folder: Path
    verdict: str
    partial: bool
    reasons: tuple[str, ...] = ()  # of the fidelity verdict
    resolution_s: float = 0.0  # its stamps' timing resolution (study_stats.timing_resolution_s)

    @property
    def name(self) -> str:
        return f"{self.condition}-seed{self.seed}"

    @property
    def flags(self) -> tuple[str, ...]:
        """Why the project flagged the run (empty: judged; emulator.study_stats.flags_of)."""
        return flags_of(self.partial, self.verdict, self.reasons)


@dataclass(frozen=True)
class MetricRow:
    job: str
    collective: str
    metric: str
    comparison: Comparison
    effect: str  # shown / not shown / not measurable
    detail: str = ""  # why (emulator.study_stats.judge)
    flagged: tuple[str, ...] = ()  # flagged runs it was judged on (include_flagged)

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        return json_finite(
            {
                "job": self.job,
                "collective": self.collective,
                "metric": self.metric,
                "alone": {"value": c.alone.point, "interval": c.alone.interval},
                "together": {"value": c.mixed.point, "interval": c.mixed.interval},
                "together_over_alone": {"value": c.ratio, "interval": c.ratio_interval},
                "ratio_undefined": c.ratio_undefined,
                "together_minus_alone": {
                    "value": c.difference,
                    "interval": c.difference_interval,
                },
                "repeats": {"alone": c.alone.repeats, "together": c.mixed.repeats},
                "units": {"alone": c.alone.units, "together": c.mixed.units},
                "effect_of_the_others": self.effect,
                "detail": self.detail,
                "flagged_runs_judged": list(self.flagged),
            }
        )


@dataclass(frozen=True)
class JobsStudyResult:
    out_dir: Path
    scenario: Path
    runs: tuple[JobsRun, ...]
    rows: tuple[MetricRow, ...]
    text: str
    report: Path | None = None  # report.html; None if it could not be written (a warning said)
    include_flagged: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "study": "jobs",
            "scenario": str(self.scenario),
            "bootstrap": BOOTSTRAP_METHOD,
            "repeats_min": DEFAULT_THRESHOLDS.repeats_min,
            "include_flagged": self.include_flagged,
            "runs": [
                {
                    **dataclasses.asdict(r),
                    "folder": str(r.folder),
                    "flags": list(r.flags),
                    "judged": self.include_flagged or not r.flags,
                }
                for r in self.runs
            ],
            "metrics": [row.to_json() for row in self.rows],
        }


def run_study(
    scenario_path: Path,
    out_dir: Path,
    settings: JobsSettings,
    runner: Runner = run_with_pipeline,
    say: Callable[[str], None] = lambda line: None,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> JobsStudyResult:
    """Check, run every condition `repeats` times (interleaved), analyse, write."""
    from collectors.results import DIR_MODE

    scenario = check_study(scenario_path, out_dir, settings)
    runs_of = conditions(scenario)
    base = scenario.run.seed
    for k in range(settings.repeats):
        for name in runs_of:
            if run_folder(out_dir, name, base + k).exists():
                raise InputError(f"{run_folder(out_dir, name, base + k)}: exists already")
    out_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    runs: list[JobsRun] = []
    for k in range(settings.repeats):
        for name, variant in runs_of.items():
            seed = base + k
            say(f"jobs study: running {name}, repeat {k + 1} of {settings.repeats} (seed {seed})")
            folder = runner(_seeded(variant, seed), run_folder(out_dir, name, seed), settings)
            runs.append(_loaded(name, seed, folder))
    return write_study(runs, out_dir, scenario_path, bootstrap, settings.include_flagged)


def _loaded(condition: str, seed: int, folder: Path) -> JobsRun:
    from collectors.results import read_json_object

    summary = read_json_object(folder / "summary.json")
    fidelity = summary.get("fidelity") or {}
    verdict = fidelity.get("verdict")
    # no fidelity section: nothing vouches for the run (emulator.study_stats.run_flags)
    reasons = tuple(fidelity.get("reasons") or ()) if verdict is not None else (NO_FIDELITY,)
    return JobsRun(
        condition,
        seed,
        folder,
        str(verdict or "unknown"),
        bool(summary.get("partial")),
        reasons,
        timing_resolution_s(summary),
    )


def _units(tables: RunTables, job: str, collective: str) -> dict[str, np.ndarray]:
    """The job's units of one collective type: busbw of its complete instances (and their
    durations, for the CV's floor), FCT of its finished flows."""
    from collectors.summary import job_tables
    from collectors.tables import rows

    mine = job_tables(tables, job)
    timed = [
        (b, d)
        for ctype, complete, b, d in rows(
            mine.collectives,
            ("collective_type", "complete", "busbw_bytes_per_s", "bandwidth_time_s"),
        )
        if ctype == collective and complete and b is not None
    ]
    fct = [
        f
        for ctype, f in rows(mine.flows, ("collective_type", "fct_s"))
        if ctype == collective and f is not None
    ]
    return {
        "busbw": np.asarray([b for b, _ in timed], dtype=float),
        "durations": np.asarray([d for _, d in timed if d is not None], dtype=float),
        "fct": np.asarray(fct, dtype=float),
    }


def _row(
    job: str,
    collective: str,
    metric: str,
    c: Comparison,
    units: str,
    sides: Sequence[tuple[str, Sequence[JobsRun], Sequence[JobsRun]]],
    confidence: float,
) -> MetricRow:
    """The row with the interference study's verdict (emulator.study_stats.judge) at this
    study's material change: shown when the interval of together/alone lies beyond 1 on the
    worse side and the change is at least MATERIAL_CHANGE (a busbw CV: and at least MATERIAL_CV
    together); then what the flagged runs did to it (with_flagged)."""
    label, worse = _rule(metric)
    threshold = 1.0 + MATERIAL_CHANGE if worse == "higher" else 1.0 - MATERIAL_CHANGE
    steady = MATERIAL_CV if metric == "busbw_cv" else None
    repeats_min = DEFAULT_THRESHOLDS.repeats_min
    verdict, detail = judge(c, label, units, threshold, repeats_min, confidence, steady, worse)
    effect, detail, flagged = with_flagged(verdict, detail, sides)
    return MetricRow(job, collective, metric, c, effect, detail, flagged)


def _rule(metric: str) -> tuple[str, Worse]:
    """What a metric is called in a verdict's detail, and which way is worse."""
    if metric == "job_time":
        return "job time", "higher"
    label, *_, worse = METRICS[metric]
    return label, worse


def _cv_floor(runs: Sequence[JobsRun], units: Sequence[dict[str, np.ndarray]]) -> float:
    """The alone runs' busbw CV floor: the largest of theirs (study_stats.busbw_cv_floor)."""
    floors = [
        busbw_cv_floor(list(u["durations"]), r.resolution_s)
        for r, u in zip(runs, units, strict=True)
    ]
    return max(floors, default=0.0)


def analyse(
    runs: Sequence[JobsRun],
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> tuple[MetricRow, ...]:
    """Per job and collective type every metric, and per job its time, alone vs together, over
    the runs not flagged (or every run, include_flagged)."""
    from collectors.tables import read_tables

    tables = {(r.condition, r.seed): read_tables(r.folder) for r in runs}
    together = [r for r in runs if r.condition == ALL]
    together_judged = judged_runs(together, include_flagged)
    jobs = [r.condition for r in runs if r.condition != ALL]
    out: list[MetricRow] = []
    for job in dict.fromkeys(jobs):
        alone = [r for r in runs if r.condition == job]
        alone_judged = judged_runs(alone, include_flagged)
        sides = [(f"{job} alone", alone, alone_judged), (ALL, together, together_judged)]
        # the types are not a statistic: a flagged run's say which rows there are
        types = sorted({ctype for r in alone for ctype in _types(tables[_key(r)], job)})
        for ctype in types:
            a_units = [_units(tables[_key(r)], job, ctype) for r in alone_judged]
            m_units = [_units(tables[_key(r)], job, ctype) for r in together_judged]
            for metric, (_, _, _, statistic, kind, _) in METRICS.items():
                c = compare(
                    PooledSample.of([u[kind] for u in a_units], statistic),
                    PooledSample.of([u[kind] for u in m_units], statistic),
                    bootstrap,
                    _cv_floor(alone_judged, a_units) if metric == "busbw_cv" else 0.0,
                )
                units = f"{UNITS[kind]} of {job}'s {ctype}"
                out.append(_row(job, ctype, metric, c, units, sides, bootstrap.confidence))
        a_time = [_job_time(tables[_key(r)], job) for r in alone_judged]
        m_time = [_job_time(tables[_key(r)], job) for r in together_judged]
        c = compare(
            PooledSample.of([np.array([x]) for x in a_time if x is not None], mean),
            PooledSample.of([np.array([x]) for x in m_time if x is not None], mean),
            bootstrap,
        )
        units = "runs (one job time each)"
        out.append(_row(job, "job", "job_time", c, units, sides, bootstrap.confidence))
    return tuple(out)


def _key(run: JobsRun) -> tuple[str, int]:
    return run.condition, run.seed


def _types(tables: RunTables, job: str) -> set[str]:
    from collectors.summary import job_tables
    from collectors.tables import column

    return set(column(job_tables(tables, job).collectives, "collective_type"))


def _job_time(tables: RunTables, job: str) -> float | None:
    from collectors.summary import jobs_summary

    return (jobs_summary(tables).get(job) or {}).get("job_time_s")


def render(
    runs: Sequence[JobsRun],
    rows: Sequence[MetricRow],
    scenario: Path,
    include_flagged: bool = False,
) -> str:
    from collectors.report import _render

    labels = {m: (label, scale, spec) for m, (label, scale, spec, *_) in METRICS.items()}
    labels["job_time"] = ("job time ms", 1e3, ".3f")
    body = []
    for row in rows:
        label, scale, spec = labels[row.metric]
        c = row.comparison

        def scaled(e: Any, scale: float = scale, spec: str = spec) -> str:
            interval = (
                None if e.interval is None else (e.interval[0] * scale, e.interval[1] * scale)
            )
            point = None if e.point is None else e.point * scale
            return fmt_interval(point, interval, spec)

        body.append(
            [
                row.job,
                row.collective,
                label,
                scaled(c.alone),
                scaled(c.mixed),
                _ratio_cell(c, scale, spec),
                row.effect,
            ]
        )
    headers = ["job", "collective", "metric", "alone", "together", "together/alone", "effect"]
    repeats = max((r.seed for r in runs), default=0) - min((r.seed for r in runs), default=0) + 1
    lines = [
        f"jobs study of {scenario}: each job alone on its hosts vs all together, "
        f"{repeats} repeat(s); 95% intervals: {BOOTSTRAP_METHOD}",
        "",
        _render(headers, body, left=3),
        "",
        "effect: what the other jobs do to this one: shown when the interval of together/alone "
        f"lies beyond 1 on the worse side and the change is at least {MATERIAL_CHANGE:.0%} (a "
        f"busbw CV: and at least {MATERIAL_CV} together), over at least "
        f"{DEFAULT_THRESHOLDS.repeats_min} repeats a side; a ratio over an alone CV at its floor "
        "is undefined, and the difference together - alone is judged",
    ]
    flagged = [(r.name, r.flags) for r in runs if r.flags]
    lines += [f"note: {n}" for n in flagged_notes(flagged, include_flagged)]
    return "\n".join(lines)


def _ratio_cell(c: Comparison, scale: float, spec: str) -> str:
    """together/alone, or where it is undefined the difference in the metric's unit."""
    if c.ratio_undefined is None:
        return fmt_interval(c.ratio, c.ratio_interval, ".3f")
    diff = c.difference_interval
    return fmt_ratio(
        None,
        None,
        c.ratio_undefined,
        None if c.difference is None else c.difference * scale,
        None if diff is None else (diff[0] * scale, diff[1] * scale),
        spec,
    )


def write_study(
    runs: Sequence[JobsRun],
    out_dir: Path,
    scenario: Path,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> JobsStudyResult:
    """Analyse, then write jobs.json, jobs.txt and last report.html (a page that cannot be
    written is a warning on stderr: the study's results stand without it,
    collectors.html_report.write_or_warn)."""
    from collectors.html_report import write_jobs_report, write_or_warn
    from collectors.results import make_private, write_private

    rows = analyse(runs, bootstrap, include_flagged)
    text = render(runs, rows, scenario, include_flagged)
    result = JobsStudyResult(
        out_dir, scenario, tuple(runs), rows, text, include_flagged=include_flagged
    )
    write_private(out_dir / JOBS_JSON, (json.dumps(result.to_json(), indent=2) + "\n").encode())
    write_private(out_dir / JOBS_TEXT, (text + "\n").encode())
    make_private(out_dir)
    page = write_or_warn(write_jobs_report, out_dir)  # after the txt: the page folds it in
    return dataclasses.replace(result, report=page)
