"""A ratio over a CV at its floor (issue 33): the jobs study printed an All-Reduce busbw CV ratio
of 471.6 [0.141, 18970234955.944] with the CV alone 0.000. Where the alone interval reaches down
to what the runs' time stamps can resolve (emulator.studies.stats.units.timing_resolution_s
and busbw_cv_floor), both studies give the difference mixed - alone with its interval and say the
ratio is undefined, in their checks, their text, their json and their page."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from emulator.studies.interference.checks import check_allreduce_cv
from emulator.studies.interference.study import analyse
from emulator.studies.interference.text import checks_table
from emulator.studies.jobs import study as jobs_study
from emulator.studies.stats.formatting import RATIO_UNDEFINED
from emulator.studies.stats.units import busbw_cv_floor, timing_resolution_s
from emulator.studies.stats.verdict import StudyThresholds
from tests.unit.test_study import STEADY_A2A, TAILED_A2A, write_repeats
from tests.unit.test_study_stats import ar_runs, with_cv
from tests.unit.test_study_verdict_rule import JOB, write_job_run

THRESHOLDS = StudyThresholds()
Z = np.random.default_rng(5).standard_normal(10)
STEADY = [1.1] * 10
TINY = [1.1 * (1 + 1e-12 * z) for z in Z]  # a CV of about 1e-12: float noise, not variation
NOISY = [1.1 * (1 + 0.1 * z) for z in Z]  # a CV of about 0.1


def test_an_alone_cv_of_exactly_0_gives_the_difference_and_no_ratio() -> None:
    alone = ar_runs("allreduce_only", np.full(10, 40e9), np.full(10, 40e9))
    mixed = ar_runs("mixed", with_cv(0.1, 10, 1), with_cv(0.1, 10, 2))
    check = check_allreduce_cv(alone, mixed, THRESHOLDS)
    assert check.alone == 0.0 and check.mixed == pytest.approx(0.1)
    assert check.ratio is None and check.ratio_ci is None
    assert check.ratio_undefined is not None and "floor" in check.ratio_undefined
    assert check.difference == pytest.approx(0.1)
    assert check.difference_ci is not None and 0.0 < check.difference_ci[0] <= 0.1
    # from nothing to a CV above cv_min, surely above it: shown, on the difference
    assert check.verdict == "shown" and "mixed - alone 0.1 [" in check.detail
    line = checks_table([check]).splitlines()[-1]
    assert f"{RATIO_UNDEFINED}; difference +0.1 [" in line and "inf" not in line


def write_study(base: Path, alone: list[float], include_mixed_noise: bool = True) -> Path:
    """An interference study over results folders: 2 repeats a role, the All-Reduce alone with
    the slowdowns `alone`, mixed with a CV of about 0.1 (TDF 20: a floor of 1.25e-6)."""
    mixed_ar = NOISY if include_mixed_noise else STEADY
    folders = {
        "allreduce_only": write_repeats(base, "ar", "allreduce_only", ar=[alone, alone]),
        "alltoall_only": write_repeats(base, "a2a", "alltoall_only", a2a=STEADY_A2A),
        "mixed": write_repeats(base, "mix", "moe_mix", [mixed_ar, mixed_ar], TAILED_A2A),
    }
    out = base / "study"
    analyse(folders, out, THRESHOLDS)
    return out


def test_an_alone_cv_of_1e_12_is_below_the_floor_and_no_ratio_is_printed(tmp_path: Path) -> None:
    out = write_study(tmp_path, TINY)
    document = json.loads((out / "study.json").read_text())
    cv = next(c for c in document["checks"] if c["name"] == "allreduce_busbw_cv")
    assert 0 < cv["alone"] < 1e-11  # the old ratio: about 0.1 / 1e-12 = 1e11
    assert cv["ratio"] is None and cv["ratio_ci"] is None and cv["ratio_undefined"]
    assert cv["numbers"]["alone_cv_floor"] == pytest.approx(2 * (1e-9 / 20) / (80e-6 * 1.1))
    assert cv["difference"] == pytest.approx(cv["mixed"] - cv["alone"])
    low, high = cv["difference_ci"]
    assert 0 < low <= cv["difference"] <= high
    assert cv["verdict"] == "shown"
    text = (out / "study.txt").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("allreduce_busbw_cv ")]
    assert f"{RATIO_UNDEFINED}; difference +" in row
    page = (out / "report.html").read_text()
    assert '<td>mixed/alone</td><td class="num">undefined</td>' in page
    assert '<td>mixed - alone</td><td class="num">+0.0' in page
    # a steady mixed CV from the floor is not an effect
    steady = json.loads((write_study(tmp_path / "calm", TINY, False) / "study.json").read_text())
    assert steady["checks"][0]["ratio"] is None and steady["checks"][0]["verdict"] == "not shown"


def test_the_jobs_study_gives_the_difference_where_the_alone_cv_is_at_its_floor(
    tmp_path: Path,
) -> None:
    out = tmp_path / "jobs"
    runs = []
    for seed in (0, 1):
        for condition, slowdowns in ((jobs_study.ALL, NOISY), (JOB, TINY)):
            folder = write_job_run(jobs_study.run_folder(out, condition, seed), slowdowns)
            runs.append(jobs_study._loaded(condition, seed, folder))
    result = jobs_study.write_study(runs, out, Path("two.yaml"))
    (row,) = [r for r in result.rows if r.metric == "busbw_cv"]
    c = row.comparison
    assert c.alone.point is not None and c.alone.point < 1e-11
    assert c.ratio is None and c.ratio_interval is None and c.ratio_undefined is not None
    assert c.difference == pytest.approx(c.mixed.point - c.alone.point)
    assert row.effect == "shown"
    (line,) = [x for x in result.text.splitlines() if x.startswith(JOB) and "busbw CV" in x]
    assert c.difference is not None and c.difference_interval is not None
    low, high = c.difference_interval
    shown = f"{RATIO_UNDEFINED}; difference +{c.difference:.3f} [{low:.3f}, {high:.3f}]"
    assert shown in line and "inf" not in line
    metrics = json.loads((out / "jobs.json").read_text())["metrics"]
    (metric,) = [m for m in metrics if m["metric"] == "busbw_cv"]
    assert metric["together_over_alone"] == {"value": None, "interval": None}
    assert metric["ratio_undefined"] and metric["together_minus_alone"]["interval"][0] > 0
    page = (out / "report.html").read_text()
    assert f"undefined; difference {c.difference:.3f}</td>" in page
    assert f"[{low:.3f}, {high:.3f}]" in page


def test_the_floor_is_the_timing_resolution_of_the_stamps() -> None:
    # the emulated engine: perf_counter's nanosecond in wall time, divided by the TDF
    assert timing_resolution_s({"backend": "netns", "tdf": 16000.0}) == pytest.approx(1e-9 / 16e3)
    # the simulator: an ulp of the simulated time per event, summed over the run's events. Two
    # instances of a simulated two_tenant All-Reduce alone that took the same time were stamped
    # 2.5e-14 s apart (durations from the run's collectives.parquet): within it
    sim = {
        "backend": "sim",
        "time": "simulated",
        "tdf": 1.0,
        "engine": {"events": 2439866, "simulated_s": 0.0105},
    }
    durations = [0.0024061547600013463, 0.0024061547599764747]
    resolution = timing_resolution_s(sim)
    assert abs(durations[0] - durations[1]) < resolution < 1e-11
    floor = busbw_cv_floor(durations, resolution)
    assert floor == pytest.approx(2 * resolution / min(durations))
    # their busbw CV is below the floor; a real variation alone, far above it
    busbw = 64e6 / np.array(durations)
    assert busbw.std() / busbw.mean() < floor < 1e-4
    assert busbw_cv_floor([], resolution) == 0.0


def test_a_real_alone_cv_keeps_its_ratio(tmp_path: Path) -> None:
    alone = [1.1 * (1 + 0.01 * z) for z in Z]  # CV about 0.01, far above the floor
    out = write_study(tmp_path, alone)
    cv = json.loads((out / "study.json").read_text())["checks"][0]
    assert cv["ratio_undefined"] is None and cv["ratio"] == pytest.approx(10, rel=0.3)
    assert cv["ratio_ci"][0] > 1 and cv["verdict"] == "shown"


def test_a_run_without_its_engine_events_falls_back_to_the_clock() -> None:
    assert timing_resolution_s({"backend": "sim"}) == 1e-9
    assert timing_resolution_s({}) == 1e-9
