"""The sensitivity study (emulator/studies/sensitivity/): the analysis on hand-built collectives
tables with hand-computed slowdowns, the rate replacement, the results it writes, and
`emulate study sensitivity`'s argument checks (each bad input: exit 2, one line, nothing run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.records import CollectiveRecord
from collectors.results import ResultsWriter
from collectors.summary import RunMeta
from collectors.tables import RunTables
from emulator.cli import main
from emulator.errors import InputError
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from emulator.studies.sensitivity import analysis
from emulator.studies.sensitivity import study as sens

US = 1e-6


def record(
    cid: int,
    ctype: str,
    duration_s: float | None,
    ideal_s: float | None = None,
    complete: bool = True,
) -> CollectiveRecord:
    return CollectiveRecord(
        collective_id=cid,
        collective_type=ctype,
        process_group="1",
        group_size=4,
        iteration=cid,
        bytes=1 << 20,
        flows=12,
        flows_finished=12 if complete else 5,
        complete=complete,
        start_s=0.0,
        ready_s=0.0,
        end_s=duration_s,
        completion_time_s=None if duration_s is None else duration_s + 1e-3,  # not what is read
        bandwidth_time_s=duration_s,
        algbw_bytes_per_s=None,
        busbw_bytes_per_s=None,
        ideal_time_s=ideal_s,
        ideal_algbw_bytes_per_s=None,
        ideal_busbw_bytes_per_s=None,
        busbw_ratio=None,
    )


def times(*records: CollectiveRecord) -> dict[str, analysis.TypeTimes]:
    return analysis.type_times(RunTables.from_rows(collectives=records).collectives)


def rate_run(
    gbps: float,
    records: list[CollectiveRecord],
    job_s: float | None = None,
    ideal_job_s: float | None = None,
) -> analysis.RateRun:
    return analysis.RateRun(
        gbps, gbps, Path(f"runs/{gbps:g}gbps"), times(*records), job_s, ideal_job_s
    )


# --- the analysis -----------------------------------------------------------------------------


def test_type_times_sum_the_complete_instances_durations_and_ideals() -> None:
    got = times(
        record(1, "ALL_TO_ALL", 100 * US, 90 * US),
        record(2, "ALL_TO_ALL", 140 * US, 110 * US),
        record(3, "ALL_TO_ALL", 999 * US, 1 * US, complete=False),  # left out
        record(4, "ALL_REDUCE", 10 * US, None),
        record(5, "ALL_REDUCE", 30 * US, 5 * US),
    )
    a2a, ar = got["ALL_TO_ALL"], got["ALL_REDUCE"]
    assert a2a.instances == 2 and a2a.total_s == pytest.approx(240 * US)
    assert a2a.mean_s == pytest.approx(120 * US) and a2a.ideal_total_s == pytest.approx(200 * US)
    # one instance without an ideal time: the type's plan total is unknown, not a partial sum
    assert ar.instances == 2 and ar.total_s == pytest.approx(40 * US) and ar.ideal_total_s is None


def test_slowdowns_expectations_and_verdicts_by_hand() -> None:
    # 400 -> 100 Gb/s (k = 4). All-to-All: 100+140 us -> 400+560 us, 4.0x, plan 200 -> 800 us.
    # All-Reduce: 10+10 us -> 12+12 us, 1.2x: f = 0.2 / 3 = 0.067, latency-bound.
    # Job: 1 ms -> 3 ms, 3.0x, f = 2/3: partly; plan 0.8 -> 2.6 ms, 3.25x.
    ref = rate_run(
        400,
        [
            record(1, "ALL_TO_ALL", 100 * US, 90 * US),
            record(2, "ALL_TO_ALL", 140 * US, 110 * US),
            record(3, "ALL_REDUCE", 10 * US, 2 * US),
            record(4, "ALL_REDUCE", 10 * US, 2 * US),
        ],
        1e-3,
        0.8e-3,
    )
    low = rate_run(
        100,
        [
            record(1, "ALL_TO_ALL", 400 * US, 360 * US),
            record(2, "ALL_TO_ALL", 560 * US, 440 * US),
            record(3, "ALL_REDUCE", 12 * US, 8 * US),
            record(4, "ALL_REDUCE", 12 * US, 8 * US),
        ],
        3e-3,
        2.6e-3,
    )
    rows, job = analysis.analyse_runs([ref, low])
    by = {row.name: row for row in rows}
    assert [row.name for row in rows] == ["ALL_REDUCE", "ALL_TO_ALL"]
    a2a = by["ALL_TO_ALL"].points[1]
    assert a2a is not None
    assert a2a.expected == 4.0 and a2a.time_s == pytest.approx(960 * US)
    assert a2a.slowdown == pytest.approx(4.0) and a2a.mean_slowdown == pytest.approx(4.0)
    assert a2a.plan_slowdown == pytest.approx(4.0) and a2a.share == pytest.approx(1.0)
    assert by["ALL_TO_ALL"].verdict == analysis.BANDWIDTH_BOUND
    ar = by["ALL_REDUCE"].points[1]
    assert ar is not None and ar.slowdown == pytest.approx(1.2)
    assert ar.share == pytest.approx(0.2 / 3) and by["ALL_REDUCE"].verdict == analysis.LATENCY_BOUND
    assert ar.plan_slowdown == pytest.approx(4.0)
    first = by["ALL_TO_ALL"].points[0]
    assert first is not None and first.slowdown == 1.0 and first.verdict == "reference"
    jp = job.points[1]
    assert jp is not None and jp.slowdown == pytest.approx(3.0)
    assert jp.plan_slowdown == pytest.approx(3.25) and jp.share == pytest.approx(2 / 3)
    assert job.verdict == analysis.PARTLY
    assert "4.00x at 100 Gb/s against 4x" in by["ALL_TO_ALL"].detail


@pytest.mark.parametrize(
    ("share", "verdict"),
    [
        (1.16, analysis.BEYOND),
        (1.15, analysis.BANDWIDTH_BOUND),
        (0.85, analysis.BANDWIDTH_BOUND),
        (0.849, analysis.PARTLY),
        (0.5, analysis.PARTLY),
        (0.499, analysis.LATENCY_BOUND),
        (-0.1, analysis.LATENCY_BOUND),
        (None, analysis.NOT_MEASURED),
    ],
)
def test_tolerance_bands(share: float | None, verdict: str) -> None:
    assert analysis.DEFAULT_TOLERANCE.verdict(share) == verdict


def test_a_type_missing_in_a_run_is_not_measured_there_and_judged_elsewhere() -> None:
    # 400, 200, 100 Gb/s; the All-Gather is absent at 100 Gb/s: judged at 200 (k = 2):
    # 50 -> 110 us is 2.2x, f = 1.2: slower than bandwidth-bound. The Reduce-Scatter exists only
    # at 200 Gb/s: no reference, so not measured anywhere.
    runs = [
        rate_run(400, [record(1, "ALL_GATHER", 50 * US)]),
        rate_run(200, [record(1, "ALL_GATHER", 110 * US), record(2, "REDUCE_SCATTER", 9 * US)]),
        rate_run(100, []),
    ]
    rows, job = analysis.analyse_runs(runs)
    by = {row.name: row for row in rows}
    ag = by["ALL_GATHER"]
    assert ag.points[2] is None and ag.verdict == analysis.BEYOND
    assert ag.points[1] is not None and ag.points[1].share == pytest.approx(1.2)
    assert "not measured at 100 Gb/s" in ag.detail
    rs = by["REDUCE_SCATTER"]
    assert rs.points == (None, None, None) and rs.verdict == analysis.NOT_MEASURED
    assert "reference" in rs.detail
    assert job.verdict == analysis.NOT_MEASURED  # no job time given


def test_the_verdict_reads_the_rate_farthest_from_the_reference() -> None:
    # 400 (ref), 100 (k 4: 12 -> 37.2 us, 3.1x, f 0.7: partly), 200 (k 2: 12 -> 24 us, f 1.0)
    runs = [
        rate_run(400, [record(1, "ALL_REDUCE", 12 * US)]),
        rate_run(100, [record(1, "ALL_REDUCE", 37.2 * US)]),
        rate_run(200, [record(1, "ALL_REDUCE", 24 * US)]),
    ]
    (row,), _ = analysis.analyse_runs(runs)
    assert row.verdict == analysis.PARTLY
    assert row.points[2] is not None and row.points[2].verdict == analysis.BANDWIDTH_BOUND


def test_a_faster_rate_than_the_reference_reads_as_a_speedup() -> None:
    # 100 -> 400 Gb/s: expected 0.25; 400 -> 130 us is 0.325x: f = 0.675 / 0.75 = 0.9
    runs = [
        rate_run(100, [record(1, "ALL_TO_ALL", 400 * US)]),
        rate_run(400, [record(1, "ALL_TO_ALL", 130 * US)]),
    ]
    (row,), _ = analysis.analyse_runs(runs)
    point = row.points[1]
    assert point is not None and point.expected == 0.25 and point.share == pytest.approx(0.9)
    assert row.verdict == analysis.BANDWIDTH_BOUND


def test_different_instance_counts_compare_means_not_totals() -> None:
    # a partial run at 100 Gb/s with 1 of 2 instances: total 400 us against 200 would read 2x;
    # the mean (400 against 100 us) reads 4x
    runs = [
        rate_run(400, [record(1, "ALL_TO_ALL", 100 * US), record(2, "ALL_TO_ALL", 100 * US)]),
        rate_run(
            100, [record(1, "ALL_TO_ALL", 400 * US), record(2, "ALL_TO_ALL", 1, complete=False)]
        ),
    ]
    (row,), _ = analysis.analyse_runs(runs)
    point = row.points[1]
    assert point is not None and point.slowdown is None and point.plan_slowdown is None
    assert point.mean_slowdown == pytest.approx(4.0) and row.verdict == analysis.BANDWIDTH_BOUND


# --- the rates --------------------------------------------------------------------------------


CLOS = """\
name: tiny
workload: {generate: {kind: allreduce, ranks: 4, size_bytes: 65536}}
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 2
  spines: 1
  host_link_gbps: 400
  fabric_link_gbps: 200
  oversubscription: 4
run: {backend: sim}
metrics: {prometheus: {enabled: false}}
"""

DUT = """\
name: tiny_dut
workload: {generate: {kind: allreduce, ranks: 2, size_bytes: 65536}}
fabric:
  kind: dut
  interfaces: [eth1, eth2]
  addresses: [10.9.0.2/24, 10.9.0.3/24]
  allowlist: [10.9.0.0/24]
"""


@pytest.fixture
def clos(tmp_path: Path) -> Path:
    path = tmp_path / "clos.yaml"
    path.write_text(CLOS)
    return path


def test_at_rate_scales_the_fabric_links_with_the_host_links(clos: Path) -> None:
    scenario = sens.at_rate(load_scenario(clos), 100, clos)
    fabric = scenario.fabric
    assert fabric.host_link_gbps == 100 and fabric.fabric_link_gbps == 50  # type: ignore[union-attr]
    assert fabric.derived_oversubscription == pytest.approx(4.0)  # type: ignore[union-attr]


def test_at_rate_refuses_a_dut(tmp_path: Path) -> None:
    path = tmp_path / "dut.yaml"
    path.write_text(DUT)
    with pytest.raises(InputError, match=r"dut\.yaml: fabric\.kind dut: .*clos"):
        sens.at_rate(load_scenario(path), 100, path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("400", "give at least 2 rates"),
        ("400,abc", "'abc' is not a number"),
        ("400,-100", "-100 is not a positive rate"),
        ("400,0", "0 is not a positive rate"),
        ("400,nan", "nan is not a positive rate"),
        ("400,200,400", "400 is given twice"),
        ("400,", "'' is not a number"),
    ],
)
def test_parse_rates_refuses_bad_lists(text: str, message: str) -> None:
    with pytest.raises(InputError, match=f"^--link-gbps {text}: .*"):
        sens.parse_rates(text)
    with pytest.raises(InputError) as info:
        sens.parse_rates(text)
    assert message in str(info.value)


def test_parse_rates_keeps_the_order() -> None:
    assert sens.parse_rates("400, 200,12.5") == (400.0, 200.0, 12.5)


# --- the study, with a fake runner ----------------------------------------------------------

A2A_AT_400_S = 100 * US  # bandwidth-bound: 100 us x 400 / rate
AR_S = (20 * US, 0.5 * US)  # latency 20 us + 0.5 us x 400 / rate


def fake_results(folder: Path, host_gbps: float, fabric_gbps: float) -> Path:
    """A results folder whose times follow the rate as a bandwidth-bound All-to-All and a
    latency-bound All-Reduce would."""
    k = 400 / host_gbps
    records = [
        record(1, "ALL_TO_ALL", A2A_AT_400_S * k, A2A_AT_400_S * k),
        record(2, "ALL_REDUCE", AR_S[0] + AR_S[1] * k, AR_S[1] * k),
    ]
    doc = yaml.safe_load(CLOS)
    doc["fabric"].update(host_link_gbps=host_gbps, fabric_link_gbps=fabric_gbps)
    meta = RunMeta(
        "tiny", 1.0, "none", "clos", job_time_s=200 * US * k,
        extra={"backend": "sim", "ideal_job_time_s": 150 * US * k},
    )  # fmt: skip
    writer = ResultsWriter(folder, scenario_text=yaml.safe_dump(doc), render_plots=False)
    writer.write(meta, RunTables.from_rows(collectives=records), partial=False)
    return folder


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float, Path, Any]]:
    """Replaces the pipeline: each call recorded (host, fabric rate, folder, settings)."""
    calls: list[tuple[float, float, Path, Any]] = []

    def run(scenario: Scenario, out_dir: Path, settings: sens.RunSettings) -> Path:
        fabric = scenario.fabric
        host, fab = fabric.host_link_gbps, fabric.fabric_link_gbps  # type: ignore[union-attr]
        calls.append((host, fab, out_dir, settings))
        return fake_results(out_dir, host, fab)

    monkeypatch.setattr(sens, "run_at_rate", run)
    return calls


def test_the_study_runs_each_rate_in_order_and_writes_its_files(
    clos: Path,
    tmp_path: Path,
    fake_runner: list[tuple[float, float, Path, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "study"
    args = ["study", "sensitivity", str(clos), "--link-gbps", "400,200,100", "--out", str(out)]
    assert main([*args, "--no-progress", "--json"]) == 0
    assert [(h, f, d) for h, f, d, _ in fake_runner] == [
        (400, 200, out / "runs" / "400gbps"),
        (200, 100, out / "runs" / "200gbps"),
        (100, 50, out / "runs" / "100gbps"),
    ]
    assert fake_runner[0][3] == sens.RunSettings(backend=None, tdf=None, progress=False)
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "sensitivity.json").read_text())
    assert printed == written and written["reference_gbps"] == 400
    a2a = written["collectives"]["ALL_TO_ALL"]
    assert a2a["verdict"] == analysis.BANDWIDTH_BOUND
    assert [p["slowdown"] for p in a2a["by_rate"]] == pytest.approx([1.0, 2.0, 4.0])
    ar = written["collectives"]["ALL_REDUCE"]
    # (20 + 0.5 k) / 20.5 us: 21/20.5 at 200, 22/20.5 at 100 Gb/s
    assert [p["slowdown"] for p in ar["by_rate"]] == pytest.approx([1.0, 21 / 20.5, 22 / 20.5])
    assert ar["verdict"] == analysis.LATENCY_BOUND
    assert [p["plan_slowdown"] for p in ar["by_rate"]] == pytest.approx([1.0, 2.0, 4.0])
    assert written["job"]["by_rate"][2]["slowdown"] == pytest.approx(4.0)
    text = (out / "sensitivity.txt").read_text()
    assert "ALL_TO_ALL  bandwidth-bound" in text and "4.00x" in text
    assert (out / "plots" / "sensitivity.png").stat().st_size > 10_000
    # the same folder again: refused, nothing run
    assert main([*args, "--no-progress"]) == 2 and len(fake_runner) == 3
    assert "already holds a sensitivity study" in capsys.readouterr().err


def test_reuse_reads_the_rates_from_the_scenario_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = [fake_results(tmp_path / f"r{g}", g, g / 2) for g in (100, 400)]  # 100 first
    out = tmp_path / "again"
    assert main(["study", "sensitivity", "--reuse", *map(str, folders), "--out", str(out)]) == 0
    written = json.loads((out / "sensitivity.json").read_text())
    assert written["reference_gbps"] == 100 and written["scenario"] is None
    point = written["collectives"]["ALL_TO_ALL"]["by_rate"][1]
    assert point["expected"] == 0.25 and point["slowdown"] == pytest.approx(0.25)
    assert "sensitivity study" in capsys.readouterr().out


# --- bad input: exit 2, one line, nothing run -----------------------------------------------


def _bad(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], calls: list[Any]
) -> None:
    assert main(["study", "sensitivity", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert calls == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--link-gbps", "400"], "--link-gbps 400: give at least 2 rates"),
        (["--link-gbps", "400,x"], "--link-gbps 400,x: 'x' is not a number"),
        (["--link-gbps", "400,400"], "--link-gbps 400,400: 400 is given twice"),
        (["--link-gbps", "0,400"], "--link-gbps 0,400: 0 is not a positive rate"),
        ([], "--link-gbps: give the rates"),
        (["--link-gbps", "400,100", "--tdf", "100"], "--tdf: a simulation runs in simulated"),
        (["--link-gbps", "400,100", "--tdf", "0.5"], "--tdf 0.5: must be at least 1"),
        (["--link-gbps", "400,100", "--reuse", "a", "b"], "--reuse takes finished runs"),
    ],
)
def test_bad_arguments(
    clos: Path,
    tmp_path: Path,
    extra: list[str],
    message: str,
    fake_runner: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the scenario's own run.backend is sim: --tdf is refused without --backend sim too
    out = tmp_path / "out"
    _bad([str(clos), "--out", str(out), *extra], message, capsys, fake_runner)
    assert not out.exists()


def test_bad_scenarios_and_folders(
    clos: Path, tmp_path: Path, fake_runner: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rates = ["--link-gbps", "400,100", "--out", str(out)]
    _bad(["--link-gbps", "400,100"], "SCENARIO: give a scenario file", capsys, fake_runner)
    _bad(
        [str(tmp_path / "nope.yaml"), *rates],
        "nope.yaml: no such scenario file",
        capsys,
        fake_runner,
    )
    dut = tmp_path / "dut.yaml"
    dut.write_text(DUT)
    _bad([str(dut), *rates], f"{dut}: fabric.kind dut", capsys, fake_runner)
    (out / "runs" / "100gbps").mkdir(parents=True)
    _bad([str(clos), *rates], "runs/100gbps: exists already", capsys, fake_runner)
    (out / "file").write_text("")
    _bad(
        [str(clos), "--link-gbps", "400,100", "--out", str(out / "file")],
        "is not a folder",
        capsys,
        fake_runner,
    )
    assert sorted(p.name for p in out.iterdir()) == ["file", "runs"]


def test_the_emulated_fabric_needs_root(
    clos: Path,
    tmp_path: Path,
    fake_runner: list[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    argv = [str(clos), "--link-gbps", "400,100", "--backend", "netns", "--out", str(tmp_path / "o")]
    _bad(argv, "runs on the netns backend: the emulated fabric needs root", capsys, fake_runner)


def test_bad_reuse(
    tmp_path: Path, fake_runner: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    one = fake_results(tmp_path / "one", 400, 200)
    same = fake_results(tmp_path / "same", 400, 200)
    out = ["--out", str(tmp_path / "o")]
    _bad(["--reuse", str(one), *out], "--reuse: 1 folder given, at least 2", capsys, fake_runner)
    _bad(["--reuse", str(one), str(same), *out], "both ran at 400 Gb/s", capsys, fake_runner)
    _bad(["--reuse", str(one), str(tmp_path / "x"), *out], "x: not a folder", capsys, fake_runner)
    _bad(["--reuse", str(one), str(one), "--tdf", "2", *out], "excludes --tdf", capsys, fake_runner)
    assert not (tmp_path / "o").exists()


def test_a_first_run_refused_at_its_start_leaves_no_empty_study_folder(
    clos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(scenario: Scenario, out_dir: Path, settings: sens.RunSettings) -> Path:
        raise InputError("metrics.prometheus: cannot listen on 127.0.0.1:9464")

    monkeypatch.setattr(sens, "run_at_rate", refuse)
    out = tmp_path / "study"
    argv = ["study", "sensitivity", str(clos), "--link-gbps", "400,100", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("sensitivity: running") and "cannot listen" in err[1]
    assert not out.exists()
