"""One verdict rule for every study (issue 33): the jobs study judges what the other jobs do to a
job with the interference study's rule (emulator.studies.stats.verdict.judge), so one repeat a side is "not
measurable" however far beyond 1 the interval of its ratio lies (one run's interval leaves out
run-to-run variation), and the same comparison with enough repeats is "shown"."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from collectors.records import CollectiveMeta, FlowMeta, RecordBuilder
from collectors.results import ResultsWriter
from collectors.summary import Fidelity, RunMeta
from collectors.tables import RunTables
from emulator.events import FlowFinished, FlowStarted
from emulator.studies.jobs import study as jobs_study
from emulator.studies.stats.verdict import DEFAULT_THRESHOLDS

AR_BYTES = 4_000_000
AR_IDEAL_S = AR_BYTES / (400e9 / 8)  # a 2-rank ring moves S per rank: busbw = S / t
JOB = "dense"
# Alone the job's All-Reduce runs near its plan; together with the other job at half the busbw.
ALONE = (1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00, 1.01)
TOGETHER = tuple(2.0 * s for s in ALONE)


def write_job_run(
    folder: Path,
    slowdowns: Sequence[float],
    fidelity: Fidelity | None = None,
    partial: bool = False,
    tdf: float = 20.0,
) -> Path:
    """A results folder of one run of the job: one 2-rank All-Reduce per slowdown (time = the
    plan's x slowdown), back to back."""
    flows: list[FlowMeta] = []
    collectives: list[CollectiveMeta] = []
    events: list[FlowStarted | FlowFinished] = []
    t = 0.0
    for i, slowdown in enumerate(slowdowns):
        cid = len(collectives)
        collectives.append(
            CollectiveMeta(cid, "ALL_REDUCE", "dp", 2, i, AR_BYTES, AR_IDEAL_S, job=JOB)
        )
        end = t + AR_IDEAL_S * slowdown
        for src in range(2):
            fid = len(flows)
            flows.append(FlowMeta(fid, cid, "ALL_REDUCE", i, 0, src, 1 - src, src, 49152, 1, JOB))
            events += [FlowStarted(fid, t), FlowFinished(fid, end, packets=1)]
        t = end
    builder = RecordBuilder(flows, collectives)
    for event in sorted(events, key=lambda e: e.time_s):
        if isinstance(event, FlowStarted):
            builder.flow_started(event)
        else:
            builder.flow_finished(event)
    tables = RunTables.from_rows(builder.flow_records(), builder.collective_records())
    meta = RunMeta("two", tdf, "ebpf", "clos", fidelity or Fidelity())
    ResultsWriter(folder, render_plots=False).write(meta, tables, partial=partial)
    return folder


def job_runs(
    out: Path, alone: Sequence[Sequence[float]], together: Sequence[Sequence[float]]
) -> list[jobs_study.JobsRun]:
    """Repeat k: the job alone with alone[k], all together with together[k] (seed k)."""
    runs = []
    for seed, (a, m) in enumerate(zip(alone, together, strict=True)):
        for condition, slowdowns in ((jobs_study.ALL, m), (JOB, a)):
            folder = write_job_run(jobs_study.run_folder(out, condition, seed), slowdowns)
            runs.append(jobs_study._loaded(condition, seed, folder))
    return runs


def rows(runs: Sequence[jobs_study.JobsRun]) -> dict[str, jobs_study.MetricRow]:
    return {row.metric: row for row in jobs_study.analyse(runs) if row.collective == "ALL_REDUCE"}


def test_one_repeat_a_side_is_not_measurable_however_far_the_interval_lies(
    tmp_path: Path,
) -> None:
    one = rows(job_runs(tmp_path, [ALONE], [TOGETHER]))
    busbw, p99 = one["busbw_mean"], one["fct_p99"]
    # the interval of one run's instances lies far beyond 1 on the worse side...
    assert busbw.comparison.ratio_interval is not None and busbw.comparison.ratio_interval[1] < 0.6
    assert p99.comparison.ratio_interval is not None and p99.comparison.ratio_interval[0] > 1.9
    # ...and still one repeat a side judges nothing, as in the interference study
    assert busbw.effect == "not measurable"
    assert p99.effect == "not measurable"
    needed = f"{DEFAULT_THRESHOLDS.repeats_min} repeats a side needed to judge"
    assert "does not include run-to-run variation" in busbw.detail and needed in busbw.detail


def test_the_same_comparison_with_enough_repeats_is_shown(tmp_path: Path) -> None:
    repeats = DEFAULT_THRESHOLDS.repeats_min
    shifted = [[s * (1 + 0.01 * k) for s in ALONE] for k in range(repeats)]
    judged = rows(job_runs(tmp_path, shifted, [[2 * s for s in a] for a in shifted]))
    assert judged["busbw_mean"].effect == "shown"
    assert judged["fct_p99"].effect == "shown"
    assert "at or below 0.95 and the interval below 1" in judged["busbw_mean"].detail
    # the job time: one unit a repeat, so 2 repeats are 2 units: judged too
    same = jobs_study.analyse(job_runs(tmp_path / "same", shifted, shifted))
    (time,) = [r for r in same if r.metric == "job_time"]
    assert time.effect == "not shown" and time.comparison.alone.units == repeats


@pytest.mark.parametrize("metric", ["busbw_mean", "busbw_cv", "fct_p50", "fct_p99"])
def test_every_metric_of_one_repeat_is_not_measurable(tmp_path: Path, metric: str) -> None:
    assert rows(job_runs(tmp_path, [ALONE], [TOGETHER]))[metric].effect == "not measurable"
