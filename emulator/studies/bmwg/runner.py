"""`emulate bmwg PROCEDURE SCENARIO`: a procedure's trials, each run `repeats` times through the
run pipeline into OUT/runs/<trial>-r<k>/ (repeat k with run.seed + k - 1), its KPIs measured
from each results folder, then the report (emulator.studies.bmwg.report).

Every trial's scenario is written to OUT/trials/<trial>.yaml and loaded before it runs, so a
trial the run would refuse is refused with its file named. Adaptive procedures (the burst
search, the link failure placed at a steady run's iteration) get their next trials from what ran.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from emulator.errors import InputError
from emulator.studies.bmwg.common import Base, Trial, TrialRun, params_of
from emulator.studies.bmwg.kpis import RunData
from emulator.studies.bmwg.registry import procedure as procedure_named
from emulator.studies.bmwg.report import REPORT_JSON, BmwgResult, write_report

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario

MAX_TRIALS = 200  # an adaptive search that has not settled by then stops (an anomaly)


@dataclass(frozen=True)
class BmwgSettings:
    backend: str | None = None  # None: the scenario's run.backend
    tdf: float | None = None
    repeats: int | None = None  # None: the procedure's
    progress: bool = True
    params: tuple[str, ...] = ()  # KEY=VALUE
    fabric_prefix: str | None = None  # the emulated fabric's namespace prefix (None: default)


Runner = Callable[["Scenario", Path, BmwgSettings], Path]


def run_with_pipeline(scenario: Scenario, out_dir: Path, settings: BmwgSettings) -> Path:
    from emulator.run import RunOptions, run_scenario

    options = RunOptions(
        out_dir=out_dir, progress=settings.progress, tdf=settings.tdf, backend=settings.backend
    )
    if settings.fabric_prefix is not None:
        options = dataclasses.replace(options, fabric_prefix=settings.fabric_prefix)
    return run_scenario(scenario, options).out_dir


def _load(out_dir: Path, trial: Trial) -> Scenario:
    from emulator.scenario import load_scenario

    folder = out_dir / "trials"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trial.name}.yaml"
    path.write_text(yaml.safe_dump(dict(trial.document), sort_keys=False))
    return load_scenario(path)


def run_bmwg(
    name: str,
    scenario_path: Path,
    out_dir: Path,
    settings: BmwgSettings = BmwgSettings(),
    runner: Runner = run_with_pipeline,
    say: Callable[[str], None] = lambda line: None,
) -> BmwgResult:
    from emulator.studies.interference.study import prepare_out_dir
    from emulator.studies.launch import check_backend

    procedure = procedure_named(name)
    base = Base.read(scenario_path)
    params = params_of(procedure.params, settings.params, name)
    procedure.check(base, params)
    repeats = settings.repeats if settings.repeats is not None else procedure.repeats
    if repeats < 1:
        raise InputError(f"--repeats {repeats}: must be at least 1")
    if (out_dir / REPORT_JSON).exists():
        raise InputError(f"{out_dir}: already holds a BMWG report; choose another --out")
    pending = procedure.trials(base, params, [])
    if not pending:
        raise InputError(f"bmwg {name}: no trial fits this fabric ({scenario_path})")
    created = not out_dir.exists()
    prepare_out_dir(out_dir)
    backend = ""
    try:
        for trial in pending:  # every first trial refused now, not after the others ran
            backend = check_backend(
                _load(out_dir, trial),
                Path(f"{scenario_path} ({trial.name})"),
                settings.backend,
                settings.tdf,
            )
    except BaseException:
        if created:  # nothing half-written of a report that never started
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    done: list[TrialRun] = []
    anomalies: list[str] = []
    trials_run = 0
    while pending:
        for trial in pending:
            trials_run += 1
            scenario = _load(out_dir, trial)
            for k in range(trial.repeats or repeats):
                seed = scenario.run.seed + k
                say(
                    f"bmwg {name}: trial {trial.name}, repeat {k + 1} of "
                    f"{trial.repeats or repeats} (seed {seed}, {backend})"
                )
                run = dataclasses.replace(scenario.run, seed=seed)
                folder = runner(
                    dataclasses.replace(scenario, run=run),
                    out_dir / "runs" / f"{trial.name}-r{k + 1}",
                    settings,
                )
                data = RunData.read(folder)
                kpis = procedure.measure(data, trial, base, params)
                done.append(TrialRun(trial, k, data, kpis, waive_resends=procedure.waive_resends))
        if trials_run >= MAX_TRIALS:
            anomalies.append(f"the procedure stopped after {MAX_TRIALS} trials, unsettled")
            break
        pending = procedure.trials(base, params, done)
    return write_report(out_dir, procedure, base, params, done, repeats, backend, anomalies)


def trial_names(runs: Sequence[TrialRun]) -> list[str]:
    return list(dict.fromkeys(r.trial.name for r in runs))
