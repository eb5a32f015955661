"""The interference study (issue 8; the Chakra paper, section 5.3): each collective alone, then mixed.

Three conditions of the same MoE workload on the same fabric: the gradient All-Reduce alone
(scenarios/allreduce_only.yaml), the All-to-All dispatch/combine alone (alltoall_only.yaml) and
both interleaved (moe_mix.yaml). The study runs each condition N times (repeats, `--repeats`,
default 3), repeat k with the scenario's run.seed + k, interleaved (repeat 1 of each condition,
then repeat 2, ...) so a drift of the machine's load does not line up with one condition. A seed
is a draw of the queue pairs' UDP source ports and so of their ECMP paths (emulator.schedule.
sports), as the QP numbers of a real run would be; the alone and mixed runs of one repeat share
it, so their flows take the same paths. (The eBPF marker's ECN draws come from the kernel and
are not seeded: repeats also differ by that and by the machine's run-to-run variation.) Each
run goes through emulator.run.run_scenario into runs/<role>-seed<seed>/ (or finished results
folders are reused), then the study writes into its own folder:

- plots/: the Chakra paper's Fig. 10 (busbw per iteration: All-Reduce alone, All-to-All alone,
  mixed) and Fig. 11 (FCT CDFs alone vs mixed) over every repeat with their 95% bands
  (emulator.studies.interference.plots); and the `emulate compare` figures (busbw per iteration
  overlaid, FCT CDFs overlaid, CNPs per collective per run) of the first repeat of each condition;
- study.json and study.txt: every run's identity (role, seed, folder, TDF, fidelity, partial),
  the checks the issue names, each with its numbers, a 95% confidence interval on each and
  whether the effect is shown. The All-Reduce CV is judged twice: over every instance, and within
  each process group from iteration to iteration (ECMP gives each group fixed paths, so groups
  differ by a fixed amount alone and mixed).

The numbers pool the units of every repeat of a condition: busbw CV over the complete instances
of a type, nearest-rank FCT percentiles over its finished flows (for one run, the same as
collectors.summary.build_summary and `emulate compare`). The intervals come from a two-level
bootstrap, repeats then units (emulator.studies.stats.bootstrap documents the method). A
mixed/alone effect is "shown" when its ratio is at or above the threshold and the interval of the
ratio lies above 1 (not run-to-run noise); "not measurable" when a side has fewer than 2 units or
fewer repeats with data than StudyThresholds.repeats_min (one run's interval leaves out
run-to-run variation).
The verdicts are reported as measured: "not shown" is a result, not an error. Runs the project
flagged (partial, or a fidelity verdict other than ok) are listed with their reasons and left out
of every statistic and figure over the repeats; include_flagged (--include-flagged) judges them
too, and every check judged on one says so (checks.judge_checks).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from emulator.errors import InputError
from emulator.studies.interference import STUDY_JSON, STUDY_TEXT
from emulator.studies.interference.checks import ALL_REDUCE, ALL_TO_ALL, StudyRun, judge_checks
from emulator.studies.interference.text import (
    checks_table,
    reference_table,
    runs_table,
    study_notes,
)
from emulator.studies.pool import LocalPool, RunPool, check_pool_backend
from emulator.studies.stats.bootstrap import BOOTSTRAP_METHOD, DEFAULT_BOOTSTRAP, BootstrapSpec
from emulator.studies.stats.flags import judged_runs
from emulator.studies.stats.units import collective_units, timing_resolution_s
from emulator.studies.stats.verdict import DEFAULT_THRESHOLDS, Check, StudyThresholds

PLOTS, RUNS = "plots", "runs"
REFERENCE_DIR = "reference-sim"  # the simulated references' own study (--reference sim)
SCENARIOS_DIR = Path(__file__).resolve().parents[3] / "scenarios"  # emulator/studies/<study>/
DEFAULT_REPEATS = 3

# Role -> shipped scenario; the order is the order of --reuse and of the tables.
ROLES: dict[str, str] = {
    "allreduce_only": "allreduce_only.yaml",
    "alltoall_only": "alltoall_only.yaml",
    "mixed": "moe_mix.yaml",
}

# Set name -> role -> shipped scenario (`--scenario-set`): the main placement, where each
# collective alone runs at line rate; the ECMP-bound one (the All-Reduce alone is held to a third
# of line rate by hash collisions); the strided one (each collective under or across the leaves).
SCENARIO_SETS: dict[str, dict[str, str]] = {
    "main": ROLES,
    "ecmp": {role: name.replace(".yaml", "_ecmp.yaml") for role, name in ROLES.items()},
    "strided": {role: name.replace(".yaml", "_strided.yaml") for role, name in ROLES.items()},
}

# Role -> how plots and tables name its run.
ROLE_LABELS: dict[str, str] = {
    "allreduce_only": "All-Reduce alone",
    "alltoall_only": "All-to-All alone",
    "mixed": "mixed",
}


@dataclass(frozen=True)
class StudyResult:
    out_dir: Path
    runs: tuple[StudyRun, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...]
    plots: tuple[Path, ...]
    text: str
    include_flagged: bool = False  # flagged runs judged too (--include-flagged)

    def to_json(self) -> dict[str, Any]:
        return {
            "study": "interference",
            # role -> every repeat, in order
            "runs": {
                role: [r.identity() for r in self.runs if r.role == role]
                for role in ROLES
                if any(r.role == role for r in self.runs)
            },
            "include_flagged": self.include_flagged,
            # the runs the project flagged: left out of every statistic unless include_flagged
            "flagged_runs": [
                {"role": r.role, "repeat": r.repeat + 1, "folder": str(r.folder), "flags": r.flags}
                for r in self.runs
                if r.flags
            ],
            "checks": [c.to_json() for c in self.checks],
            "all_shown": all(c.shown for c in self.checks),
            "notes": list(self.notes),
            "plots": [str(p) for p in self.plots],
        }


# A runner takes (scenario file, results folder to write, TDF override, progress, run.seed
# override) and returns the results folder it wrote: run_with_pipeline in production, a fake in
# tests.
Runner = Callable[[Path, Path, float | None, bool, int | None], Path]


def run_with_pipeline(
    scenario_path: Path,
    out_dir: Path,
    tdf: float | None,
    progress: bool,
    seed: int | None = None,
    backend: str | None = None,
    reference: str | None = None,
) -> Path:
    """Run one scenario with the run pipeline (`emulate run`), with run.seed replaced by `seed`
    and run.backend by `backend` when given; reference "sim": also simulate it beside
    (`emulate run --reference sim`, into <out_dir>-reference-sim)."""
    from emulator.run import RunOptions, run_scenario
    from emulator.scenario import load_scenario

    scenario = load_scenario(scenario_path)
    if seed is not None:
        scenario = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, seed=seed))
    options = RunOptions(
        out_dir=out_dir, progress=progress, tdf=tdf, backend=backend, reference=reference
    )
    result = run_scenario(scenario, options)
    return result.out_dir


def default_scenarios(scenario_set: str = "main") -> dict[str, Path]:
    names = SCENARIO_SETS.get(scenario_set)
    if names is None:
        raise InputError(
            f"--scenario-set {scenario_set}: not one of {', '.join(sorted(SCENARIO_SETS))}"
        )
    return {role: SCENARIOS_DIR / name for role, name in names.items()}


def prepare_out_dir(out_dir: Path) -> None:
    """Create the study folder; refuse one that already holds a study."""
    from collectors.results import DIR_MODE

    if (out_dir / STUDY_JSON).exists():
        raise InputError(f"{out_dir}: already holds a study ({STUDY_JSON}); choose another --out")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; choose another --out")
    out_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def run_study(
    out_dir: Path,
    scenarios: Mapping[str, Path] | None = None,
    reuse: Mapping[str, Sequence[Path]] | None = None,
    tdf: float | None = None,
    progress: bool = True,
    runner: Runner = run_with_pipeline,
    thresholds: StudyThresholds = DEFAULT_THRESHOLDS,
    say: Callable[[str], None] = lambda line: None,
    repeats: int = DEFAULT_REPEATS,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    scenario_set: str = "main",
    reference: str | None = None,
    include_flagged: bool = False,
    pool: RunPool | None = None,
    backend: str | None = None,
) -> StudyResult:
    """Run `repeats` runs of each condition (or reuse finished ones: role -> results folders,
    one per repeat), then write the study into out_dir. scenario_set: the shipped scenarios of
    each role (SCENARIO_SETS), before `scenarios` replaces any. reference "sim": the runner also
    simulated each run (into <run folder>-reference-sim); those are judged as a study of their
    own in out_dir/reference-sim/ and set beside the emulated checks. include_flagged: judge
    the runs the project flagged too (module docstring). pool: where the runs execute (default
    here, one after another; emulator.studies.pool); backend: the runs' backend when the runner
    overrides the scenarios' (a cluster takes only the simulated-time ones)."""
    from emulator.backends import backend_name
    from emulator.scenario import load_scenario

    study_of = functools.partial(analyse, include_flagged=include_flagged)
    if repeats < 1:
        raise InputError(f"--repeats {repeats}: must be at least 1")
    if reuse is not None:
        missing = [role for role in ROLES if not reuse.get(role)]
        if missing:
            raise InputError(f"study: no results folder to reuse for {', '.join(missing)}")
        prepare_out_dir(out_dir)
        return study_of(reuse, out_dir, thresholds, bootstrap=bootstrap)
    paths = {**default_scenarios(scenario_set), **(scenarios or {})}
    for role, path in paths.items():
        if not path.is_file():
            raise InputError(f"{path}: no such scenario file (the study's {role} run)")
    loaded = {role: load_scenario(paths[role]) for role in ROLES}
    base = {role: loaded[role].run.seed for role in ROLES}
    pool = pool if pool is not None else LocalPool(say)
    for role in ROLES if pool.remote else ():
        check_pool_backend(pool, backend_name(loaded[role], backend), paths[role])
    prepare_out_dir(out_dir)
    folders: dict[str, list[Path]] = {role: [] for role in ROLES}
    seeds: dict[str, list[int | None]] = {role: [] for role in ROLES}
    order: list[str] = []
    for k in range(repeats):  # interleaved: a drift of the machine hits every condition alike
        for role in ROLES:
            seed = base[role] + k
            pool.submit(
                f"study: running {role}, repeat {k + 1} of {repeats} (seed {seed}): {paths[role]}",
                out_dir / RUNS / f"{role}-seed{seed}",
                functools.partial(
                    _role_run, runner, paths[role], tdf, progress and not pool.remote, seed
                ),
            )
            order.append(role)
            seeds[role].append(seed)
    for role, folder in zip(order, pool.results(), strict=True):
        folders[role].append(folder)
    if reference is None:
        return study_of(folders, out_dir, thresholds, seeds, bootstrap)
    simulated = {role: [reference_folder(f) for f in runs] for role, runs in folders.items()}
    prepare_out_dir(out_dir / REFERENCE_DIR)
    ref = study_of(simulated, out_dir / REFERENCE_DIR, thresholds, seeds, bootstrap)
    return study_of(folders, out_dir, thresholds, seeds, bootstrap, reference=ref)


def _role_run(
    runner: Runner,
    path: Path,
    tdf: float | None,
    progress: bool,
    seed: int | None,
    out_dir: Path,
) -> Path:
    """One role's run into out_dir (a pool's call: out_dir last)."""
    return runner(path, out_dir, tdf, progress, seed)


def reference_folder(folder: Path) -> Path:
    """Where `emulate run --reference sim` wrote a run's simulation (emulator.run.pipeline)."""
    return folder.with_name(folder.name + "-reference-sim")


def _scenario_facts(folder: Path) -> tuple[float | None, int | None]:
    """The host link rate of the run's fabric and its run.seed, from the scenario copy in its
    results folder (None when unknown)."""
    from collectors.results import SCENARIO_COPY
    from emulator.errors import EmulatorError
    from emulator.scenario import load_scenario
    from fabrics.spec import ClosSpec, DutSpec

    copy = folder / SCENARIO_COPY
    if not copy.is_file():
        return None, None
    try:
        scenario = load_scenario(copy)
    except EmulatorError:
        return None, None
    fabric = scenario.fabric
    if isinstance(fabric, ClosSpec):
        return fabric.host_link_gbps * 1e9 / 8, scenario.run.seed
    if isinstance(fabric, DutSpec):
        return fabric.max_rate_gbps * 1e9 / 8, scenario.run.seed
    return None, scenario.run.seed


def seed_of(folder: Path, copy_seed: int | None) -> int | None:
    """The seed of a reused run: its scenario copy's (written as run, the study's seed included),
    else what the study's folder name says (<role>-seed<k>)."""
    if copy_seed is not None:
        return copy_seed
    match = re.fullmatch(r".*-seed(\d+)", folder.name)
    return int(match.group(1)) if match else None


def analyse(
    folders: Mapping[str, Path | Sequence[Path]],
    out_dir: Path,
    thresholds: StudyThresholds = DEFAULT_THRESHOLDS,
    seeds: Mapping[str, Sequence[int | None]] | None = None,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    reference: StudyResult | None = None,
    include_flagged: bool = False,
) -> StudyResult:
    """Read the results folders (role -> one folder, or one per repeat), judge the checks, write
    plots, study.json and study.txt. seeds: role -> each repeat's run.seed (default: from the
    folders, seed_of). include_flagged: judge the runs the project flagged too."""
    from collectors.pages.kit import write_or_warn
    from collectors.report import LoadedRun, compare_table, load_run, write_compare_plots
    from collectors.results import write_private
    from collectors.summary import RunMeta, build_summary
    from emulator.studies.interference.page import write_study_report
    from emulator.studies.interference.plots import write_study_figures

    missing = [role for role in ROLES if not folders.get(role)]
    if missing:
        raise InputError(f"study: no results folder for {', '.join(missing)}")
    loaded: list[LoadedRun] = []
    runs: list[StudyRun] = []
    for role in ROLES:
        given = folders[role]
        for k, folder in enumerate([given] if isinstance(given, Path | str) else given):
            run = load_run(Path(folder))
            summary = build_summary(
                RunMeta.from_summary(run.summary), run.tables, bool(run.summary.get("partial"))
            )
            # the verdict as the run wrote it: a missing one is not "ok" (stats.flags.run_flags)
            summary["fidelity"] = run.summary.get("fidelity")
            resolution_s = timing_resolution_s(run.summary)
            line_rate, copy_seed = _scenario_facts(run.folder)
            seed = seeds[role][k] if seeds is not None else seed_of(run.folder, copy_seed)
            # Label plots and tables by role, so the legends say "alone" or "mixed" whatever the
            # scenarios are called.
            label = f"{ROLE_LABELS[role]}{'' if seed is None else f' seed {seed}'} ({run.label})"
            loaded.append(LoadedRun(run.folder, {**run.summary, "scenario": label}, run.tables))
            units = {
                ctype: collective_units(run.tables, ctype, resolution_s)
                for ctype in (ALL_REDUCE, ALL_TO_ALL)
            }
            runs.append(StudyRun(role, run.folder, summary, line_rate, seed, k, units))
    checks = judge_checks(runs, thresholds, bootstrap, include_flagged)
    notes = study_notes(runs, checks, include_flagged)
    # The figures are of the judged runs, as the checks (a flagged run only in the tables).
    by_role = {
        role: judged_runs([r for r in runs if r.role == role], include_flagged) for role in ROLES
    }
    # They show the first repeat of each role. write_compare_plots takes any number of
    # runs, but it colours each on its own (nothing groups the repeats of a role), so 3 x N lines
    # would hide the alone/mixed contrast; every repeat is in the tables, the checks and study.json.
    firsts = [loaded[runs.index(by_role[role][0])] for role in ROLES if by_role[role]]
    plots = write_compare_plots(firsts, out_dir / PLOTS)
    # The paper's Fig. 10 and 11 over every repeat, with the repeats' 95% bands.
    every = {role: [loaded[runs.index(r)].tables for r in by_role[role]] for role in ROLES}
    plots += write_study_figures(every, out_dir / PLOTS)
    text = "\n".join(
        [
            f"interference study: {out_dir}",
            "",
            runs_table(runs, include_flagged),
            "",
            checks_table(checks),
            *(f"  {c.name}: {c.detail}" for c in checks),
            f"  intervals: {bootstrap.confidence:.0%}, {BOOTSTRAP_METHOD}, "
            f"B={bootstrap.resamples}, seed {bootstrap.seed}",
            "",
            compare_table(loaded),
            *(
                [
                    "",
                    f"the same checks in the simulated references ({reference.out_dir}):",
                    reference_table(checks, reference.checks),
                ]
                if reference is not None
                else []
            ),
            *([""] + [f"note: {n}" for n in notes] if notes else []),
            "",
            f"plots (Fig. 10 and 11 over every repeat; the rest, the first repeat): {out_dir / PLOTS}",
        ]
    )
    result = StudyResult(
        out_dir, tuple(runs), checks, tuple(notes), tuple(plots), text, include_flagged
    )
    document = {
        **result.to_json(),
        "thresholds": asdict(thresholds),
        "bootstrap": {"method": BOOTSTRAP_METHOD, **asdict(bootstrap)},
    }
    if reference is not None:
        document["reference"] = {
            "backend": "sim",
            "folder": str(reference.out_dir),
            "checks": [c.to_json() for c in reference.checks],
        }
    write_private(out_dir / STUDY_JSON, (json.dumps(document, indent=2) + "\n").encode())
    write_private(out_dir / STUDY_TEXT, (text + "\n").encode())
    write_or_warn(write_study_report, out_dir)  # after study.txt: the page folds it in
    return result


# Study name -> the function that runs it (`emulate study NAME`).
STUDIES: dict[str, Callable[..., StudyResult]] = {"interference": run_study}
