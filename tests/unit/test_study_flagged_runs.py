"""Runs the project flagged (issue 33): a partial run and a run whose fidelity verdict is not ok
are listed with their reasons and left out of every statistic of a study by default, so the
statistics equal those of the study without them; --include-flagged judges them, and then every
check (measure, estimate, verdict) that used one says so; every run of a side flagged leaves the
checks not measurable, saying why. The interference study, the jobs study, the seeds series and
the sensitivity study alike."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emulator.cli import main
from emulator.studies.interference.study import ROLES, analyse
from emulator.studies.jobs import study as jobs_study
from emulator.studies.seeds.series import analyse_seeds, load_seed_run
from emulator.studies.sensitivity import study as sens
from emulator.studies.stats.flags import INCLUDED_FLAGGED, NO_FIDELITY, run_flags
from tests.unit.test_html_report_sensitivity import rate_runs
from tests.unit.test_study import NOISY_AR, STEADY_A2A, STEADY_AR, TAILED_A2A, write_repeats
from tests.unit.test_study_verdict_rule import ALONE, JOB, TOGETHER, write_job_run

PARTIAL = "the run did not finish (partial results): what it measured is a part"
CPU = "CPU saturated in 40% of samples"


def flag(folder: Path, partial: bool = False, reason: str = CPU) -> Path:
    """Flag a results folder as the run pipeline would: partial, or a verdict degraded."""
    path = folder / "summary.json"
    summary = json.loads(path.read_text())
    summary["partial"] = partial
    summary["fidelity"] = {"verdict": "degraded", "reasons": [PARTIAL if partial else reason]}
    path.write_text(json.dumps(summary))
    return folder


def interference_folders(base: Path) -> dict[str, list[Path]]:
    """Three repeats of the All-Reduce alone (the third partial, and noisy), two of the
    All-to-All alone, three mixed (the second degraded, and calm)."""
    ar = write_repeats(base, "ar", "allreduce_only", ar=[*STEADY_AR, NOISY_AR[0]])
    a2a = write_repeats(base, "a2a", "alltoall_only", a2a=STEADY_A2A)
    mixed = write_repeats(
        base,
        "mix",
        "moe_mix",
        [NOISY_AR[0], STEADY_AR[0], NOISY_AR[1]],
        [*TAILED_A2A, STEADY_A2A[0]],
    )
    return {"allreduce_only": ar, "alltoall_only": a2a, "mixed": mixed}


def flagged_folders(base: Path) -> dict[str, list[Path]]:
    folders = interference_folders(base)
    flag(folders["allreduce_only"][2], partial=True)
    flag(folders["mixed"][1])
    return folders


def numbers(check: dict[str, Any]) -> tuple[Any, ...]:
    """What a check measured and judged (its detail apart)."""
    keys = ("verdict", "alone", "mixed", "ratio", "alone_ci", "mixed_ci", "ratio_ci", "numbers")
    return tuple(json.dumps(check[k], sort_keys=True) for k in keys)


def study_json(out: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((out / "study.json").read_text())
    return document


def test_flagged_runs_are_left_out_of_every_check_and_listed(tmp_path: Path) -> None:
    folders = flagged_folders(tmp_path / "runs")
    result = analyse(folders, tmp_path / "study")
    unflagged = {
        "allreduce_only": folders["allreduce_only"][:2],
        "alltoall_only": folders["alltoall_only"],
        "mixed": [folders["mixed"][0], folders["mixed"][2]],
    }
    without = analyse(unflagged, tmp_path / "without")
    document, reference = study_json(tmp_path / "study"), study_json(tmp_path / "without")
    # every statistic is the one of the study without the flagged runs
    assert [numbers(c) for c in document["checks"]] == [numbers(c) for c in reference["checks"]]
    assert [c.detail for c in result.checks] == [c.detail for c in without.checks]
    assert all(c["flagged"] == [] for c in document["checks"])
    # listed with their reasons, in study.json and study.txt
    assert document["include_flagged"] is False
    assert [(r["role"], r["repeat"]) for r in document["flagged_runs"]] == [
        ("allreduce_only", 3),
        ("mixed", 2),
    ]
    partial, degraded = (r["flags"] for r in document["flagged_runs"])
    assert partial == [
        "partial: the run did not finish (interrupted or failed)",
        f"fidelity degraded: {PARTIAL}",
    ]
    assert degraded == [f"fidelity degraded: {CPU}"]
    assert document["runs"]["mixed"][1]["flags"] == degraded
    text = (tmp_path / "study" / "study.txt").read_text()
    assert (
        "note: mixed repeat 2: flagged, and left out of every statistic (--include-flagged "
        f"judges it): fidelity degraded: {CPU}"
    ) in text
    assert "note: allreduce_only repeat 3: flagged, and left out of every statistic" in text
    judged = {
        tuple(r.split()[:2]): r.split()[6:8]
        for r in text.splitlines()
        if r.startswith(tuple(ROLES))
    }
    assert judged[("mixed", "2")] == ["no", "(flagged)"]
    assert judged[("mixed", "1")][0] == "yes"


def test_included_flagged_runs_are_judged_and_every_check_says_so(tmp_path: Path) -> None:
    folders = flagged_folders(tmp_path / "runs")
    analyse(folders, tmp_path / "study", include_flagged=True)
    # the same numbers, not flagged: what the checks measure with the flagged runs in
    analyse(interference_folders(tmp_path / "ok"), tmp_path / "plain")
    document, plain = study_json(tmp_path / "study"), study_json(tmp_path / "plain")
    assert [numbers(c) for c in document["checks"]] == [numbers(c) for c in plain["checks"]]
    assert document["include_flagged"] is True
    by_name = {c["name"]: c for c in document["checks"]}
    ar, mixed = "allreduce_only repeat 3", "mixed repeat 2"
    expected = {
        "allreduce_busbw_cv": [ar, mixed],
        "allreduce_busbw_cv_within_groups": [ar, mixed],
        "allreduce_busbw_mean": [ar, mixed],
        "alltoall_fct_tail": [mixed],
        "alltoall_fct_p99": [mixed],
        "allreduce_alone_line_rate": [ar],
    }
    for name, runs in expected.items():
        check = by_name[name]
        assert f"; {INCLUDED_FLAGGED}: " in check["detail"], name
        assert [f.split(" (")[0] for f in check["flagged"]] == runs, name
        assert all(run in check["detail"] for run in runs)
    assert f"{mixed} (fidelity degraded: {CPU})" in by_name["alltoall_fct_p99"]["flagged"]
    text = (tmp_path / "study" / "study.txt").read_text()
    assert f"note: {mixed}: flagged, and judged (--include-flagged)" in text
    assert "yes (flagged)" in text


def test_every_run_of_a_side_flagged_is_not_measurable_with_the_reason(tmp_path: Path) -> None:
    folders = interference_folders(tmp_path / "runs")
    for folder in folders["mixed"]:
        flag(folder)
    result = analyse(folders, tmp_path / "study")
    for check in result.checks:
        if check.name == "allreduce_alone_line_rate":  # judged on the alone runs only
            assert check.verdict == "shown"
            continue
        assert check.verdict == "not measurable", check.name
        assert check.detail.startswith("every mixed run is flagged and left out: mixed repeat 1")
        assert check.detail.endswith("; --include-flagged judges them")
        assert f"mixed repeat 3 (fidelity degraded: {CPU})" in check.detail
    assert (tmp_path / "study" / "report.html").is_file()  # the figures with no mixed run


def test_a_summary_without_a_fidelity_verdict_is_flagged() -> None:
    assert run_flags({"fidelity": {"verdict": "ok", "reasons": []}}) == ()
    assert run_flags({}) == (NO_FIDELITY,)
    assert run_flags({"fidelity": {"verdict": "unknown", "unknown": ["tick lateness"]}}) == (
        "fidelity unknown: no reason given",
    )


def test_the_interference_command_takes_include_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = flagged_folders(tmp_path / "runs")
    args = ["study", "interference", "--out", str(tmp_path / "s")]
    for role, given in folders.items():
        args += [f"--reuse-{role.replace('_', '-')}", *map(str, given)]
    assert main([*args, "--include-flagged"]) == 0
    assert study_json(tmp_path / "s")["include_flagged"] is True
    assert INCLUDED_FLAGGED in capsys.readouterr().out


# -- the jobs study ---------------------------------------------------------------------------


def jobs_runs(out: Path) -> list[jobs_study.JobsRun]:
    """Three repeats: all together (the second degraded), the job alone (the third partial)."""
    runs = []
    for seed in range(3):
        shift = 1 + 0.01 * seed
        for condition, slowdowns in ((jobs_study.ALL, TOGETHER), (JOB, ALONE)):
            folder = write_job_run(
                jobs_study.run_folder(out, condition, seed), [s * shift for s in slowdowns]
            )
            if (condition, seed) == (jobs_study.ALL, 1):
                flag(folder)
            if (condition, seed) == (JOB, 2):
                flag(folder, partial=True)
            runs.append(jobs_study._loaded(condition, seed, folder))
    return runs


def measured(rows: Sequence[jobs_study.MetricRow]) -> list[tuple[Any, ...]]:
    return [
        (r.metric, r.effect, r.comparison.alone.point, r.comparison.mixed.point,
         r.comparison.ratio, r.comparison.ratio_interval)
        for r in rows
    ]  # fmt: skip


def test_the_jobs_study_leaves_flagged_runs_out_and_includes_them_when_asked(
    tmp_path: Path,
) -> None:
    runs = jobs_runs(tmp_path / "jobs")
    (tmp_path / "with").mkdir()
    flagged = [r.name for r in runs if r.flags]
    assert flagged == ["all-seed1", "dense-seed2"]
    result = jobs_study.write_study(runs, tmp_path / "jobs", Path("two.yaml"))
    clean = [r for r in runs if not r.flags]
    assert measured(result.rows) == measured(jobs_study.analyse(clean))
    assert all(r.flagged == () and INCLUDED_FLAGGED not in r.detail for r in result.rows)
    document = json.loads((tmp_path / "jobs" / "jobs.json").read_text())
    assert document["include_flagged"] is False
    listed = {f"{r['condition']}-seed{r['seed']}": r for r in document["runs"]}
    assert listed["all-seed1"]["flags"] == [f"fidelity degraded: {CPU}"]
    assert listed["all-seed1"]["judged"] is False and listed["all-seed0"]["judged"] is True
    assert listed["dense-seed2"]["flags"][0].startswith("partial")
    assert "note: all-seed1: flagged, and left out of every statistic" in result.text
    page = (tmp_path / "jobs" / "report.html").read_text()
    assert "flagged, and left out of every measure: all-seed1 (fidelity degraded" in page

    included = jobs_study.write_study(
        runs, tmp_path / "with", Path("two.yaml"), include_flagged=True
    )
    assert measured(included.rows) != measured(result.rows)
    for row in included.rows:
        assert f"; {INCLUDED_FLAGGED}: " in row.detail
        assert [f.split(" (")[0] for f in row.flagged] == ["dense-seed2", "all-seed1"]
    document = json.loads((tmp_path / "with" / "jobs.json").read_text())
    assert document["include_flagged"] is True
    assert all(len(m["flagged_runs_judged"]) == 2 for m in document["metrics"])


def test_the_jobs_study_with_every_together_run_flagged_is_not_measurable(tmp_path: Path) -> None:
    runs = jobs_runs(tmp_path / "jobs")
    for run in runs:
        if run.condition == jobs_study.ALL:
            flag(run.folder)
    runs = [jobs_study._loaded(r.condition, r.seed, r.folder) for r in runs]
    rows = jobs_study.analyse(runs)
    assert rows and all(r.effect == "not measurable" for r in rows)
    assert all(
        r.detail.startswith("every all run is flagged and left out: all-seed0") for r in rows
    )


def test_the_jobs_command_takes_include_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def run_study(_scenario: Path, _out: Path, settings: Any, **_: Any) -> Any:
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(jobs_study, "run_study", run_study)
    with pytest.raises(SystemExit):
        main(["study", "jobs", "two.yaml", "--out", "unused", "--include-flagged"])
    assert seen[0].include_flagged is True


# -- the seeds series and the sensitivity study -----------------------------------------------


def test_the_seeds_series_leaves_flagged_runs_out_of_every_estimate(tmp_path: Path) -> None:
    folders = write_repeats(
        tmp_path / "runs", "s", "moe_mix", [*NOISY_AR, STEADY_AR[0]], [*TAILED_A2A, STEADY_A2A[0]]
    )
    flag(folders[1])
    runs = [load_seed_run(f, seed) for seed, f in enumerate(folders)]
    for name in ("default", "clean", "every"):
        (tmp_path / name).mkdir()
    default = analyse_seeds(runs, tmp_path / "default")
    clean = analyse_seeds([runs[0], runs[2]], tmp_path / "clean")
    every = analyse_seeds(runs, tmp_path / "every", include_flagged=True)
    shutil.rmtree(tmp_path / "runs")  # the estimates come from what was read

    def points(result: Any) -> dict[str, Any]:
        return {
            g: {n: (e.point, e.interval) for n, e in m.items()} for g, m in result.estimates.items()
        }

    assert points(default) == points(clean) and points(every) != points(default)
    document = json.loads((tmp_path / "default" / "seeds.json").read_text())
    assert [r["judged"] for r in document["runs"]] == [True, False, True]
    assert document["runs"][1]["flags"] == [f"fidelity degraded: {CPU}"]
    assert "note: seed 1: flagged, and left out of every statistic" in default.text
    assert f"every estimate {INCLUDED_FLAGGED}: seed 1 (fidelity degraded: {CPU})" in every.text
    assert json.loads((tmp_path / "every" / "seeds.json").read_text())["include_flagged"] is True


def test_the_run_command_takes_include_flagged_with_seeds_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "scenarios/moe_mix.yaml", "--include-flagged"]) == 2
    assert "--include-flagged goes with --seeds" in capsys.readouterr().err


def test_the_sensitivity_study_does_not_measure_a_flagged_rate(tmp_path: Path) -> None:
    out = tmp_path / "default"
    result = sens.write_study(rate_runs(out), out, Path("small.yaml"))
    for row in (*result.rows, result.job):
        assert row.points[1] is None  # the degraded 200 Gb/s run: not measured
        assert "; flagged and left out: 200 Gb/s" in row.detail
    assert any(
        n.startswith("200 Gb/s") and "left out of every statistic" in n for n in result.notes
    )
    assert json.loads((out / "sensitivity.json").read_text())["runs"][1]["flags"] == [
        "fidelity degraded: no reason given"
    ]
    out = tmp_path / "included"
    included = sens.write_study(rate_runs(out), out, Path("small.yaml"), include_flagged=True)
    assert all(row.points[1] is not None for row in included.rows if row.name != "BROADCAST")
    assert all(f"; {INCLUDED_FLAGGED}: 200 Gb/s" in row.detail for row in included.rows)
    # the reference flagged: nothing is measured against it
    out = tmp_path / "reference"
    runs = rate_runs(out)
    runs[0] = runs[0].__class__(**{**runs[0].__dict__, "partial": True})
    result = sens.write_study(runs, out, Path("small.yaml"))
    assert {row.verdict for row in (*result.rows, result.job)} == {"not measured"}
    assert np.all([("400 Gb/s" in row.detail) for row in result.rows])
