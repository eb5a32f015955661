"""`emulate run SCENARIO --seeds N`: the same scenario with N seeds, and each number with its
confidence interval over them.

Run k (0..N-1) is the scenario with run.seed + k (another draw of the source ports, so of the
ECMP paths, and of every random choice the run makes: marking, loss, stragglers), written by the
run pipeline into <folder>/seed-<seed>/ as a complete results folder. Then, per collective type,
the mean and CV of busbw over complete instances, FCT p50 and p99 over finished flows, and per
run the job time, CNPs and ECN marks, each as a point estimate over every seed pooled with its
two-level percentile bootstrap interval (emulator.studies.stats.bootstrap: seeds with
replacement, then units within each drawn seed), into seeds.json and seeds.txt beside the runs and
on the terminal, and report.html (page) linking each seed's own page.

In simulation a seed is the only thing that changes between runs (same seed, same tables), so the
intervals are the model's spread over ECMP placements and random draws. On the emulated fabric
the runs also differ by the machine's run-to-run variation, which the upper level of the
bootstrap carries too. A per-run number (job time) has one unit per seed: with one seed it has no
interval. Runs the project flagged (partial, or a fidelity verdict other than ok:
emulator.studies.stats.flags.run_flags) are listed with their reasons and left out of every
estimate, unless include_flagged (`--include-flagged`), and then the text says the estimates
include them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from emulator.errors import InputError
from emulator.studies.seeds import RUN_FOLDER, SEEDS_JSON, SEEDS_TEXT
from emulator.studies.stats.bootstrap import (
    BOOTSTRAP_METHOD,
    DEFAULT_BOOTSTRAP,
    BootstrapSpec,
    PooledSample,
    Statistic,
    cv,
    mean,
    percentile,
)
from emulator.studies.stats.estimates import Estimate, estimate
from emulator.studies.stats.flags import (
    INCLUDED_FLAGGED,
    flagged_notes,
    flagged_text,
    judged_runs,
    run_flags,
)
from emulator.studies.stats.formatting import fmt_interval, json_finite
from emulator.studies.stats.units import CollectiveUnits, collective_units


@dataclass(frozen=True)
class Measure:
    """One statistic of the runs: what it is of, its unit for display and how to compute it."""

    name: str
    unit: str
    scale: float  # displayed value = value / scale
    statistic: Statistic
    units: str = ""  # the CollectiveUnits field it is computed on (collective measures)


COLLECTIVE_MEASURES = (
    Measure("busbw_mean_bytes_per_s", "GB/s", 1e9, mean, "busbw"),
    Measure("busbw_cv", "", 1.0, cv, "busbw"),
    Measure("fct_p50_s", "us", 1e-6, percentile(50.0), "fct"),
    Measure("fct_p99_s", "us", 1e-6, percentile(99.0), "fct"),
)
# Per-run numbers: one unit per seed, read from each run's summary.json.
RUN_MEASURES = (
    Measure("job_time_s", "ms", 1e-3, mean),
    Measure("cnps", "", 1.0, mean),
    Measure("ce_marks", "", 1.0, mean),
)


@dataclass(frozen=True)
class SeedRun:
    """One seed's run as read back from its results folder."""

    seed: int
    folder: Path
    summary: Mapping[str, Any]
    units: Mapping[str, CollectiveUnits]
    failed_expectations: int = 0

    @property
    def name(self) -> str:
        return f"seed {self.seed}"

    @property
    def flags(self) -> tuple[str, ...]:
        """Why the project flagged the run (empty: it is in the estimates)."""
        return run_flags(self.summary)

    def per_run(self, name: str) -> float | None:
        if name == "job_time_s":
            value = self.summary.get("job_time_s")
        else:  # summed over collective types, as the printed table's totals
            stats = (self.summary.get("collectives") or {}).values()
            values = [s.get(name) for s in stats if s.get(name) is not None]
            value = sum(values) if values else None
        return None if value is None else float(value)


@dataclass(frozen=True)
class SeedsResult:
    out_dir: Path
    runs: tuple[SeedRun, ...]
    estimates: Mapping[str, Mapping[str, Estimate]]  # "ALL_REDUCE"/"run" -> measure -> estimate
    bootstrap: BootstrapSpec
    text: str
    report: Path | None = None  # report.html; None if it could not be written (a warning said)
    include_flagged: bool = False  # flagged runs are in the estimates (--include-flagged)

    @property
    def failed_expectations(self) -> int:
        return sum(r.failed_expectations for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        def one(e: Estimate) -> dict[str, Any]:
            return {
                "point": e.point,
                "ci": list(e.interval) if e.interval else None,
                "seeds": e.repeats,
                "units": e.units,
            }

        return {
            "seeds": [r.seed for r in self.runs],
            "runs": [
                {
                    "seed": r.seed,
                    "folder": str(r.folder),
                    "partial": bool(r.summary.get("partial")),
                    "fidelity": (r.summary.get("fidelity") or {}).get("verdict"),
                    "flags": list(r.flags),
                    "judged": self.include_flagged or not r.flags,
                }
                for r in self.runs
            ],
            "include_flagged": self.include_flagged,
            "backend": self.runs[0].summary.get("backend") if self.runs else None,
            "estimates": {
                group: {name: one(e) for name, e in measures.items()}
                for group, measures in self.estimates.items()
            },
            "bootstrap": {"method": BOOTSTRAP_METHOD, **asdict(self.bootstrap)},
        }


def load_seed_run(folder: Path, seed: int, failed_expectations: int = 0) -> SeedRun:
    from collectors.report import load_run

    run = load_run(folder)
    types = sorted(
        {t for t in run.tables.collectives.column("collective_type").to_pylist() if t is not None}
    )
    units = {ctype: collective_units(run.tables, ctype) for ctype in types}
    return SeedRun(seed, folder, run.summary, units, failed_expectations)


def analyse_seeds(
    runs: Sequence[SeedRun],
    out_dir: Path,
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    say: Callable[[str], None] | None = None,
    include_flagged: bool = False,
) -> SeedsResult:
    """Every measure over the runs not flagged (every run, include_flagged) with its interval;
    writes seeds.json, seeds.txt and then report.html (a page that cannot be written is a
    warning through `say`, default stderr: the series' results stand without it,
    collectors.pages.kit.write_or_warn)."""
    from collectors.pages.kit import write_or_warn
    from collectors.results import write_private
    from emulator.studies.seeds.page import write_seeds_report

    if not runs:
        raise InputError("--seeds: no run to analyse")
    every, runs = runs, judged_runs(runs, include_flagged)
    rng = np.random.default_rng(bootstrap.seed)
    estimates: dict[str, dict[str, Estimate]] = {}
    types = sorted({t for r in runs for t in r.units})
    for ctype in types:
        of = [r.units.get(ctype) or CollectiveUnits.empty() for r in runs]
        estimates[ctype] = {
            m.name: estimate(
                PooledSample.of([getattr(u, m.units) for u in of], m.statistic), bootstrap, rng
            )
            for m in COLLECTIVE_MEASURES
        }
    estimates["run"] = {
        m.name: estimate(
            PooledSample.of(
                [np.array([v]) for r in runs if (v := r.per_run(m.name)) is not None],
                m.statistic,
            ),
            bootstrap,
            rng,
        )
        for m in RUN_MEASURES
    }
    text = seeds_text(every, estimates, bootstrap, out_dir, include_flagged)
    result = SeedsResult(
        out_dir, tuple(every), estimates, bootstrap, text, include_flagged=include_flagged
    )
    document = json.dumps(json_finite(result.to_json()), indent=2) + "\n"
    write_private(out_dir / SEEDS_JSON, document.encode())
    write_private(out_dir / SEEDS_TEXT, (text + "\n").encode())
    page = write_or_warn(write_seeds_report, out_dir, say)
    return dataclasses.replace(result, report=page)


def seeds_text(
    runs: Sequence[SeedRun],
    estimates: Mapping[str, Mapping[str, Estimate]],
    bootstrap: BootstrapSpec,
    out_dir: Path,
    include_flagged: bool = False,
) -> str:
    measures = {m.name: m for m in (*COLLECTIVE_MEASURES, *RUN_MEASURES)}
    seeds = ", ".join(str(r.seed) for r in runs)
    lines = [f"{len(runs)} seeds ({seeds}): {out_dir}", ""]
    for group, values in estimates.items():
        lines.append("per run" if group == "run" else group)
        for name, e in values.items():
            m = measures[name]
            scaled = None if e.point is None else e.point / m.scale
            interval = None if e.interval is None else tuple(x / m.scale for x in e.interval)
            unit = f" {m.unit}" if m.unit else ""
            shown = fmt_interval(scaled, interval, ".4g")  # type: ignore[arg-type]
            lines.append(f"  {name:<24} {shown}{unit}  ({e.repeats} seeds, {e.units} units)")
    lines += [
        "",
        f"intervals: {bootstrap.confidence:.0%}, {BOOTSTRAP_METHOD}, B={bootstrap.resamples}, "
        f"seed {bootstrap.seed}; a per-run number with one seed has none",
    ]
    flagged = [(r.name, r.flags) for r in runs if r.flags]
    if flagged and include_flagged:
        lines.append(f"every estimate {INCLUDED_FLAGGED}: {flagged_text(flagged)}")
    elif flagged and len(flagged) == len(runs):
        lines.append("no estimate: every run is flagged and left out (--include-flagged)")
    lines += [f"note: {n}" for n in flagged_notes(flagged, include_flagged)]
    return "\n".join(lines)


# Runs one scenario (already carrying its seed) into a folder; returns (folder, failed
# expectations). The run pipeline in production, a fake in tests.
SeedRunner = Callable[[Any, Path], tuple[Path, int]]


def pipeline_runner(options: Any) -> SeedRunner:
    from emulator.run import run_scenario

    def run(scenario: Any, folder: Path) -> tuple[Path, int]:
        result = run_scenario(scenario, dataclasses.replace(options, out_dir=folder))
        return result.out_dir, result.failed_expectations

    return run


def default_seeds_dir(scenario: Any, now: datetime | None = None) -> Path:
    from collectors.results import default_results_dir

    parent = Path(scenario.metrics.results_dir)
    return default_results_dir(parent, f"{scenario.name}-seeds", now or datetime.now(UTC))


def run_seeds(
    scenario: Any,
    count: int,
    out_dir: Path,
    runner: SeedRunner,
    say: Callable[[str], None],
    bootstrap: BootstrapSpec = DEFAULT_BOOTSTRAP,
    include_flagged: bool = False,
) -> SeedsResult:
    """Run the scenario with run.seed, run.seed + 1, ... (count runs) into out_dir/seed-<seed>/,
    then analyse them. A run that fails stops the series (its error propagates); the finished
    runs stay, and no seeds.json is written."""
    if count < 1:
        raise InputError(f"--seeds {count}: must be at least 1")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError(f"--out {out_dir}: exists and is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)
    base = scenario.run.seed
    runs: list[SeedRun] = []
    for k in range(count):
        seed = base + k
        seeded = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, seed=seed))
        say(f"seeds: run {k + 1} of {count} (run.seed {seed})")
        folder, failed = runner(seeded, out_dir / RUN_FOLDER.format(seed=seed))
        runs.append(load_seed_run(folder, seed, failed))
    return analyse_seeds(runs, out_dir, bootstrap, say, include_flagged)
