"""report.html with several jobs: a run's page gets a Jobs section (placement, and per job and
collective type the collective table's columns with the job's ranks and time) when it has 2 or more
jobs and is unchanged with one; the jobs study writes its page after jobs.json and jobs.txt, with
each job's measures alone and together as the json and the txt say, the effects as badges, every
run linked, user text escaped; a page that cannot be written is a warning and the study stands."""

from __future__ import annotations

import argparse
import json
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from collectors.pages.run import render_run_report
from emulator.commands import jobs_study as jobs_command
from emulator.errors import InputError
from emulator.studies.jobs import study as jobs_study
from emulator.studies.jobs.analysis import JobsRun, MetricRow
from emulator.studies.jobs.page import render_jobs_report, write_jobs_report
from emulator.studies.jobs.study import JobsStudyResult
from emulator.studies.stats.estimates import Comparison, Estimate
from tests.unit.test_html_report import EVIL, Page, run_folder, tiny_png

# -- a run with several jobs ----------------------------------------------------------------

# summary.json's `placement` and `jobs` of a simulated two-job run (numbers from a real one)
PLACEMENT = [
    {"job": "dense", "hosts": [0, 1, 2, 3, 8, 9, 10, 11], "iterations": 2, "start_us": 0.0},
    {"job": "moe", "hosts": [12, 7, 5, 6], "iterations": 1, "start_us": 100.5},
]


def stats(busbw: float, cv: float, p50_us: float, p99_us: float, **extra: Any) -> dict[str, Any]:
    return {
        "instances": 6,
        "busbw_mean_bytes_per_s": busbw,
        "busbw_p5_bytes_per_s": busbw * 0.55,
        "busbw_cv": cv,
        "ideal_busbw_bytes_per_s": 9062500000.000008,
        "fct_p50_s": p50_us * 1e-6,
        "fct_p99_s": p99_us * 1e-6,
        "fct_max_s": p99_us * 1.2e-6,
        "cnps": 3,
        "ce_marks": 11,
        **extra,
    }


JOBS: dict[str, dict[str, Any]] = {
    "dense": {
        "ranks": 8,
        "job_time_s": 0.0002898055999999987,
        "collectives": {"ALL_REDUCE": stats(10908314061.907497, 0.0701628954, 22.09424, 39.1336)},
    },
    "moe": {
        "ranks": 4,
        "job_time_s": 0.0011565847999999881,
        "collectives": {
            "ALL_TO_ALL": stats(8048339354.2772665, 0.2020795420, 22.1, 44.6, cnps=None),
            "SEND_RECV": stats(1.5e9, 0.0, 3.25, 7.5),
        },
    },
}


def test_a_run_with_two_jobs_shows_where_each_runs_and_its_collectives(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, placement=PLACEMENT, jobs=JOBS)
    page = Page(render_run_report(folder))
    assert page.errors == [] and page.stack == []
    words = "".join(page.text)
    assert "Jobs" in words
    # the placement: hosts as ranges of consecutive hosts, in the placement's order
    assert page.row("job", "hosts") == ["job", "hosts", "iterations", "start us"]
    assert page.row("dense", "0-3,8-11") == ["dense", "0-3,8-11", "2", "0"]
    assert page.row("moe", "12,7,5-6") == ["moe", "12,7,5-6", "1", "100.5"]
    # per job and type: the collective table's columns, after the job's ranks and time
    collective_heads = page.row("collective", "instances")
    assert page.row("job", "collective") == [
        "job", "collective", "ranks", "job time ms", *collective_heads[1:]
    ]  # fmt: skip
    assert page.row("dense", "ALL_REDUCE") == [
        "dense", "ALL_REDUCE", "8", "0.290", "6", "10.91", "6.00", "0.070", "9.06", "0.022",
        "0.039", "0.047", "3", "11",
    ]  # fmt: skip
    for name, job in JOBS.items():
        for ctype, s in job["collectives"].items():
            cells = page.row(name, ctype)
            assert cells[2:4] == [str(job["ranks"]), f"{job['job_time_s'] * 1e3:.3f}"]
            assert cells[4] == str(s["instances"])
            assert cells[5] == f"{s['busbw_mean_bytes_per_s'] * 1e-9:.2f}"
            assert cells[7] == f"{s['busbw_cv']:.3f}"
            assert cells[9:11] == [f"{s['fct_p50_s'] * 1e3:.3f}", f"{s['fct_p99_s'] * 1e3:.3f}"]
            assert cells[12:] == [str(s["cnps"]) if s["cnps"] is not None else "-", "11"]


def test_a_run_with_one_job_has_the_page_it_had(tmp_path: Path) -> None:
    def without_files(text: str) -> str:  # the Files section lists summary.json's size
        return text.split("<h2>Files</h2>")[0]

    one = run_folder(tmp_path / "one", placement=PLACEMENT[:1], jobs={"dense": JOBS["dense"]})
    plain = run_folder(tmp_path / "plain")
    page = render_run_report(one)
    assert "Jobs" not in "".join(Page(page).text)
    assert without_files(page) == without_files(render_run_report(plain))


def test_job_names_are_escaped(tmp_path: Path) -> None:
    placement = [{**PLACEMENT[0], "job": EVIL}, PLACEMENT[1]]
    jobs = {EVIL: JOBS["dense"], "moe": JOBS["moe"]}
    text = render_run_report(run_folder(tmp_path, placement=placement, jobs=jobs))
    assert "<script" not in text.lower() and "&lt;script&gt;" in text
    page = Page(text)
    assert page.row(EVIL, "0-3,8-11")[2:] == ["2", "0"]
    assert page.row(EVIL, "ALL_REDUCE")[2:4] == ["8", "0.290"]


# -- the jobs study ---------------------------------------------------------------------------


def comparison(
    alone: tuple[float | None, tuple[float, float] | None],
    together: tuple[float | None, tuple[float, float] | None],
    ratio: float | None,
    ratio_interval: tuple[float, float] | None,
) -> Comparison:
    units = 1 if alone[1] is None else 12
    return Comparison(
        Estimate(*alone, 2, units), Estimate(*together, 2, units), ratio, ratio_interval
    )


def metric_rows() -> list[MetricRow]:
    """What emulator.studies.jobs.analysis.analyse would find: the dense job's busbw lower and its tail
    longer together (shown), its CV from 0 (an infinite ratio: not shown), its time from one unit
    a side (not measurable); a job named like markup."""
    return [
        MetricRow(
            "dense", "ALL_REDUCE", "busbw_mean",
            comparison((11.6736e9, (11.6012e9, 11.7321e9)), (10.9083e9, (10.1429e9, 11.6737e9)),
                       0.93442, (0.86912, 0.99871)),
            "shown",
        ),
        MetricRow(
            "dense", "ALL_REDUCE", "busbw_cv",
            comparison((0.0, (0.0, 0.0)), (0.07016, (0.0, 0.07016)), None, (0.0, float("inf"))),
            "not shown",
        ),
        MetricRow(
            "dense", "ALL_REDUCE", "fct_p99",
            comparison((22.52e-6, (22.48e-6, 22.57e-6)), (39.13e-6, (38.51e-6, 39.14e-6)),
                       1.74312, (1.71304, 1.74306)),
            "shown",
        ),
        MetricRow(
            "dense", "job", "job_time",
            comparison((0.26912e-3, None), (0.28981e-3, None), 1.07688, None),
            "not measurable",
        ),
        MetricRow(
            EVIL, "ALL_TO_ALL", "fct_p50",
            comparison((22.12e-6, (22.07e-6, 22.16e-6)), (22.14e-6, (22.08e-6, 22.19e-6)),
                       1.00090, (0.99732, 1.00412)),
            "not shown",
        ),
    ]  # fmt: skip


def runs(out: Path) -> list[JobsRun]:
    """Two repeats of "all" and "dense" inside the study (only all-seed0 and dense-seed1 with a
    page), dense-seed0 partial and degraded; the other job's runs reused from elsewhere."""
    found = []
    for seed in (0, 1):
        for condition in ("all", "dense"):
            folder = jobs_study.run_folder(out, condition, seed)
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text("{}")
            if (condition, seed) in {("all", 0), ("dense", 1)}:
                (folder / "report.html").write_text("")
            bad = (condition, seed) == ("dense", 0)
            found.append(JobsRun(condition, seed, folder, "degraded" if bad else "ok", bad))
        found.append(JobsRun(EVIL, seed, Path(f"/elsewhere/moe-seed{seed}"), "ok", False))
    return found


def write_study(
    out: Path, monkeypatch: pytest.MonkeyPatch, rows: Sequence[MetricRow] | None = None
) -> JobsStudyResult:
    """emulator.studies.jobs.study.write_study with these rows for its analysis (no tables to read)."""
    found = metric_rows() if rows is None else rows
    monkeypatch.setattr(jobs_study, "analyse", lambda *_: tuple(found))
    return jobs_study.write_study(runs(out), out, Path("scenarios/two_tenant.yaml"))


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, JobsStudyResult]:
    out = tmp_path / "study"
    return out, write_study(out, monkeypatch)


LABELS = {
    "busbw_mean": ("busbw mean GB/s", 1e-9, ".2f"),
    "busbw_cv": ("busbw CV", 1.0, ".3f"),
    "fct_p50": ("FCT p50 us", 1e6, ".1f"),
    "fct_p99": ("FCT p99 us", 1e6, ".1f"),
    "job_time": ("job time ms", 1e3, ".3f"),
}


def shown(value: Any, scale: float, spec: str) -> str:
    return "-" if value is None else format(value * scale, spec)


def shown_interval(interval: Any, scale: float, spec: str) -> str:
    if interval is None:
        return "-"
    return f"[{shown(interval[0], scale, spec)}, {shown(interval[1], scale, spec)}]"


def test_the_study_writes_its_page_with_the_json_s_numbers(
    study: tuple[Path, JobsStudyResult],
) -> None:
    out, result = study
    assert result.report == out / "report.html"
    assert stat.S_IMODE(result.report.stat().st_mode) == 0o600
    text = result.report.read_text()
    assert "<script" not in text.lower() and "http" not in text
    page = Page(text)
    assert page.errors == [] and page.stack == []
    doc = json.loads((out / "jobs.json").read_text())
    assert len(doc["metrics"]) == 5
    for m in doc["metrics"]:
        label, scale, spec = LABELS[m["metric"]]
        cells = page.row(m["job"], m["collective"], label)
        expected = []
        for side, k, f in (("alone", scale, spec), ("together", scale, spec)):
            expected += [shown(m[side]["value"], k, f), shown_interval(m[side]["interval"], k, f)]
        ratio = m["together_over_alone"]
        expected += [shown(ratio["value"], 1, ".3f"), shown_interval(ratio["interval"], 1, ".3f")]
        assert cells[3:] == [*expected, m["effect_of_the_others"]]
    # by hand, and as jobs.txt prints them (point, then interval)
    busbw = page.row("dense", "ALL_REDUCE", "busbw mean GB/s")
    assert busbw[3:] == [
        "11.67", "[11.60, 11.73]", "10.91", "[10.14, 11.67]", "0.934", "[0.869, 0.999]", "shown"
    ]  # fmt: skip
    assert page.row("dense", "ALL_REDUCE", "busbw CV")[7:9] == ["-", "[0.000, -]"]  # inf: null
    assert page.row("dense", "job", "job time ms")[3:] == [
        "0.269", "-", "0.290", "-", "1.077", "-", "not measurable"
    ]  # fmt: skip
    # every row with finite intervals as jobs.txt prints it (an infinite bound: txt "inf")
    txt = [re.split(r"\s{2,}", line) for line in result.text.splitlines()]
    finite = [r for r in page.rows if r[0] in ("dense", EVIL) and len(r) == 10 and "-" not in r[8]]
    assert len(finite) == 3
    for row in finite:
        joined = [" ".join(c for c in row[k : k + 2] if c != "-") for k in (3, 5, 7)]
        assert [*row[:3], *joined, row[9]] in txt, row


def test_the_page_has_the_effects_the_runs_and_the_files(
    study: tuple[Path, JobsStudyResult],
) -> None:
    out, result = study
    text = (out / "report.html").read_text()
    page = Page(text)
    words = "".join(page.text)
    assert "Study: jobs" in words
    assert "scenarioscenarios/two_tenant.yaml" in words  # the facts: term, then value
    assert f"jobsdense, {EVIL}" in words and "repeats2" in words
    # a verdict per job, its effects as badges of their own tone
    assert "dense: effect of the other jobs: shown in 2 of 4 measures" in words
    assert f"{EVIL}: effect of the other jobs: shown in 0 of 1 measures" in words
    assert text.count('<span class="badge bad">shown</span>') == 2
    assert text.count('<span class="badge good">not shown</span>') == 2
    assert text.count('<span class="badge warn">not measurable</span>') == 1
    (footer,) = [line for line in result.text.splitlines() if line.startswith("effect:")]
    assert footer in words  # what "effect" means, as jobs.txt says it
    assert f"95% intervals: {jobs_study.BOOTSTRAP_METHOD}" in words
    # each run: its page where it has one, else its folder; one outside the study named only
    assert page.hrefs[:4] == [
        "runs/all-seed0/report.html",
        "runs/dense-seed0/",
        "runs/all-seed1/",
        "runs/dense-seed1/report.html",
    ]
    assert page.row("all", "0") == ["all", "0", "runs/all-seed0", "no", "ok"]
    assert page.row("dense", "0") == ["dense", "0", "runs/dense-seed0", "yes", "degraded"]
    assert page.row(EVIL, "1") == [EVIL, "1", "/elsewhere/moe-seed1", "no", "ok"]
    assert (
        "flagged, and left out of every measure: dense-seed0 (partial: the run did not finish "
        "(interrupted or failed); fidelity degraded: no reason given)"
    ) in words
    assert page.hrefs[4:] == ["jobs.json", "jobs.txt"]
    assert page.srcs == []  # the study has no plots
    assert "jobs study of scenarios/two_tenant.yaml" in words  # the txt, folded in
    assert "<script" not in text.lower() and "&lt;script&gt;" in text


def test_a_plot_the_study_has_is_on_its_page(study: tuple[Path, JobsStudyResult]) -> None:
    out, _ = study
    (out / "plots").mkdir()
    (out / "plots" / "jobs.png").write_bytes(tiny_png((0, 128, 0)))
    page = Page(render_jobs_report(out))
    assert page.alts == ["jobs"] and page.srcs[0].startswith("data:image/png;base64,")


def test_a_page_that_cannot_be_written_is_a_warning_and_the_study_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    (out / "report.html").mkdir(parents=True)  # cannot be replaced by a file
    result = write_study(out, monkeypatch)
    assert result.report is None
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {out / 'report.html'}: not written (IsADirectoryError")
    assert len(json.loads((out / "jobs.json").read_text())["metrics"]) == 5
    assert (out / "jobs.txt").read_text() == result.text + "\n"


def test_the_command_prints_the_page_after_the_tables_not_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"

    def run_study(_scenario: Path, out_dir: Path, *_: Any, **__: Any) -> JobsStudyResult:
        return write_study(out_dir, monkeypatch)

    monkeypatch.setattr(jobs_study, "run_study", run_study)
    parser = argparse.ArgumentParser()
    jobs_command.add_arguments(parser)
    main = jobs_command.main
    assert main(parser.parse_args(["two.yaml", "--out", str(out)])) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == f"report: {out / 'report.html'}"
    assert printed[:-1] == (out / "jobs.txt").read_text().splitlines()  # the text, then the page
    as_json = parser.parse_args(["two.yaml", "--out", str(tmp_path / "other"), "--json"])
    assert main(as_json) == 0
    printed_json = capsys.readouterr().out
    assert json.loads(printed_json)["study"] == "jobs" and "report:" not in printed_json


def test_missing_or_bad_json_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "jobs.json"))):
        write_jobs_report(tmp_path)
    (tmp_path / "jobs.json").write_text("[]")
    with pytest.raises(InputError, match="expected a JSON object"):
        render_jobs_report(tmp_path)
    assert not (tmp_path / "report.html").exists()
