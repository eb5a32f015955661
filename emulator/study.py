"""The interference study (issue 8; the Chakra paper, section 5.3): each collective alone, then mixed.

Three runs of the same MoE workload on the same fabric: the gradient All-Reduce alone
(scenarios/allreduce_only.yaml), the All-to-All dispatch/combine alone (alltoall_only.yaml) and
both interleaved (moe_mix.yaml). The study runs them with emulator.run.run_scenario (or reuses
results folders already written), then writes into its own folder:

- plots/: busbw per iteration overlaid (All-Reduce alone vs mixed, All-to-All alone vs mixed),
  FCT CDFs per collective overlaid (log x), CNPs per collective per run: the `emulate compare`
  figures (collectors.report.write_compare_plots) of the three runs;
- study.json and study.txt: the checks the issue names, each with its numbers and whether this run
  shows the expected effect, plus per-run identity (TDF, fidelity, partial). The All-Reduce CV is
  judged twice: over every instance, and within each process group from iteration to iteration
  (ECMP gives each group fixed paths, so groups differ by a fixed amount alone and mixed).

The verdicts are reported as measured: "not shown" is a result, not an error. The numbers come
from collectors.summary.build_summary, the same as `emulate compare` prints: busbw CV over the
complete instances of a type, nearest-rank FCT percentiles over its finished flows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from emulator.config import param
from emulator.errors import InputError

ALL_REDUCE, ALL_TO_ALL = "ALL_REDUCE", "ALL_TO_ALL"
STUDY_JSON, STUDY_TEXT, PLOTS, RUNS = "study.json", "study.txt", "plots", "runs"
SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"

# Role -> shipped scenario; the order is the order of --reuse and of the tables.
ROLES: dict[str, str] = {
    "allreduce_only": "allreduce_only.yaml",
    "alltoall_only": "alltoall_only.yaml",
    "mixed": "moe_mix.yaml",
}

# Role -> how plots and tables name its run.
ROLE_LABELS: dict[str, str] = {
    "allreduce_only": "All-Reduce alone",
    "alltoall_only": "All-to-All alone",
    "mixed": "mixed",
}

Verdict = Literal["shown", "not shown", "not measurable"]


@dataclass(frozen=True)
class StudyThresholds:
    """How large an effect must be to count as shown (a smaller one is within run-to-run noise)."""

    cv_ratio_min: float = param(
        1.25,
        doc="All-Reduce busbw CV mixed / alone at or above which the variability is shown",
        min=1.0,
    )
    cv_min: float = param(
        0.02,
        doc="All-Reduce busbw CV mixed below which it counts as steady whatever the ratio (a "
        "ratio of two tiny CVs is noise)",
        min=0.0,
    )
    tail_ratio_min: float = param(
        1.25,
        doc="All-to-All FCT p99/p50 mixed over the same alone at or above which the tail is shown",
        min=1.0,
    )
    line_rate_ratio_min: float = param(
        0.8,
        doc="All-Reduce alone busbw / ideal (congestion-free plan) busbw at or above which it "
        "counts as near line rate",
        min=0.0,
        max=1.0,
    )


@dataclass(frozen=True)
class Check:
    """One of the issue's expectations, with the numbers it was judged on."""

    name: str
    question: str
    expected: str
    verdict: Verdict
    alone: float | None
    mixed: float | None
    ratio: float | None
    threshold: float
    detail: str
    numbers: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def shown(self) -> bool:
        return self.verdict == "shown"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["numbers"] = dict(self.numbers)
        out["shown"] = self.shown
        return out


@dataclass(frozen=True)
class StudyRun:
    """One run of the study as read back from its results folder."""

    role: str
    folder: Path
    summary: dict[str, Any]  # recomputed with collectors.summary.build_summary
    line_rate_bytes_per_s: float | None  # host link rate of the run's fabric, when known
    # collective type -> mean over process groups of the busbw CV across that group's instances
    cv_within_groups: Mapping[str, float | None] = field(default_factory=dict)

    def stats(self, collective: str) -> Mapping[str, Any]:
        return (self.summary.get("collectives") or {}).get(collective) or {}


@dataclass(frozen=True)
class StudyResult:
    out_dir: Path
    runs: tuple[StudyRun, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...]
    plots: tuple[Path, ...]
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "study": "interference",
            "runs": {
                r.role: {
                    "folder": str(r.folder),
                    "scenario": r.summary.get("scenario"),
                    "tdf": r.summary.get("tdf"),
                    "partial": bool(r.summary.get("partial")),
                    "fidelity": r.summary.get("fidelity"),
                    "line_rate_bytes_per_s": r.line_rate_bytes_per_s,
                    "cnps_by_collective": {
                        ctype: stats.get("cnps")
                        for ctype, stats in (r.summary.get("collectives") or {}).items()
                    },
                }
                for r in self.runs
            },
            "checks": [c.to_json() for c in self.checks],
            "all_shown": all(c.shown for c in self.checks),
            "notes": list(self.notes),
            "plots": [str(p) for p in self.plots],
        }


# A runner takes (scenario file, results folder to write, TDF override, progress) and returns the
# results folder it wrote: emulator.run.run_scenario in production, a fake in tests.
Runner = Callable[[Path, Path, float | None, bool], Path]


def run_with_pipeline(
    scenario_path: Path, out_dir: Path, tdf: float | None, progress: bool
) -> Path:
    """Run one scenario with the run pipeline (`emulate run`)."""
    from emulator.run import RunOptions, run_scenario
    from emulator.scenario import load_scenario

    scenario = load_scenario(scenario_path)
    result = run_scenario(scenario, RunOptions(out_dir=out_dir, progress=progress, tdf=tdf))
    return result.out_dir


def default_scenarios() -> dict[str, Path]:
    return {role: SCENARIOS_DIR / name for role, name in ROLES.items()}


def default_out_dir(now: datetime | None = None) -> Path:
    from collectors.results import default_results_dir

    return default_results_dir(Path("results"), "interference", now or datetime.now(UTC))


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
    reuse: Sequence[Path] | None = None,
    tdf: float | None = None,
    progress: bool = True,
    runner: Runner = run_with_pipeline,
    thresholds: StudyThresholds = StudyThresholds(),
    say: Callable[[str], None] = lambda line: None,
) -> StudyResult:
    """Run (or reuse) the three runs, then write the study into out_dir."""
    if reuse is not None and len(reuse) != len(ROLES):
        raise InputError(
            f"--reuse: give {len(ROLES)} results folders ({', '.join(ROLES)}), got {len(reuse)}"
        )
    prepare_out_dir(out_dir)
    if reuse is not None:
        folders = dict(zip(ROLES, reuse, strict=True))
    else:
        paths = {**default_scenarios(), **(scenarios or {})}
        for role, path in paths.items():
            if not path.is_file():
                raise InputError(f"{path}: no such scenario file (the study's {role} run)")
        folders = {}
        for role in ROLES:
            say(f"study: running {role}: {paths[role]}")
            folders[role] = runner(paths[role], out_dir / RUNS / role, tdf, progress)
    return analyse(folders, out_dir, thresholds)


def _line_rate_bytes_per_s(folder: Path) -> float | None:
    """The host link rate of the run's fabric, from the scenario copy in its results folder."""
    from collectors.results import SCENARIO_COPY
    from emulator.errors import EmulatorError
    from emulator.scenario import load_scenario
    from fabrics.spec import ClosSpec, DutSpec

    copy = folder / SCENARIO_COPY
    if not copy.is_file():
        return None
    try:
        fabric = load_scenario(copy).fabric
    except EmulatorError:
        return None
    if isinstance(fabric, ClosSpec):
        return fabric.host_link_gbps * 1e9 / 8
    if isinstance(fabric, DutSpec):
        return fabric.max_rate_gbps * 1e9 / 8
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _cv_check(
    name: str,
    question: str,
    cv_alone: float | None,
    cv_mixed: float | None,
    thresholds: StudyThresholds,
    numbers: Mapping[str, float | None],
) -> Check:
    ratio = _ratio(cv_mixed, cv_alone)
    verdict: Verdict
    if cv_alone is None or cv_mixed is None:
        verdict = "not measurable"
        detail = "no complete All-Reduce instances with a busbw in " + (
            "the alone run" if cv_alone is None else "the mixed run"
        )
    elif cv_mixed < thresholds.cv_min:
        verdict = "not shown"
        detail = f"mixed CV {cv_mixed:.4f} is below {thresholds.cv_min:g}: steady"
    elif ratio is None:
        verdict = "shown"
        detail = f"alone CV is 0 (one instance or identical ones); mixed CV {cv_mixed:.4f}"
    else:
        verdict = "shown" if ratio >= thresholds.cv_ratio_min else "not shown"
        detail = (
            f"mixed CV is {ratio:.2f}x the alone CV "
            f"({'at or above' if verdict == 'shown' else 'below'} {thresholds.cv_ratio_min:g}x)"
        )
    return Check(
        name,
        question,
        "higher CV mixed",
        verdict,
        cv_alone,
        cv_mixed,
        ratio,
        thresholds.cv_ratio_min,
        detail,
        numbers,
    )


def check_allreduce_cv(alone: StudyRun, mixed: StudyRun, thresholds: StudyThresholds) -> Check:
    """CV over every instance: includes the fixed differences between process groups (paths)."""
    counts = {
        "instances_alone": alone.stats(ALL_REDUCE).get("instances_complete"),
        "instances_mixed": mixed.stats(ALL_REDUCE).get("instances_complete"),
        "busbw_mean_alone_bytes_per_s": alone.stats(ALL_REDUCE).get("busbw_mean_bytes_per_s"),
        "busbw_mean_mixed_bytes_per_s": mixed.stats(ALL_REDUCE).get("busbw_mean_bytes_per_s"),
    }
    return _cv_check(
        "allreduce_busbw_cv",
        "Does the All-Reduce busbw vary more when mixed with the All-to-All?",
        alone.stats(ALL_REDUCE).get("busbw_cv"),
        mixed.stats(ALL_REDUCE).get("busbw_cv"),
        thresholds,
        counts,
    )


def check_allreduce_cv_within_groups(
    alone: StudyRun, mixed: StudyRun, thresholds: StudyThresholds
) -> Check:
    """The same question per process group (iteration to iteration), averaged over groups.

    ECMP pins a group's flows to the same uplinks in every iteration, so groups differ from each
    other by a fixed amount alone and mixed; this CV leaves that out and keeps what changes from
    one iteration to the next."""
    return _cv_check(
        "allreduce_busbw_cv_within_groups",
        "Does each All-Reduce group's busbw vary more from iteration to iteration when mixed?",
        alone.cv_within_groups.get(ALL_REDUCE),
        mixed.cv_within_groups.get(ALL_REDUCE),
        thresholds,
        {},
    )


def cv_within_groups(tables: Any, collective: str) -> float | None:
    """Mean over process groups (with 2 or more complete instances) of their busbw CV."""
    from collectors.stats import coefficient_of_variation, mean
    from collectors.tables import rows

    by_group: dict[str, list[float]] = {}
    columns = ("collective_type", "process_group", "busbw_bytes_per_s", "complete")
    for ctype, group, busbw, complete in rows(tables.collectives, columns):
        if ctype == collective and complete and busbw is not None:
            by_group.setdefault(group, []).append(busbw)
    cvs = [coefficient_of_variation(v) for v in by_group.values() if len(v) >= 2]
    return mean([cv for cv in cvs if cv is not None])


def check_alltoall_tail(alone: StudyRun, mixed: StudyRun, thresholds: StudyThresholds) -> Check:
    a, m = alone.stats(ALL_TO_ALL), mixed.stats(ALL_TO_ALL)
    tail_alone = _ratio(a.get("fct_p99_s"), a.get("fct_p50_s"))
    tail_mixed = _ratio(m.get("fct_p99_s"), m.get("fct_p50_s"))
    ratio = _ratio(tail_mixed, tail_alone)
    numbers = {
        "fct_p50_alone_s": a.get("fct_p50_s"),
        "fct_p99_alone_s": a.get("fct_p99_s"),
        "fct_p50_mixed_s": m.get("fct_p50_s"),
        "fct_p99_mixed_s": m.get("fct_p99_s"),
        "flows_finished_alone": a.get("flows_finished"),
        "flows_finished_mixed": m.get("flows_finished"),
    }
    verdict: Verdict
    if ratio is None:
        verdict = "not measurable"
        detail = "no finished All-to-All flows in " + (
            "the alone run" if tail_alone is None else "the mixed run"
        )
    else:
        verdict = "shown" if ratio >= thresholds.tail_ratio_min else "not shown"
        detail = (
            f"mixed p99/p50 is {ratio:.2f}x the alone p99/p50 "
            f"({'at or above' if verdict == 'shown' else 'below'} {thresholds.tail_ratio_min:g}x)"
        )
    return Check(
        "alltoall_fct_tail",
        "Does the All-to-All FCT tail (p99/p50) grow when mixed with the All-Reduce?",
        "longer tail mixed",
        verdict,
        tail_alone,
        tail_mixed,
        ratio,
        thresholds.tail_ratio_min,
        detail,
        numbers,
    )


def check_allreduce_line_rate(alone: StudyRun, thresholds: StudyThresholds) -> Check:
    stats = alone.stats(ALL_REDUCE)
    busbw = stats.get("busbw_mean_bytes_per_s")
    ideal = stats.get("ideal_busbw_bytes_per_s")
    ratio = _ratio(busbw, ideal)
    line = alone.line_rate_bytes_per_s
    numbers = {
        "busbw_mean_bytes_per_s": busbw,
        "ideal_busbw_bytes_per_s": ideal,
        "line_rate_bytes_per_s": line,
        "busbw_over_line_rate": _ratio(busbw, line),
        "ideal_over_line_rate": _ratio(ideal, line),
    }
    verdict: Verdict
    if ratio is None:
        verdict = "not measurable"
        detail = "no complete All-Reduce instance with an ideal busbw in the alone run"
    else:
        assert busbw is not None and ideal is not None  # a ratio needs both
        verdict = "shown" if ratio >= thresholds.line_rate_ratio_min else "not shown"
        line_text = "" if line is None else f", host line rate {line / 1e9:.2f} GB/s"
        detail = (
            f"busbw {busbw / 1e9:.2f} GB/s is {ratio:.0%} of the congestion-free plan's "
            f"{ideal / 1e9:.2f} GB/s ({'at or above' if verdict == 'shown' else 'below'} "
            f"{thresholds.line_rate_ratio_min:.0%}){line_text}"
        )
    return Check(
        "allreduce_alone_line_rate",
        "Does the All-Reduce alone run near line rate (busbw / ideal busbw)?",
        f"busbw / ideal >= {thresholds.line_rate_ratio_min:g}",
        verdict,
        ratio,
        None,
        ratio,
        thresholds.line_rate_ratio_min,
        detail,
        numbers,
    )


def _notes(runs: Sequence[StudyRun], checks: Sequence[Check]) -> list[str]:
    notes = []
    for run in runs:
        if run.summary.get("partial"):
            notes.append(f"{run.role}: the run is partial (interrupted or failed); fewer samples")
        fidelity = run.summary.get("fidelity") or {}
        if fidelity.get("verdict") not in (None, "ok"):
            reasons = "; ".join(fidelity.get("reasons") or []) or "no reason given"
            notes.append(
                f"{run.role}: fidelity {fidelity.get('verdict')} ({reasons}): the numbers may "
                "show this machine's limits rather than the fabric's"
            )
    # An "alone" run carrying the other collective is not a baseline (wrong folder or scenario).
    for run, other in ((runs[0], ALL_TO_ALL), (runs[1], ALL_REDUCE)):
        if run.stats(other).get("instances"):
            notes.append(
                f"{run.role}: the run also carries {other} ({run.stats(other)['instances']} "
                "instances), so it is not that collective alone; check the folder or scenario"
            )
    tdfs = {run.summary.get("tdf") for run in runs}
    if len(tdfs) > 1:
        notes.append(
            "the runs used different time dilation factors "
            f"({', '.join(str(t) for t in sorted(tdfs, key=str))}): pass --tdf to fix one"
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


def _fmt(value: float | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def checks_table(checks: Sequence[Check]) -> str:
    headers = ("check", "expected", "alone", "mixed", "mixed/alone", "verdict")
    body = [
        (
            c.name,
            c.expected,
            _fmt(c.alone, ".4g"),
            _fmt(c.mixed, ".4g"),
            _fmt(c.ratio, ".3g") if c.mixed is not None else "-",
            c.verdict,
        )
        for c in checks
    ]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i < 2 or i == 5 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, body)])


def analyse(
    folders: Mapping[str, Path], out_dir: Path, thresholds: StudyThresholds = StudyThresholds()
) -> StudyResult:
    """Read the three results folders, judge the checks, write plots, study.json and study.txt."""
    from collectors.report import LoadedRun, compare_table, load_run, write_compare_plots
    from collectors.results import write_private
    from collectors.summary import RunMeta, build_summary

    missing = [role for role in ROLES if role not in folders]
    if missing:
        raise InputError(f"study: no results folder for {', '.join(missing)}")
    loaded: list[LoadedRun] = []
    runs: list[StudyRun] = []
    for role in ROLES:
        run = load_run(Path(folders[role]))
        summary = build_summary(
            RunMeta.from_summary(run.summary), run.tables, bool(run.summary.get("partial"))
        )
        # Label plots and tables by role, so the legends say "alone" or "mixed" whatever the
        # scenarios are called.
        label = f"{ROLE_LABELS[role]} ({run.label})"
        loaded.append(LoadedRun(run.folder, {**run.summary, "scenario": label}, run.tables))
        within = {ALL_REDUCE: cv_within_groups(run.tables, ALL_REDUCE)}  # what a check judges
        line_rate = _line_rate_bytes_per_s(run.folder)
        runs.append(StudyRun(role, run.folder, summary, line_rate, within))
    ar_alone, a2a_alone, mixed = runs
    checks = (
        check_allreduce_cv(ar_alone, mixed, thresholds),
        check_alltoall_tail(a2a_alone, mixed, thresholds),
        check_allreduce_line_rate(ar_alone, thresholds),
        check_allreduce_cv_within_groups(ar_alone, mixed, thresholds),
    )
    notes = _notes(runs, checks)
    plots = write_compare_plots(loaded, out_dir / PLOTS)
    text = "\n".join(
        [
            f"interference study: {out_dir}",
            *(f"  {r.role}: {r.folder} (tdf {r.summary.get('tdf')})" for r in runs),
            "",
            checks_table(checks),
            *(f"  {c.name}: {c.detail}" for c in checks),
            "",
            compare_table(loaded),
            *([""] + [f"note: {n}" for n in notes] if notes else []),
            "",
            f"plots: {out_dir / PLOTS}",
        ]
    )
    result = StudyResult(out_dir, tuple(runs), checks, tuple(notes), tuple(plots), text)
    document = {**result.to_json(), "thresholds": asdict(thresholds)}
    write_private(out_dir / STUDY_JSON, (json.dumps(document, indent=2) + "\n").encode())
    write_private(out_dir / STUDY_TEXT, (text + "\n").encode())
    return result


# Study name -> the function that runs it (`emulate study NAME`).
STUDIES: dict[str, Callable[..., StudyResult]] = {"interference": run_study}
