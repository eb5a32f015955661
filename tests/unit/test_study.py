"""The interference study on small results folders written with known numbers: the verdicts follow
the numbers (shown, not shown, not measurable), the plots have data drawn, the CLI prints and
exits 0 either way, and the runs go through the run pipeline with the study's options."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from collectors.events import FlowFinished, FlowStarted
from collectors.records import CollectiveMeta, FlowMeta, RecordBuilder
from collectors.results import ResultsWriter
from collectors.summary import Fidelity, RunMeta
from collectors.tables import RunTables
from emulator.cli import main
from emulator.study import ROLES, StudyThresholds, analyse, run_study, run_with_pipeline

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_TEXT = (ROOT / "scenarios" / "moe_mix.yaml").read_text()  # 400 Gb/s host links
LINE_BYTES_PER_S = 400e9 / 8
AR_BYTES = 4_000_000
AR_IDEAL_S = AR_BYTES / LINE_BYTES_PER_S  # a 2-rank ring moves S per rank: busbw = S / t
A2A_SHARE_BYTES = 100_000


def write_run(
    folder: Path,
    scenario: str,
    ar_slowdowns: Sequence[float] = (),
    a2a_fct_s: Sequence[Sequence[float]] = (),
    a2a_cnps: int = 0,
    fidelity: Fidelity | None = None,
    tdf: float = 20.0,
    ar_groups: int = 1,
) -> Path:
    """A results folder: one 2-rank All-Reduce per slowdown (time = ideal x slowdown; instance i
    in process group i mod ar_groups), and one 4-rank All-to-All per list of 12 flow completion
    times."""
    flows: list[FlowMeta] = []
    collectives: list[CollectiveMeta] = []
    events: list[FlowStarted | FlowFinished] = []
    t = 0.0
    for i, slowdown in enumerate(ar_slowdowns):
        cid = len(collectives)
        group = "dp" if ar_groups == 1 else f"dp{i % ar_groups}"
        collectives.append(CollectiveMeta(cid, "ALL_REDUCE", group, 2, i, AR_BYTES, AR_IDEAL_S))
        end = t + AR_IDEAL_S * slowdown
        for src in range(2):
            fid = len(flows)
            flows.append(FlowMeta(fid, cid, "ALL_REDUCE", i, 0, src, 1 - src, src, 49152, 1))
            events += [FlowStarted(fid, t), FlowFinished(fid, end, packets=1)]
        t = end
    for i, fcts in enumerate(a2a_fct_s):
        cid = len(collectives)
        collectives.append(CollectiveMeta(cid, "ALL_TO_ALL", "ep", 4, i, 4 * A2A_SHARE_BYTES, 3e-6))
        pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
        assert len(fcts) == len(pairs)
        for (src, dst), fct in zip(pairs, fcts, strict=True):
            fid = len(flows)
            flows.append(
                FlowMeta(fid, cid, "ALL_TO_ALL", i, 0, src, dst, src, 50000, A2A_SHARE_BYTES)
            )
            events += [
                FlowStarted(fid, t),
                FlowFinished(fid, t + fct, packets=25, cnps_sent=a2a_cnps, ce_marks=a2a_cnps),
            ]
        t += max(fcts)
    builder = RecordBuilder(flows, collectives)
    for event in sorted(events, key=lambda e: e.time_s):
        if isinstance(event, FlowStarted):
            builder.flow_started(event)
        else:
            builder.flow_finished(event)
    tables = RunTables.from_rows(builder.flow_records(), builder.collective_records())
    meta = RunMeta(scenario, tdf, "ebpf", "clos", fidelity or Fidelity())
    ResultsWriter(folder, scenario_text=SCENARIO_TEXT, render_plots=False).write(
        meta, tables, partial=False
    )
    return folder


STEADY_AR = [1.10, 1.11, 1.09, 1.10, 1.12, 1.10, 1.11, 1.09]  # ~91% of ideal, CV < 0.01
NOISY_AR = [1.1, 2.0, 1.3, 3.0, 1.2, 2.5, 1.1, 1.8]  # CV ~ 0.35
STEADY_A2A = [[10e-6 + k * 0.1e-6 for k in range(12)] for _ in range(4)]  # p99/p50 ~ 1.05
TAILED_A2A = [[10e-6 + k * 0.1e-6 for k in range(10)] + [60e-6, 90e-6] for _ in range(4)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    return {
        "ar_alone": write_run(base / "ar", "allreduce_only", ar_slowdowns=STEADY_AR),
        "a2a_alone": write_run(base / "a2a", "alltoall_only", a2a_fct_s=STEADY_A2A, a2a_cnps=1),
        "mixed_interfering": write_run(base / "mixed", "moe_mix", NOISY_AR, TAILED_A2A, a2a_cnps=7),
        "mixed_calm": write_run(base / "calm", "moe_mix", STEADY_AR, STEADY_A2A, a2a_cnps=1),
        "ar_slow": write_run(
            base / "slow", "allreduce_only", ar_slowdowns=[2 * s for s in STEADY_AR]
        ),
        "mixed_no_ar": write_run(base / "no_ar", "moe_mix", a2a_fct_s=TAILED_A2A),
    }


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


def colored_pixels(path: Path) -> int:
    """Pixels of a saturated color: the plotted lines and bars (axes, text and grid are gray)."""
    image = imread(path)[..., :3]
    return int(np.count_nonzero(image.max(axis=-1) - image.min(axis=-1) > 0.3))


def test_interference_present_is_shown_with_its_numbers(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    result = analyse(
        {
            "allreduce_only": folders["ar_alone"],
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_interfering"],
        },
        tmp_path,
    )
    checks = by_name(result)
    cv = checks["allreduce_busbw_cv"]
    assert cv.verdict == "shown" and cv.shown
    assert cv.alone == pytest.approx(
        float(np.std(1 / np.array(STEADY_AR)) / np.mean(1 / np.array(STEADY_AR)))
    )
    assert cv.mixed == pytest.approx(
        float(np.std(1 / np.array(NOISY_AR)) / np.mean(1 / np.array(NOISY_AR)))
    )
    assert cv.ratio == pytest.approx(cv.mixed / cv.alone) and cv.ratio > 10
    tail = checks["alltoall_fct_tail"]
    assert tail.shown
    # nearest rank over 48 flows: p50 is the 24th, p99 the 48th smallest
    assert tail.alone == pytest.approx(11.1e-6 / 10.5e-6)
    assert tail.mixed == pytest.approx(90e-6 / 10.5e-6)
    line = checks["allreduce_alone_line_rate"]
    assert line.shown
    busbw = LINE_BYTES_PER_S / np.array(STEADY_AR)
    assert line.numbers["busbw_mean_bytes_per_s"] == pytest.approx(float(busbw.mean()))
    assert line.alone == pytest.approx(float(busbw.mean()) / LINE_BYTES_PER_S)
    assert line.numbers["line_rate_bytes_per_s"] == pytest.approx(LINE_BYTES_PER_S)
    assert result.notes == ()
    # study.json says the same, with a boolean per check
    document = json.loads((tmp_path / "study.json").read_text())
    assert [c["shown"] for c in document["checks"]] == [True, True, True, True]
    # one process group: within-group CV is the CV over every instance
    assert checks["allreduce_busbw_cv_within_groups"].mixed == pytest.approx(cv.mixed)
    assert document["all_shown"] is True
    assert document["checks"][0]["alone"] == pytest.approx(cv.alone)
    assert document["runs"]["mixed"]["cnps_by_collective"] == {
        "ALL_REDUCE": 0,
        "ALL_TO_ALL": 48 * 7,
    }
    assert document["runs"]["alltoall_only"]["cnps_by_collective"] == {"ALL_TO_ALL": 48}
    assert document["thresholds"] == {
        "cv_ratio_min": 1.25,
        "cv_min": 0.02,
        "tail_ratio_min": 1.25,
        "line_rate_ratio_min": 0.8,
    }
    assert (tmp_path / "study.txt").read_text().strip() == result.text.strip()


def test_plots_exist_and_have_data_drawn(folders: dict[str, Path], tmp_path: Path) -> None:
    result = analyse(
        {
            "allreduce_only": folders["ar_alone"],
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_interfering"],
        },
        tmp_path,
    )
    names = sorted(p.name for p in result.plots)
    assert names == [
        "compare_busbw_per_iteration.png",
        "compare_cnps.png",
        "compare_fct_cdf.png",
    ]
    for path in result.plots:
        assert path.parent == tmp_path / "plots" and path.stat().st_size > 10_000
        assert colored_pixels(path) > 500, path.name


def test_no_interference_is_reported_as_not_shown(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    code = main(
        [
            "study",
            "interference",
            "--reuse",
            str(folders["ar_slow"]),
            str(folders["a2a_alone"]),
            str(folders["mixed_calm"]),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    document = json.loads((out / "study.json").read_text())
    verdicts = {c["name"]: c["verdict"] for c in document["checks"]}
    assert verdicts == {
        "allreduce_busbw_cv": "not shown",
        "alltoall_fct_tail": "not shown",
        "allreduce_alone_line_rate": "not shown",
        "allreduce_busbw_cv_within_groups": "not shown",
    }
    assert document["all_shown"] is False
    line = document["checks"][2]
    assert (
        line["alone"] == pytest.approx(0.5 * float(np.mean(1 / np.array(STEADY_AR))))
        and line["shown"] is False
    )
    tail = document["checks"][1]
    assert tail["ratio"] == pytest.approx(1.0)
    # The printed table says it too, with the numbers.
    rows = {r.split()[0]: r for r in text.splitlines() if r.startswith(("allreduce_", "alltoall_"))}
    assert rows["allreduce_alone_line_rate"].endswith("not shown")
    assert f" {line['alone']:.4g} " in rows["allreduce_alone_line_rate"]
    assert rows["alltoall_fct_tail"].endswith("not shown")
    assert "plots: " in text


def test_missing_collective_is_not_measurable(folders: dict[str, Path], tmp_path: Path) -> None:
    result = analyse(
        {
            "allreduce_only": folders["ar_alone"],
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_no_ar"],
        },
        tmp_path,
    )
    checks = by_name(result)
    assert checks["allreduce_busbw_cv"].verdict == "not measurable"
    assert not checks["allreduce_busbw_cv"].shown
    assert "mixed run" in checks["allreduce_busbw_cv"].detail
    assert checks["alltoall_fct_tail"].verdict == "shown"


def test_thresholds_decide_and_notes_flag_fidelity(tmp_path: Path) -> None:
    ar = write_run(tmp_path / "ar", "a", ar_slowdowns=STEADY_AR, tdf=10.0)
    a2a = write_run(tmp_path / "a2a", "b", a2a_fct_s=STEADY_A2A)
    mixed = write_run(
        tmp_path / "mix",
        "c",
        NOISY_AR,
        TAILED_A2A,
        fidelity=Fidelity("degraded", ("CPU saturated in 40% of samples",)),
    )
    strict = StudyThresholds(cv_ratio_min=1000.0, tail_ratio_min=1000.0, line_rate_ratio_min=0.95)
    result = analyse(
        {"allreduce_only": ar, "alltoall_only": a2a, "mixed": mixed}, tmp_path / "s", strict
    )
    assert [c.verdict for c in result.checks] == ["not shown"] * 4
    assert any("mixed: fidelity degraded (CPU saturated" in n for n in result.notes)
    assert any("different time dilation factors" in n for n in result.notes)


def test_run_study_runs_the_three_scenarios_through_the_runner(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    calls: list[tuple[Path, Path, float | None, bool]] = []
    source = {
        "allreduce_only": folders["ar_alone"],
        "alltoall_only": folders["a2a_alone"],
        "mixed": folders["mixed_interfering"],
    }

    def runner(scenario: Path, out_dir: Path, tdf: float | None, progress: bool) -> Path:
        calls.append((scenario, out_dir, tdf, progress))
        role = out_dir.name
        return source[role]

    mixed_yaml = tmp_path / "my_mix.yaml"
    mixed_yaml.write_text(SCENARIO_TEXT)
    out = tmp_path / "study"
    result = run_study(
        out, scenarios={"mixed": mixed_yaml}, tdf=25.0, progress=False, runner=runner
    )
    assert calls == [
        (ROOT / "scenarios" / "allreduce_only.yaml", out / "runs" / "allreduce_only", 25.0, False),
        (ROOT / "scenarios" / "alltoall_only.yaml", out / "runs" / "alltoall_only", 25.0, False),
        (mixed_yaml, out / "runs" / "mixed", 25.0, False),
    ]
    assert [r.role for r in result.runs] == list(ROLES)
    assert all(c.shown for c in result.checks)
    assert (out / "study.json").is_file()


def test_run_with_pipeline_passes_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Any, Any]] = []

    class FakeOptions:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    def fake_run(scenario: Any, options: FakeOptions) -> Any:
        seen.append((scenario, options.kwargs))
        return types.SimpleNamespace(out_dir=options.kwargs["out_dir"], summary={}, partial=False)

    fake = types.ModuleType("emulator.run")
    fake.RunOptions = FakeOptions  # type: ignore[attr-defined]
    fake.run_scenario = fake_run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "emulator.run", fake)
    out = run_with_pipeline(ROOT / "scenarios" / "allreduce_only.yaml", tmp_path / "r", 7.0, False)
    assert out == tmp_path / "r"
    ((scenario, options),) = seen
    assert scenario.name == "allreduce_only" and not scenario.workload.generate.include_alltoall
    assert options == {"out_dir": tmp_path / "r", "progress": False, "tdf": 7.0}


def test_bad_input_is_one_line_exit_2(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = [str(folders["ar_alone"]), str(folders["a2a_alone"])]
    cases = [
        ["--reuse", *ok, str(tmp_path / "absent"), "--out", str(tmp_path / "a")],
        ["--mixed", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "b")],
        ["--reuse", *ok, str(folders["mixed_calm"]), "--tdf", "5", "--out", str(tmp_path / "c")],
        ["--tdf", "0.5", "--out", str(tmp_path / "d")],
    ]
    for args in cases:
        assert main(["study", "interference", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    # A folder that already holds a study is not overwritten.
    done = tmp_path / "done"
    assert (
        main(
            [
                "study",
                "interference",
                "--reuse",
                *ok,
                str(folders["mixed_calm"]),
                "--out",
                str(done),
            ]
        )
        == 0
    )
    capsys.readouterr()
    before = (done / "study.json").read_text()
    assert (
        main(
            [
                "study",
                "interference",
                "--reuse",
                *ok,
                str(folders["mixed_calm"]),
                "--out",
                str(done),
            ]
        )
        == 2
    )
    assert "already holds a study" in capsys.readouterr().err
    assert (done / "study.json").read_text() == before


def test_json_output(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(folders["ar_alone"]), str(folders["a2a_alone"]), str(folders["mixed_interfering"])]
    assert (
        main(["study", "interference", "--reuse", *args, "--out", str(tmp_path / "j"), "--json"])
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert document["study"] == "interference" and document["all_shown"] is True
    assert set(document["runs"]) == set(ROLES)


def test_one_instance_alone_has_cv_zero(folders: dict[str, Path], tmp_path: Path) -> None:
    single = write_run(tmp_path / "one", "allreduce_only", ar_slowdowns=[1.1])
    result = analyse(
        {
            "allreduce_only": single,
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_interfering"],
        },
        tmp_path / "s",
    )
    cv = by_name(result)["allreduce_busbw_cv"]
    assert cv.alone == 0.0 and cv.ratio is None and cv.verdict == "shown"
    assert "alone CV is 0" in cv.detail


def test_an_alone_run_carrying_the_other_collective_is_flagged(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    result = analyse(
        {
            "allreduce_only": folders["mixed_calm"],
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_interfering"],
        },
        tmp_path,
    )
    flagged = [n for n in result.notes if "is not that collective alone" in n]
    assert flagged == [
        "allreduce_only: the run also carries ALL_TO_ALL (4 instances), so it is not that "
        "collective alone; check the folder or scenario"
    ]


def test_fixed_differences_between_groups_are_not_iteration_to_iteration_variability(
    tmp_path: Path,
) -> None:
    # Two DP groups, one on a collided ECMP path (twice as slow) in every iteration: alone the
    # instances differ a lot but each group is steady; mixed each group varies from one
    # iteration to the next while the overall spread hardly changes.
    alone = [1.1, 2.2] * 4
    mixed = [1.1, 2.2, 1.3, 2.6, 1.0, 2.0, 1.2, 2.5]
    ar = write_run(tmp_path / "ar", "allreduce_only", ar_slowdowns=alone, ar_groups=2)
    a2a = write_run(tmp_path / "a2a", "alltoall_only", a2a_fct_s=STEADY_A2A)
    mix = write_run(tmp_path / "mix", "moe_mix", mixed, STEADY_A2A, ar_groups=2)
    result = analyse({"allreduce_only": ar, "alltoall_only": a2a, "mixed": mix}, tmp_path / "s")
    checks = by_name(result)
    overall = checks["allreduce_busbw_cv"]
    within = checks["allreduce_busbw_cv_within_groups"]
    assert overall.alone == pytest.approx(1 / 3) and overall.verdict == "not shown"
    assert within.alone == pytest.approx(0.0) and within.verdict == "shown"

    def cv(xs: list[float]) -> float:
        b = 1 / np.array(xs)
        return float(b.std() / b.mean())

    assert within.mixed == pytest.approx((cv(mixed[0::2]) + cv(mixed[1::2])) / 2)
