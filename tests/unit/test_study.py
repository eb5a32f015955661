"""The interference study on small results folders written with known numbers: the verdicts follow
the numbers and their intervals over repeats (shown, not shown, not measurable), the plots have
data drawn, the CLI prints and exits 0 either way, and the repeats go through the run pipeline
with the study's options and one seed each."""

from __future__ import annotations

import json
import shutil
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from collectors.records import CollectiveMeta, FlowMeta, RecordBuilder
from collectors.results import ResultsWriter
from collectors.summary import Fidelity, RunMeta
from collectors.tables import RunTables
from emulator.cli import main
from emulator.events import FlowFinished, FlowStarted
from emulator.studies.interference.study import ROLES, analyse, run_study, run_with_pipeline
from emulator.studies.stats.verdict import StudyThresholds

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
    seed: int | None = None,
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
    # the scenario copy as a run writes it: with the seed it ran with
    text = SCENARIO_TEXT if seed is None else SCENARIO_TEXT.rstrip("\n") + f"\n  seed: {seed}\n"
    ResultsWriter(folder, scenario_text=text, render_plots=False).write(meta, tables, partial=False)
    return folder


# Two repeats of each condition: the same kind of numbers, not the same numbers.
STEADY_AR = (
    [1.10, 1.11, 1.09, 1.10, 1.12, 1.10, 1.11, 1.09],
    [1.09, 1.12, 1.10, 1.11, 1.10, 1.09, 1.12, 1.10],
)  # ~91% of ideal, CV < 0.01
NOISY_AR = (
    [1.1, 2.0, 1.3, 3.0, 1.2, 2.5, 1.1, 1.8],
    [1.2, 2.2, 1.1, 2.8, 1.3, 2.4, 1.0, 1.9],
)  # CV ~ 0.35
STEADY_A2A = tuple(
    [[(10e-6 + shift) + k * 0.1e-6 for k in range(12)] for _ in range(4)] for shift in (0.0, 0.2e-6)
)  # p99/p50 ~ 1.05
TAILED_A2A = tuple(
    [[10e-6 + k * 0.1e-6 for k in range(10)] + tail for _ in range(4)]
    for tail in ([60e-6, 90e-6], [70e-6, 85e-6])
)  # p99/p50 ~ 8


def write_repeats(
    base: Path,
    name: str,
    scenario: str,
    ar: Sequence[Sequence[float]] = (),
    a2a: Sequence[Sequence[Sequence[float]]] = (),
    **kwargs: Any,
) -> list[Path]:
    """One results folder per repeat, named <name>-seed<k> as the study names them (k = 1, 2..):
    repeat k's All-Reduce slowdowns are ar[k - 1], its All-to-All FCTs a2a[k - 1]."""
    n = max(len(ar), len(a2a))
    return [
        write_run(
            base / f"{name}-seed{k + 1}",
            scenario,
            ar[k] if ar else (),
            a2a[k] if a2a else (),
            seed=k + 1,
            **kwargs,
        )
        for k in range(n)
    ]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    base = tmp_path_factory.mktemp("runs")
    return {
        "ar_alone": write_repeats(base, "ar", "allreduce_only", ar=STEADY_AR),
        "a2a_alone": write_repeats(base, "a2a", "alltoall_only", a2a=STEADY_A2A, a2a_cnps=1),
        "mixed_interfering": write_repeats(
            base, "mixed", "moe_mix", NOISY_AR, TAILED_A2A, a2a_cnps=7
        ),
        "mixed_calm": write_repeats(base, "calm", "moe_mix", STEADY_AR, STEADY_A2A, a2a_cnps=1),
        "ar_slow": write_repeats(
            base, "slow", "allreduce_only", ar=[[2 * s for s in r] for r in STEADY_AR]
        ),
        "mixed_no_ar": write_repeats(base, "no_ar", "moe_mix", a2a=TAILED_A2A),
    }


def roles(folders: dict[str, list[Path]], ar: str, a2a: str, mixed: str) -> dict[str, list[Path]]:
    return {"allreduce_only": folders[ar], "alltoall_only": folders[a2a], "mixed": folders[mixed]}


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


def colored_pixels(path: Path) -> int:
    """Pixels of a saturated color: the plotted lines and bars (axes, text and grid are gray)."""
    image = imread(path)[..., :3]
    return int(np.count_nonzero(image.max(axis=-1) - image.min(axis=-1) > 0.3))


def busbw_cv(*slowdowns: Sequence[float]) -> float:
    busbw = 1 / np.concatenate([np.asarray(s) for s in slowdowns])
    return float(busbw.std() / busbw.mean())


def test_interference_present_is_shown_with_its_numbers(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    result = analyse(roles(folders, "ar_alone", "a2a_alone", "mixed_interfering"), tmp_path)
    checks = by_name(result)
    cv = checks["allreduce_busbw_cv"]
    assert cv.verdict == "shown" and cv.shown
    # point estimates over both repeats pooled
    assert cv.alone == pytest.approx(busbw_cv(*STEADY_AR))
    assert cv.mixed == pytest.approx(busbw_cv(*NOISY_AR))
    assert cv.ratio == pytest.approx(cv.mixed / cv.alone) and cv.ratio > 10
    for point, (low, high) in ((cv.alone, cv.alone_ci), (cv.mixed, cv.mixed_ci)):
        assert low <= point <= high and low < high
    assert cv.ratio_ci[0] > 1.0 and cv.numbers["repeats_alone"] == cv.numbers["repeats_mixed"] == 2
    tail = checks["alltoall_fct_tail"]
    assert tail.shown
    # nearest rank over 96 flows: p50 is the 48th smallest, p99 the 96th
    alone_fcts = sorted(f for run in STEADY_A2A for fcts in run for f in fcts)
    assert tail.alone == pytest.approx(alone_fcts[95] / alone_fcts[47])
    assert tail.mixed == pytest.approx(90e-6 / 10.5e-6)
    assert tail.numbers["flows_finished_mixed"] == 96 and tail.ratio_ci[0] > 1.0
    line = checks["allreduce_alone_line_rate"]
    assert line.shown
    busbw = LINE_BYTES_PER_S / np.concatenate(STEADY_AR)
    assert line.numbers["busbw_mean_bytes_per_s"] == pytest.approx(float(busbw.mean()))
    assert line.alone == pytest.approx(float(busbw.mean()) / LINE_BYTES_PER_S)
    assert line.alone_ci[0] <= line.alone <= line.alone_ci[1] and line.mixed_ci is None
    assert line.numbers["line_rate_bytes_per_s"] == pytest.approx(LINE_BYTES_PER_S)
    assert result.notes == ()
    # study.json says the same, with a boolean per check and the intervals
    document = json.loads((tmp_path / "study.json").read_text())
    assert [c["shown"] for c in document["checks"]] == [True] * 6
    # the All-Reduce loses busbw mixed (GB/s, pooled means); the All-to-All p99 (us) grows
    busbw_mean = checks["allreduce_busbw_mean"]
    mixed_busbw = LINE_BYTES_PER_S / np.concatenate(NOISY_AR)
    assert busbw_mean.mixed == pytest.approx(float(mixed_busbw.mean()) * 1e-9)
    assert busbw_mean.ratio_ci[1] < 1.0
    assert checks["alltoall_fct_p99"].mixed == pytest.approx(90.0)
    # one process group: within-group CV is the mean of each repeat's CV
    within = checks["allreduce_busbw_cv_within_groups"]
    assert within.mixed == pytest.approx((busbw_cv(NOISY_AR[0]) + busbw_cv(NOISY_AR[1])) / 2)
    assert document["all_shown"] is True
    assert document["checks"][0]["alone"] == pytest.approx(cv.alone)
    assert document["checks"][0]["ratio_ci"] == pytest.approx(list(cv.ratio_ci))
    # every repeat, with its seed (from its scenario copy) and its CNPs
    runs = document["runs"]
    assert [r["seed"] for r in runs["mixed"]] == [1, 2]
    assert [r["repeat"] for r in runs["mixed"]] == [1, 2]
    assert runs["mixed"][1]["folder"] == str(folders["mixed_interfering"][1])
    assert runs["mixed"][0]["cnps_by_collective"] == {"ALL_REDUCE": 0, "ALL_TO_ALL": 48 * 7}
    assert runs["alltoall_only"][0]["cnps_by_collective"] == {"ALL_TO_ALL": 48}
    assert document["thresholds"] == {
        "cv_ratio_min": 1.25,
        "cv_min": 0.02,
        "tail_ratio_min": 1.25,
        "busbw_ratio_max": 0.9,
        "line_rate_ratio_min": 0.8,
        "repeats_min": 2,
    }
    assert document["bootstrap"]["resamples"] == 2000
    assert (tmp_path / "study.txt").read_text().strip() == result.text.strip()
    # The printed table: each number with its interval; one identity row per repeat.
    rows = {
        r.split()[0]: r for r in result.text.splitlines() if r.startswith("allreduce_busbw_cv ")
    }
    low, high = cv.ratio_ci
    assert f"{cv.ratio:.3g} [{low:.3g}, {high:.3g}]" in rows["allreduce_busbw_cv"]
    identity = [r.split() for r in result.text.splitlines() if r.startswith(tuple(ROLES))]
    assert [(r[0], r[1], r[2]) for r in identity if len(r) == 8] == [
        (role, str(k), str(k)) for role in ROLES for k in (1, 2)
    ]


def test_plots_exist_and_have_data_drawn(folders: dict[str, list[Path]], tmp_path: Path) -> None:
    result = analyse(roles(folders, "ar_alone", "a2a_alone", "mixed_interfering"), tmp_path)
    names = sorted(p.name for p in result.plots)
    assert names == [
        "compare_busbw_per_iteration.png",
        "compare_cnps.png",
        "compare_fct_cdf.png",
        "seed_fig10_busbw.png",
        "seed_fig11_fct_cdf.png",
    ]
    for path in result.plots:
        assert path.parent == tmp_path / "plots" and path.stat().st_size > 10_000
        assert colored_pixels(path) > 500, path.name
    assert "plots (Fig. 10 and 11 over every repeat; the rest, the first repeat): " in result.text


def test_plots_draw_the_first_repeat_of_each_role(
    folders: dict[str, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collectors.report

    drawn: list[list[Path]] = []

    def fake_plots(runs: Sequence[Any], out: Path) -> list[Path]:
        drawn.append([r.folder for r in runs])
        return []

    monkeypatch.setattr(collectors.report, "write_compare_plots", fake_plots)
    analyse(roles(folders, "ar_alone", "a2a_alone", "mixed_interfering"), tmp_path)
    assert drawn == [
        [folders["ar_alone"][0], folders["a2a_alone"][0], folders["mixed_interfering"][0]]
    ]


def test_no_interference_is_reported_as_not_shown(
    folders: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    code = main(
        [
            "study",
            "interference",
            "--reuse-allreduce-only",
            *map(str, folders["ar_slow"]),
            "--reuse-alltoall-only",
            *map(str, folders["a2a_alone"]),
            "--reuse-mixed",
            *map(str, folders["mixed_calm"]),
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
        "allreduce_busbw_mean": "not shown",  # mixed runs twice as fast as the slow alone
        "alltoall_fct_p99": "not shown",
    }
    assert document["all_shown"] is False
    assert [len(document["runs"][role]) for role in ROLES] == [2, 2, 2]
    line = document["checks"][2]
    assert (
        line["alone"] == pytest.approx(0.5 * float(np.mean(1 / np.concatenate(STEADY_AR))))
        and line["shown"] is False
    )
    tail = document["checks"][1]
    assert tail["ratio"] == pytest.approx(1.0, abs=0.02)
    # The printed table says it too, with the numbers.
    rows = {r.split()[0]: r for r in text.splitlines() if r.startswith(("allreduce_", "alltoall_"))}
    assert rows["allreduce_alone_line_rate"].endswith("not shown")
    assert f" {line['alone']:.3g} [" in rows["allreduce_alone_line_rate"]
    assert rows["alltoall_fct_tail"].endswith("not shown")
    assert "plots (Fig. 10 and 11 over every repeat; the rest, the first repeat): " in text


def test_missing_collective_is_not_measurable(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    result = analyse(roles(folders, "ar_alone", "a2a_alone", "mixed_no_ar"), tmp_path)
    checks = by_name(result)
    for name in ("allreduce_busbw_cv", "allreduce_busbw_cv_within_groups"):
        assert checks[name].verdict == "not measurable" and not checks[name].shown
        assert "mixed runs (0)" in checks[name].detail
        assert checks[name].mixed_ci is None and checks[name].ratio_ci is None
    assert checks["alltoall_fct_tail"].verdict == "shown"


def test_one_repeat_is_not_measurable_but_has_its_interval(
    folders: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old --reuse A B C: one run per role; an interval from one run's instances leaves out
    run-to-run variation, so nothing is judged, but the numbers and intervals are there."""
    firsts = [str(folders[name][0]) for name in ("ar_alone", "a2a_alone", "mixed_interfering")]
    out = tmp_path / "one"
    assert main(["study", "interference", "--reuse", *firsts, "--out", str(out)]) == 0
    capsys.readouterr()
    document = json.loads((out / "study.json").read_text())
    for check in document["checks"]:
        assert check["verdict"] == "not measurable", check["name"]
        assert "does not include run-to-run variation" in check["detail"]
        assert check["alone_ci"] is not None and check["ratio_ci"] is not None
    cv = document["checks"][0]
    assert cv["alone"] == pytest.approx(busbw_cv(STEADY_AR[0]))
    # The same run judged with one repeat allowed: its interval comes from the instances alone.
    lenient = analyse(
        {role: [Path(f)] for role, f in zip(ROLES, firsts, strict=True)},
        tmp_path / "lenient",
        StudyThresholds(repeats_min=1),
    )
    assert [c.verdict for c in lenient.checks] == ["shown"] * 6
    assert by_name(lenient)["allreduce_busbw_cv"].ratio_ci == pytest.approx(cv["ratio_ci"])


def test_thresholds_decide_and_notes_flag_fidelity(tmp_path: Path) -> None:
    ar = write_repeats(tmp_path, "ar", "a", ar=STEADY_AR, tdf=10.0)
    a2a = write_repeats(tmp_path, "a2a", "b", a2a=STEADY_A2A)
    mixed = write_repeats(
        tmp_path,
        "mix",
        "c",
        NOISY_AR,
        TAILED_A2A,
        fidelity=Fidelity("degraded", ("CPU saturated in 40% of samples",)),
    )
    strict = StudyThresholds(
        cv_ratio_min=1000.0, tail_ratio_min=1000.0, line_rate_ratio_min=0.95, busbw_ratio_max=0.01
    )
    result = analyse(
        {"allreduce_only": ar, "alltoall_only": a2a, "mixed": mixed},
        tmp_path / "s",
        strict,
        include_flagged=True,  # the degraded runs judged too (tests/unit/test_study_flagged_runs.py)
    )
    assert [c.verdict for c in result.checks] == ["not shown"] * 6
    assert any(
        n.startswith("mixed repeat 2: flagged, and judged (--include-flagged)")
        and n.endswith("fidelity degraded: CPU saturated in 40% of samples")
        for n in result.notes
    )
    [tdf_note] = [n for n in result.notes if "different time dilation factors" in n]
    assert "(10, 20)" in tdf_note, tdf_note  # not 10.0, 20.0
    assert ": below 1000;" in by_name(result)["allreduce_busbw_cv"].detail


def test_run_study_runs_each_scenario_repeats_times_with_one_seed_each(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    calls: list[tuple[Path, Path, float | None, bool, int | None]] = []
    source = roles(folders, "ar_alone", "a2a_alone", "mixed_interfering")

    def runner(
        scenario: Path, out_dir: Path, tdf: float | None, progress: bool, seed: int | None
    ) -> Path:
        calls.append((scenario, out_dir, tdf, progress, seed))
        role = out_dir.name.split("-seed")[0]
        return source[role][len([c for c in calls if c[0] == scenario]) - 1]

    # The mixed scenario's own seed is 7: its repeats use 7 and 8; the shipped ones have 0.
    mixed_yaml = tmp_path / "my_mix.yaml"
    mixed_yaml.write_text(SCENARIO_TEXT.rstrip("\n") + "\n  seed: 7\n")
    out = tmp_path / "study"
    result = run_study(
        out, scenarios={"mixed": mixed_yaml}, tdf=25.0, progress=False, runner=runner, repeats=2
    )
    ar_yaml = ROOT / "scenarios" / "allreduce_only.yaml"
    a2a_yaml = ROOT / "scenarios" / "alltoall_only.yaml"
    runs = out / "runs"
    # interleaved: repeat 1 of each condition, then repeat 2
    assert calls == [
        (ar_yaml, runs / "allreduce_only-seed0", 25.0, False, 0),
        (a2a_yaml, runs / "alltoall_only-seed0", 25.0, False, 0),
        (mixed_yaml, runs / "mixed-seed7", 25.0, False, 7),
        (ar_yaml, runs / "allreduce_only-seed1", 25.0, False, 1),
        (a2a_yaml, runs / "alltoall_only-seed1", 25.0, False, 1),
        (mixed_yaml, runs / "mixed-seed8", 25.0, False, 8),
    ]
    assert [(r.role, r.repeat, r.seed) for r in result.runs] == [
        ("allreduce_only", 0, 0),
        ("allreduce_only", 1, 1),
        ("alltoall_only", 0, 0),
        ("alltoall_only", 1, 1),
        ("mixed", 0, 7),
        ("mixed", 1, 8),
    ]
    assert all(c.shown for c in result.checks)
    document = json.loads((out / "study.json").read_text())
    assert [r["seed"] for r in document["runs"]["mixed"]] == [7, 8]


def test_reference_sim_judges_the_simulations_beside_the_emulated_runs(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    """Each emulated run's <folder>-reference-sim is judged as a study of its own; here the
    emulated mix interferes and its simulated references do not, so the verdicts differ."""
    emulated = roles(folders, "ar_alone", "a2a_alone", "mixed_interfering")
    simulated = roles(folders, "ar_alone", "a2a_alone", "mixed_calm")
    done: dict[str, int] = {}

    def runner(
        scenario: Path, out_dir: Path, tdf: float | None, progress: bool, seed: int | None
    ) -> Path:
        role = out_dir.name.split("-seed")[0]
        k = done[role] = done.get(role, -1) + 1
        shutil.copytree(emulated[role][k], out_dir)
        shutil.copytree(simulated[role][k], out_dir.with_name(out_dir.name + "-reference-sim"))
        return out_dir

    out = tmp_path / "study"
    result = run_study(out, progress=False, runner=runner, repeats=2, reference="sim")
    assert all(c.shown for c in result.checks)
    document = json.loads((out / "study.json").read_text())
    ref = {c["name"]: c["verdict"] for c in document["reference"]["checks"]}
    assert ref["allreduce_busbw_cv"] == "not shown" and ref["alltoall_fct_tail"] == "not shown"
    own = json.loads((out / "reference-sim" / "study.json").read_text())
    assert [c["verdict"] for c in own["checks"]] == list(ref.values())
    assert "the same checks in the simulated references" in result.text
    assert "emulated mixed/alone" in result.text


def test_run_with_pipeline_passes_the_options_and_the_seed(
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
    path = ROOT / "scenarios" / "allreduce_only.yaml"
    out = run_with_pipeline(path, tmp_path / "r", 7.0, False, 5)
    assert out == tmp_path / "r"
    run_with_pipeline(path, tmp_path / "s", None, True)
    (scenario, options), (own, _) = seen
    assert scenario.name == "allreduce_only" and not scenario.workload.generate.include_alltoall
    assert options == {
        "out_dir": tmp_path / "r",
        "progress": False,
        "tdf": 7.0,
        "backend": None,
        "reference": None,
    }
    assert scenario.run.seed == 5 and own.run.seed == 0  # the file's own seed without one
    # only the seed differs, and the scenario still resolves paths against its file
    assert scenario.source == own.source == path
    assert scenario.run.time_dilation == own.run.time_dilation and scenario.fabric == own.fabric


def test_bad_input_is_one_line_exit_2(
    folders: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = [str(folders["ar_alone"][0]), str(folders["a2a_alone"][0])]
    mixed = str(folders["mixed_calm"][0])
    cases = [
        ["--reuse", *ok, str(tmp_path / "absent"), "--out", str(tmp_path / "a")],
        ["--mixed", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "b")],
        ["--reuse", *ok, mixed, "--tdf", "5", "--out", str(tmp_path / "c")],
        ["--tdf", "0.5", "--out", str(tmp_path / "d")],
        ["--repeats", "0", "--out", str(tmp_path / "e")],
        ["--reuse", *ok, mixed, "--repeats", "2", "--out", str(tmp_path / "f")],
        ["--reuse", *ok, mixed, "--reuse-mixed", mixed, "--out", str(tmp_path / "g")],
        ["--reuse-mixed", mixed, "--out", str(tmp_path / "h")],
        ["--reuse-allreduce-only", ok[0], "--reuse-alltoall-only", ok[1], "--reuse-mixed",
         mixed, "--allreduce-only", str(ROOT / "scenarios" / "allreduce_only.yaml")],
    ]  # fmt: skip
    for args in cases:
        assert main(["study", "interference", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    # A folder that already holds a study is not overwritten.
    done = tmp_path / "done"
    args = ["study", "interference", "--reuse", *ok, mixed, "--out", str(done)]
    assert main(args) == 0
    capsys.readouterr()
    before = (done / "study.json").read_text()
    assert main(args) == 2
    assert "already holds a study" in capsys.readouterr().err
    assert (done / "study.json").read_text() == before


def test_json_output(
    folders: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["study", "interference", "--out", str(tmp_path / "j"), "--json"]
    for flag, name in zip(
        ("--reuse-allreduce-only", "--reuse-alltoall-only", "--reuse-mixed"),
        ("ar_alone", "a2a_alone", "mixed_interfering"),
        strict=True,
    ):
        args += [flag, *map(str, folders[name])]
    assert main(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["study"] == "interference" and document["all_shown"] is True
    assert set(document["runs"]) == set(ROLES)
    assert all(len(c["alone_ci"]) == 2 for c in document["checks"])


def test_one_instance_alone_is_not_measurable(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    single = write_repeats(tmp_path, "one", "allreduce_only", ar=[[1.1]])
    result = analyse(
        {
            "allreduce_only": single,
            "alltoall_only": folders["a2a_alone"],
            "mixed": folders["mixed_interfering"],
        },
        tmp_path / "s",
    )
    checks = by_name(result)
    for name in ("allreduce_busbw_cv", "allreduce_alone_line_rate"):
        check = checks[name]
        assert check.verdict == "not measurable" and check.alone_ci is None, name
        assert "fewer than 2 complete All-Reduce instances" in check.detail
        assert "alone runs (1)" in check.detail
    # no group has 2 instances alone
    assert checks["allreduce_busbw_cv_within_groups"].verdict == "not measurable"
    assert "alone runs (0)" in checks["allreduce_busbw_cv_within_groups"].detail


def test_an_alone_run_carrying_the_other_collective_is_flagged(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    result = analyse(roles(folders, "mixed_calm", "a2a_alone", "mixed_interfering"), tmp_path)
    flagged = [n for n in result.notes if "is not that collective alone" in n]
    assert flagged == [
        f"allreduce_only repeat {k}: the run also carries ALL_TO_ALL (4 instances), so it is "
        "not that collective alone; check the folder or scenario"
        for k in (1, 2)
    ]


def test_fixed_differences_between_groups_are_not_iteration_to_iteration_variability(
    tmp_path: Path,
) -> None:
    # Two DP groups, one on a collided ECMP path (twice as slow) in every iteration: alone the
    # instances differ a lot but each group is steady; mixed each group varies from one
    # iteration to the next while the overall spread hardly changes.
    alone = [1.1, 2.2] * 4
    mixed = ([1.1, 2.2, 1.3, 2.6, 1.0, 2.0, 1.2, 2.5], [1.2, 2.3, 1.0, 2.7, 1.1, 2.1, 1.3, 2.4])
    ar = write_repeats(tmp_path, "ar", "allreduce_only", ar=[alone, alone], ar_groups=2)
    a2a = write_repeats(tmp_path, "a2a", "alltoall_only", a2a=STEADY_A2A)
    mix = write_repeats(tmp_path, "mix", "moe_mix", mixed, STEADY_A2A, ar_groups=2)
    result = analyse({"allreduce_only": ar, "alltoall_only": a2a, "mixed": mix}, tmp_path / "s")
    checks = by_name(result)
    overall = checks["allreduce_busbw_cv"]
    within = checks["allreduce_busbw_cv_within_groups"]
    assert overall.alone == pytest.approx(1 / 3) and overall.verdict == "not shown"
    assert within.alone == pytest.approx(0.0, abs=1e-9) and within.verdict == "shown"
    # the mean over each repeat's groups: a group's instances of two repeats are not pooled
    cells = [busbw_cv(run[g::2]) for run in mixed for g in (0, 1)]
    assert within.mixed == pytest.approx(sum(cells) / 4)
    assert within.numbers["instances_mixed"] == 16


def test_runs_table_shows_a_missing_tdf_as_a_dash_and_a_factor_without_noise() -> None:
    """A run without a TDF (a DUT at target time, an old folder) reads "-", not "None"."""
    from emulator.studies.interference.checks import StudyRun
    from emulator.studies.interference.text import runs_table

    runs = [
        StudyRun("mixed", Path("a"), {"tdf": None, "fidelity": {"verdict": "ok"}}, None),
        StudyRun(
            "mixed", Path("b"), {"tdf": 9700.0, "fidelity": {"verdict": "ok"}}, None, repeat=1
        ),
    ]
    rows = runs_table(runs).splitlines()
    assert "None" not in rows[2] and " - " in rows[2]
    assert " 9700 " in rows[3] and "9700.0" not in rows[3]


class _DeferredPool:
    """A pool whose runs execute elsewhere and finish in reverse order (a cluster's tasks)."""

    remote = True

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._calls: list[tuple[Path, Any]] = []

    def submit(self, line: str, out_dir: Path, call: Any) -> None:
        self.lines.append(line)
        self._calls.append((out_dir, call))

    def results(self) -> list[Path]:
        done = {out_dir: call(out_dir) for out_dir, call in reversed(self._calls)}
        folders = [done[out_dir] for out_dir, _ in self._calls]
        self._calls = []
        return folders


def test_runs_finishing_in_any_order_elsewhere_come_back_to_their_roles(
    folders: dict[str, list[Path]], tmp_path: Path
) -> None:
    source = roles(folders, "ar_alone", "a2a_alone", "mixed_interfering")
    progress_seen: list[bool] = []

    def runner(
        scenario: Path, out_dir: Path, tdf: float | None, progress: bool, seed: int | None
    ) -> Path:
        progress_seen.append(progress)
        role, _, seed_text = out_dir.name.partition("-seed")
        return source[role][int(seed_text)]

    pool = _DeferredPool()
    result = run_study(
        tmp_path / "study", progress=True, runner=runner, repeats=2, pool=pool, backend="sim"
    )
    assert progress_seen == [False] * 6  # no terminal of ours where they run
    assert len(pool.lines) == 6
    assert [(r.role, r.seed, r.folder) for r in result.runs] == [
        (role, k, source[role][k]) for role in ROLES for k in range(2)
    ]
    assert all(c.shown for c in result.checks)


def test_a_study_of_emulated_runs_over_a_cluster_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    from emulator.errors import InputError

    with pytest.raises(InputError, match="--cluster: its runs take the netns backend"):
        run_study(tmp_path / "study", runner=run_with_pipeline, pool=_DeferredPool())
    assert not (tmp_path / "study").exists()
