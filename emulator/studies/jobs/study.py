"""The jobs study (issue 18): each job of a several-jobs scenario alone, then all together.

A scenario with `workloads:` (several jobs sharing one fabric) runs as it is ("all") and once per
job with only that job ("<job>"), each job on the hosts it has among the others (its placement is
computed once, emulator.planning.workload.place, and pinned), with its own start offset and passes,
everything else equal. Repeat k (`--repeats`) runs every condition with run.seed + k, interleaved
(all, then each job, then the next repeat), as the interference study does.

What the study measures and how it judges: emulator.studies.jobs.analysis.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.errors import InputError
from emulator.studies.jobs import JOBS_JSON, JOBS_TEXT
from emulator.studies.jobs.analysis import ALL, JobsRun, MetricRow, analyse
from emulator.studies.jobs.text import render
from emulator.studies.pool import LocalPool, RunPool, scenario_run
from emulator.studies.stats.bootstrap import BOOTSTRAP_METHOD, DEFAULT_BOOTSTRAP, BootstrapSpec
from emulator.studies.stats.flags import NO_FIDELITY
from emulator.studies.stats.units import timing_resolution_s
from emulator.studies.stats.verdict import DEFAULT_THRESHOLDS

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario

RUNS = "runs"


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
    from emulator.planning.workload import place, trace_prefix

    with trace_prefix(scenario) as prefix:
        return {p.name: p.hosts for p in place(scenario, prefix, scenario.fabric.ranks)}


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


def check_study(
    scenario_path: Path, out_dir: Path, settings: JobsSettings, pool: RunPool | None = None
) -> Scenario:
    """Everything a run would otherwise fail on late: the file, its jobs, the backend."""
    from emulator.scenario import load_scenario
    from emulator.studies.launch import check_backend

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
    check_backend(scenario, scenario_path, settings.backend, settings.tdf, pool)
    if (out_dir / JOBS_JSON).exists():
        raise InputError(
            f"{out_dir}: already holds a jobs study ({JOBS_JSON}); choose another --out"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; choose another --out")
    return scenario


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
    pool: RunPool | None = None,
) -> JobsStudyResult:
    """Check, run every condition `repeats` times (interleaved; over a cluster all at once,
    `pool`), analyse, write."""
    from collectors.results import DIR_MODE

    pool = pool if pool is not None else LocalPool(say)
    scenario = check_study(scenario_path, out_dir, settings, pool)
    runs_of = conditions(scenario)
    base = scenario.run.seed
    for k in range(settings.repeats):
        for name in runs_of:
            if run_folder(out_dir, name, base + k).exists():
                raise InputError(f"{run_folder(out_dir, name, base + k)}: exists already")
    out_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    order: list[tuple[str, int]] = []
    for k in range(settings.repeats):
        for name, variant in runs_of.items():
            seed = base + k
            pool.submit(
                f"jobs study: running {name}, repeat {k + 1} of {settings.repeats} (seed {seed})",
                run_folder(out_dir, name, seed),
                scenario_run(pool, runner, _seeded(variant, seed), settings),
            )
            order.append((name, seed))
    runs = [
        _loaded(name, seed, folder)
        for (name, seed), folder in zip(order, pool.results(), strict=True)
    ]
    return write_study(runs, out_dir, scenario_path, bootstrap, settings.include_flagged)


def _loaded(condition: str, seed: int, folder: Path) -> JobsRun:
    from collectors.results import read_json_object

    summary = read_json_object(folder / "summary.json")
    fidelity = summary.get("fidelity") or {}
    verdict = fidelity.get("verdict")
    # no fidelity section: nothing vouches for the run (emulator.studies.stats.flags.run_flags)
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


def write_study(
    runs: Sequence[JobsRun],
    out_dir: Path,
    scenario: Path,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> JobsStudyResult:
    """Analyse, then write jobs.json, jobs.txt and last report.html (a page that cannot be
    written is a warning on stderr: the study's results stand without it,
    collectors.pages.kit.write_or_warn)."""
    from collectors.pages.kit import write_or_warn
    from collectors.results import make_private, write_private
    from emulator.studies.jobs.page import write_jobs_report

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
