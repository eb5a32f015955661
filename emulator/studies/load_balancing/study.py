"""The load-balancing study (issue 36): `emulate study load-balancing SCENARIO`.

The scenario runs under each condition (emulator.studies.load_balancing.conditions: ECMP with
go-back-N, the baseline; spraying, flowlets and adaptive routing with go-back-N or selective
repeat; per-packet entropy on hashing switches, simulator only), `repeats` times each, repeat k
with the scenario's run.seed + k, interleaved (every condition's repeat 1, then every repeat 2,
...) so a drift of the machine's load does not line up with one condition, as the interference
study does. Each run goes through the run pipeline (emulator.run.run_scenario) into
runs/<condition>-seed<seed>/, a results folder like any other; finished folders can be read
instead (--reuse, each one's condition read back from its scenario copy). Then the study writes
into its folder:

- study.json and study.txt: every run's identity, every metric of every condition with its 95%
  interval and against the baseline (emulator.studies.load_balancing.analysis), the checks
  (emulator.studies.load_balancing.checks) and the notes;
- plots/: busbw per condition with its interval, the links' MMR per condition, FCT CDFs per
  condition (emulator.studies.load_balancing.plots);
- report.html, the study's page (emulator.studies.load_balancing.page).

Flagged runs are left out as in every study, except a reordering condition's runs flagged only
for their resends (emulator.studies.load_balancing.runs says why and how they are shown).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.errors import InputError
from emulator.studies.interference.study import prepare_out_dir, reference_folder, seed_of
from emulator.studies.load_balancing import STUDY_JSON, STUDY_TEXT
from emulator.studies.load_balancing.analysis import Analysis, analyse
from emulator.studies.load_balancing.checks import (
    DEFAULT_LB_THRESHOLDS,
    LbThresholds,
    judge_checks,
)
from emulator.studies.load_balancing.conditions import (
    BASELINE,
    CONDITIONS,
    Condition,
    balancing_tiers,
    clos_of,
    condition_of,
    parse_conditions,
    variant,
)
from emulator.studies.load_balancing.runs import RESEND_REASON, LbRun, read_run
from emulator.studies.pool import LocalPool, RunPool, scenario_run
from emulator.studies.stats.bootstrap import BOOTSTRAP_METHOD, DEFAULT_BOOTSTRAP, BootstrapSpec
from emulator.studies.stats.verdict import Check

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario

PLOTS, RUNS = "plots", "runs"
REFERENCE_DIR = "reference-sim"  # the simulated references' own study (--reference sim)
DEFAULT_REPEATS = 3
RESEND_RULE = (
    "runs of a condition that may reorder, flagged only because "
    f"'{RESEND_REASON}', are judged with that flag shown: the resends are what the condition "
    "does, not a fault of the run"
)


@dataclass(frozen=True)
class LbSettings:
    """How the study's runs are run (the interference study's run options)."""

    backend: str | None = None  # None: the scenario's run.backend
    tdf: float | None = None  # None: the scenario's run.time_dilation
    progress: bool = True
    repeats: int = DEFAULT_REPEATS
    include_flagged: bool = False
    reference: str | None = None  # "sim": also simulate every emulated run (--reference sim)


# A runner takes the scenario of one run, the results folder to write and the settings, and
# returns the folder it wrote: run_with_pipeline in production, a fake in tests.
Runner = Callable[["Scenario", Path, LbSettings], Path]


def run_with_pipeline(scenario: Scenario, out_dir: Path, settings: LbSettings) -> Path:
    from emulator.run import RunOptions, run_scenario

    options = RunOptions(
        out_dir=out_dir,
        progress=settings.progress,
        tdf=settings.tdf,
        backend=settings.backend,
        reference=settings.reference,
    )
    return run_scenario(scenario, options).out_dir


def run_folder(out_dir: Path, condition: str, seed: int) -> Path:
    return out_dir / RUNS / f"{condition}-seed{seed}"


@dataclass(frozen=True)
class Facts:
    """What the study says of the scenario its runs are conditions of."""

    scenario: Path | None = None  # None: reused runs
    sport_policy: str | None = None  # collectives.sport_policy (None: unknown)
    tiers: tuple[str, ...] = ()  # the tiers the conditions balance

    @classmethod
    def of(cls, scenario: Scenario, path: Path | None, where: Path) -> Facts:
        tiers = balancing_tiers(clos_of(scenario, where))
        return cls(path, scenario.collectives.sport_policy, tiers)


@dataclass(frozen=True)
class Plan:
    """What the study will run, settled before anything runs."""

    scenario: Scenario
    backend: str
    conditions: tuple[Condition, ...]
    variants: Mapping[str, Scenario]


def plan_study(
    scenario_path: Path,
    conditions: str | None,
    out_dir: Path,
    settings: LbSettings,
    pool: RunPool | None = None,
) -> Plan:
    """Every check a run would otherwise fail on late: the file, its fabric, the conditions,
    each variant on its backend, the study folder."""
    from emulator.backends import backend_name
    from emulator.scenario import load_scenario
    from emulator.studies.launch import check_backend

    if settings.repeats < 1:
        raise InputError(f"--repeats {settings.repeats}: must be at least 1")
    if not scenario_path.is_file():
        raise InputError(f"{scenario_path}: no such scenario file")
    scenario = load_scenario(scenario_path)
    clos_of(scenario, scenario_path)
    backend = backend_name(scenario, settings.backend)
    if settings.reference is not None and backend == "sim":
        raise InputError("--reference sim: the runs are simulated already (--backend sim)")
    chosen = parse_conditions(conditions)
    variants = {c.name: variant(scenario, c, scenario_path) for c in chosen}
    for name, scenario_of in variants.items():
        where = Path(f"{scenario_path} ({name})")
        check_backend(scenario_of, where, settings.backend, settings.tdf, pool)
    if (out_dir / STUDY_JSON).exists() or (out_dir.exists() and not out_dir.is_dir()):
        prepare_out_dir(out_dir)  # refuses it, in its words
    for k in range(settings.repeats):
        for name in variants:
            folder = run_folder(out_dir, name, scenario.run.seed + k)
            if folder.exists():
                raise InputError(f"{folder}: exists already; choose another --out")
    return Plan(scenario, backend, chosen, variants)


def run_study(
    scenario_path: Path,
    out_dir: Path,
    settings: LbSettings = LbSettings(),
    conditions: str | None = None,
    runner: Runner = run_with_pipeline,
    say: Callable[[str], None] = lambda line: None,
    thresholds: LbThresholds = DEFAULT_LB_THRESHOLDS,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    pool: RunPool | None = None,
) -> LbStudyResult:
    """Plan, run every condition `repeats` times (interleaved; over a cluster all at once,
    `pool`), analyse and write."""
    pool = pool if pool is not None else LocalPool(say)
    plan = plan_study(scenario_path, conditions, out_dir, settings, pool)
    if conditions is not None and BASELINE not in [c.strip() for c in conditions.split(",")]:
        say(f"load-balancing study: {BASELINE} added, the baseline every condition is against")
    created = not out_dir.exists()
    prepare_out_dir(out_dir)
    base = plan.scenario.run.seed
    order: list[tuple[str, int]] = []
    try:
        for k in range(settings.repeats):  # interleaved: a drift of the machine hits them all
            for name, scenario in plan.variants.items():
                seed = base + k
                run = dataclasses.replace(scenario.run, seed=seed)
                pool.submit(
                    f"load-balancing study: running {name}, repeat {k + 1} of "
                    f"{settings.repeats} (seed {seed}, {plan.backend})",
                    run_folder(out_dir, name, seed),
                    scenario_run(pool, runner, dataclasses.replace(scenario, run=run), settings),
                )
                order.append((name, seed))
        ran: list[tuple[str, int | None, Path]] = [
            (name, seed, folder) for (name, seed), folder in zip(order, pool.results(), strict=True)
        ]
    except BaseException:
        # A first run refused at its start (a busy exporter port) leaves no empty study folder.
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    facts = Facts.of(plan.scenario, scenario_path, scenario_path)
    reference = None
    if settings.reference is not None:
        simulated = [(c, s, reference_folder(f)) for c, s, f in ran]
        prepare_out_dir(out_dir / REFERENCE_DIR)
        reference = write_study(
            read_runs(simulated),
            out_dir / REFERENCE_DIR,
            facts,
            settings.include_flagged,
            thresholds,
            bootstrap,
        )
    return write_study(
        read_runs(ran), out_dir, facts, settings.include_flagged, thresholds, bootstrap, reference
    )


def read_runs(ran: Sequence[tuple[str, int | None, Path]]) -> list[LbRun]:
    """The runs read back, each numbered within its condition in the order given."""
    repeat: dict[str, int] = {}
    runs = []
    for condition, seed, folder in ran:
        runs.append(read_run(condition, folder, seed, repeat.get(condition, 0)))
        repeat[condition] = repeat.get(condition, 0) + 1
    return runs


def reused(folders: Sequence[Path]) -> tuple[list[tuple[str, int | None, Path]], Facts]:
    """Finished results folders: each one's condition and seed from its scenario copy, and the
    scenario's facts from the baseline's copy (else the first's)."""
    from collectors.results import SCENARIO_COPY
    from emulator.scenario import load_scenario

    out: list[tuple[str, int | None, Path]] = []
    facts: dict[str, Facts] = {}
    for folder in folders:
        copy = Path(folder) / SCENARIO_COPY
        if not copy.is_file():
            raise InputError(f"--reuse {folder}: no {SCENARIO_COPY}; its condition is unknown")
        scenario = load_scenario(copy)
        condition = condition_of(scenario, copy)
        out.append((condition.name, seed_of(Path(folder), scenario.run.seed), Path(folder)))
        facts.setdefault(condition.name, Facts.of(scenario, None, copy))
    order = list(CONDITIONS)
    out.sort(key=lambda entry: order.index(entry[0]))  # stable: each condition's given order
    return out, facts.get(BASELINE) or next(iter(facts.values()), Facts())


def reuse_study(
    folders: Sequence[Path],
    out_dir: Path,
    include_flagged: bool = False,
    thresholds: LbThresholds = DEFAULT_LB_THRESHOLDS,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
) -> LbStudyResult:
    """The study of finished runs (--reuse DIR...)."""
    if not folders:
        raise InputError("--reuse: give the results folders of the runs")
    ran, facts = reused(folders)
    prepare_out_dir(out_dir)
    return write_study(read_runs(ran), out_dir, facts, include_flagged, thresholds, bootstrap)


@dataclass(frozen=True)
class LbStudyResult:
    out_dir: Path
    facts: Facts
    runs: tuple[LbRun, ...]
    analysis: Analysis
    checks: tuple[Check, ...]
    notes: tuple[str, ...]
    plots: tuple[Path, ...]
    text: str
    include_flagged: bool = False
    report: Path | None = None  # report.html; None if it could not be written (a warning said)
    reference: LbStudyResult | None = None

    @property
    def scenario(self) -> Path | None:
        return self.facts.scenario

    @property
    def sport_policy(self) -> str | None:
        return self.facts.sport_policy

    @property
    def tiers(self) -> tuple[str, ...]:
        return self.facts.tiers

    def to_json(self) -> dict[str, Any]:
        a = self.analysis
        conditions: dict[str, Any] = {}
        for name in a.conditions:
            metrics: dict[str, Any] = {}
            for cell in a.cells:
                if cell.condition == name:
                    metrics.setdefault(cell.metric, {})[cell.of] = cell.to_json()
            conditions[name] = {
                **CONDITIONS[name].describe(),
                "runs": [
                    r.identity(self.include_flagged) for r in self.runs if r.condition == name
                ],
                "metrics": metrics,
            }
        out: dict[str, Any] = {
            "study": "load_balancing",
            "scenario": None if self.scenario is None else str(self.scenario),
            "baseline": BASELINE,
            "balancing_tiers": list(self.tiers),
            "sport_policy": self.sport_policy,
            "collective_types": list(a.types),
            "link_groups": list(a.groups),
            "load_balance_measured": bool(a.groups),
            "include_flagged": self.include_flagged,
            "resend_rule": RESEND_RULE,
            "conditions": conditions,
            "flagged_runs": [
                {
                    "condition": r.condition,
                    "repeat": r.repeat + 1,
                    "folder": str(r.folder),
                    "flags": list(r.project_flags),
                    "judged": self.include_flagged or not r.flags,
                }
                for r in self.runs
                if r.project_flags
            ],
            "check_sides": f"alone: the baseline ({BASELINE}); mixed: the condition the check "
            "names; ratio: condition / baseline",
            "checks": [c.to_json() for c in self.checks],
            "all_shown": all(c.shown for c in self.checks),
            "notes": list(self.notes),
            "plots": [str(p) for p in self.plots],
        }
        if self.reference is not None:
            out["reference"] = {
                "backend": "sim",
                "folder": str(self.reference.out_dir),
                "checks": [c.to_json() for c in self.reference.checks],
            }
        return out


def write_study(
    runs: Sequence[LbRun],
    out_dir: Path,
    facts: Facts,
    include_flagged: bool = False,
    thresholds: LbThresholds = DEFAULT_LB_THRESHOLDS,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    reference: LbStudyResult | None = None,
) -> LbStudyResult:
    """Analyse and judge, then write plots/, study.json, study.txt and last report.html (a page
    that cannot be written is a warning: the study stands without it)."""
    from collectors.pages.kit import write_or_warn
    from collectors.results import write_private
    from emulator.studies.load_balancing.page import write_study_report
    from emulator.studies.load_balancing.plots import write_study_figures
    from emulator.studies.load_balancing.text import render, study_notes

    analysis = analyse(runs, bootstrap, include_flagged)
    checks = judge_checks(
        analysis, runs, thresholds, bootstrap.confidence, include_flagged, facts.sport_policy
    )
    notes = study_notes(runs, analysis, checks, facts.sport_policy, include_flagged)
    plots = write_study_figures(analysis, runs, out_dir / PLOTS, include_flagged)
    result = LbStudyResult(
        out_dir,
        facts,
        tuple(runs),
        analysis,
        checks,
        tuple(notes),
        tuple(plots),
        "",
        include_flagged,
        reference=reference,
    )
    result = dataclasses.replace(result, text=render(result, bootstrap))
    document = {
        **result.to_json(),
        "thresholds": asdict(thresholds),
        "bootstrap": {"method": BOOTSTRAP_METHOD, **asdict(bootstrap)},
    }
    write_private(out_dir / STUDY_JSON, (json.dumps(document, indent=2) + "\n").encode())
    write_private(out_dir / STUDY_TEXT, (result.text + "\n").encode())
    page = write_or_warn(write_study_report, out_dir)  # after study.txt: the page folds it in
    return dataclasses.replace(result, report=page)
